package realnode

import (
	"regexp"
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
