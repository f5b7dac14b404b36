package realnode

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/test/cluster"
)

// Faults that hang instead of exiting (issue 42): a GPU that falls off the bus leaves its
// worker blocked in a CUDA call, and its peers in the same collective, until a framework's
// timeout (minutes) or never; a gang can also hang with no fault anyone sees. The test
// worker's --hang blocks every index for ever once the gang has registered, as such a gang
// does: no more output, SIGTERM ignored (only SIGKILL ends it), heartbeats going on.

// hangGrace is the hung workers' termination grace period: they ignore SIGTERM, so each stop
// takes it in full before the SIGKILL.
const hangGrace = 3 * time.Second

// withGrace sets the workers' termination grace period.
func withGrace(d time.Duration) runOption {
	return func(r *v1alpha1.TrainingRun) {
		r.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(d / time.Second))
	}
}

// withProgressDeadline sets spec.failurePolicy.progressDeadlineSeconds.
func withProgressDeadline(d time.Duration) runOption {
	return func(r *v1alpha1.TrainingRun) {
		r.Spec.FailurePolicy.ProgressDeadlineSeconds = ptr.To(int32(d / time.Second))
	}
}

// hungLine is the test worker's last line once it hangs (test/worker, --hang).
var hungLine = regexp.MustCompile(`(?m)^(\d\d:\d\d:\d\d\.\d\d\d) worker \d+: blocked in a collective that never completes`)

// waitHung waits until every index of attempt n says it hangs, and returns when the last one
// wrote its last line (the worker logs the time of day, UTC, to the millisecond).
func waitHung(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, run string, n int32, workers int) time.Time {
	t.Helper()
	var last time.Time
	for i := range workers {
		for {
			log := workerLog(ctx, t, c, ns, run, n, i)
			if m := hungLine.FindStringSubmatch(log); m != nil {
				at := timeOfDay(t, m[1])
				if at.After(last) {
					last = at
				}
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("index %d of %s attempt %d never hung:\n%s", i, run, n, log)
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return last
}

// timeOfDay is today's (UTC) time of a clock the worker logged, yesterday's if that would be
// in the future (a test across midnight).
func timeOfDay(t *testing.T, clock string) time.Time {
	t.Helper()
	tod, err := time.Parse("15:04:05.000", clock)
	if err != nil {
		t.Fatalf("worker time %q: %v", clock, err)
	}
	now := time.Now().UTC()
	at := time.Date(now.Year(), now.Month(), now.Day(), tod.Hour(), tod.Minute(), tod.Second(), tod.Nanosecond(), time.UTC)
	if at.After(now.Add(time.Minute)) {
		at = at.AddDate(0, 0, -1)
	}
	return at
}

// requireStays watches the run for d and fails the test if bad ever holds.
func requireStays(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string, d time.Duration, what string, bad func(*v1alpha1.TrainingRun) bool) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	run, err := watchRun(wctx, t, c, ns, name, bad)
	switch {
	case err == nil:
		t.Fatalf("TrainingRun %s/%s: %s: violated within %s: %s", ns, name, what, d, describeRun(run))
	case wctx.Err() == nil || ctx.Err() != nil:
		t.Fatalf("TrainingRun %s/%s: watch for %s: %v", ns, name, what, err)
	}
}

// restartedAtAll holds once the run has left attempt 1 in any way.
func restartedAtAll(r *v1alpha1.TrainingRun) bool {
	return r.Status.Attempt > 1 || r.Status.LastFailure != nil || r.Status.Phase == v1alpha1.PhaseFailed
}

// TestRealFatalXIDOnAHungWorkerRestartsTheGang: four real workers, one GPU each over both
// nodes, block for ever as a gang in a collective does; XID 79 (fallen off the bus) on the
// GPU of one of them. Nothing exits, and faultline does not wait for that: once the settle
// window after the agent's evidence is over, it judges the attempt as the evidence says
// (infrastructure, GPUFault, the node excluded), stops the hung workers (they ignore SIGTERM:
// each stop takes its grace period, then SIGKILL) and restarts the gang, attempt 2 Running
// within the settle window and the teardown. One infrastructure restart is spent, once; the
// verdict says the worker was still running.
//
// It runs alone: a fatal XID turns the node's GPUHealthy condition False (undone at its end).
func TestRealFatalXIDOnAHungWorkerRestartsTheGang(t *testing.T) {
	ctx, c, ns := scenario(t, 4*time.Minute)
	startController(t, c, ns)

	run := createRun(ctx, t, c, ns, realRun("hung-xid", 4, []string{"--hang", "--fail-after", "1s"}, withGPUs(1), withGrace(hangGrace)))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, t, c, ns, run.Name, 1, 4)
	waitHung(ctx, t, c, ns, run.Name, 1, 4)
	target := first[1]
	node := c.Real.Node(target.Spec.NodeName)
	if node == nil {
		t.Fatalf("index 1 runs on %s, no real node", target.Spec.NodeName)
	}
	monitor := monitorOverlaps(ctx, t, c, ns, run.Name)

	uuid := gpuOfPod(ctx, t, node, target)
	injected := time.Now()
	injectFatalXID(t, c, node.Name, uuid)
	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, got, 2)
	took := time.Since(injected)
	t.Logf("XID 79 on %s's GPU %s (the worker hung, never exiting) -> attempt 2 Running in %s", target.Name, uuid, took.Round(time.Millisecond))

	f := got.Status.LastFailure
	if f == nil || f.Class != v1alpha1.ClassInfrastructure || f.Cause != v1alpha1.CauseGPUFault || f.Pod != target.Name || f.Node != node.Name || f.XID != 79 {
		t.Fatalf("verdict: %s; want Infrastructure/GPUFault XID 79 on %s (node %s)", describeRun(got), target.Name, node.Name)
	}
	if !f.StillRunning || f.ExitCode != nil || !strings.Contains(f.Explanation, "was still running") {
		t.Errorf("verdict stillRunning=%v exit %s explanation %q: want the worker named as still running, with no exit", f.StillRunning, ptrOr(f.ExitCode), f.Explanation)
	}
	if got.Status.Restarts != (v1alpha1.RestartCounts{Infrastructure: 1}) {
		t.Errorf("restarts %+v, want one infrastructure restart", got.Status.Restarts)
	}
	if !slices.Contains(got.Status.ExcludedNodes, node.Name) {
		t.Errorf("excluded nodes %v, want %s (the GPU fault's)", got.Status.ExcludedNodes, node.Name)
	}
	// The decision came after the settle window (1 s, from the evidence rounded up to the
	// second), not after a framework's timeout: the rest is the teardown, each hung worker
	// taking its grace period, and the new workers' start.
	settle := 2 * time.Second
	if decided := f.DecidedAt; decided == nil || decided.Time.After(injected.Add(settle+2*time.Second)) {
		t.Errorf("decided at %v, XID at %s: want it within the settle window", decided, injected.UTC().Format(time.RFC3339Nano))
	}
	if bound := settle + hangGrace + 45*time.Second; took > bound {
		t.Errorf("attempt 2 Running %s after the XID, want within the settle window and the teardown (%s)", took.Round(time.Millisecond), bound)
	}
	for i, p := range waitWorkers(ctx, t, c, ns, run.Name, 2, 4) {
		if p.Spec.NodeName == node.Name {
			t.Errorf("attempt 2 index %d on %s, the excluded node", i, node.Name)
		}
	}
	// Spent once: the restarted gang runs on, and nothing restarts it again.
	requireStays(ctx, t, c, ns, run.Name, 15*time.Second, "one restart",
		func(r *v1alpha1.TrainingRun) bool {
			return r.Status.Attempt != 2 || r.Status.Restarts != (v1alpha1.RestartCounts{Infrastructure: 1})
		})
	monitor.check(t)
}

// TestRealProgramXIDOnAHungWorkerDoesNothing: the same hung gang, and XID 31 (a GPU memory
// page fault, the program's) on one worker's GPU: the agent writes its evidence, and nothing
// ends the attempt. A program's XID never ends an attempt by itself; the program's own exit
// (or the framework's timeout) will.
func TestRealProgramXIDOnAHungWorkerDoesNothing(t *testing.T) {
	ctx, c, ns := scenario(t, 3*time.Minute)
	startController(t, c, ns)

	run := createRun(ctx, t, c, ns, realRun("hung-app-xid", 4, []string{"--hang", "--fail-after", "1s"}, withGPUs(1), withGrace(hangGrace)))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, t, c, ns, run.Name, 1, 4)
	waitHung(ctx, t, c, ns, run.Name, 1, 4)
	target := first[1]
	node := c.Real.Node(target.Spec.NodeName)
	if node == nil {
		t.Fatalf("index 1 runs on %s, no real node", target.Spec.NodeName)
	}
	t.Cleanup(func() { resetGPUHealth(t, c, node.Name) }) // in case the agent took 31 for fatal
	uuid := gpuOfPod(ctx, t, node, target)
	if err := agents[node.Name].InjectXIDByUUID(uuid, 31); err != nil {
		t.Fatal(err)
	}
	// The premise: the agent saw it, and wrote the program's XID on the worker.
	if _, err := c.WaitPods(ctx, ns, attemptSelector(run.Name, 1), func(pods []*corev1.Pod) (bool, error) {
		return slices.ContainsFunc(pods, func(p *corev1.Pod) bool {
			return p.UID == target.UID && strings.Contains(p.Annotations[v1alpha1.AnnotationFaultEvidence], `"xid":31`)
		}), nil
	}); err != nil {
		t.Fatalf("evidence of XID 31 on %s: %v", target.Name, err)
	}
	requireStays(ctx, t, c, ns, run.Name, 20*time.Second, "nothing ends the attempt", restartedAtAll)
	got, err := watchRun(ctx, t, c, ns, run.Name, func(*v1alpha1.TrainingRun) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if !runningAttempt(1)(got) || got.Status.Restarts != (v1alpha1.RestartCounts{}) {
		t.Errorf("after XID 31 on a hung worker: %s; want attempt 1 Running, no restart", describeRun(got))
	}
	p, err := c.Client.CoreV1().Pods(ns).Get(ctx, target.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cond := podCondition(p, v1alpha1.PodConditionInfrastructureFault); cond != nil {
		t.Errorf("pod %s has %s=%s (%s) after a program's XID", p.Name, cond.Type, cond.Status, cond.Reason)
	}
}

// TestRealSilentGangIsRestartedAfterItsProgressDeadline: two gangs with a progress deadline
// of 30 s. In one every worker blocks and stops writing (--hang); it is restarted once the
// deadline after its last line is over (the agents write NoProgress on each silent worker,
// the controller ends the attempt none of whose workers progresses), not before, on its own
// budget (restarts.noProgress), and its next attempt, which logs, runs on. The other logs a
// step every 2 s and is never touched.
func TestRealSilentGangIsRestartedAfterItsProgressDeadline(t *testing.T) {
	t.Parallel()
	ctx, c, ns := scenario(t, 4*time.Minute)
	startController(t, c, ns)
	const deadline = 30 * time.Second

	// Attempt 1 of the silent gang hangs; attempt 2 does not, and logs as the other does.
	silent := createRun(ctx, t, c, ns, realRun("silent", 2, []string{"--hang", "--fail-after", "1s", "--log-every", "2s"},
		withProgressDeadline(deadline), withGrace(hangGrace)))
	chatty := createRun(ctx, t, c, ns, realRun("chatty", 2, []string{"--log-every", "2s"}, withProgressDeadline(deadline), withGrace(hangGrace)))
	waitRun(ctx, t, c, ns, silent.Name, "attempt 1 Running", runningAttempt(1))
	waitRun(ctx, t, c, ns, chatty.Name, "attempt 1 Running", runningAttempt(1))
	chattyStart := time.Now()
	lastLine := waitHung(ctx, t, c, ns, silent.Name, 1, 2)
	t.Logf("the silent gang's last line at %s", lastLine.Format(time.RFC3339Nano))

	// Not before the deadline after its last line.
	if early := time.Until(lastLine.Add(deadline - 2*time.Second)); early > 0 {
		requireStays(ctx, t, c, ns, silent.Name, early, "no restart before the progress deadline", restartedAtAll)
	}
	got := waitRun(ctx, t, c, ns, silent.Name, "attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, got, 2)
	f := got.Status.LastFailure
	if f == nil || f.Class != v1alpha1.ClassUnknown || f.Cause != v1alpha1.CauseNoProgress || !f.StillRunning || f.Rule != "default-no-progress" {
		t.Fatalf("verdict: %s; want Unknown/NoProgress, the workers still running", describeRun(got))
	}
	if got.Status.Restarts != (v1alpha1.RestartCounts{NoProgress: 1}) {
		t.Errorf("restarts %+v, want one NoProgress restart (its own budget)", got.Status.Restarts)
	}
	// Decided after the deadline (DecidedAt has whole seconds), within the agents' period
	// (5 s) and the settle window of it; the verdict's time is the gang's last progress.
	if d := f.DecidedAt; d == nil || d.Time.Before(lastLine.Add(deadline).Truncate(time.Second)) || d.Time.After(lastLine.Add(deadline+20*time.Second)) {
		t.Errorf("decided at %v: want between %s and %s after the last line (%s)", d, deadline, deadline+20*time.Second, lastLine.Format(time.RFC3339Nano))
	}
	if fa := f.FailedAt; fa == nil || fa.Time.Before(lastLine.Add(-2*time.Second)) || fa.Time.After(lastLine.Add(2*time.Second)) {
		t.Errorf("failed at %v: want the gang's last line, %s", fa, lastLine.Format(time.RFC3339Nano))
	}
	if ev := strings.Join(f.Evidence, "\n"); !strings.Contains(f.Explanation, v1alpha1.ProgressSignalLog) || !strings.Contains(ev, "no output in the log of container worker") {
		t.Errorf("explanation %q, evidence %q: want the signal that stopped (the workers' logs) and since when", f.Explanation, ev)
	}

	// The gang that logs: untouched for twice its deadline, and never marked.
	if rest := time.Until(chattyStart.Add(2 * deadline)); rest > 0 {
		requireStays(ctx, t, c, ns, chatty.Name, rest, "a gang that logs is never touched", restartedAtAll)
	}
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: attemptSelector(chatty.Name, 1).String()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if cond := podCondition(&pods.Items[i], v1alpha1.PodConditionNoProgress); cond != nil {
			t.Errorf("pod %s of the gang that logs has %s=%s: %s", pods.Items[i].Name, cond.Type, cond.Status, cond.Message)
		}
	}
	// The restarted gang logs, and runs on.
	requireStays(ctx, t, c, ns, silent.Name, 10*time.Second, "attempt 2 runs on",
		func(r *v1alpha1.TrainingRun) bool {
			return r.Status.Attempt != 2 || r.Status.Phase != v1alpha1.PhaseRunning
		})
}

// TestRealStalledGangRestartsOnceAndRunsOn (issue 56): with the default flags, where each
// worker's supervising barrier keeps its container across attempts, a gang silent past its
// progress deadline is restarted in place once, and attempt 2, which writes again, runs on
// for twice the deadline. The kept pods still carry attempt 1's NoProgress when their barrier
// opens (the agents take it off at their next look): read against the container's start,
// attempt 1's, the marks made attempt 2 a gang silent for minutes, and the controller failed
// the run on its noProgress budget a second after the open.
func TestRealStalledGangRestartsOnceAndRunsOn(t *testing.T) {
	t.Parallel()
	ctx, c, ns := scenario(t, 4*time.Minute)
	startController(t, c, ns)
	const deadline = 30 * time.Second

	// With its command set, the barrier is the worker container's entrypoint and, by default,
	// supervises the worker: the container lives across attempts.
	run := createRun(ctx, t, c, ns, realRun("stalled", 2, []string{"--hang", "--fail-after", "1s", "--log-every", "2s"},
		withProgressDeadline(deadline), withGrace(hangGrace), withCommand(cluster.WorkerProgram)))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, t, c, ns, run.Name, 1, 2)
	waitHung(ctx, t, c, ns, run.Name, 1, 2)

	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, got, 2)
	if f := got.Status.LastFailure; f == nil || f.Cause != v1alpha1.CauseNoProgress {
		t.Fatalf("verdict: %s; want NoProgress", describeRun(got))
	}
	second := waitWorkers(ctx, t, c, ns, run.Name, 2, 2)
	kept := 0
	for i, p := range second {
		if first[i] != nil && p.UID == first[i].UID {
			kept++
		}
	}
	if kept == 0 {
		t.Fatalf("no pod of attempt 1 kept in attempt 2: the premise (a restart in place) does not hold: %s", describeRun(got))
	}
	for i, p := range second {
		// A barrier in the worker's container supervises it (issue 56 removed the other mode).
		if b := attempt.BarrierOf(p); b.Place != attempt.BarrierInWorker {
			t.Fatalf("index %d: barrier at %v: the premise (a supervising barrier, one container across attempts) does not hold", i, b.Place)
		}
	}
	opened := time.Now()

	requireStays(ctx, t, c, ns, run.Name, 2*deadline, "attempt 2 runs on for twice its deadline",
		func(r *v1alpha1.TrainingRun) bool {
			return r.Status.Attempt != 2 || r.Status.Phase != v1alpha1.PhaseRunning
		})
	final, err := watchRun(ctx, t, c, ns, run.Name, func(*v1alpha1.TrainingRun) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if final.Status.Restarts != (v1alpha1.RestartCounts{NoProgress: 1}) {
		t.Errorf("restarts %+v, want the noProgress budget spent once", final.Status.Restarts)
	}
	// Attempt 2 writes again: each index logs its steps (one every 2 s) all along.
	for i := range 2 {
		log := workerLog(ctx, t, c, ns, run.Name, 2, i)
		if n := len(attempt2Step.FindAllString(log, -1)); n < 10 {
			t.Errorf("index %d logged %d steps of attempt 2 in the %s since its open, want one every 2 s:\n%s", i, n, time.Since(opened).Round(time.Second), log)
		}
	}
}

// attempt2Step is a step the test worker logs in attempt 2 (--log-every).
var attempt2Step = regexp.MustCompile(`(?m)worker \d+: step \d+ \(attempt 2\)`)
