package realnode

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/inplacegate"
	"github.com/faultline-dev/faultline/test/cluster"
)

// keepOnPeerLoss are the test worker's flags for a gang that does not end by itself when a
// worker dies (its coordinator would notice only by heartbeats, after minutes): the agents
// stop the survivors, as they stop a framework blocked in a collective.
var keepOnPeerLoss = []string{"--heartbeats-only", "--heartbeat-timeout", "5m"}

// TestRealInPlaceAgentDiesMidRestart: a gang restarts in place across both real nodes (a
// worker on one node killed: Unknown), and the node agent of the other node is killed as the
// restart is decided, before that node's pods can run attempt 2. Nobody will stop or open
// them there: once the agent's heartbeat has expired (within agentlease.Duration of its
// death), or the margin for opening a barrier has passed, their indexes move to new pods on
// the other node, the InPlaceWaiting condition naming each pod and the node, and attempt 2
// runs; no worker of attempt 2 on the silent node.
//
// It runs alone: it kills a node's agent (and starts it again before it ends).
func TestRealInPlaceAgentDiesMidRestart(t *testing.T) {
	ctx, c, ns := scenario(t, 4*time.Minute)
	startController(t, c, ns)
	run := createRun(ctx, t, c, ns, realRun("agentdies", 4, nil, withRestartMode(v1alpha1.RestartModeInPlace)))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, t, c, ns, run.Name, 1, 4)
	silent := c.Real.Node(first[0].Spec.NodeName) // the coordinator's node loses its agent
	var victim *corev1.Pod
	for _, p := range first {
		if p.Spec.NodeName != silent.Name {
			victim = p
		}
	}
	if victim == nil {
		t.Fatalf("every worker on %s: the gang must span both real nodes", silent.Name)
	}
	t.Cleanup(func() {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := startAgent(rctx, c, silent); err != nil {
			t.Errorf("start the node agent of %s again: %v", silent.Name, err)
		}
	})

	killWorker(ctx, t, c, c.Real.Node(victim.Spec.NodeName), victim, "SIGKILL")
	waitRun(ctx, t, c, ns, run.Name, "attempt 2 decided", func(r *v1alpha1.TrainingRun) bool { return r.Status.Attempt >= 2 })
	agents[silent.Name].Stop()
	delete(agents, silent.Name)
	died := time.Now()

	fellBack := waitRun(ctx, t, c, ns, run.Name, "the fallback naming the silent node", func(r *v1alpha1.TrainingRun) bool {
		cond := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionInPlaceWaiting)
		return cond != nil && cond.Reason == v1alpha1.ReasonInPlaceFallback || r.Status.Attempt > 2 || r.Status.Phase == v1alpha1.PhaseFailed
	})
	cond := meta.FindStatusCondition(fellBack.Status.Conditions, v1alpha1.ConditionInPlaceWaiting)
	if cond == nil || cond.Reason != v1alpha1.ReasonInPlaceFallback {
		t.Fatalf("no fallback: %s", describeRun(fellBack))
	}
	took := time.Since(died)
	t.Logf("agent of %s killed -> fallback in %s (the bound: its heartbeat's %s): %s", silent.Name, took.Round(time.Millisecond), agentlease.Duration, cond.Message)
	// Whichever ends the wait first, the margin after the go signal or the agent's heartbeat
	// (then the message says the agent is silent), the pods and their node are named.
	if !strings.Contains(cond.Message, "node "+silent.Name) {
		t.Errorf("the fallback %q does not name node %s", cond.Message, silent.Name)
	}
	// A bound the design states, not a speed: the agent renewed at most RenewInterval
	// before it died, and the controller looks again when the heartbeat would expire.
	if bound := agentlease.Duration + inplacegate.OpenMargin; took > bound {
		t.Errorf("the fallback came %s after the agent's death, beyond the stated bound %s", took.Round(time.Second), bound)
	}

	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, got, 2)
	if got.Status.Restarts != (v1alpha1.RestartCounts{Unknown: 1}) {
		t.Errorf("restarts %+v, want one unknown restart", got.Status.Restarts)
	}
	for i, p := range waitWorkers(ctx, t, c, ns, run.Name, 2, 4) {
		if p.Spec.NodeName == silent.Name {
			t.Errorf("index %d (pod %s) runs attempt 2 on %s, whose agent is silent", i, p.Name, silent.Name)
		}
	}
}

// TestRealInPlaceLongGracePeriodIsHonoured: workers that checkpoint on SIGTERM, taking 65 s
// to exit, with a 90 s grace period, and that do not end when a peer dies. A worker killed
// outright ends attempt 1; the agents stop every other worker in place and wait for them: the controller waits as long as their pods'
// grace period allows (and a margin), not a fixed minute, so every index restarts in place,
// in its own pod, and none is moved.
//
// It runs alone: its workers hold the nodes' agents for a minute.
func TestRealInPlaceLongGracePeriodIsHonoured(t *testing.T) {
	const linger = 65 * time.Second
	ctx, c, ns := scenario(t, 5*time.Minute)
	startController(t, c, ns)
	run := createRun(ctx, t, c, ns, realRun("checkpoint", 4, slices.Concat(keepOnPeerLoss, []string{"--sigterm-delay", linger.String()}),
		withRestartMode(v1alpha1.RestartModeInPlace), withGrace(90*time.Second)))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, t, c, ns, run.Name, 1, 4)

	killWorker(ctx, t, c, c.Real.Node(first[3].Spec.NodeName), first[3], "SIGKILL")
	killed := time.Now()
	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, got, 2)
	t.Logf("worker killed -> attempt 2 Running in %s (the others took %s to stop)", time.Since(killed).Round(time.Second), linger)
	rec := attempt.Record(got)
	if rec.RestartMode != v1alpha1.RestartModeInPlace || len(rec.MovedIndexes) != 0 {
		t.Errorf("attempt 2: restartMode %s, moved %v; want in place, none moved", rec.RestartMode, rec.MovedIndexes)
	}
	if cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionInPlaceWaiting); cond != nil && cond.Reason == v1alpha1.ReasonInPlaceFallback {
		t.Errorf("a fallback: %s", cond.Message)
	}
	for i, p := range waitWorkers(ctx, t, c, ns, run.Name, 2, 4) {
		if p.UID != first[i].UID {
			t.Errorf("index %d: pod %s, want attempt 1's %s restarted in place", i, p.Name, first[i].Name)
		}
	}
}

// TestRealTwoRunsRestartOnOneNode: two runs on the same real node restart at once. One
// checkpoints on SIGTERM for a minute (five workers, so that the node agent has more stops in
// flight than it ever syncs pods at once); the other stops at once. The quick run's restart
// waits for nothing of the slow one's: its attempt 2 runs while the slow run's old workers
// are still stopping.
//
// It runs alone: its workers hold a node's agent for a minute.
func TestRealTwoRunsRestartOnOneNode(t *testing.T) {
	ctx, c, ns := scenario(t, 5*time.Minute)
	startController(t, c, ns)
	node := c.Real.Nodes[0].Name
	pin := func(r *v1alpha1.TrainingRun) {
		r.Spec.Template.Spec.TopologySpreadConstraints = nil
		r.Spec.Template.Spec.NodeSelector[corev1.LabelHostname] = node
	}
	slow := createRun(ctx, t, c, ns, realRun("slow", 5, slices.Concat(keepOnPeerLoss, []string{"--sigterm-delay", "60s"}),
		withRestartMode(v1alpha1.RestartModeInPlace), withGrace(90*time.Second), pin))
	quick := createRun(ctx, t, c, ns, realRun("quick", 2, nil, withRestartMode(v1alpha1.RestartModeInPlace), pin))
	waitRun(ctx, t, c, ns, slow.Name, "slow attempt 1 Running", runningAttempt(1))
	waitRun(ctx, t, c, ns, quick.Name, "quick attempt 1 Running", runningAttempt(1))
	slowWorkers := waitWorkers(ctx, t, c, ns, slow.Name, 1, 5)
	quickWorkers := waitWorkers(ctx, t, c, ns, quick.Name, 1, 2)

	killWorker(ctx, t, c, c.Real.Node(slowWorkers[4].Spec.NodeName), slowWorkers[4], "SIGKILL")
	waitRun(ctx, t, c, ns, slow.Name, "slow attempt 2 decided", func(r *v1alpha1.TrainingRun) bool { return r.Status.Attempt >= 2 })
	killWorker(ctx, t, c, c.Real.Node(quickWorkers[1].Spec.NodeName), quickWorkers[1], "SIGKILL")
	killed := time.Now()
	got := waitRun(ctx, t, c, ns, quick.Name, "quick attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, got, 2)
	t.Logf("quick run: worker killed -> attempt 2 Running in %s", time.Since(killed).Round(time.Millisecond))
	s := getRun(ctx, t, c, ns, slow.Name)
	if runningAttempt(2)(s) {
		t.Errorf("the slow run's attempt 2 ran before the quick run's: the quick run waited behind its stops")
	}
	if rec := attempt.Record(s); rec == nil || rec.BarrierOpenedAt != nil {
		t.Errorf("the slow run's barrier opened before its workers (a minute to stop) could have stopped: %s", describeRun(s))
	}
	if got := waitRun(ctx, t, c, ns, slow.Name, "slow attempt 2 Running", attemptRunningOrOver(2)); !runningAttempt(2)(got) {
		t.Errorf("the slow run: %s", describeRun(got))
	}
}

// getRun reads a run from the API server.
func getRun(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string) *v1alpha1.TrainingRun {
	t.Helper()
	r := &v1alpha1.TrainingRun{}
	if err := runClient(t, c).Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, r); err != nil {
		t.Fatal(err)
	}
	return r
}
