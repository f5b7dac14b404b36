package realnode

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestRealInPlaceFallsBackToRecreate (issue 27): one real node's kubelet runs with the
// RestartAllContainersOnContainerExits gate off, so that its Node does not declare the
// feature (the scheduler would keep a pod with a RestartAllContainers rule off it).
//
//   - A run with restartMode Auto (the default) over both real nodes gets pods without the
//     in-place shape (no barrier, no rule) and runs there as before; a GPU fault on a node
//     (an XID on a worker's GPU, fatal evidence on a running worker) restarts it by recreate: attempt
//     2's record says Recreate, and its workers are new pods.
//   - A run with restartMode InPlace over the same nodes is Stalled, reason
//     InPlaceUnsupported, naming that node and why, and no Job is made.
//
// It runs alone: it restarts a node's kubelet, and the XID turns that node's GPUHealthy
// False. It restores both before it ends.
func TestRealInPlaceFallsBackToRecreate(t *testing.T) {
	ctx, c, ns := scenario(t, 4*time.Minute)

	old := c.Real.Nodes[1]
	gate := v1alpha1.FeatureRestartAllContainers // the kubelet's gate has the feature's name
	t.Cleanup(func() {
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer rcancel()
		if err := c.Real.RestartKubelet(rctx, c, old, nil); err != nil {
			t.Errorf("restore the kubelet of %s: %v", old.Name, err)
			return
		}
		if n := declaredFeatures(rctx, t, c, old.Name); !slices.Contains(n, gate) {
			t.Errorf("%s with its kubelet's default gates declares %v, without %s", old.Name, n, gate)
		}
	})
	restarted := time.Now()
	if err := c.Real.RestartKubelet(ctx, c, old, map[string]bool{gate: false}); err != nil {
		t.Fatal(err)
	}
	declared := declaredFeatures(ctx, t, c, old.Name)
	if slices.Contains(declared, gate) {
		t.Fatalf("%s's kubelet runs with %s=false and still declares it: %v", old.Name, gate, declared)
	}
	t.Logf("kubelet of %s restarted with %s=false in %s; it declares %v", old.Name, gate, time.Since(restarted).Round(time.Millisecond), declared)

	startController(t, c, ns)

	// InPlace: the run waits, and says which node cannot and why.
	stuck := createRun(ctx, t, c, ns, realRun("inplace", 2, nil, withRestartMode(v1alpha1.RestartModeInPlace)))
	got := waitRun(ctx, t, c, ns, stuck.Name, "Stalled InPlaceUnsupported", func(r *v1alpha1.TrainingRun) bool {
		// Or its first attempt started: then it never stalls.
		return meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.ConditionStalled) || len(r.Status.Attempts) > 0 && r.Status.Attempts[0].StartTime != nil
	})
	cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionStalled)
	if cond == nil || cond.Status != metav1.ConditionTrue {
		t.Fatalf("restartMode InPlace on a node that cannot: the run started instead of stalling: %s", describeRun(got))
	}
	if cond.Reason != v1alpha1.ReasonInPlaceUnsupported || !strings.Contains(cond.Message, old.Name+" (its kubelet does not declare "+gate+")") {
		t.Errorf("Stalled %s: %q; want %s naming %s and its kubelet's missing %s", cond.Reason, cond.Message, v1alpha1.ReasonInPlaceUnsupported, old.Name, gate)
	}
	for _, n := range c.Real.Nodes {
		if n != old && strings.Contains(cond.Message, n.Name) {
			t.Errorf("Stalled names %s, whose kubelet restarts in place: %q", n.Name, cond.Message)
		}
	}
	if _, err := c.Client.BatchV1().Jobs(ns).Get(ctx, stuck.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("run %s with restartMode InPlace on a node that cannot: its Job: %v; want none", stuck.Name, err)
	}
	t.Logf("restartMode InPlace: Stalled %s: %s", cond.Reason, cond.Message)

	// Auto: the pods are made to be recreated, and run on both nodes.
	run := createRun(ctx, t, c, ns, realRun("auto", 4, []string{"--heartbeats-only", "--heartbeat-timeout", "30s"}, withGPUs(1)))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, t, c, ns, run.Name, 1, 4)
	var target *corev1.Pod
	for _, p := range first {
		if inPlaceShaped(p) {
			t.Errorf("pod %s of a restartMode Auto run on %s has the in-place shape", p.Name, old.Name)
		}
		if p.Spec.NodeName == old.Name && target == nil {
			target = p
		}
	}
	if target == nil {
		t.Fatalf("attempt 1 has no worker on %s: the gang must span both real nodes (%s)", old.Name, describePods(podList(first)))
	}

	// A GPU fault on the old node: the agent marks the worker of that GPU, and the fatal
	// evidence ends the attempt whether or not the worker dies of it (a program on a GPU
	// fallen off the bus often hangs: issue 42).
	uuid := gpuOfPod(ctx, t, old, target)
	injected := time.Now()
	injectFatalXID(t, c, old.Name, uuid)
	if _, err := c.WaitPods(ctx, ns, attemptSelector(run.Name, 1), func(pods []*corev1.Pod) (bool, error) {
		return slices.ContainsFunc(pods, func(p *corev1.Pod) bool {
			return p.UID == target.UID && p.Annotations[v1alpha1.AnnotationFaultEvidence] != ""
		}), nil
	}); err != nil {
		t.Fatalf("evidence on %s after an XID on its GPU %s: %v", target.Name, uuid, err)
	}

	got = waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, got, 2)
	t.Logf("XID 79 -> attempt 2 Running in %s", time.Since(injected).Round(time.Millisecond))
	if f := got.Status.LastFailure; f == nil || f.Cause != v1alpha1.CauseGPUFault || f.Node != old.Name {
		t.Errorf("verdict: %s; want GPUFault on %s", describeRun(got), old.Name)
	}
	rec := got.Status.Attempts[len(got.Status.Attempts)-1]
	if rec.Attempt != 2 || rec.RestartMode != v1alpha1.RestartModeRecreate || rec.JobAttempt != 0 || len(rec.MovedIndexes) != 0 {
		t.Errorf("attempt 2's record: attempt %d restartMode %q jobAttempt %d movedIndexes %v; want 2, Recreate, 0, none",
			rec.Attempt, rec.RestartMode, rec.JobAttempt, rec.MovedIndexes)
	}
	second := waitWorkers(ctx, t, c, ns, run.Name, 2, 4)
	for i, p := range second {
		if inPlaceShaped(p) || p.UID == first[i].UID {
			t.Errorf("attempt 2 index %d: pod %s (uid %s, attempt 1's %s), in-place shape %t; want a new pod without it", i, p.Name, p.UID, first[i].UID, inPlaceShaped(p))
		}
	}
}

// inPlaceShaped says whether p has the shape of a pod that restarts in place: the barrier
// init container, or a RestartAllContainers rule on a container.
func inPlaceShaped(p *corev1.Pod) bool {
	for _, c := range p.Spec.InitContainers {
		if c.Name == v1alpha1.BarrierContainer {
			return true
		}
	}
	for _, c := range p.Spec.Containers {
		for _, r := range c.RestartPolicyRules {
			if r.Action == corev1.ContainerRestartRuleActionRestartAllContainers {
				return true
			}
		}
	}
	return false
}

// declaredFeatures is what node name's kubelet declares now.
func declaredFeatures(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) []string {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Status.DeclaredFeatures
}

// gpuOfPod is the GPU the kubelet of node allocated to pod (its PodResources API).
func gpuOfPod(ctx context.Context, t *testing.T, node *cluster.RealNode, pod *corev1.Pod) string {
	t.Helper()
	gpus := gpusOf(ctx, t, node, pod.Namespace)
	if gpus[pod.Name] == "" {
		t.Fatalf("the kubelet of %s allocated no GPU to %s: %v", node.Name, pod.Name, gpus)
	}
	return gpus[pod.Name]
}

// killWorker sends sig to the worker container of pod on node through the node's
// containerd, as a crash or an operator would: neither the kubelet nor faultline asks.
func killWorker(ctx context.Context, t testing.TB, c *cluster.Cluster, node *cluster.RealNode, pod *corev1.Pod, sig string) {
	t.Helper()
	w := workerStatus(pod)
	if w == nil || w.ContainerID == "" {
		t.Fatalf("pod %s has no worker container to kill", pod.Name)
	}
	_, id, _ := strings.Cut(w.ContainerID, "://")
	if out, err := c.Real.Ctr(ctx, node, "-n", "k8s.io", "tasks", "kill", "-s", sig, id); err != nil {
		t.Fatalf("kill -%s the worker %s of %s: %v: %s", sig, id, pod.Name, err, out)
	}
}
