package realnode

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/goodput"
	"github.com/faultline-dev/faultline/test/cluster"
)

// firstLine is the test worker's first line of an attempt (test/worker: "worker start").
var firstLine = regexp.MustCompile(`(?m)^(\d\d:\d\d:\d\d\.\d\d\d) worker start:`)

// TestRealGoodputStartsUntilTheGangsFirstProgress (issue 61): a gang whose progress is
// watched, each worker silent for its first 5 s (a program importing and compiling), its
// supervising barrier keeping the container across attempts. Each attempt's record says
// when its gang first progressed: the last worker's first line of that attempt, as its log
// has it (not the barrier's own lines, not attempt 1's output in the same container), 5 s
// after every worker Ran; and the goodput ledger counts the time before it as starting: its
// training is what each attempt ran after its gang's first progress, until attempt 1 hung
// (NoProgress, 8 s after its rendezvous: after the agents' next look found the first
// progress, so that the ledger had not already counted the hang's start as training) and
// until now.
func TestRealGoodputStartsUntilTheGangsFirstProgress(t *testing.T) {
	t.Parallel()
	ctx, c, ns := scenario(t, 4*time.Minute)
	startController(t, c, ns)
	const workers, quiet = 2, 5 * time.Second
	run := createRun(ctx, t, c, ns, realRun("quiet", workers, []string{"--quiet-for", quiet.String(), "--hang", "--fail-after", "8s", "--log-every", "1s"},
		withProgressDeadline(30*time.Second), withGrace(hangGrace), withCommand(cluster.WorkerProgram)))

	progressed := func(n int32) func(*v1alpha1.TrainingRun) bool {
		return func(r *v1alpha1.TrainingRun) bool {
			rec := attempt.RecordOf(&r.Status, n)
			return r.Status.Phase == v1alpha1.PhaseFailed || rec != nil && rec.ProgressingTime != nil
		}
	}
	// checkFirst checks attempt n's record of its gang's first progress against its workers'
	// logs, and returns it.
	checkFirst := func(r *v1alpha1.TrainingRun, n int32) time.Time {
		t.Helper()
		rec := attempt.RecordOf(&r.Status, n)
		if rec == nil || rec.ProgressingTime == nil || rec.RunningTime == nil {
			t.Fatalf("attempt %d has no first progress: %s", n, describeRun(r))
		}
		var last time.Time
		for i := range workers {
			log := workerLog(ctx, t, c, ns, run.Name, n, i)
			m := firstLine.FindStringSubmatch(log)
			if m == nil {
				t.Fatalf("index %d of attempt %d has no first line:\n%s", i, n, log)
			}
			if at := timeOfDay(t, m[1]); at.After(last) {
				last = at
			}
		}
		got := rec.ProgressingTime.Time
		// The record keeps whole seconds; the runtime stamps the line a moment after the
		// worker's own clock.
		if got.Before(last.Truncate(time.Second)) || got.After(last.Add(time.Second)) {
			t.Errorf("attempt %d: its gang's first progress is %s, its last worker's first line %s", n, got.Format(time.RFC3339), last.Format(time.RFC3339Nano))
		}
		if d := got.Sub(rec.RunningTime.Time); d < quiet-2*time.Second {
			t.Errorf("attempt %d: first progress %s after every worker ran, want the workers' %s of silence", n, d, quiet)
		}
		t.Logf("attempt %d: every worker Running at %s, the gang's first line at %s, recorded first progress %s",
			n, rec.RunningTime.Format(time.RFC3339), last.Format(time.RFC3339Nano), got.Format(time.RFC3339))
		return got
	}

	first := checkFirst(waitRun(ctx, t, c, ns, run.Name, "attempt 1's first progress", progressed(1)), 1)
	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2's first progress", progressed(2))
	if got.Status.Attempt != 2 || got.Status.LastFailure == nil || got.Status.LastFailure.Cause != v1alpha1.CauseNoProgress {
		t.Fatalf("want attempt 2 after attempt 1 hung: %s", describeRun(got))
	}
	second := checkFirst(got, 2)
	if opened := attempt.RecordOf(&got.Status, 2).BarrierOpenedAt; opened == nil || second.Before(opened.Time) {
		t.Errorf("attempt 2's first progress %s is not after its barrier opened (%v): attempt 1's output counted", second, opened)
	}

	// The ledger: training only after each gang's first progress.
	l := got.Status.Goodput
	if l == nil {
		t.Fatalf("no ledger: %s", describeRun(got))
	}
	wall := goodput.Wall(l, got.CreationTimestamp.Time)
	if sum := l.Training.Duration + goodput.Lost(l); (sum - wall).Abs() > wall/100 {
		t.Fatalf("the ledger's parts add up to %s, its wall time is %s: %+v", sum, wall, l)
	}
	hung := got.Status.LastFailure.FailedAt.Time // the gang's last progress in attempt 1
	want := hung.Sub(first) + l.Through.Sub(second)
	if d := (l.Training.Duration - want).Abs(); d > 2500*time.Millisecond {
		t.Errorf("the ledger's training is %s, the attempts ran %s after their gangs' first progress (attempt 1 until it hung at %s, attempt 2 until %s): %+v",
			l.Training.Duration, want, hung.Format(time.RFC3339), l.Through.Format(time.RFC3339Nano), l)
	}
	t.Logf("ledger at %s: training %s (want %s), starting %s, hung %s, teardown %s", l.Through.Format(time.RFC3339Nano),
		l.Training.Duration, want, l.Starting.Duration, l.Hung.Duration, l.Teardown.Duration)
}

// savedLine is the test worker's line for a save it made on its own (--save-every).
var savedLine = regexp.MustCompile(`(?m)^(\d\d:\d\d:\d\d\.\d\d\d) worker \d+: saved step (\d+) \(periodic, attempt 1\)`)

// TestRealGoodputCountsTheWorkRedone (issue 61): a gang that saves every 10 s and says each
// save to its barrier (the done file); XID 79 on one worker's GPU a second after a save. The
// workers that restart in place had their barriers hear their last saves: attempt 1's record
// says the gang's last save (its step and time, the oldest of the workers' last saves) and the
// work attempt 2 does
// again, from that save to the fault (the agent's evidence); the goodput ledger takes that
// out of training, and still adds up.
//
// It runs alone: a fatal XID turns the node's GPUHealthy condition False (undone at its end).
func TestRealGoodputCountsTheWorkRedone(t *testing.T) {
	ctx, c, ns := scenario(t, 3*time.Minute)
	startController(t, c, ns)
	run := createRun(ctx, t, c, ns, realRun("redone", 2, []string{"--heartbeats-only", "--heartbeat-timeout", "10s",
		"--log-every", "200ms", "--checkpoint-dir", "/ckpt", "--save-every", "50", "--say-saves", "--save-on-usr1"},
		withGPUs(1), withCheckpoint(v1alpha1.CheckpointPolicy{TimeoutSeconds: 60}, checkpointDir(t, ns)), withCommand(cluster.WorkerProgram)))
	node, uuid := secondWorkersGPU(ctx, t, c, ns, run.Name)

	// Index 0's first save (step 50, 10 s after the gang met), then the fault a second after.
	var savedAt time.Time
	var savedStep string
	for savedAt.IsZero() {
		if m := savedLine.FindStringSubmatch(workerLog(ctx, t, c, ns, run.Name, 1, 0)); m != nil {
			savedAt, savedStep = timeOfDay(t, m[1]), m[2]
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("index 0 never saved")
		case <-time.After(200 * time.Millisecond):
		}
	}
	time.Sleep(time.Until(savedAt.Add(time.Second)))
	injected := time.Now()
	injectFatalXID(t, c, node.Name, uuid)
	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, got, 2)

	rec := attempt.RecordOf(&got.Status, 1)
	if rec == nil || rec.Saved == nil || rec.Redone == nil {
		t.Fatalf("attempt 1 records no save, or no work redone: %s", describeRun(got))
	}
	// The last save index 0 made before its stop: step 50 (the next is 9 s after the fault).
	if last := savedLine.FindAllStringSubmatch(workerLog(ctx, t, c, ns, run.Name, 1, 0), -1); len(last) != 1 {
		t.Fatalf("index 0 saved %d times in attempt 1, want once (the premise: the fault a second after its first save)", len(last))
	}
	// Said by the worker that restarted in place, and by the one that moved where its agent
	// stopped it through its barrier before its pod went.
	if rec.Saved.Step == nil || strconv.FormatInt(*rec.Saved.Step, 10) != savedStep || rec.Saved.Workers < 1 || rec.Saved.Workers > 2 {
		t.Errorf("attempt 1's save: step %v, %+v; want step %s, said by one or both workers", ptrText(rec.Saved.Step), rec.Saved, savedStep)
	}
	// The barrier takes the done file's time; the worker logs a moment before it writes it.
	if d := rec.Saved.At.Sub(savedAt); d < -10*time.Millisecond || d > 500*time.Millisecond {
		t.Errorf("attempt 1's save at %s, the worker logged it at %s", rec.Saved.At.Format(time.RFC3339Nano), savedAt.Format(time.RFC3339Nano))
	}
	tr := got.Status.Trace
	if tr == nil || tr.DetectedAt == nil {
		t.Fatalf("no evidence time on the restart's trace: %s", describeRun(got))
	}
	if want := tr.DetectedAt.Sub(rec.Saved.At.Time); rec.Redone.Duration != want {
		t.Errorf("attempt 1's work redone %s, want %s: from its save to the agent's evidence", rec.Redone.Duration, want)
	}
	if d := rec.Redone.Duration - injected.Sub(savedAt); d < -100*time.Millisecond || d > time.Second {
		t.Errorf("attempt 1's work redone %s; the fault came %s after the save", rec.Redone.Duration, injected.Sub(savedAt))
	}
	l := got.Status.Goodput
	if l == nil || l.Redone != *rec.Redone {
		t.Fatalf("the ledger's redone: %+v, want attempt 1's %s", l, rec.Redone.Duration)
	}
	wall := goodput.Wall(l, got.CreationTimestamp.Time)
	if sum := l.Training.Duration + goodput.Lost(l); (sum - wall).Abs() > wall/100 {
		t.Errorf("the ledger's parts add up to %s, its wall time is %s: %+v", sum, wall, l)
	}
	t.Logf("saved step %s at %s, XID %s after; redone %s; ledger: training %s, redone %s, detection %s, teardown %s",
		savedStep, savedAt.Format(time.RFC3339Nano), injected.Sub(savedAt).Round(time.Millisecond), rec.Redone.Duration,
		l.Training.Duration, l.Redone.Duration, l.Detection.Duration, l.Teardown.Duration)
}

func ptrText(p *int64) string {
	if p == nil {
		return "none"
	}
	return strconv.FormatInt(*p, 10)
}
