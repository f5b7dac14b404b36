package realnode

import (
	"strings"
	"testing"
	"time"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// TestRealNoDuplicateRegistration: over a gang restart, no index ever has two processes. The
// workers notice a lost task only by its heartbeat timeout (60 s here), as XLA's coordination
// service does, so when worker 3 dies the other three, the coordinator among them, live on;
// and they take 3 s to exit after SIGTERM, as workers that save a checkpoint do: the restart
// must stop them, and wait for them, before attempt 2 starts. Had any of attempt 2's workers started
// while attempt 1's coordinator lived, it would have registered there (the address never
// changes) and been refused as a duplicate incarnation. The test's watch never sees two
// bound live pods of one index, and attempt 2's coordinator registers each index once and
// refuses nothing. The run recreates its gang (restartMode Recreate): in place, the barrier
// holds the same line (TestRealInPlaceBarrier).
func TestRealNoDuplicateRegistration(t *testing.T) {
	t.Parallel()
	ctx, c, ns := scenario(t, 3*time.Minute)
	startController(t, c, ns)

	run := realRun("dup", 4, []string{"--fail-index", "3", "--fail", "exit", "--fail-after", "1s",
		"--heartbeats-only", "--heartbeat-timeout", "60s", "--sigterm-delay", "3s"},
		withRules(v1alpha1.FailurePolicyRule{Name: "retry-bugs", OnCauses: []v1alpha1.Cause{v1alpha1.CauseAppExit}, Action: v1alpha1.ActionRestartRunIgnoreBudget}),
		withRestartMode(v1alpha1.RestartModeRecreate))
	monitor := monitorOverlaps(ctx, t, c, ns, run.Name)
	run = createRun(ctx, t, c, ns, run)
	first := createdWorkers(ctx, t, c, ns, run.Name, 1, 4)
	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", attemptRunningOrOver(2))
	if !runningAttempt(2)(got) {
		monitor.check(t)
		t.Fatalf("attempt 2 did not run: %s", describeRun(got))
	}
	if f := got.Status.LastFailure; f == nil || f.Cause != v1alpha1.CauseAppExit || f.Pod != first[3].Name {
		t.Fatalf("verdict: %s; want AppExit on %s", describeRun(got), first[3].Name)
	}
	waitWorkers(ctx, t, c, ns, run.Name, 2, 4)
	log, tasks := registeredTasks(ctx, t, c, ns, run.Name, 2, 4)
	monitor.check(t)
	if strings.Join(tasks, ",") != eachOnce(4) || strings.Contains(log, "REFUSED") {
		t.Errorf("attempt 2's coordinator registered %v (want each of 0-3 once, nothing refused):\n%s", tasks, log)
	}
	// Attempt 2's workers all still run: none was refused by an old coordinator.
	for i := range 4 {
		if l := workerLog(ctx, t, c, ns, run.Name, 2, i); strings.Contains(l, "different incarnation") {
			t.Errorf("attempt 2 worker %d was refused as a duplicate:\n%s", i, l)
		}
	}
}
