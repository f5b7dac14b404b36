package realnode

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// registered matches the coordinator's line for each task that registers (test/worker).
var registered = regexp.MustCompile(`coordinator: registered task (\d+) `)

// TestRealNodeShutdownRestartsTheGang: a 4-worker run across both real nodes; logind (its
// stand-in on the node's bus) announces a shutdown of one node. The real kubelet's graceful
// node shutdown stops that node's workers (exit 143, DisruptionTarget TerminationByKubelet),
// and the node agent's evidence is on them before they end. One infrastructure restart
// follows; the new attempt's workers all run on the other node and rendezvous there: the
// coordinator registers every index once.
//
// The node that goes down is the one without the coordinator (index 0): when the
// coordinator's node goes down, the other workers there may die of its loss (exit 1 with
// the coordination service's words) before the kubelet's SIGTERM reaches them, as JAX's
// would; faultline classifies them by the agent's evidence all the same, but their exit
// codes are then a race.
//
// The run recreates its gang (restartMode Recreate): this is the recreate path on real
// nodes, which Auto takes where nodes cannot restart in place; the same shutdown in place is
// TestRealInPlaceRestartKeepsHealthyPods.
//
// It runs alone: the node it shuts down is every scenario's. It brings the node back
// (PrepareForShutdown(false)) before it ends.
func TestRealNodeShutdownRestartsTheGang(t *testing.T) {
	ctx, c, ns := scenario(t, 4*time.Minute)
	startController(t, c, ns)

	// The workers notice a lost task by its heartbeats, as XLA's service does, not the moment
	// its connection closes: the workers of the node going down all get the kubelet's SIGTERM
	// before the coordination service (on the other node) tells them anything.
	// The coordinator outlives its own SIGTERM by 5 s: faultline restarts the gang as soon as
	// the first worker of the node has ended with the agent's evidence, and the teardown's
	// SIGTERM to the coordinator could otherwise end the node's other workers (by its loss)
	// before the kubelet's SIGTERM reaches them.
	run := createRun(ctx, t, c, ns, realRun("gang", 4, []string{"--heartbeats-only", "--heartbeat-timeout", "10s",
		"--sigterm-delay", "5s", "--sigterm-delay-index", "0"}, withRestartMode(v1alpha1.RestartModeRecreate)))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	workers := waitWorkers(ctx, t, c, ns, run.Name, 1, 4)
	perNode := map[string]int{}
	for _, p := range workers {
		perNode[p.Spec.NodeName]++
	}
	if len(perNode) != 2 {
		t.Fatalf("attempt 1 on nodes %v: the gang must span both real nodes", perNode)
	}
	up := c.Real.Node(workers[0].Spec.NodeName) // the coordinator's node stays up
	var down *cluster.RealNode
	for _, n := range c.Real.Nodes {
		if n != up {
			down = n
		}
	}
	t.Cleanup(func() { bringBack(t, c, down) })

	// Both hold delay locks on the node's logind; each releases its own when it is done.
	released := map[string]chan time.Duration{"kubelet": make(chan time.Duration, 1), "agent": make(chan time.Duration, 1)}
	watchRelease := func(who string, l interface{ Released(time.Duration) bool }, within time.Duration) {
		go func() {
			start := time.Now()
			if l.Released(within) {
				released[who] <- time.Since(start)
			}
			close(released[who])
		}()
	}
	// Attempt 1's pods on the node that goes down, held in the API by a finalizer of the
	// test's until it has read how they ended: the restart deletes them as soon as its
	// verdict is in (the controller creates and deletes a gang's pods itself, with no
	// finalizer of the Job controller's to keep them), and on a loaded machine the kubelet,
	// shutting down, had not written a worker's exit before its pod was gone.
	var onDown []*corev1.Pod
	for _, p := range workers {
		if p.Spec.NodeName == down.Name {
			onDown = append(onDown, p)
			holdPod(ctx, t, c, p)
		}
	}
	announced := time.Now()
	watchRelease("kubelet", down.KubeletLock, 30*time.Second)
	watchRelease("agent", agents[down.Name].Lock, 30*time.Second)
	if err := down.Logind.PrepareForShutdown(true); err != nil {
		t.Fatal(err)
	}
	stopped, err := waitEnded(ctx, c, ns, onDown)
	if err != nil {
		t.Fatalf("the kubelet of %s stopped its %d workers: %v", down.Name, len(onDown), err)
	}
	t.Logf("PrepareForShutdown(true) -> %d workers on %s Failed in %s", len(stopped), down.Name, time.Since(announced).Round(time.Millisecond))
	for _, p := range stopped {
		term := cluster.WorkerTerminated(p)
		if term == nil || term.ExitCode != 143 {
			t.Errorf("pod %s on %s: terminated %+v, want exit 143 (SIGTERM from the kubelet)", p.Name, down.Name, term)
			continue
		}
		dt := podCondition(p, corev1.DisruptionTarget)
		if dt == nil || dt.Status != corev1.ConditionTrue || dt.Reason != corev1.PodReasonTerminationByKubelet {
			t.Errorf("pod %s: DisruptionTarget %+v, want True/TerminationByKubelet from the kubelet", p.Name, dt)
		}
		infra := podCondition(p, v1alpha1.PodConditionInfrastructureFault)
		if infra == nil || infra.Status != corev1.ConditionTrue || infra.Reason != string(v1alpha1.CauseNodeShutdown) {
			t.Errorf("pod %s: InfrastructureFault %+v, want True/NodeShutdown from the node agent", p.Name, infra)
			continue
		}
		var ev v1alpha1.FaultEvidence
		if err := json.Unmarshal([]byte(p.Annotations[v1alpha1.AnnotationFaultEvidence]), &ev); err != nil {
			t.Errorf("pod %s: evidence %q: %v", p.Name, p.Annotations[v1alpha1.AnnotationFaultEvidence], err)
			continue
		}
		detected, err := time.Parse(time.RFC3339Nano, ev.DetectedAt)
		if err != nil || ev.Node != down.Name {
			t.Errorf("pod %s: evidence %+v, want detected on %s", p.Name, ev, down.Name)
			continue
		}
		// Before it ended: the container's finishedAt has a resolution of one second, the
		// evidence's of a nanosecond; the condition's time is when the agent wrote it.
		if finished := term.FinishedAt.Time; detected.After(finished.Add(time.Second)) || infra.LastTransitionTime.After(finished.Add(time.Second)) {
			t.Errorf("pod %s: evidence detected %s, condition written %s, after the container finished at %s",
				p.Name, detected.Format(time.RFC3339Nano), infra.LastTransitionTime.Format(time.RFC3339Nano), finished.Format(time.RFC3339))
		}
		t.Logf("pod %s: agent detected %s, condition %s; kubelet: DisruptionTarget %s, container finished %s (exit %d, %q)",
			p.Name, detected.Sub(announced).Round(time.Millisecond), infra.LastTransitionTime.Format("15:04:05"),
			dt.LastTransitionTime.Format("15:04:05"), term.FinishedAt.Format("15:04:05"), term.ExitCode, p.Status.Message)
	}

	// Logind goes on (powers off) once every delay lock is released, or after its
	// InhibitDelayMaxSec: the agent releases when its marks are written (--release-timeout
	// bounds it), the kubelet when its pods have stopped (shutdownGracePeriod bounds it).
	for _, who := range []string{"agent", "kubelet"} {
		d, ok := <-released[who]
		if !ok {
			t.Errorf("the %s of %s kept its inhibitor lock for 30 s after PrepareForShutdown(true)", who, down.Name)
			continue
		}
		t.Logf("the %s released its inhibitor lock %s after PrepareForShutdown(true)", who, d.Round(time.Millisecond))
	}

	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, got, 2)
	t.Logf("PrepareForShutdown(true) -> attempt 2 Running in %s", time.Since(announced).Round(time.Millisecond))
	f := got.Status.LastFailure
	if f == nil || f.Class != v1alpha1.ClassInfrastructure || f.Cause != v1alpha1.CauseNodeShutdown || f.Node != down.Name {
		t.Fatalf("verdict: %s; want Infrastructure/NodeShutdown on %s", describeRun(got), down.Name)
	}
	if want := (v1alpha1.RestartCounts{Infrastructure: 1}); got.Status.Restarts != want {
		t.Errorf("restarts %+v, want %+v", got.Status.Restarts, want)
	}
	second := waitWorkers(ctx, t, c, ns, run.Name, 2, 4)
	for i, p := range second {
		if p.Spec.NodeName != up.Name {
			t.Errorf("attempt 2 worker %d on %s, want %s (the node that stayed up)", i, p.Spec.NodeName, up.Name)
		}
	}
	// The new gang rendezvoused: its coordinator registered each index once.
	log, tasks := registeredTasks(ctx, t, c, ns, run.Name, 2, 4)
	if strings.Join(tasks, ",") != eachOnce(4) {
		t.Errorf("attempt 2's coordinator registered tasks %v, want each of 0-3 once:\n%s", tasks, log)
	}
	if strings.Contains(log, "REFUSED") {
		t.Errorf("attempt 2's coordinator refused a registration:\n%s", log)
	}
}

// bringBack cancels the shutdown of a real node, waits until it is Ready again, and restarts
// its node agent (see startAgent), so that later scenarios find the node as it was.
func bringBack(t testing.TB, c *cluster.Cluster, n *cluster.RealNode) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The agent's token died with its DaemonSet pod: stop it before it takes a new lock.
	if a := agents[n.Name]; a != nil {
		a.Stop()
		delete(agents, n.Name)
	}
	if err := c.CancelShutdown(ctx, n); err != nil {
		t.Errorf("bring %s back: %v", n.Name, err)
		return
	}
	if err := startAgent(ctx, c, n); err != nil {
		t.Errorf("restart the node agent of %s with its new DaemonSet pod's token: %v", n.Name, err)
	}
}
