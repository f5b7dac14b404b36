package realnode

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apischeme "github.com/faultline-dev/faultline/api/scheme"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/test/cluster"
)

// startController starts `launcher controller` for namespace ns, as deployed: its gang
// restarts are in place where the nodes can (restartMode Auto), with the barrier image the
// nodes have (cluster.BarrierImage stands for the release's, which they cannot pull).
func startController(t testing.TB, c *cluster.Cluster, ns string, args ...string) *cluster.Process {
	t.Helper()
	return cluster.StartProcess(t, launcherBin, append([]string{"controller",
		"--kubeconfig", c.Kubeconfig, "--namespace", ns, "--leader-elect=false",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--barrier-image", cluster.BarrierImage}, args...)...)
}

// ---------------------------------------------------------------------------------------
// Runs of the test worker on the real nodes

var ()

// testScheme knows the built-in types and faultline's, as the controller and launcher do.
var testScheme = apischeme.New()

func runClient(t testing.TB, c *cluster.Cluster) client.Client {
	t.Helper()
	cl, err := client.New(c.Config, client.Options{Scheme: testScheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// workerMemory is every worker's memory limit: the test worker needs about 10 MiB, and the
// OOM scenario must reach the limit quickly.
var workerMemory = resource.MustParse("64Mi")

// runOption changes a run built by realRun.
type runOption func(*v1alpha1.TrainingRun)

// realRun is a JAX run of workers test workers on the real nodes, spread over them (at most
// one worker more on one node than on another, counting this attempt's pods and the nodes
// that take pods only), with
// args for the worker (see test/worker).
func realRun(name string, workers int32, args []string, opts ...runOption) *v1alpha1.TrainingRun {
	run := &v1alpha1.TrainingRun{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.KindTrainingRun},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TrainingRunSpec{
			Framework: "jax",
			Workers:   workers,
			Template:  corev1.PodTemplateSpec{Spec: realPodSpec(map[string]string{v1alpha1.LabelRun: name})},
		},
	}
	spec := &run.Spec.Template.Spec
	spec.TopologySpreadConstraints[0].MatchLabelKeys = []string{v1alpha1.LabelAttempt}
	spec.Containers[0].Args = args
	for _, o := range opts {
		o(run)
	}
	return run
}

// realPodSpec is a pod of the test worker for the real nodes, spread over them with the pods
// that have the labels spread (at most one more on one node than on another, counting the
// nodes that take pods only).
func realPodSpec(spread map[string]string) corev1.PodSpec {
	return corev1.PodSpec{
		RestartPolicy:                corev1.RestartPolicyNever,
		NodeSelector:                 map[string]string{cluster.LabelNodeKind: cluster.NodeKindReal},
		Tolerations:                  []corev1.Toleration{cluster.RealNodeToleration},
		AutomountServiceAccountToken: ptr.To(false),
		EnableServiceLinks:           ptr.To(false),
		TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
			// A node shutting down is NotReady and tainted so: no domain to balance against.
			NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor),
			LabelSelector:    &metav1.LabelSelector{MatchLabels: spread},
		}},
		Containers: []corev1.Container{{
			Name: "worker", Image: cluster.WorkerImage, ImagePullPolicy: corev1.PullNever,
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: workerMemory}},
		}},
	}
}

// gangOfOne is the environment of a test worker that is a JAX gang on its own: its own
// coordinator, in its pod's network (test/worker).
func gangOfOne() []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "JAX_COORDINATOR_ADDRESS", Value: "127.0.0.1:1234"},
		{Name: "JAX_NUM_PROCESSES", Value: "1"}, {Name: "JAX_PROCESS_ID", Value: "0"},
	}
}

// deletePods deletes the pods of namespace ns that match selector and waits until they are
// gone, so that the next measurement has the nodes to itself.
func deletePods(ctx context.Context, t testing.TB, c *cluster.Cluster, ns string, selector labels.Selector) {
	t.Helper()
	if err := c.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selector.String()}); err != nil {
		t.Fatalf("delete the pods %s in %s: %v", selector, ns, err)
	}
	if _, err := c.WaitPods(ctx, ns, selector, func(pods []*corev1.Pod) (bool, error) { return len(pods) == 0, nil }); err != nil {
		t.Fatalf("the pods %s in %s are not gone: %v", selector, ns, err)
	}
}

func withRules(rules ...v1alpha1.FailurePolicyRule) runOption {
	return func(r *v1alpha1.TrainingRun) {
		r.Spec.FailurePolicy.Rules = append(r.Spec.FailurePolicy.Rules, rules...)
	}
}

// withRestartMode sets spec.failurePolicy.restartMode (the default, Auto, restarts in place
// on these nodes).
func withRestartMode(m v1alpha1.RestartMode) runOption {
	return func(r *v1alpha1.TrainingRun) { r.Spec.FailurePolicy.RestartMode = m }
}

func withGPUs(n int64) runOption {
	return func(r *v1alpha1.TrainingRun) {
		q := *resource.NewQuantity(n, resource.DecimalSI)
		r.Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceName(v1alpha1.ResourceGPU)] = q
	}
}

func createRun(ctx context.Context, t testing.TB, c *cluster.Cluster, ns string, run *v1alpha1.TrainingRun) *v1alpha1.TrainingRun {
	t.Helper()
	run = run.DeepCopy()
	run.Namespace = ns
	if err := runClient(t, c).Create(ctx, run); err != nil {
		t.Fatalf("create TrainingRun %s/%s: %v", ns, run.Name, err)
	}
	return run
}

// watchRun returns as soon as cond holds for the run (list+watch on its name).
func watchRun(ctx context.Context, t testing.TB, c *cluster.Cluster, ns, name string, cond func(*v1alpha1.TrainingRun) bool) (*v1alpha1.TrainingRun, error) {
	cfg := rest.CopyConfig(c.Config)
	cfg.GroupVersion = &v1alpha1.GroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(testScheme).WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, err
	}
	lw := cache.NewListWatchFromClient(rc, v1alpha1.ResourceTrainingRun, ns, fields.OneTermEqualSelector("metadata.name", name))
	var last *v1alpha1.TrainingRun
	_, err = watchtools.UntilWithSync(ctx, lw, &v1alpha1.TrainingRun{}, nil, func(e watch.Event) (bool, error) {
		r, ok := e.Object.(*v1alpha1.TrainingRun)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		last = r
		return cond(r), nil
	})
	return last, err
}

// waitRun waits until cond holds for the run; it fails the test with what it saw last.
func waitRun(ctx context.Context, t testing.TB, c *cluster.Cluster, ns, name, what string, cond func(*v1alpha1.TrainingRun) bool) *v1alpha1.TrainingRun {
	t.Helper()
	start := time.Now()
	run, err := watchRun(ctx, t, c, ns, name, cond)
	if err != nil {
		t.Fatalf("TrainingRun %s/%s: %s: not observed within %s (%v); last seen: %s", ns, name, what,
			time.Since(start).Round(time.Millisecond), err, describeRun(run))
	}
	return run
}

// runningAttempt holds when attempt n has every worker Running.
func runningAttempt(n int32) func(*v1alpha1.TrainingRun) bool {
	return func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt == n && r.Status.Phase == v1alpha1.PhaseRunning && r.Status.ReadyWorkers == r.Spec.Workers
	}
}

// attemptRunningOrOver holds when attempt n has every worker Running, or when the run went
// past it (a later attempt, or a final phase): a test that waits for attempt n then fails at
// once on what happened instead, rather than at its deadline.
func attemptRunningOrOver(n int32) func(*v1alpha1.TrainingRun) bool {
	return func(r *v1alpha1.TrainingRun) bool {
		return runningAttempt(n)(r) || r.Status.Attempt > n || r.Status.Phase == v1alpha1.PhaseFailed || r.Status.Phase == v1alpha1.PhaseSucceeded
	}
}

// requireRunning fails the test unless the run has attempt n Running.
func requireRunning(t testing.TB, run *v1alpha1.TrainingRun, n int32) {
	t.Helper()
	if !runningAttempt(n)(run) {
		t.Fatalf("want attempt %d Running, the run went on: %s", n, describeRun(run))
	}
}

// failedOrRestarted holds once the run failed or went past its first attempt.
func failedOrRestarted(r *v1alpha1.TrainingRun) bool {
	return r.Status.Phase == v1alpha1.PhaseFailed || r.Status.Attempt > 1
}

func describeRun(run *v1alpha1.TrainingRun) string {
	if run == nil {
		return "<no run observed>"
	}
	s := run.Status
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%q attempt=%d restarts=%+v ready=%d/%d excluded=%v", s.Phase, s.Attempt, s.Restarts, s.ReadyWorkers, run.Spec.Workers, s.ExcludedNodes)
	if f := s.LastFailure; f != nil {
		fmt.Fprintf(&b, " lastFailure={class:%s cause:%s action:%s pod:%s node:%s exit:%v explanation:%q evidence:%q}",
			f.Class, f.Cause, f.Action, f.Pod, f.Node, ptrOr(f.ExitCode), f.Explanation, f.Evidence)
	}
	return b.String()
}

func ptrOr(p *int32) string {
	if p == nil {
		return "<nil>"
	}
	return strconv.Itoa(int(*p))
}

// ---------------------------------------------------------------------------------------
// Workers

func attemptSelector(run string, n int32) labels.Selector {
	return labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run, v1alpha1.LabelAttempt: strconv.Itoa(int(n))})
}

// waitWorkers waits until every index of the attempt has one Running pod and returns them by
// index: a pod made for the attempt, or an earlier one restarted in place for it
// (attempt.Running).
func waitWorkers(ctx context.Context, t testing.TB, c *cluster.Cluster, ns, run string, n int32, workers int) map[int]*corev1.Pod {
	t.Helper()
	return waitIndexes(ctx, t, c, ns, labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run}), workers,
		fmt.Sprintf("%d workers of %s attempt %d Running", workers, run, n), func(p *corev1.Pod) bool {
			k, _ := attempt.Running(p)
			return k == n && cluster.PodRunning(p)
		})
}

// createdWorkers waits until every index of attempt n has a pod made for it, whatever its
// phase, and returns them by index. A worker that fails a second after its gang registered
// may be Failed before the kubelet ever reports it Running (the kubelet's status sync
// coalesces the two on a busy machine), so a test of such a gang names its pods with this,
// not with waitWorkers.
func createdWorkers(ctx context.Context, t testing.TB, c *cluster.Cluster, ns, run string, n int32, workers int) map[int]*corev1.Pod {
	t.Helper()
	return waitIndexes(ctx, t, c, ns, attemptSelector(run, n), workers,
		fmt.Sprintf("%d workers of %s attempt %d created", workers, run, n), func(*corev1.Pod) bool { return true })
}

// waitIndexes waits until the pods that selector selects and keep keeps cover workers indexes,
// and returns them by index: each read with its node's barrier record where its agent keeps
// it on its heartbeat (-real-agent-records-on-heartbeat), as the controller reads it.
func waitIndexes(ctx context.Context, t testing.TB, c *cluster.Cluster, ns string, selector labels.Selector, workers int, what string, keep func(*corev1.Pod) bool) map[int]*corev1.Pod {
	t.Helper()
	var byIndex map[int]*corev1.Pod
	pods, err := c.WaitPodsWithRecords(ctx, ns, selector, func(pods []*corev1.Pod) (bool, error) {
		byIndex = map[int]*corev1.Pod{}
		for _, p := range pods {
			if keep(p) && !attempt.Spare(p) { // a warm spare is no worker
				byIndex[attempt.IndexOrNone(p)] = p
			}
		}
		return len(byIndex) == workers, nil
	})
	if err != nil {
		t.Fatalf("%s: %v; pods: %s", what, err, describePods(pods))
	}
	return byIndex
}

func describePods(pods []*corev1.Pod) string {
	var parts []string
	for _, p := range pods {
		var exits []string
		for _, cs := range p.Status.ContainerStatuses {
			if term := cs.State.Terminated; term != nil {
				exits = append(exits, fmt.Sprintf("%s:exit %d %s", cs.Name, term.ExitCode, term.Reason))
			}
		}
		parts = append(parts, fmt.Sprintf("%s(attempt=%s,index=%d,%s,node=%s%s%v)", p.Name, p.Labels[v1alpha1.LabelAttempt],
			attempt.IndexOrNone(p), p.Status.Phase, p.Spec.NodeName, map[bool]string{true: ",deleting", false: ""}[p.DeletionTimestamp != nil], exits))
	}
	if len(parts) == 0 {
		return "<none>"
	}
	return strings.Join(parts, " ")
}

// workerLog is what `launcher logs` prints for one index of one attempt.
func workerLog(ctx context.Context, t testing.TB, c *cluster.Cluster, ns, run string, n int32, index int) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, launcherBin, "logs", run, "--kubeconfig", c.Kubeconfig, "-n", ns,
		"--attempt", strconv.Itoa(int(n)), "--index", strconv.Itoa(index))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("launcher logs %s --attempt %d --index %d: %v\n%s", run, n, index, err, errOut.String())
	}
	return out.String()
}

// waitEnded watches pods until each has ended (phase Failed or Succeeded, and every
// container's termination written) or is gone, and returns each as it was last seen. A pod
// can go before another has ended: a restart deletes an attempt's pods as soon as its verdict
// is in, and the kubelet removes each once it has written how it ended. The phase can come
// first: in a node shutdown the kubelet's shutdown manager writes Failed with its
// DisruptionTarget before the status of the container it is still stopping (seen on a loaded
// machine: Failed with the worker still running, its exit 143 written a moment later).
func waitEnded(ctx context.Context, c *cluster.Cluster, ns string, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	last := map[types.UID]*corev1.Pod{}
	ended := func(p *corev1.Pod) bool {
		if cluster.PodLive(p) {
			return false
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Terminated == nil {
				return false
			}
		}
		return true
	}
	_, err := c.WaitPods(ctx, ns, labels.Everything(), func(live []*corev1.Pod) (bool, error) {
		present := map[types.UID]bool{}
		for _, p := range live {
			present[p.UID] = true
			if _, ok := last[p.UID]; ok || containsPod(pods, p) {
				last[p.UID] = p
			}
		}
		for _, p := range pods {
			if l, ok := last[p.UID]; !ok || (present[p.UID] && !ended(l)) {
				return false, nil
			}
		}
		return true, nil
	})
	var out []*corev1.Pod
	for _, p := range pods {
		if l, ok := last[p.UID]; ok {
			out = append(out, l)
		}
	}
	return out, err
}

func containsPod(pods []*corev1.Pod, p *corev1.Pod) bool {
	for _, q := range pods {
		if q.UID == p.UID {
			return true
		}
	}
	return false
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// ---------------------------------------------------------------------------------------
// One process per index

// overlapMonitor watches every pod of a run and records each moment at which one completion
// index had two bound pods that may run (scheduled, not terminal): the duplicate task
// registration that TensorFlow and JAX cannot survive.
type overlapMonitor struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	violations []string
	events     int
	err        error
}

func monitorOverlaps(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, run string) *overlapMonitor {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	m := &overlapMonitor{cancel: cancel, done: make(chan struct{})}
	synced := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(m.done)
		_, err := c.WaitPods(ctx, ns, labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run}), func(pods []*corev1.Pod) (bool, error) {
			once.Do(func() { close(synced) })
			m.mu.Lock()
			defer m.mu.Unlock()
			m.events++
			live := map[int][]*corev1.Pod{}
			for _, p := range pods {
				if p.Spec.NodeName != "" && cluster.PodLive(p) {
					live[attempt.IndexOrNone(p)] = append(live[attempt.IndexOrNone(p)], p)
				}
			}
			for i, ps := range live {
				if len(ps) > 1 {
					m.violations = append(m.violations, fmt.Sprintf("index %d: %d bound live pods: %s", i, len(ps), describePods(ps)))
				}
			}
			return false, nil
		})
		if ctx.Err() == nil {
			m.mu.Lock()
			m.err = err
			m.mu.Unlock()
		}
	}()
	t.Cleanup(m.stop)
	select {
	case <-synced:
	case <-m.done:
		t.Fatalf("pod monitor for %s ended before it synced: %v", run, m.err)
	}
	return m
}

func (m *overlapMonitor) stop() {
	m.cancel()
	<-m.done
}

// check stops the monitor and fails the test if any index ever had two live pods.
func (m *overlapMonitor) check(t *testing.T) {
	t.Helper()
	m.stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		t.Errorf("pod monitor ended early: %v", m.err)
	}
	for _, v := range m.violations {
		t.Errorf("overlap: %s", v)
	}
	t.Logf("pod monitor saw %d pod changes, %d overlaps", m.events, len(m.violations))
}

// ---------------------------------------------------------------------------------------
// Diagnostics

// scenario is a test's share of the package's real-node cluster: the cluster, a namespace of
// its own (dumped if the test fails), and a context that ends after d or with the test.
//
// It starts once every real node is healthy as the API sees it (cluster.NodeUnhealthy): a
// test that changed a node hands it back so in its cleanup, and a test never depends on the
// order the tests run in.
func scenario(t testing.TB, d time.Duration) (context.Context, *cluster.Cluster, string) {
	t.Helper()
	c := cluster.Shared(t)
	hctx, hcancel := context.WithTimeout(context.Background(), nodeHealthTimeout)
	defer hcancel()
	for _, n := range c.Real.Nodes {
		if err := c.WaitNodeHealthy(hctx, n.Name); err != nil {
			t.Fatalf("a test left a real node unhealthy: %v", err)
		}
	}
	ns := c.Namespace(t)
	dumpOnFailure(t, c, ns)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx, c, ns
}

// nodeHealthTimeout bounds a wait for a node to be healthy again: a kubelet's start (Ready in
// about 1.3 s here, up to 30 s on a loaded machine) and the node lifecycle controller's next
// pass (its node-monitor-period, 5 s here) that takes its taints off.
const nodeHealthTimeout = 90 * time.Second

// dumpOnFailure logs the namespace's pods and events, and the agents' logs, if the test failed.
func dumpOnFailure(t testing.TB, c *cluster.Cluster, ns string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var b strings.Builder
		if pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
			var ps []*corev1.Pod
			for i := range pods.Items {
				ps = append(ps, &pods.Items[i])
			}
			fmt.Fprintf(&b, "pods: %s\n", describePods(ps))
		}
		if evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
			sort.Slice(evs.Items, func(i, j int) bool { return evs.Items[i].LastTimestamp.Before(&evs.Items[j].LastTimestamp) })
			for _, e := range evs.Items {
				fmt.Fprintf(&b, "event %s %s/%s %s: %s\n", e.LastTimestamp.Format("15:04:05"), e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
		for name, a := range agents {
			fmt.Fprintf(&b, "agent %s (last 15 lines):\n%s\n", name, a.Tail(15))
		}
		t.Logf("namespace %s at the end of the failed test:\n%s", ns, b.String())
	})
}

// registeredTasks waits until the coordinator (index 0) of an attempt has seen all world
// tasks register, and returns its log and the tasks it registered, sorted ("0", "1", …;
// a task registered twice shows twice). The last registration may trail the workers'
// Running by a moment, and the log is read through the kubelet.
func registeredTasks(ctx context.Context, t testing.TB, c *cluster.Cluster, ns, run string, attempt int32, world int) (log string, tasks []string) {
	t.Helper()
	all := fmt.Sprintf("coordinator: all %d tasks registered", world)
	for log = workerLog(ctx, t, c, ns, run, attempt, 0); !strings.Contains(log, all); log = workerLog(ctx, t, c, ns, run, attempt, 0) {
		select {
		case <-ctx.Done():
			t.Fatalf("attempt %d's coordinator never saw all %d tasks register:\n%s", attempt, world, log)
		case <-time.After(200 * time.Millisecond):
		}
	}
	for _, m := range registered.FindAllStringSubmatch(log, -1) {
		tasks = append(tasks, m[1])
	}
	sort.Strings(tasks)
	return log, tasks
}

// eachOnce is tasks "0" to world-1, each once, as registeredTasks returns them.
func eachOnce(world int) string {
	want := make([]string, world)
	for i := range want {
		want[i] = strconv.Itoa(i)
	}
	sort.Strings(want)
	return strings.Join(want, ",")
}

// keepStatus is the finalizer by which a test keeps a pod in the API until it has read how
// the pod ended (holdPod).
const keepStatus = "test.faultline.dev/keep-status"

// holdPod adds keepStatus to pod and removes it when the test ends: a deleted pod stays,
// terminating, with the status the kubelet last wrote, until then.
func holdPod(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod) {
	t.Helper()
	patch := []byte(`{"metadata":{"finalizers":["` + keepStatus + `"]}}`)
	if _, err := c.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("hold pod %s: %v", pod.Name, err)
	}
	t.Cleanup(func() {
		// Read again on a conflict: the kubelet and the controller write the pod meanwhile.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p, err := c.Client.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
			if err != nil {
				return nil // gone
			}
			var keep []string
			for _, f := range p.Finalizers {
				if f != keepStatus {
					keep = append(keep, f)
				}
			}
			p.Finalizers = keep
			_, err = c.Client.CoreV1().Pods(p.Namespace).Update(context.Background(), p, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Errorf("release pod %s: %v", pod.Name, err)
		}
	})
}
