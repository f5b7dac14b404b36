package trace

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/goodput"
	"github.com/faultline-dev/faultline/test/cluster"
)

// addsUp fails the test unless the ledger's parts add up to the wall time it covers, within
// 1%.
func addsUp(t *testing.T, what string, run *v1alpha1.TrainingRun) *v1alpha1.GoodputLedger {
	t.Helper()
	l := run.Status.Goodput
	if l == nil {
		t.Fatalf("%s: the run has no goodput ledger", what)
	}
	wall := goodput.Wall(l, run.CreationTimestamp.Time)
	sum := l.Training.Duration + goodput.Lost(l)
	if diff := (sum - wall).Abs(); wall <= 0 || float64(diff) > 0.01*float64(wall) {
		t.Fatalf("%s: the ledger's parts add up to %s, its wall time is %s: %+v", what, sum, wall, l)
	}
	return l
}

// near fails the test unless the ledger's part is the trace's phase within 100 ms.
func near(t *testing.T, part string, got, phase time.Duration) {
	t.Helper()
	if d := (got - phase).Abs(); d > 100*time.Millisecond {
		t.Errorf("the ledger's %s is %s, the restart's trace says %s: %s apart", part, got, phase, d)
	}
}

// TestE2EGoodputLedgerAddsUp (issue 61): a run that restarts on a node's shutdown, then fails
// on a worker's exit 1. Its ledger adds up to its wall time at the restart and at the end;
// the restart's detection (the agent's evidence to the decision) and teardown (the decision
// to attempt 2's Job) are the trace's phases within 100 ms, and attempt 2's start is the
// trace's schedule and running; the failure adds its detection and nothing to the teardown,
// and the ledger ends with the run.
func TestE2EGoodputLedgerAddsUp(t *testing.T) {
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	node := cluster.NodeName(0)
	const workers = 2
	st := startStack(ctx, t, c, node)
	run := newRun("goodput", workers, node)
	run.Namespace = st.ns
	if err := st.cl.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	waitRun(ctx, t, st.cl, run, "attempt 1 Running", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt == 1 && r.Status.Phase == v1alpha1.PhaseRunning
	})
	shutdownUnder(ctx, t, c, st.logind, run, workers)
	restarted := waitRun(ctx, t, st.cl, run, "attempt 2 Running with the episode's end recorded", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt == 2 && r.Status.Trace != nil && r.Status.Trace.RunningAt != nil
	})
	l := addsUp(t, "at attempt 2 Running", restarted)
	tr := restarted.Status.Trace
	if tr.DetectedAt == nil || tr.DecidedAt == nil || tr.CreatedAt == nil {
		t.Fatalf("the restart's trace lacks a phase: %+v", tr)
	}
	near(t, "detection", l.Detection.Duration, tr.DecidedAt.Sub(tr.DetectedAt.Time))
	near(t, "teardown", l.Teardown.Duration, tr.CreatedAt.Sub(tr.DecidedAt.Time))
	rec := restarted.Status.Attempts[0]
	firstStart := rec.RunningTime.Sub(restarted.CreationTimestamp.Time)
	// Attempt 1's start, to the second the record keeps, and attempt 2's, the trace's.
	if got, want := l.Scheduling.Duration+l.Queued.Duration, firstStart+tr.RunningAt.Sub(tr.CreatedAt.Time); (got - want).Abs() > 1100*time.Millisecond {
		t.Errorf("the ledger's scheduling and queued come to %s, the attempts' starts to %s", got, want)
	}
	t.Logf("at attempt 2 Running: %s of %s trained; detection %s (trace %s), teardown %s (trace %s), scheduling %s, queued %s",
		l.Training.Duration, goodput.Wall(l, restarted.CreationTimestamp.Time), l.Detection.Duration, tr.DecidedAt.Sub(tr.DetectedAt.Time),
		l.Teardown.Duration, tr.CreatedAt.Sub(tr.DecidedAt.Time), l.Scheduling.Duration, l.Queued.Duration)

	// The shutdown is called off: the agent takes its lock again and withdraws its marks
	// from attempt 2's workers. Then a bug: one of them exits 1, and the run fails.
	if err := st.logind.PrepareForShutdown(false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-st.logind.Locks():
	case <-ctx.Done():
		t.Fatal("the agent took no inhibitor lock after the shutdown was called off")
	}
	pods, err := c.WaitPods(ctx, st.ns, labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run.Name, v1alpha1.LabelAttempt: "2"}), func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			if hasInfraCondition(p) {
				return false, nil
			}
		}
		return len(pods) == workers, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.FailPod(ctx, st.ns, pods[0].Name, cluster.Failure{ExitCode: 1, Message: "Traceback: ZeroDivisionError"}); err != nil {
		t.Fatal(err)
	}
	failed := waitRun(ctx, t, st.cl, run, "Failed", func(r *v1alpha1.TrainingRun) bool { return r.Status.Phase == v1alpha1.PhaseFailed })
	end := addsUp(t, "once Failed", failed)
	// The exit's time has whole seconds (the verdict's): the training until it may come to
	// nothing here, the failure coming within a second of attempt 2's start.
	if end.Teardown != l.Teardown || end.Detection.Duration <= l.Detection.Duration || end.Training.Duration < l.Training.Duration {
		t.Errorf("the failure: teardown %s → %s, detection %s → %s, training %s → %s; want the teardown unchanged, more detection, no less training",
			l.Teardown.Duration, end.Teardown.Duration, l.Detection.Duration, end.Detection.Duration, l.Training.Duration, end.Training.Duration)
	}
	if v := failed.Status.LastFailure; v == nil || v.DecidedAt == nil || end.Through.Sub(v.DecidedAt.Time).Abs() > time.Second {
		t.Errorf("the ledger goes through %s; the run was decided Failed at %v", end.Through, v)
	}
	later := goodput.AsOf(failed, time.Now().Add(time.Hour))
	if !later.Through.Equal(&end.Through) {
		t.Errorf("an hour after the end the ledger goes through %s, not the end's %s", later.Through, end.Through)
	}
	t.Logf("once Failed: goodput %.1f%% of %s: %s", 100*goodput.Share(end, failed.CreationTimestamp.Time), goodput.Wall(end, failed.CreationTimestamp.Time), fmt.Sprintf("%+v", *end))
}

// TestE2EGoodputSurvivesAControllerRestart (issue 61): a controller that stops while the gang
// trains, and another that starts 3 s later, go on from the ledger in the status: the next
// write counts the time the controller was away as training (the gang trained), what the
// first counted stays as it was, and the parts still add up to the wall time.
func TestE2EGoodputSurvivesAControllerRestart(t *testing.T) {
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	node := cluster.NodeName(0)
	st := startStack(ctx, t, c, node)
	run := newRun("goodput-restart", 2, node)
	run.Namespace = st.ns
	if err := st.cl.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	running := waitRun(ctx, t, st.cl, run, "attempt 1 Running", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Phase == v1alpha1.PhaseRunning && r.Status.Goodput != nil
	})
	before := addsUp(t, "attempt 1 Running", running)
	st.controller.Stop()
	away := 3 * time.Second
	time.Sleep(away) // the controller's absence is what is measured
	st.startController(t, c)
	// The new controller's first write: a bug ends the run.
	pods, err := c.WaitPods(ctx, st.ns, labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run.Name}), func(pods []*corev1.Pod) (bool, error) {
		return len(pods) == 2, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.FailPod(ctx, st.ns, pods[0].Name, cluster.Failure{ExitCode: 1}); err != nil {
		t.Fatal(err)
	}
	failed := waitRun(ctx, t, st.cl, run, "Failed", func(r *v1alpha1.TrainingRun) bool { return r.Status.Phase == v1alpha1.PhaseFailed })
	after := addsUp(t, "once Failed, by the second controller", failed)
	// Less the second the exit's time may lose: it has whole seconds.
	if trained := after.Training.Duration - before.Training.Duration; trained < away-time.Second {
		t.Errorf("training grew by %s across a controller away for %s: the ledger did not go on from the status", trained, away)
	}
	if after.Scheduling != before.Scheduling || after.Queued != before.Queued {
		t.Errorf("the second controller changed what the first counted: scheduling %s → %s, queued %s → %s",
			before.Scheduling.Duration, after.Scheduling.Duration, before.Queued.Duration, after.Queued.Duration)
	}
}
