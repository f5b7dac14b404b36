package realnode

import (
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestRealAppExitFailsFast: a worker's bug (a traceback, exit 1, from the real container) fails
// the run: class Application, cause AppExit, the failing index named, nothing restarted.
// Its peers end too (the coordination service tells them), and are only peers.
func TestRealAppExitFailsFast(t *testing.T) {
	t.Parallel()
	ctx, c, ns := scenario(t, 3*time.Minute)
	startController(t, c, ns)

	run := createRun(ctx, t, c, ns, realRun("bug", 4, []string{"--fail-index", "2", "--fail", "exit", "--fail-after", "1s"}))
	workers := createdWorkers(ctx, t, c, ns, run.Name, 1, 4)
	start := time.Now()
	got := waitRun(ctx, t, c, ns, run.Name, "Failed", failedOrRestarted)
	t.Logf("all 4 created -> Failed in %s", time.Since(start).Round(time.Millisecond))

	f := got.Status.LastFailure
	if f == nil || f.Class != v1alpha1.ClassApplication || f.Cause != v1alpha1.CauseAppExit {
		t.Fatalf("verdict: %s; want Application/AppExit", describeRun(got))
	}
	if f.Pod != workers[2].Name || f.ExitCode == nil || *f.ExitCode != 1 {
		t.Errorf("verdict names pod %s exit %s, want %s (index 2) exit 1", f.Pod, ptrOr(f.ExitCode), workers[2].Name)
	}
	if got.Status.Attempt != 1 || got.Status.Restarts != (v1alpha1.RestartCounts{}) {
		t.Errorf("attempt %d restarts %+v: an application bug restarts nothing", got.Status.Attempt, got.Status.Restarts)
	}
	// The real container's own exit, as the kubelet reported it.
	p, err := c.Client.CoreV1().Pods(ns).Get(ctx, workers[2].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if term := cluster.WorkerTerminated(p); term == nil || term.ExitCode != 1 || !strings.Contains(term.Message, "ValueError: injected application error") {
		t.Errorf("pod %s terminated %+v: want exit 1 with the traceback as its message (FallbackToLogsOnError)", p.Name, term)
	}
}

// TestRealOOMKilledIsApplication: a worker that allocates past its memory limit is killed by
// the kernel; the kubelet reports OOMKilled (exit 137), and the verdict is Application,
// OOMKilled, not the Unknown a bare 137 would be.
func TestRealOOMKilledIsApplication(t *testing.T) {
	t.Parallel()
	ctx, c, ns := scenario(t, 3*time.Minute)
	startController(t, c, ns)

	// The peers end at once of the lost task (its connection closes), and the kubelet reports
	// the OOM kill through its own status sync: on a starved machine (three test clusters at
	// once) that took longer than the default 1 s settle window, and the peers' failure alone
	// was judged Unknown. The window is there to wait for the root cause; give it the time
	// the kubelet takes here, as an operator sizes settleSeconds to the cluster's latency.
	run := createRun(ctx, t, c, ns, realRun("oom", 4, []string{"--fail-index", "1", "--fail", "oom", "--fail-after", "1s"},
		func(r *v1alpha1.TrainingRun) { r.Spec.FailurePolicy.SettleSeconds = ptr.To[int32](5) }))
	workers := createdWorkers(ctx, t, c, ns, run.Name, 1, 4)
	got := waitRun(ctx, t, c, ns, run.Name, "Failed", failedOrRestarted)

	f := got.Status.LastFailure
	if f == nil || f.Class != v1alpha1.ClassApplication || f.Cause != v1alpha1.CauseOOMKilled || f.Pod != workers[1].Name {
		t.Fatalf("verdict: %s; want Application/OOMKilled on %s", describeRun(got), workers[1].Name)
	}
	if got.Status.Restarts != (v1alpha1.RestartCounts{}) {
		t.Errorf("restarts %+v: an OOM is the program's, it restarts nothing", got.Status.Restarts)
	}
	p, err := c.Client.CoreV1().Pods(ns).Get(ctx, workers[1].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if term := cluster.WorkerTerminated(p); term == nil || term.Reason != "OOMKilled" || term.ExitCode != 137 {
		t.Errorf("pod %s terminated %+v: want the kubelet's OOMKilled, exit 137", p.Name, term)
	}
}

// TestRealBareSigtermIsUnknown: the container runtime sends SIGTERM to one worker (as anyone
// with access to the node's containerd can) with no node signal: exit 143, no evidence, no
// DisruptionTarget. Nobody can tell whose fault that was: Unknown, which restarts the run on
// the unknown budget, and the next attempt runs.
func TestRealBareSigtermIsUnknown(t *testing.T) {
	t.Parallel()
	ctx, c, ns := scenario(t, 3*time.Minute)
	startController(t, c, ns)

	run := createRun(ctx, t, c, ns, realRun("sigterm", 4, nil))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	workers := waitWorkers(ctx, t, c, ns, run.Name, 1, 4)
	victim := workers[3]
	node := c.Real.Node(victim.Spec.NodeName)
	id := strings.TrimPrefix(victim.Status.ContainerStatuses[0].ContainerID, "containerd://")
	if out, err := c.Real.Ctr(ctx, node, "-n", "k8s.io", "tasks", "kill", "--signal", "SIGTERM", id); err != nil {
		t.Fatalf("ctr tasks kill %s on %s: %v\n%s", id, node.Name, err, out)
	}
	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, got, 2)

	f := got.Status.LastFailure
	if f == nil || f.Class != v1alpha1.ClassUnknown || f.Cause != v1alpha1.CauseUnknown || f.Pod != victim.Name {
		t.Fatalf("verdict: %s; want Unknown on %s", describeRun(got), victim.Name)
	}
	if f.ExitCode == nil || *f.ExitCode != 143 {
		t.Errorf("verdict exit %s, want 143", ptrOr(f.ExitCode))
	}
	if want := (v1alpha1.RestartCounts{Unknown: 1}); got.Status.Restarts != want {
		t.Errorf("restarts %+v, want %+v (the unknown budget)", got.Status.Restarts, want)
	}
}

// TestRealHintFromLogsFires: a worker prints the coordination service's lost-peer message
// on stderr and exits 1 (it writes no /dev/termination-log, as no framework does). Its
// termination message is its log's tail (FallbackToLogsOnError, which faultline sets): the
// kubelet's, or, as the pod restarts in place (restartMode Auto on these nodes), the node
// agent's report, read the same way. The JAX plugin's hint reaches the verdict: a peer
// failure, which is never a root cause, so the failure is Unknown and says why.
func TestRealHintFromLogsFires(t *testing.T) {
	t.Parallel()
	ctx, c, ns := scenario(t, 3*time.Minute)
	startController(t, c, ns)

	const message = "F1124 12:00:00.000000 client.h:77] Terminating process because the JAX distributed service detected fatal errors. " +
		"This most likely indicates that another task died; see the other task logs for more details. absl::Status: UNAVAILABLE: " +
		"The following tasks are unhealthy (stopped sending heartbeats):\n/job:jax_worker/replica:0/task:3\nThe tasks have crashed."
	// Index 2 is the only failure, the root the verdict names: the coordinator (index 0)
	// notices its loss by heartbeats only, after a minute, so no peer ends meanwhile. (With
	// the coordinator failing instead, its peers end within milliseconds of it, and which
	// exit the runtime timed first is a race.)
	run := createRun(ctx, t, c, ns, realRun("hint", 4, []string{"--fail-index", "2", "--fail", "message", "--message", message, "--fail-after", "1s",
		"--heartbeats-only", "--heartbeat-timeout", "60s"}))
	workers := createdWorkers(ctx, t, c, ns, run.Name, 1, 4)
	got := waitRun(ctx, t, c, ns, run.Name, "the first failure judged", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.LastFailure != nil
	})

	f := got.Status.LastFailure
	if f.Pod != workers[2].Name {
		t.Errorf("verdict names %s, want the worker that printed the message, %s", f.Pod, workers[2].Name)
	}
	if f.Cause != v1alpha1.CauseUnknown || !strings.Contains(f.Explanation+strings.Join(f.Evidence, "\n"), "jax hint") {
		t.Fatalf("verdict: %s; want Unknown because the jax hint (PeerFailure) matched its logs", describeRun(got))
	}
	p, err := c.Client.CoreV1().Pods(ns).Get(ctx, workers[2].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pol := p.Spec.Containers[0].TerminationMessagePolicy; pol != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("worker's terminationMessagePolicy %q, want FallbackToLogsOnError", pol)
	}
	if term := cluster.WorkerTerminated(p); term == nil || !strings.Contains(term.Message, "stopped sending heartbeats") {
		t.Errorf("pod %s terminated %+v: want its logs as its termination message", p.Name, term)
	}
}
