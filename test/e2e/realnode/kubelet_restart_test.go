package realnode

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// TestRealKubeletRestartIsNotNodeLost: a worker node's kubelet stops and stays away for longer
// than the node monitor's grace period (40 s here), as an upgrade or a crash loop of the
// kubelet does, then comes back. Meanwhile the node is unreachable in the API (the node
// lifecycle controller's taint, the pods marked not ready) while every worker runs on
// (containerd holds them) and the node agent, a process apart, renews its heartbeat. The pods
// tolerate the node's silence for 300 s (Kubernetes' default): the run stays in attempt 1,
// the same pods, no restart spent, and is Running again once the kubelet is back.
//
// It runs alone: it takes a node's kubelet away.
func TestRealKubeletRestartIsNotNodeLost(t *testing.T) {
	ctx, c, ns := scenario(t, 4*time.Minute)
	startController(t, c, ns)
	run := createRun(ctx, t, c, ns, realRun("blink", 2, nil))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	before := waitWorkers(ctx, t, c, ns, run.Name, 1, 2)
	blinking := c.Real.Node(before[1].Spec.NodeName)
	if blinking == nil || before[0].Spec.NodeName == blinking.Name {
		t.Fatalf("want the two workers on the two real nodes: %s", describePods([]*corev1.Pod{before[0], before[1]}))
	}
	if d, ok := unreachableToleration(before[1]); !ok || d < 2*time.Minute {
		t.Fatalf("worker %s tolerates %s its node's unreachability (found %v): the blink below must stay within it", before[1].Name, d, ok)
	}

	c.Real.StopKubelet(blinking)
	stopped := time.Now()
	t.Cleanup(func() {
		if blinking.KubeletRunning() {
			return
		}
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.Real.StartKubelet(rctx, c, blinking, nil); err != nil {
			t.Errorf("bring the kubelet of %s back: %v", blinking.Name, err)
		}
	})
	// The node lifecycle controller marks the silent node unreachable after its grace period.
	if _, err := c.WaitNode(ctx, blinking.Name, func(n *corev1.Node) (bool, error) {
		return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeUnreachable }), nil
	}); err != nil {
		t.Fatalf("%s never marked unreachable with its kubelet stopped: %v", blinking.Name, err)
	}
	t.Logf("kubelet of %s stopped -> node unreachable in %s", blinking.Name, time.Since(stopped).Round(time.Second))
	// The controller hears of it (the pods turn not ready): let it have its say for a while,
	// the node silent all along, then bring the kubelet back.
	waitRun(ctx, t, c, ns, run.Name, "the run sees its workers not ready", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.ReadyWorkers < r.Spec.Workers || r.Status.Attempt > 1
	})
	quiet, cancel := context.WithTimeout(ctx, 15*time.Second)
	got, _ := watchRun(quiet, t, c, ns, run.Name, func(r *v1alpha1.TrainingRun) bool { return r.Status.Attempt > 1 })
	cancel()
	if got != nil && got.Status.Attempt > 1 {
		t.Fatalf("the run restarted while %s's kubelet was away (workers running, agent alive): %s", blinking.Name, describeRun(got))
	}
	if err := c.Real.StartKubelet(ctx, c, blinking, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubelet of %s away for %s (unreachable), back and the node healthy", blinking.Name, time.Since(stopped).Round(time.Second))

	after := waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running again", attemptRunningOrOver(1))
	requireRunning(t, after, 1)
	if after.Status.Restarts != (v1alpha1.RestartCounts{}) || len(after.Status.Attempts) != 1 || after.Status.LastFailure != nil {
		t.Errorf("a blink of a kubelet spent a restart: %s", describeRun(after))
	}
	now := waitWorkers(ctx, t, c, ns, run.Name, 1, 2)
	for i, p := range before {
		if now[i].UID != p.UID || workerRestarts(now[i]) != workerRestarts(p) {
			t.Errorf("index %d: pod %s (restarts %d) became %s (restarts %d): the workers were touched", i, p.Name, workerRestarts(p), now[i].Name, workerRestarts(now[i]))
		}
	}
}

// unreachableToleration is how long a pod tolerates the node.kubernetes.io/unreachable taint.
func unreachableToleration(p *corev1.Pod) (time.Duration, bool) {
	for _, t := range p.Spec.Tolerations {
		if t.Key == corev1.TaintNodeUnreachable && t.TolerationSeconds != nil {
			return time.Duration(*t.TolerationSeconds) * time.Second, true
		}
	}
	return 0, false
}

// workerRestarts is the restart count of a pod's worker container.
func workerRestarts(p *corev1.Pod) int32 {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "worker" {
			return cs.RestartCount
		}
	}
	return -1
}
