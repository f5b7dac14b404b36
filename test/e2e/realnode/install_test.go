package realnode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/nodeagent/inplace"
	"github.com/faultline-dev/faultline/pkg/tracing"
	"github.com/faultline-dev/faultline/pkg/version"
	"github.com/faultline-dev/faultline/test/cluster"
	"github.com/faultline-dev/faultline/test/otlp"
)

// Every part as a pod, on real nodes: a cluster of its own (two real nodes, untainted, no kwok
// node: an operator's), faultline's three images built by the release's recipe (pkg/image) and
// pushed to a registry on the loopback, containerd pulling them by the names `launcher install
// --registry` rendered, the controller running as its Deployment's pods (in-cluster config,
// leader election through its Lease) and the node agent as the DaemonSet's pod on every node,
// with the manifest's own mounts and security context (the nodes show their own bus, CRI
// socket, PodResources socket and pod logs at the standard paths). The nodes have no GPUs: the
// agent finds no NVML and runs without GPU monitoring, as on a CPU node.
//
// The three tests share that cluster (installation): the install and the story, then the
// uninstall, then a reinstall with the barrier image missing. Each starts it if it runs
// alone; stopInstallation (TestMain) stops it.

// releaseVersion is the version of the release built for these tests: the launcher says it,
// the images are tagged with it.
const releaseVersion = "v0.0.0-realnode"

// controllerLease is the Lease the controller's replicas compete for (pkg/controller's
// LeaderElectionID), in its namespace.
const controllerLease = "faultline-controller." + v1alpha1.GroupName

// installation is the cluster faultline is installed on as an operator would.
type installation struct {
	c        *cluster.Cluster
	registry *cluster.Registry
	release  *cluster.Release
	dir      string
	// ns is the users' namespace of the story, made before the install.
	ns string
	// before is the API's objects before the install (apiObjects).
	before map[string]bool
	// installed: faultline is installed now (the story's, or a reinstall's).
	installed bool
	otlp      *otlp.Receiver
}

var (
	inst    *installation
	instErr error
	instMu  sync.Mutex
)

// installationCluster starts the installation's cluster, registry and release once.
func installationCluster(t *testing.T) *installation {
	t.Helper()
	if testing.Short() {
		t.Skip("real nodes; skipped with -short")
	}
	if reason := cluster.RealNodesNeedRoot(); reason != "" {
		t.Skip(reason)
	}
	instMu.Lock()
	defer instMu.Unlock()
	if inst != nil || instErr != nil {
		if instErr != nil {
			t.Fatalf("the installation's cluster: %v", instErr)
		}
		return inst
	}
	i := &installation{}
	instErr = func() error {
		var err error
		if i.dir, err = os.MkdirTemp("", "faultline-install-"); err != nil {
			return err
		}
		start := time.Now()
		if i.release, err = cluster.BuildRelease(i.dir, releaseVersion); err != nil {
			return err
		}
		t.Logf("release %s built in %s", releaseVersion, time.Since(start).Round(time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if i.c, err = cluster.Start(ctx, cluster.Options{
			Name: "install", RealNodes: 2, RealNode: cluster.RealNodeSpec{Untainted: true},
			Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, "install cluster: "+format+"\n", args...) },
		}); err != nil {
			return err
		}
		if i.registry, err = cluster.StartRegistry(); err != nil {
			return err
		}
		if err := i.c.Real.UseRegistry(i.registry.Host); err != nil {
			return err
		}
		if err := i.release.Push(ctx, i.registry); err != nil {
			return err
		}
		ns, err := i.c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml-team"}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		i.ns = ns.Name
		// The namespace's own objects (its service account, its CA) come a moment later.
		if err := waitDefaultServiceAccount(ctx, i.c, i.ns); err != nil {
			return err
		}
		i.before, err = apiObjects(ctx, i.c)
		return err
	}()
	if instErr != nil {
		stopInstallationLocked(i)
		t.Fatalf("the installation's cluster: %v", instErr)
	}
	inst = i
	return i
}

// stopInstallation stops the installation's cluster (TestMain).
func stopInstallation() {
	instMu.Lock()
	defer instMu.Unlock()
	stopInstallationLocked(inst)
	inst = nil
}

func stopInstallationLocked(i *installation) {
	if i == nil {
		return
	}
	if i.otlp != nil {
		i.otlp.Stop()
	}
	if i.registry != nil {
		_ = i.registry.Close()
	}
	if i.c != nil {
		if err := i.c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop the installation's cluster: %v\n", err)
		}
	}
	if i.dir != "" {
		os.RemoveAll(i.dir)
	}
}

func waitDefaultServiceAccount(ctx context.Context, c *cluster.Cluster, ns string) error {
	for {
		_, err1 := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		_, err2 := c.Client.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		// The kubelets' heartbeats too, which each writes a moment after its node is Ready.
		var err3 error
		for _, n := range c.Real.Nodes {
			if _, err := c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, n.Name, metav1.GetOptions{}); err != nil {
				err3 = err
			}
		}
		if err1 == nil && err2 == nil && err3 == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s has no default service account or CA, or a node no heartbeat Lease: %v, %v, %v", ns, err1, err2, err3)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// launch runs the release's launcher against the installation and returns its output.
func (i *installation) launch(ctx context.Context, t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, i.release.Launcher, append(args, "--kubeconfig", i.c.Kubeconfig)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("launcher %s:\n%s", strings.Join(args, " "), out.String())
	return out.String(), err
}

// install runs `launcher install --registry` (with more flags) and waits until the
// controller's two replicas are Ready with one holding the Lease, and the agent's pod on every
// real node is Ready and holds its inhibitor lock on the node's logind.
func (i *installation) install(ctx context.Context, t *testing.T, flags ...string) {
	t.Helper()
	out, err := i.launch(ctx, t, append([]string{"install", "--registry", i.registry.Host}, flags...)...)
	if err != nil {
		t.Fatalf("launcher install: %v", err)
	}
	i.installed = true
	images := version.ImagesOf(i.registry.Host, releaseVersion)
	for _, want := range []string{images.Controller, images.Agent, "deployment.apps/faultline-controller serverside-applied", "daemonset.apps/faultline-nodeagent serverside-applied"} {
		if !strings.Contains(out, want) {
			t.Errorf("launcher install's output lacks %q", want)
		}
	}
	if i.otlp != nil {
		i.traceTo(ctx, t, i.otlp)
	}
	i.waitRunning(ctx, t)
}

// fresh uninstalls what a test before installed, so that the test installs on a cluster
// with nothing of faultline's, and uninstalls what it installs when it ends.
func (i *installation) fresh(ctx context.Context, t *testing.T) {
	t.Helper()
	if i.installed {
		if _, err := i.launch(ctx, t, "uninstall", "--force"); err != nil {
			t.Fatalf("uninstall before the install: %v", err)
		}
		i.installed = false
	}
	t.Cleanup(func() {
		uctx, ucancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer ucancel()
		if _, err := i.launch(uctx, t, "uninstall", "--force"); err != nil {
			t.Errorf("uninstall after the test: %v", err)
		}
		i.installed = false
	})
}

// traceTo points the controller's and the agents' traces at an OTLP receiver, as an operator
// does (`kubectl set env`).
func (i *installation) traceTo(ctx context.Context, t *testing.T, r *otlp.Receiver) {
	t.Helper()
	var env []corev1.EnvVar
	for _, kv := range r.Env() {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	for _, kind := range []string{"deployments", "daemonsets"} {
		name := map[string]string{"deployments": "faultline-controller", "daemonsets": "faultline-nodeagent"}[kind]
		patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []map[string]any{{"name": map[string]string{"deployments": "controller", "daemonsets": "nodeagent"}[kind], "env": env}}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if kind == "deployments" {
			_, err = i.c.Client.AppsV1().Deployments(v1alpha1.NodeAgentNamespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		} else {
			_, err = i.c.Client.AppsV1().DaemonSets(v1alpha1.NodeAgentNamespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		}
		if err != nil {
			t.Fatalf("set the OTLP endpoint on %s %s: %v", kind, name, err)
		}
	}
}

// waitRunning waits for the installed controller and agents, as waits say above.
func (i *installation) waitRunning(ctx context.Context, t *testing.T) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	// The rollouts first, as an operator waits for them: the OTLP settings (traceTo) change
	// both templates, and until the old pods are gone an old controller may hold the Lease
	// (and handle the story's fault without tracing it), an old agent the node's lock.
	for _, obj := range []string{"deployment/faultline-controller", "daemonset/faultline-nodeagent"} {
		if out, err := i.c.Kubectl(wctx, "rollout", "status", obj, "-n", v1alpha1.NodeAgentNamespace, "--timeout=4m"); err != nil {
			t.Fatalf("kubectl rollout status %s: %v\n%s%s", obj, err, out, i.podEvents(ctx, v1alpha1.NodeAgentNamespace))
		}
	}
	sel := labels.SelectorFromSet(labels.Set{v1alpha1.LabelAppName: "faultline-controller"})
	var current []string
	pods, err := i.c.WaitPods(wctx, v1alpha1.NodeAgentNamespace, sel, func(pods []*corev1.Pod) (bool, error) {
		current = current[:0]
		for _, p := range pods {
			if podReady(p) && p.DeletionTimestamp == nil {
				current = append(current, p.Name)
			}
		}
		return len(current) == 2 && len(pods) == 2, nil
	})
	if err != nil {
		t.Fatalf("the controller's 2 replicas Ready, and no other: %v; pods: %s%s", err, describePods(pods), i.podEvents(ctx, v1alpha1.NodeAgentNamespace))
	}
	sel = labels.SelectorFromSet(labels.Set{v1alpha1.LabelAppName: cluster.AgentAppLabel})
	pods, err = i.c.WaitPods(wctx, v1alpha1.NodeAgentNamespace, sel, func(pods []*corev1.Pod) (bool, error) {
		nodes := map[string]bool{}
		for _, p := range pods {
			if podReady(p) && p.DeletionTimestamp == nil {
				nodes[p.Spec.NodeName] = true
			}
		}
		return len(nodes) == len(i.c.Real.Nodes) && len(pods) == len(i.c.Real.Nodes), nil
	})
	if err != nil {
		t.Fatalf("the agent's pod Ready on each of %d real nodes, and no other: %v; pods: %s%s", len(i.c.Real.Nodes), err, describePods(pods), i.podEvents(ctx, v1alpha1.NodeAgentNamespace))
	}
	for _, n := range i.c.Real.Nodes {
		if _, err := n.WaitLock(wctx, cluster.AgentLockWho); err != nil {
			t.Fatalf("the agent's pod took no inhibitor lock on %s's logind: %v", n.Name, err)
		}
	}
	leader, err := waitLeader(wctx, i.c)
	for err == nil && !slices.ContainsFunc(current, func(name string) bool { return strings.HasPrefix(leader, name+"_") }) {
		select {
		case <-wctx.Done():
			err = fmt.Errorf("the Lease is held by %s, none of the current controller pods %v", leader, current)
		case <-time.After(250 * time.Millisecond):
			leader, err = waitLeader(wctx, i.c)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// waitLeader waits until the controller's Lease is held by one of its pods, and returns it.
func waitLeader(ctx context.Context, c *cluster.Cluster) (string, error) {
	for {
		l, err := c.Client.CoordinationV1().Leases(v1alpha1.NodeAgentNamespace).Get(ctx, controllerLease, metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil && strings.HasPrefix(*l.Spec.HolderIdentity, "faultline-controller-") {
			return *l.Spec.HolderIdentity, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no controller pod holds the Lease %s/%s: %v", v1alpha1.NodeAgentNamespace, controllerLease, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podEvents are a namespace's events, for a failure's message.
func (i *installation) podEvents(ctx context.Context, ns string) string {
	evs, err := i.c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nevents:")
	for _, e := range evs.Items {
		fmt.Fprintf(&b, "\n  %s/%s %s: %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
	return b.String()
}

// TestRealInstalledAsAnOperatorWould: the release's images pulled from a registry, `launcher
// install` applying everything, every part a pod on the real nodes; then the demo's story: a
// logind shutdown of a worker's node restarts the gang (in place: the nodes can), a worker's bug
// fails the run with its root cause, and `launcher explain` and the controller's trace say so.
func TestRealInstalledAsAnOperatorWould(t *testing.T) {
	i := installationCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	c, ns := i.c, i.ns
	if i.otlp == nil {
		// On the pod network (the host's address on the real nodes' bridge): the controller's
		// and the agents' pods send their spans there.
		var err error
		if i.otlp, err = otlp.Start(net.JoinHostPort(c.Real.HostIP(), "0")); err != nil {
			t.Fatal(err)
		}
	}
	i.install(ctx, t)

	// The images came from the registry, by the names install rendered.
	images := version.ImagesOf(i.registry.Host, releaseVersion)
	pulled := strings.Join(i.registry.Pulled(), " ")
	for _, name := range []string{version.ControllerImageName, version.AgentImageName} {
		if !strings.Contains(pulled, name+":"+releaseVersion) {
			t.Errorf("the registry served no pull of %s:%s (pulls: %s)", name, releaseVersion, pulled)
		}
	}
	// The pods are the manifests' own: images, mounts and security context as installed.
	ds, err := c.Client.AppsV1().DaemonSets(v1alpha1.NodeAgentNamespace).Get(ctx, "faultline-nodeagent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !checkAgentPods(ctx, t, c, ds, images.Agent) {
		// What the kubelet said of the agent's pods (a probe, a sandbox changed, a kill).
		t.Logf("events in %s:%s", v1alpha1.NodeAgentNamespace, i.podEvents(ctx, v1alpha1.NodeAgentNamespace))
		if dir, err := c.SaveLogs(filepath.Join(c.Tools.Root, "_output", "test-logs")); err == nil {
			t.Logf("the nodes' kubelet and containerd logs: %s", dir)
		}
	}
	dep, err := c.Client.AppsV1().Deployments(v1alpha1.NodeAgentNamespace).Get(ctx, "faultline-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if args := dep.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--barrier-image="+images.Barrier) {
		t.Errorf("the controller's args %v lack --barrier-image=%s", args, images.Barrier)
	}
	leader, err := waitLeader(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("controller leader: %s", leader)

	// A logind shutdown of a worker's node restarts the gang, in place where it can: with its
	// command set, the barrier is the worker container's entrypoint (the installed
	// controller's default), from an image volume of the registry's barrier image.
	run := createRun(ctx, t, c, ns, realRun("gang", 4, []string{"--heartbeats-only", "--heartbeat-timeout", "10s",
		"--sigterm-delay", "5s", "--sigterm-delay-index", "0"}, withCommand(cluster.WorkerProgram)))
	got := waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", attemptRunningOrOver(1))
	requireRunning(t, got, 1)
	workers := waitWorkers(ctx, t, c, ns, run.Name, 1, 4)
	for _, p := range workers {
		if _, place := attempt.BarrierContainer(&p.Spec); place != attempt.BarrierInWorker || !attempt.BarrierOf(p).OpenedFor(1) {
			t.Errorf("pod %s: barrier at %v, opened for attempt 1 %v; want the worker's entrypoint, recorded open", p.Name, place, attempt.BarrierOf(p).OpenedFor(1))
		}
	}
	var down *cluster.RealNode
	for _, n := range c.Real.Nodes {
		if n.Name != workers[0].Spec.NodeName {
			down = n
		}
	}
	if down == nil {
		t.Fatalf("attempt 1 all on %s: the gang must span both nodes", workers[0].Spec.NodeName)
	}
	if err := down.Logind.PrepareForShutdown(true); err != nil {
		t.Fatal(err)
	}
	got = waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, got, 2)
	f := got.Status.LastFailure
	if f == nil || f.Class != v1alpha1.ClassInfrastructure || f.Cause != v1alpha1.CauseNodeShutdown || got.Status.Restarts.Infrastructure != 1 {
		t.Errorf("after the shutdown of %s: %s; want one Infrastructure restart for NodeShutdown", down.Name, describeRun(got))
	}
	again := waitWorkers(ctx, t, c, ns, run.Name, 2, 4)
	kept := 0
	for idx, p := range again {
		if old, ok := workers[idx]; ok && old.UID == p.UID {
			kept++
		}
	}
	if kept == 0 {
		t.Errorf("no worker restarted in place: both nodes' kubelets declare %s and run the agent's pod", v1alpha1.FeatureRestartAllContainers)
	}
	if !strings.Contains(strings.Join(i.registry.Pulled(), " "), version.BarrierImageName+":"+releaseVersion) {
		t.Errorf("the barrier image was never pulled from the registry (pulls: %v)", i.registry.Pulled())
	}
	t.Logf("attempt 2: %d of 4 workers restarted in place", kept)
	// The agents' pods share the node's PID namespace: each gave its barriers the go signal
	// through the barrier's socket, with no exec.
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	if err := waitOpensVia(sctx, i.otlp, run.Name, len(again), inplace.ViaSocket); err != nil {
		t.Errorf("the installed agents' opens of %s: %v", run.Name, err)
	}
	scancel()
	explain, err := i.launch(ctx, t, "explain", run.Name, "-n", ns)
	if err != nil || !strings.Contains(explain, string(v1alpha1.CauseNodeShutdown)) || !strings.Contains(explain, down.Name) {
		t.Errorf("launcher explain %s: %v; want the NodeShutdown of %s", run.Name, err, down.Name)
	}
	bctx, bcancel := context.WithTimeout(ctx, 2*time.Minute)
	if err := c.CancelShutdown(bctx, down); err != nil {
		t.Errorf("bring %s back: %v", down.Name, err)
	}
	bcancel()

	// A worker's bug fails the run with its root cause.
	bug := createRun(ctx, t, c, ns, realRun("bug", 4, []string{"--fail-index", "2", "--fail", "exit", "--fail-after", "2s"}))
	bugWorkers := createdWorkers(ctx, t, c, ns, bug.Name, 1, 4)
	got = waitRun(ctx, t, c, ns, bug.Name, "Failed", failedOrRestarted)
	f = got.Status.LastFailure
	if got.Status.Phase != v1alpha1.PhaseFailed || f == nil || f.Class != v1alpha1.ClassApplication || f.Cause != v1alpha1.CauseAppExit || f.Pod != bugWorkers[2].Name {
		t.Errorf("the bug: %s; want Failed, Application/AppExit of %s (index 2)", describeRun(got), bugWorkers[2].Name)
	}
	explain, err = i.launch(ctx, t, "explain", bug.Name, "-n", ns)
	if err != nil || !strings.Contains(explain, string(v1alpha1.CauseAppExit)) || !strings.Contains(explain, bugWorkers[2].Name) {
		t.Errorf("launcher explain %s: %v; want AppExit of %s", bug.Name, err, bugWorkers[2].Name)
	}
	// The controller's trace (from its pod, over the pod network) has both verdicts.
	tctx, tcancel := context.WithTimeout(ctx, time.Minute)
	defer tcancel()
	if err := waitCauses(tctx, i.otlp, tracing.ServiceController, string(v1alpha1.CauseNodeShutdown), string(v1alpha1.CauseAppExit)); err != nil {
		t.Errorf("the controller's trace: %v", err)
	}
	// The runs' framework plugin started confined (pkg/sandbox), in the controller pod that
	// leads now: the pod's seccomp profile (RuntimeDefault, containerd's) lets Landlock
	// through. (The leader before the story may have been a pod of the rollout's past.)
	if now, err := waitLeader(ctx, c); err != nil {
		t.Error(err)
	} else if podName, _, _ := strings.Cut(now, "_"); podName != "" {
		raw, err := c.Client.CoreV1().Pods(v1alpha1.NodeAgentNamespace).GetLogs(podName, &corev1.PodLogOptions{}).DoRaw(ctx)
		logs := string(raw)
		if err != nil || !strings.Contains(logs, "framework plugins run confined") || !strings.Contains(logs, "faultline-plugin-jax") {
			t.Errorf("controller %s: its log (%v) does not say that the JAX plugin started confined:\n%s", podName, err, tail(logs, 20))
		}
	}
}

// checkAgentPods: the agent's pod on each real node runs the rendered image with the
// DaemonSet's mounts of the node (its system bus, CRI socket, PodResources, pod logs, driver
// root) and its security context (root, privileged).
func checkAgentPods(ctx context.Context, t *testing.T, c *cluster.Cluster, ds *appsv1.DaemonSet, image string) (restartFree bool) {
	t.Helper()
	restartFree = true
	pods, err := c.Client.CoreV1().Pods(v1alpha1.NodeAgentNamespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(ds.Spec.Selector.MatchLabels).String()})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			want[v.Name] = v.HostPath.Path
		}
	}
	for _, path := range []string{"/run/dbus/system_bus_socket", "/var/lib/kubelet/pod-resources", "/var/log/pods", "/"} {
		if !slices.Contains(slices.Collect(maps.Values(want)), path) {
			t.Errorf("the DaemonSet mounts no %s from its node", path)
		}
	}
	for _, p := range pods.Items {
		ctr := p.Spec.Containers[0]
		if ctr.Image != image {
			t.Errorf("agent pod %s: image %s, want %s", p.Name, ctr.Image, image)
		}
		sc := ctr.SecurityContext
		if sc == nil || sc.Privileged == nil || !*sc.Privileged || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
			t.Errorf("agent pod %s: security context %+v, want the manifest's (root, privileged)", p.Name, sc)
		}
		for _, v := range p.Spec.Volumes {
			if path, ok := want[v.Name]; ok && (v.HostPath == nil || v.HostPath.Path != path) {
				t.Errorf("agent pod %s: volume %s %+v, want hostPath %s", p.Name, v.Name, v.VolumeSource, path)
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount > 0 {
				prev, err := c.Client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: cs.Name, Previous: true, TailLines: ptr.To[int64](15)}).DoRaw(ctx)
				if err != nil {
					prev = []byte(err.Error())
				}
				t.Errorf("agent pod %s on %s restarted %d times; its last end: %s; its last lines:\n%s\nwhy, its events and its kubelet's words:\n%s",
					p.Name, p.Spec.NodeName, cs.RestartCount, lastEnd(cs), prev, whyRestarted(ctx, c, &p))
				restartFree = false
			}
		}
	}
	return restartFree
}

// TestRealUninstallLeavesNothing: after the story, `launcher uninstall --force` (the gang of the
// story still runs) returns the cluster to what it was before the install: the same objects in
// the API, and no finalizer or mark of faultline's on any of them.
func TestRealUninstallLeavesNothing(t *testing.T) {
	i := installationCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if !i.installed {
		i.install(ctx, t)
	}
	unfinished := hasUnfinished(ctx, t, i)
	if out, err := i.launch(ctx, t, "uninstall"); unfinished && err == nil {
		t.Errorf("launcher uninstall with a run not finished exited 0:\n%s", out)
	} else if !unfinished && err != nil {
		t.Errorf("launcher uninstall with every run finished: %v", err)
	}
	out, err := i.launch(ctx, t, "uninstall", "--force")
	if err != nil {
		t.Fatalf("launcher uninstall --force: %v", err)
	}
	i.installed = false
	if !strings.Contains(out, "faultline uninstalled") {
		t.Errorf("uninstall's output lacks its end:\n%s", out)
	}
	after, err := apiObjects(ctx, i.c)
	if err != nil {
		t.Fatal(err)
	}
	var added, removed []string
	for k := range after {
		if !i.before[k] {
			added = append(added, k)
		}
	}
	for k := range i.before {
		if !after[k] {
			removed = append(removed, k)
		}
	}
	slices.Sort(added)
	slices.Sort(removed)
	if len(added) > 0 || len(removed) > 0 {
		t.Errorf("the API's objects after the uninstall differ from before the install:\n  left behind: %v\n  gone: %v", added, removed)
	}
	if marks := faultlineMarks(ctx, t, i.c); len(marks) > 0 {
		t.Errorf("faultline's finalizers or marks left: %v", marks)
	}
}

// hasUnfinished reports whether a TrainingRun of the installation has not finished.
func hasUnfinished(ctx context.Context, t *testing.T, i *installation) bool {
	t.Helper()
	runs := &v1alpha1.TrainingRunList{}
	if err := runClient(t, i.c).List(ctx, runs); err != nil {
		return false
	}
	for _, r := range runs.Items {
		if r.Status.Phase != v1alpha1.PhaseFailed && r.Status.Phase != v1alpha1.PhaseSucceeded {
			return true
		}
	}
	return false
}

// TestRealBarrierImageUnpullableNeverHangs: faultline installed with a barrier image the
// registry does not have. A run that may restart in place (Auto) does not sit in
// ImagePullBackOff with no word: it starts, without restarts in place. A run that must
// (InPlace) stalls with a condition that names the image.
func TestRealBarrierImageUnpullableNeverHangs(t *testing.T) {
	i := installationCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := i.c
	missing := i.registry.Host + "/" + version.BarrierImageName + ":absent"
	i.fresh(ctx, t) // a fresh install, with the barrier image the registry does not have
	i.install(ctx, t, "--barrier-image", missing)
	ns := i.ns

	auto := createRun(ctx, t, c, ns, realRun("auto", 2, []string{"--heartbeats-only"}))
	start := time.Now()
	got := waitRun(ctx, t, c, ns, auto.Name, "attempt 1 Running (Auto, the barrier missing)", attemptRunningOrOver(1))
	requireRunning(t, got, 1)
	t.Logf("Auto with the barrier image missing: Running in %s", time.Since(start).Round(time.Millisecond))
	for _, p := range waitWorkers(ctx, t, c, ns, auto.Name, 1, 2) {
		for _, ic := range p.Spec.InitContainers {
			if ic.Image == missing {
				if st := initStatus(p, ic.Name); st == nil || st.State.Terminated == nil {
					t.Errorf("worker %s runs with the missing barrier %s as its init container (%+v)", p.Name, missing, st)
				}
			}
		}
	}

	strict := createRun(ctx, t, c, ns, realRun("inplace", 2, []string{"--heartbeats-only"}, withRestartMode(v1alpha1.RestartModeInPlace)))
	got = waitRun(ctx, t, c, ns, strict.Name, "Stalled naming the barrier image", func(r *v1alpha1.TrainingRun) bool {
		cond := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionStalled)
		return cond != nil && cond.Status == metav1.ConditionTrue && strings.Contains(cond.Message, missing)
	})
	cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionStalled)
	t.Logf("InPlace with the barrier image missing: Stalled %s: %s", cond.Reason, cond.Message)
}

// apiObjects lists every object the API serves a list of, as "group/resource namespace/name",
// but events (a record of what happened, not what is there) and the nodes' heartbeats'
// Leases' content (their names are the nodes').
func apiObjects(ctx context.Context, c *cluster.Cluster) (map[string]bool, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		return nil, err
	}
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		return nil, fmt.Errorf("the API's resources: %w", err)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			return nil, err
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || r.Name == "events" {
				continue
			}
			items, err := dyn.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{})
			if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", r.Name, err)
			}
			for _, u := range items.Items {
				out[gv.Group+"/"+r.Name+" "+u.GetNamespace()+"/"+u.GetName()] = true
			}
		}
	}
	return out, nil
}

// faultlineMarks lists every object with a finalizer of faultline's, and every Node with a
// condition, annotation or taint of faultline's.
func faultlineMarks(ctx context.Context, t *testing.T, c *cluster.Cluster) []string {
	t.Helper()
	var marks []string
	prefix := v1alpha1.GroupName + "/"
	jobs, err := c.Client.BatchV1().Jobs("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		for _, f := range j.Finalizers {
			if strings.HasPrefix(f, prefix) {
				marks = append(marks, "job "+j.Namespace+"/"+j.Name+" finalizer "+f)
			}
		}
	}
	pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if len(p.Finalizers) > 0 {
			marks = append(marks, fmt.Sprintf("pod %s/%s finalizers %v", p.Namespace, p.Name, p.Finalizers))
		}
	}
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		for _, cond := range n.Status.Conditions {
			if strings.HasPrefix(string(cond.Type), prefix) {
				marks = append(marks, "node "+n.Name+" condition "+string(cond.Type))
			}
		}
		for k := range n.Annotations {
			if strings.HasPrefix(k, prefix) {
				marks = append(marks, "node "+n.Name+" annotation "+k)
			}
		}
		for _, tt := range n.Spec.Taints {
			if strings.HasPrefix(tt.Key, prefix) {
				marks = append(marks, "node "+n.Name+" taint "+tt.Key)
			}
		}
	}
	return marks
}

// waitCauses waits until service's spans (received by r) have named every cause.
func waitCauses(ctx context.Context, r *otlp.Receiver, service string, causes ...string) error {
	var got []string
	_, err := r.WaitFor(ctx, func(spans []otlp.Span) bool {
		got = got[:0]
		for _, s := range spans {
			if c := s.Attr("faultline.cause"); s.Service == service && c != "" {
				got = append(got, c)
			}
		}
		return !slices.ContainsFunc(causes, func(c string) bool { return !slices.Contains(got, c) })
	})
	if err != nil {
		return fmt.Errorf("no span of %s names every one of %v (its spans' causes: %v)", service, causes, got)
	}
	return nil
}

// waitOpensVia waits until the agents' spans (received by r) show n barriers of run opened,
// and checks that every one went via. (An open that found its barrier opened already, a pod
// queued again while its status lags, says no way.)
func waitOpensVia(ctx context.Context, r *otlp.Receiver, run string, n int, via string) error {
	type open struct{ pod, via, reason string }
	var got []open
	_, err := r.WaitFor(ctx, func(spans []otlp.Span) bool {
		got = got[:0]
		for _, s := range spans {
			o := open{s.Attr(string(tracing.KeyPod)), s.Attr(string(tracing.KeyBarrierSignal)), s.Attr(string(tracing.KeyBarrierSignalReason))}
			if s.Service == tracing.ServiceAgent && s.Name == tracing.SpanInPlaceOpen && s.Attr(string(tracing.KeyRun)) == run && o.via != "" {
				got = append(got, o)
			}
		}
		return len(got) >= n
	})
	if err != nil {
		return fmt.Errorf("%d barrier opens in the agents' spans, want %d: %+v", len(got), n, got)
	}
	if slices.ContainsFunc(got, func(o open) bool { return o.via != via }) {
		return fmt.Errorf("opens %+v: want every one via %s", got, via)
	}
	return nil
}

// lastEnd says how a container's previous run ended, with the last lines it wrote (the
// kubelet's termination message, from its log on error).
func lastEnd(cs corev1.ContainerStatus) string {
	t := cs.LastTerminationState.Terminated
	if t == nil {
		return "unknown"
	}
	return fmt.Sprintf("exit %d (%s) at %s: %s", t.ExitCode, t.Reason, t.FinishedAt.Format(time.RFC3339), t.Message)
}

// whyRestarted is what the kubelet said of pod p's restart, kept short for CI's excerpt: the
// pod's events, and its node's kubelet log lines that name the pod and a kill, a probe or a
// sandbox.
func whyRestarted(ctx context.Context, c *cluster.Cluster, p *corev1.Pod) string {
	var b strings.Builder
	if evs, err := c.Client.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name}); err == nil {
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "  event %s %s (x%d, last %s): %s\n", e.Type, e.Reason, e.Count, e.LastTimestamp.Format(time.RFC3339), e.Message)
		}
	}
	if n := c.Real.Node(p.Spec.NodeName); n != nil {
		raw, _ := os.ReadFile(n.KubeletLog())
		var lines []string
		for _, l := range strings.Split(string(raw), "\n") {
			low := strings.ToLower(l)
			if strings.Contains(l, p.Name) && (strings.Contains(low, "kill") || strings.Contains(low, "probe") || strings.Contains(low, "sandbox") || strings.Contains(low, "restart")) {
				lines = append(lines, l)
			}
		}
		fmt.Fprintf(&b, "  kubelet of %s:\n%s", n.Name, tail(strings.Join(lines, "\n"), 12))
	}
	return b.String()
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestRealInstallWaitsAndNamesAnUnpullableImage (issue 59): `launcher install` reports success
// only once faultline runs. An install whose node agent image the registry does not have fails
// within its deadline, naming the image the kubelets could not pull and the flag that names
// another; an install of the release's images returns only once the controller's replicas and
// an agent on every node run the new version, Ready.
func TestRealInstallWaitsAndNamesAnUnpullableImage(t *testing.T) {
	i := installationCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := i.c
	i.fresh(ctx, t)

	missing := i.registry.Host + "/" + version.AgentImageName + ":absent"
	const deadline = 3 * time.Minute
	start := time.Now()
	out, err := i.launch(ctx, t, "install", "--registry", i.registry.Host, "--agent-image", missing, "--timeout", deadline.String())
	took := time.Since(start)
	i.installed = true // applied, if not running
	if err == nil {
		t.Fatalf("launcher install exited 0 with its agent image missing:\n%s", out)
	}
	for _, want := range []string{"daemonset faultline-system/faultline-nodeagent cannot start", "its image " + missing + " cannot be pulled", "--agent-image"} {
		if !strings.Contains(out, want) {
			t.Errorf("the failed install does not say %q", want)
		}
	}
	if took > deadline {
		t.Errorf("the failed install took %s, past its --timeout %s", took.Round(time.Second), deadline)
	}
	t.Logf("install with the agent image missing: failed in %s", took.Round(time.Second))

	start = time.Now()
	out, err = i.launch(ctx, t, "install", "--registry", i.registry.Host)
	if err != nil {
		t.Fatalf("launcher install of the release: %v", err)
	}
	t.Logf("install of the release: returned in %s", time.Since(start).Round(time.Second))
	for _, want := range []string{"deployment/faultline-controller rolled out", "daemonset/faultline-nodeagent rolled out", "faultline is running"} {
		if !strings.Contains(out, want) {
			t.Errorf("the install does not say %q", want)
		}
	}
	// Read once, with no wait: when install returned, all of it ran.
	dep, err := c.Client.AppsV1().Deployments(v1alpha1.NodeAgentNamespace).Get(ctx, "faultline-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := *dep.Spec.Replicas; dep.Status.UpdatedReplicas != want || dep.Status.ReadyReplicas != want {
		t.Errorf("when install returned, the controller had %d updated and %d ready replicas of %d", dep.Status.UpdatedReplicas, dep.Status.ReadyReplicas, want)
	}
	ds, err := c.Client.AppsV1().DaemonSets(v1alpha1.NodeAgentNamespace).Get(ctx, "faultline-nodeagent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := int32(len(c.Real.Nodes)); ds.Status.UpdatedNumberScheduled != n || ds.Status.NumberReady != n {
		t.Errorf("when install returned, %d agents were updated and %d ready, of %d nodes", ds.Status.UpdatedNumberScheduled, ds.Status.NumberReady, n)
	}
	if !strings.Contains(strings.Join(i.registry.Pulled(), " "), version.AgentImageName+":"+releaseVersion) {
		t.Errorf("the agent's image of the release was never pulled (pulls: %v)", i.registry.Pulled())
	}
}
