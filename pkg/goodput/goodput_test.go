package goodput

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

var t0 = time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func sec(s float64) metav1.Duration {
	return metav1.Duration{Duration: time.Duration(s * float64(time.Second))}
}

// status builds a status in phase p at attempt n.
func status(p v1alpha1.Phase, n int32) *v1alpha1.TrainingRunStatus {
	return &v1alpha1.TrainingRunStatus{Phase: p, Attempt: n}
}

// decided is status s with a decision on a failure of cause c that began at failed (and,
// where detected is set, that the node agent saw then), decided at decidedAt.
func decided(s *v1alpha1.TrainingRunStatus, c v1alpha1.Cause, failed, decidedAt float64, detected *float64) *v1alpha1.TrainingRunStatus {
	s = s.DeepCopy()
	s.LastFailure = &v1alpha1.FailureVerdict{Cause: c, FailedAt: &metav1.Time{Time: at(failed)}, DecidedAt: &metav1.Time{Time: at(decidedAt)}}
	if detected != nil {
		s.Trace = &v1alpha1.TraceStatus{DetectedAt: &metav1.MicroTime{Time: at(*detected)}}
	}
	return s
}

// TestLedgerAddsUpAlongARunsLife: a run's writes, one after another, as the controller makes
// them: queued, scheduling, training, a node failure decided (detection from the agent's
// evidence), the teardown, the next attempt scheduled and training, a gang without progress
// (hung from its last progress), and a failure that ends the run. Every part gets what the
// statuses say, they add up to the wall time at every write, and the ended run's ledger
// stays as it was.
func TestLedgerAddsUpAlongARunsLife(t *testing.T) {
	detected := 41.25
	writes := []struct {
		at   float64
		next *v1alpha1.TrainingRunStatus
	}{
		{0.5, status(v1alpha1.PhasePending, 0)},
		{2, status(v1alpha1.PhasePending, 1)},
		{10, status(v1alpha1.PhaseRunning, 1)},
		{40, status(v1alpha1.PhaseRunning, 1)}, // a write that changes nothing of the ledger's
		{43.5, decided(status(v1alpha1.PhaseRestarting, 2), v1alpha1.CauseNodeShutdown, 41, 43.5, &detected)},
		{50, decided(status(v1alpha1.PhasePending, 2), v1alpha1.CauseNodeShutdown, 41, 43.5, &detected)},
		{58, decided(status(v1alpha1.PhaseRunning, 2), v1alpha1.CauseNodeShutdown, 41, 43.5, &detected)},
		{200, decided(status(v1alpha1.PhaseRestarting, 3), v1alpha1.CauseNoProgress, 140, 200, &detected)},
		{205, decided(status(v1alpha1.PhasePending, 3), v1alpha1.CauseNoProgress, 140, 200, nil)},
		{215, decided(status(v1alpha1.PhaseRunning, 3), v1alpha1.CauseNoProgress, 140, 200, nil)},
		{300, decided(status(v1alpha1.PhaseFailed, 3), v1alpha1.CauseAppExit, 298, 300, nil)},
		{400, decided(status(v1alpha1.PhaseFailed, 3), v1alpha1.CauseAppExit, 298, 300, nil)},
	}
	before := &v1alpha1.TrainingRunStatus{}
	var l *v1alpha1.GoodputLedger
	for _, w := range writes {
		l = Advance(l, t0, false, before, w.next, at(w.at))
		if sum := l.Training.Duration + Lost(l); sum != Wall(l, t0) {
			t.Fatalf("at %vs: the parts add up to %v, the wall time is %v: %+v", w.at, sum, Wall(l, t0), l)
		}
		before = w.next
	}
	want := &v1alpha1.GoodputLedger{
		Through:    metav1.NewMicroTime(at(300)),
		Scheduling: sec(2 + 8 + 8 + 10),           // the run's creation, three attempts' starts
		Training:   sec(31.25 + 82 + 83),          // 10-41.25, 58-140, 215-298
		Detection:  sec(43.5 - 41.25 + 300 - 298), // from the agent's evidence; from the exit
		Hung:       sec(200 - 140),                // from the gang's last progress
		Teardown:   sec(50 - 43.5 + 205 - 200),
	}
	if diff := cmp.Diff(want, l); diff != "" {
		t.Errorf("the ledger (-want +got):\n%s", diff)
	}
	if got := Share(l, t0); got < 0.65 || got > 0.66 {
		t.Errorf("goodput %.4f, want 196.25/300", got)
	}
}

// TestLedgerAsOfNow: the launcher's view adds the time since the last write to what the
// run is doing, and nothing to a run that has ended; a failure that began before the
// ledger's last write is not counted twice.
func TestLedgerAsOfNow(t *testing.T) {
	run := &v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t0)}}
	run.Status = *status(v1alpha1.PhaseRunning, 1)
	run.Status.Goodput = &v1alpha1.GoodputLedger{Through: metav1.NewMicroTime(at(10)), Scheduling: sec(10)}
	if l := AsOf(run, at(70)); l.Training != sec(60) || l.Through.Time != at(70) || run.Status.Goodput.Training != sec(0) {
		t.Errorf("as of 70 s: %+v (the status's own: %+v), want 60 s of training added to a copy", l, run.Status.Goodput)
	}
	run.Status.Phase = v1alpha1.PhaseSucceeded
	if l := AsOf(run, at(70)); l.Through.Time != at(10) {
		t.Errorf("an ended run's ledger moved: %+v", l)
	}
	// A decision on a failure the ledger's last write was already past: it goes no further
	// back than that write.
	before := status(v1alpha1.PhaseRunning, 1)
	l := Advance(&v1alpha1.GoodputLedger{Through: metav1.NewMicroTime(at(30))}, t0, false, before,
		decided(status(v1alpha1.PhaseRestarting, 2), v1alpha1.CauseGPUFault, 20, 31, nil), at(31))
	if l.Detection != sec(1) || l.Training != sec(0) {
		t.Errorf("a failure from before the last write: %+v, want 1 s of detection and no training", l)
	}
}

// TestLedgerCountsTheQueue: a run that waits for Kueue's admission, then starts, trains and is
// suspended (preempted) has its waits as queued, and nothing else.
func TestLedgerCountsTheQueue(t *testing.T) {
	queued := status(v1alpha1.PhasePending, 1)
	queued.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonQueued}}
	admitted := status(v1alpha1.PhasePending, 1)
	admitted.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionTrue}}
	before := queued
	var l *v1alpha1.GoodputLedger
	for _, w := range []struct {
		at   float64
		next *v1alpha1.TrainingRunStatus
	}{{0, queued}, {5, admitted}, {7, status(v1alpha1.PhaseRunning, 1)}, {17, status(v1alpha1.PhaseSuspended, 1)}, {20, admitted}} {
		l = Advance(l, t0, false, before, w.next, at(w.at))
		before = w.next
	}
	want := &v1alpha1.GoodputLedger{Through: metav1.NewMicroTime(at(20)), Queued: sec(5 + 3), Scheduling: sec(2), Training: sec(10)}
	if diff := cmp.Diff(want, l); diff != "" {
		t.Errorf("the ledger (-want +got):\n%s", diff)
	}
}

// progressing is status s with attempt 1's gang first progressing at first.
func progressing(s *v1alpha1.TrainingRunStatus, first float64) *v1alpha1.TrainingRunStatus {
	s = s.DeepCopy()
	s.Attempts = append(s.Attempts, v1alpha1.AttemptRecord{Attempt: 1, ProgressingTime: &metav1.Time{Time: at(first)}})
	return s
}

// TestLedgerStartsUntilTheGangsFirstProgress: where progress is watched, a Running attempt
// is starting (after its scheduling) until its gang's first progress (the write that finds
// it splits at it, no further back than the last write), a restart's next attempt starts
// again until its own (attempt 2 never progresses), and a failure before any progress is
// starting until it began and detection after; where progress is not watched, the same
// writes train from Running.
func TestLedgerStartsUntilTheGangsFirstProgress(t *testing.T) {
	writes := []struct {
		at   float64
		next *v1alpha1.TrainingRunStatus
	}{
		{2, status(v1alpha1.PhasePending, 1)},
		{10, status(v1alpha1.PhaseRunning, 1)},
		{15, status(v1alpha1.PhaseRunning, 1)},
		{31, progressing(status(v1alpha1.PhaseRunning, 1), 30)},
		{60, progressing(status(v1alpha1.PhaseRunning, 1), 30)},
		{100, decided(progressing(status(v1alpha1.PhaseRestarting, 2), 30), v1alpha1.CauseNodeShutdown, 90, 100, nil)},
		{110, decided(progressing(status(v1alpha1.PhaseRunning, 2), 30), v1alpha1.CauseNodeShutdown, 90, 100, nil)},
		{150, decided(progressing(status(v1alpha1.PhaseFailed, 2), 30), v1alpha1.CauseAppExit, 140, 150, nil)},
	}
	for _, tc := range []struct {
		watched bool
		want    *v1alpha1.GoodputLedger
	}{
		{true, &v1alpha1.GoodputLedger{Through: metav1.NewMicroTime(at(150)),
			Scheduling: sec(2 + 8), Starting: sec(5 + 15 + 30), Training: sec(60), Detection: sec(10 + 10), Teardown: sec(10)}},
		{false, &v1alpha1.GoodputLedger{Through: metav1.NewMicroTime(at(150)),
			Scheduling: sec(2 + 8), Training: sec(80 + 30), Detection: sec(10 + 10), Teardown: sec(10)}},
	} {
		before := &v1alpha1.TrainingRunStatus{}
		var l *v1alpha1.GoodputLedger
		for _, w := range writes {
			l = Advance(l, t0, tc.watched, before, w.next, at(w.at))
			if sum := l.Training.Duration + Lost(l); sum != Wall(l, t0) {
				t.Fatalf("watched %v, at %vs: the parts add up to %v, the wall time is %v", tc.watched, w.at, sum, Wall(l, t0))
			}
			before = w.next
		}
		if diff := cmp.Diff(tc.want, l); diff != "" {
			t.Errorf("watched %v: the ledger (-want +got):\n%s", tc.watched, diff)
		}
	}
}

// TestLedgerCountsTheWorkRedone: the work an attempt's restart redoes is from the gang's last
// save (or its training's start, if later) to the failure's start; the write that records it
// (the open of the next attempt) moves it from training to redone, once, and the parts still
// add up. Without a save known, nothing is redone.
func TestLedgerCountsTheWorkRedone(t *testing.T) {
	detected := 41.25
	failed := decided(status(v1alpha1.PhaseRestarting, 2), v1alpha1.CauseGPUFault, 41, 43.5, &detected)
	rec := v1alpha1.AttemptRecord{Attempt: 1, RunningTime: &metav1.Time{Time: at(10)}, ProgressingTime: &metav1.Time{Time: at(12)}}
	for name, tc := range map[string]struct {
		saved   float64 // 0: none known
		watched bool
		want    time.Duration
	}{
		"from the save to the evidence":          {saved: 30.5, want: sec(41.25 - 30.5).Duration},
		"a save before it trained":               {saved: 5, want: sec(41.25 - 10).Duration},
		"watched: from its first progress":       {saved: 5, watched: true, want: sec(41.25 - 12).Duration},
		"a save after the failure: nothing lost": {saved: 42, want: 0},
		"no save known":                          {want: 0},
	} {
		t.Run(name, func(t *testing.T) {
			r := rec
			if tc.saved != 0 {
				r.Saved = &v1alpha1.SavedStatus{At: metav1.NewMicroTime(at(tc.saved)), Workers: 1}
			}
			if got := RedoneOf(&r, failed, tc.watched); got != tc.want {
				t.Errorf("RedoneOf = %s, want %s", got, tc.want)
			}
		})
	}

	// The ledger: attempt 2's open records 10.75 s of attempt 1 redone.
	opened := failed.DeepCopy()
	opened.Phase = v1alpha1.PhasePending
	withRedone := opened.DeepCopy()
	withRedone.Attempts = []v1alpha1.AttemptRecord{{Attempt: 1, Redone: &metav1.Duration{Duration: sec(10.75).Duration}}, {Attempt: 2}}
	before := &v1alpha1.TrainingRunStatus{}
	var l *v1alpha1.GoodputLedger
	for _, w := range []struct {
		at   float64
		next *v1alpha1.TrainingRunStatus
	}{{10, status(v1alpha1.PhaseRunning, 1)}, {43.5, failed}, {45, withRedone}, {50, withRedone}} {
		l = Advance(l, t0, false, before, w.next, at(w.at))
		if sum := l.Training.Duration + Lost(l); sum != Wall(l, t0) {
			t.Fatalf("at %vs: the parts add up to %v, the wall time is %v", w.at, sum, Wall(l, t0))
		}
		before = w.next
	}
	want := &v1alpha1.GoodputLedger{Through: metav1.NewMicroTime(at(50)),
		Scheduling: sec(10 + 5), // the run's creation, and attempt 2's start since its open
		Training:   sec(31.25 - 10.75), Redone: sec(10.75), Detection: sec(43.5 - 41.25), Teardown: sec(1.5)}
	if diff := cmp.Diff(want, l); diff != "" {
		t.Errorf("the ledger (-want +got):\n%s", diff)
	}
}
