package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/cli"
	"github.com/faultline-dev/faultline/test/cluster"
)

// The real-node story (-real-nodes): the same steps on two real nodes (kubelet, containerd,
// runc; test/cluster) running the test worker (test/worker), a program that behaves like a
// JAX process. Nothing is played: the kubelet stops the workers on the node that shuts down,
// and the bug is the worker's own exit, so the demo reports the exit codes and times the
// kubelet and the program produced.
const (
	realNodes = 2
	// realGPUs per node, from the fake device plugin; one per worker, so that the whole gang
	// fits on the node that stays up.
	realGPUs         = 4
	realGPUPerWorker = 1
	// buggyIndex raises a ValueError bugAfter after attempt 2's gang has registered.
	buggyIndex = 1
	bugAfter   = 6 * time.Second
)

// startRealCluster starts the control plane with the real nodes.
func (d *demo) startRealCluster(ctx context.Context) error {
	d.stepf("Starting a local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,\n"+
		"      kube-scheduler, all real) and %d real nodes: a kubelet with its own containerd and runc each,\n"+
		"      pods on a bridge of their own, CoreDNS, and %d fake GPUs per node from a device plugin...", realNodes, realGPUs)
	t := time.Now()
	var err error
	d.c, err = cluster.Start(ctx, cluster.Options{Name: "demo", RealNodes: realNodes, RealNode: cluster.RealNodeSpec{GPUs: realGPUs}})
	if err != nil {
		return err
	}
	v, err := d.c.Client.Discovery().ServerVersion()
	if err != nil {
		return err
	}
	n, err := d.c.Client.CoreV1().Nodes().Get(ctx, cluster.RealNodeName(0), metav1.GetOptions{})
	if err != nil {
		return err
	}
	d.say("      up in %s: Kubernetes %s; nodes %s and %s: kubelet %s, %s, %d GPUs each.", since(t), v.GitVersion,
		cluster.RealNodeName(0), cluster.RealNodeName(realNodes-1), n.Status.NodeInfo.KubeletVersion,
		n.Status.NodeInfo.ContainerRuntimeVersion, realGPUs)
	return nil
}

// startRealAgents starts a node agent per real node, sharing the node's system bus (and so
// its logind) with the kubelet, with a token bound to the agent DaemonSet's pod there.
func (d *demo) startRealAgents(ctx context.Context) (map[string]*cluster.Agent, error) {
	agents := map[string]*cluster.Agent{}
	for _, n := range d.c.Real.Nodes {
		pod, err := d.c.AgentPodOn(ctx, n.Name)
		if err != nil {
			return agents, err
		}
		a, err := d.c.StartRealNodeAgent(ctx, n, cluster.AgentOptions{
			Bin: filepath.Join(d.bin, "nodeagent"), DaemonSetPod: pod,
			Dir: filepath.Join(d.workdir, n.Name), Args: []string{"--release-timeout", "5s"},
		})
		if err != nil {
			return agents, err
		}
		agents[n.Name] = a
	}
	return agents, nil
}

// submitReal writes the run as `launcher run` would build it, plus what the real nodes need
// (their toleration, the local image, a spread over both nodes), and submits it.
func (d *demo) submitReal(ctx context.Context) error {
	spec := cli.RunSpec{
		Name: runName, Namespace: namespace, Framework: "jax", Workers: int32(d.opts.Workers),
		Image: cluster.WorkerImage, GPUsPerWorker: realGPUPerWorker, Memory: "64Mi", ExcludeFaultyNodes: true,
		Command: []string{"/worker", "--fail-index", strconv.Itoa(buggyIndex), "--fail-attempt", "2",
			"--fail", "exit", "--fail-after", bugAfter.String()},
	}
	run, err := spec.TrainingRun()
	if err != nil {
		return err
	}
	pod := &run.Spec.Template.Spec
	pod.Tolerations = append(pod.Tolerations, cluster.RealNodeToleration)
	pod.NodeSelector = map[string]string{cluster.LabelNodeKind: cluster.NodeKindReal}
	pod.AutomountServiceAccountToken = ptr.To(false)
	pod.Containers[0].ImagePullPolicy = corev1.PullNever
	pod.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor),
		LabelSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.LabelRun: runName}},
		MatchLabelKeys:   []string{v1alpha1.LabelAttempt},
	}}
	run.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.KindTrainingRun}
	b, err := yaml.Marshal(run)
	if err != nil {
		return err
	}
	file := filepath.Join(d.workdir, "run.yaml")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		return err
	}
	d.say("      run.yaml: what `launcher run --framework jax --workers %d --gpus-per-worker %d --exclude-faulty-nodes`", d.opts.Workers, realGPUPerWorker)
	d.say("      builds, with the test worker's image (built here, imported into each node's containerd), the")
	d.say("      real nodes' toleration and a spread over both nodes. Worker %d of attempt 2 has a bug: it", buggyIndex)
	d.say("      raises ValueError %s after the gang has started.", bugAfter)
	_, err = d.launcher(ctx, true, "submit", "-f", file)
	return err
}

// shutdownReal announces a shutdown of node to its kubelet and agent, and reports what the
// agent wrote and how the kubelet stopped the workers there.
func (d *demo) shutdownReal(ctx context.Context, node string, onNode []*corev1.Pod) (fault time.Time, err error) {
	n := d.c.Real.Node(node)
	fault = time.Now()
	if err := n.Logind.PrepareForShutdown(true); err != nil {
		return fault, err
	}
	marked, err := d.waitMarked(ctx, onNode)
	if err != nil {
		return fault, err
	}
	d.say("      the agent marked the %d workers on %s (indexes %s) with InfrastructureFault=NodeShutdown",
		len(onNode), node, indexes(onNode))
	d.say("      %s after the announcement. The kubelet's own graceful shutdown stops them:", marked.Sub(fault).Round(time.Millisecond))
	failed, err := d.waitFailed(ctx, onNode)
	if err != nil {
		return fault, err
	}
	for _, p := range failed {
		term := cluster.WorkerTerminated(p)
		if term == nil {
			continue
		}
		dt := "no DisruptionTarget"
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
				dt = "DisruptionTarget " + c.Reason
			}
		}
		d.say("        index %d: exit %d (%s), %s, %q", attempt.IndexOrNone(p), term.ExitCode, exitMeaning(term.ExitCode), dt, firstLine(p.Status.Message))
		if term.ExitCode != 143 {
			// The coordinator's loss reached it before the kubelet's SIGTERM did.
			d.say("          (it ended first on its own, with the coordination service's error: %q)", errorLine(term.Message))
		}
	}
	d.say("      all %d ended %s after the announcement.", len(failed), since(fault))
	return fault, nil
}

// waitFailed waits until every pod of pods has ended (Failed) or is gone, and returns each
// as it was last seen: the restart deletes an attempt's pods as soon as its verdict is in,
// and the kubelet removes each once it has written how it ended, so one can go before
// another has ended.
func (d *demo) waitFailed(ctx context.Context, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	want := map[types.UID]bool{}
	for _, p := range pods {
		want[p.UID] = true
	}
	last := map[types.UID]*corev1.Pod{}
	sel := labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: runName})
	_, err := d.c.WaitPods(ctx, namespace, sel, func(all []*corev1.Pod) (bool, error) {
		present := map[types.UID]bool{}
		for _, p := range all {
			present[p.UID] = true
			if want[p.UID] {
				last[p.UID] = p
			}
		}
		for uid := range want {
			if l, ok := last[uid]; !ok || (present[uid] && l.Status.Phase != corev1.PodFailed) {
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

// bugReal waits for the buggy worker's own exit to fail the run, and returns the time from
// its exit (as the worker logged it) to the run's phase Failed.
func (d *demo) bugReal(ctx context.Context, next []*corev1.Pod) (time.Duration, error) {
	var victim *corev1.Pod
	for _, p := range next {
		if attempt.IndexOrNone(p) == buggyIndex {
			victim = p
		}
	}
	if victim == nil {
		return 0, fmt.Errorf("no worker %d in attempt 2", buggyIndex)
	}
	d.stepf("A bug: worker index %d of attempt 2 raises ValueError %s after the gang started, and exits 1.\n"+
		"      No node signal comes within the settle window, so the application is to blame.", buggyIndex, bugAfter)
	if _, err := d.waitRun(ctx, "phase Failed", func(r *v1alpha1.TrainingRun) bool { return r.Status.Phase == v1alpha1.PhaseFailed }); err != nil {
		return 0, err
	}
	failed := time.Now()
	p, err := d.c.Client.CoreV1().Pods(namespace).Get(ctx, victim.Name, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	if term := cluster.WorkerTerminated(p); term != nil {
		d.say("      index %d: exit %d (%s), its error: %q", buggyIndex, term.ExitCode, exitMeaning(term.ExitCode), errorLine(term.Message))
	}
	// A worker that restarts in place: its container is gone with its log, and the node
	// agent's report has the runtime's exit time.
	if ex, ok := attempt.ReportedExit(p); ok {
		d.say("      (its pod restarts in place: the node agent reported the exit, which the pod's status never shows)")
		if exited := ex.Terminated().FinishedAt; !exited.IsZero() {
			return failed.Sub(exited.Time), nil
		}
	}
	logs, err := d.launcher(ctx, false, "logs", runName, "--attempt", "2", "--index", strconv.Itoa(buggyIndex))
	if err != nil {
		return 0, err
	}
	exited, err := exitTime(logs, failed)
	if err != nil {
		return 0, err
	}
	return failed.Sub(exited), nil
}

// exitLine is the worker's last log line before an injected fault (test/worker), with its
// UTC time of day to the millisecond.
var exitLine = regexp.MustCompile(`(?m)^(\d\d:\d\d:\d\d\.\d\d\d) worker \d+: failing now`)

// exitTime is when the worker logged that it was failing, on the day of near.
func exitTime(logs string, near time.Time) (time.Time, error) {
	m := exitLine.FindAllStringSubmatch(logs, -1)
	if m == nil {
		return time.Time{}, errors.New("the buggy worker's log has no 'failing now' line:\n" + logs)
	}
	tod, err := time.Parse("15:04:05.000", m[len(m)-1][1])
	if err != nil {
		return time.Time{}, err
	}
	n := near.UTC()
	t := time.Date(n.Year(), n.Month(), n.Day(), tod.Hour(), tod.Minute(), tod.Second(), tod.Nanosecond(), time.UTC)
	if t.After(n) { // logged just before midnight, read just after
		t = t.AddDate(0, 0, -1)
	}
	return t, nil
}

func exitMeaning(code int32) string {
	switch code {
	case 143:
		return "SIGTERM"
	case 137:
		return "SIGKILL"
	case 1:
		return "the program's own exit"
	}
	return "exit code"
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// errorRE finds the line of a termination message (the log's tail) that says what went
// wrong: a Python exception or the coordination service's status.
var errorRE = regexp.MustCompile(`(?m)^(\w+Error: .*|.*absl::Status: .*|UNAVAILABLE: .*)$`)

// errorLine is that line, or the message's last line.
func errorLine(msg string) string {
	if m := errorRE.FindAllString(msg, -1); m != nil {
		line := m[len(m)-1]
		if i := strings.Index(line, "absl::Status: "); i >= 0 {
			line = line[i+len("absl::Status: "):]
		}
		return line
	}
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	return lines[len(lines)-1]
}
