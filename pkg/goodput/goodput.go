// Package goodput keeps a run's goodput ledger (status.goodput): its wall-clock time split by
// what the run was doing, training or losing time to a cause. The controller advances the
// ledger at each status write from the status that write replaces (Advance); the launcher
// reads it as of now (AsOf). Both are pure.
package goodput

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// Part is where a stretch of the run's time went.
type Part int

const (
	Training Part = iota
	Queued
	Scheduling
	Starting
	Detection
	Hung
	Teardown
	Redone
)

// doing is what the status says the run is doing: the part its time goes to until the next
// write; false once it has ended. Where progress is watched (watched), a Running attempt
// trains from its gang's first progress on.
func doing(st *v1alpha1.TrainingRunStatus, watched bool) (Part, bool) {
	switch st.Phase {
	case v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed:
		return 0, false
	case v1alpha1.PhaseRunning:
		if watched && !progressed(st) {
			return Starting, true
		}
		return Training, true
	case v1alpha1.PhaseRestarting:
		return Teardown, true
	case v1alpha1.PhaseSuspended:
		return Queued, true
	}
	// Pending (or before the first write): waiting for Kueue's admission is queued; the rest,
	// the first attempt's creation included, is scheduling.
	if meta.IsStatusConditionFalse(st.Conditions, v1alpha1.ConditionAdmitted) {
		return Queued, true
	}
	return Scheduling, true
}

// Advance returns the ledger of the status next as the write of it at now leaves it: the
// time since the ledger's Through goes to what before (the status it replaces) said the run
// was doing; where next found the gang's first progress (watched: the run's progress is
// watched), the part before it goes to starting; where next decided on a failure, the part
// after the failure began goes to detection (or, a gang without progress, to hung). A run
// created at created starts a ledger; one that had ended keeps its own.
func Advance(ledger *v1alpha1.GoodputLedger, created time.Time, watched bool, before, next *v1alpha1.TrainingRunStatus, now time.Time) *v1alpha1.GoodputLedger {
	l := &v1alpha1.GoodputLedger{Through: metav1.NewMicroTime(created)}
	if ledger != nil {
		l = ledger.DeepCopy()
	}
	from := l.Through.Time
	part, on := doing(before, watched)
	if !on || !now.After(from) {
		return l
	}
	if at, ok := firstProgress(before, next); ok && part == Starting {
		at = clamp(at, from, now)
		add(l, Starting, at.Sub(from))
		from, part = at, Training
	}
	if began, cause, ok := decidedFailure(before, next); ok && (part == Training || part == Starting) {
		began = clamp(began, from, now)
		add(l, part, began.Sub(from))
		from = began
		part = Detection
		if cause == v1alpha1.CauseNoProgress {
			part = Hung
		}
	}
	add(l, part, now.Sub(from))
	l.Through = metav1.NewMicroTime(now)
	redo(l, before, next)
	return l
}

// redo moves out of training the work that next found an attempt's restart redoes
// (AttemptRecord.Redone, set once, at the open of the attempt after it).
func redo(l *v1alpha1.GoodputLedger, before, next *v1alpha1.TrainingRunStatus) {
	for i := range next.Attempts {
		r := &next.Attempts[i]
		if r.Redone == nil {
			continue
		}
		if old := attempt.RecordOf(before, r.Attempt); old != nil && old.Redone != nil {
			continue
		}
		d := min(r.Redone.Duration, l.Training.Duration)
		l.Training.Duration -= d
		add(l, Redone, d)
	}
}

// RedoneOf is the training of attempt rec, which the failure of st.LastFailure ended, that
// the next attempt does again: from the gang's last save (rec.Saved), or the attempt's
// training's start if later (its gang's first progress where progress is watched, else every
// worker Running), to when the failure began (FailureBegan); zero where it never trained.
func RedoneOf(rec *v1alpha1.AttemptRecord, st *v1alpha1.TrainingRunStatus, watched bool) time.Duration {
	from := rec.RunningTime
	if watched {
		from = rec.ProgressingTime
	}
	began, ok := FailureBegan(st)
	if rec.Saved == nil || from == nil || !ok {
		return 0
	}
	start := from.Time
	if rec.Saved.At.After(start) {
		start = rec.Saved.At.Time
	}
	return max(began.Sub(start), 0)
}

// AsOf is the ledger as of now: the status's own, with the time since it was written added
// to what the status says the run is doing.
func AsOf(run *v1alpha1.TrainingRun, now time.Time) *v1alpha1.GoodputLedger {
	return Advance(run.Status.Goodput, run.CreationTimestamp.Time, attempt.ProgressWatched(run), &run.Status, &run.Status, now)
}

// NoteFirstProgress records on rec, the record of run's attempt whose workers are all
// Running, its gang's first progress (exitclass.GangProgressing) once the workers showed it,
// where run's progress is watched: where its starting ends.
func NoteFirstProgress(run *v1alpha1.TrainingRun, rec *v1alpha1.AttemptRecord, workers []*corev1.Pod, nodes map[string]exitclass.NodeFacts) {
	if rec.ProgressingTime != nil || !attempt.ProgressWatched(run) {
		return
	}
	if at, ok := exitclass.GangProgressing(workers, nodes); ok {
		rec.ProgressingTime = &metav1.Time{Time: at}
	}
}

// progressed: the status's attempt has shown its gang's first progress.
func progressed(st *v1alpha1.TrainingRunStatus) bool {
	rec := attempt.RecordOf(st, st.Attempt)
	return rec != nil && rec.ProgressingTime != nil
}

// firstProgress is the gang's first progress of before's attempt where next found it.
func firstProgress(before, next *v1alpha1.TrainingRunStatus) (time.Time, bool) {
	if progressed(before) {
		return time.Time{}, false
	}
	rec := attempt.RecordOf(next, before.Attempt)
	if rec == nil || rec.ProgressingTime == nil {
		return time.Time{}, false
	}
	return rec.ProgressingTime.Time, true
}

// decidedFailure is the failure next decided on and before had not: when it began (the node
// agent's evidence as the episode's trace has it, else the failure's own time) and its cause.
func decidedFailure(before, next *v1alpha1.TrainingRunStatus) (time.Time, v1alpha1.Cause, bool) {
	v := next.LastFailure
	if v == nil || v.DecidedAt == nil || v.FailedAt == nil {
		return time.Time{}, "", false
	}
	if old := before.LastFailure; old != nil && old.DecidedAt != nil && old.DecidedAt.Equal(v.DecidedAt) {
		return time.Time{}, "", false
	}
	began, _ := FailureBegan(next)
	return began, v.Cause, true
}

// FailureBegan is when the failure st decided on (st.LastFailure) began: the node agent's
// evidence as the episode's trace has it, else the failure's own time.
func FailureBegan(st *v1alpha1.TrainingRunStatus) (time.Time, bool) {
	v := st.LastFailure
	if v == nil || v.FailedAt == nil {
		return time.Time{}, false
	}
	if tr := st.Trace; tr != nil && tr.DetectedAt != nil && v.Cause != v1alpha1.CauseNoProgress {
		// The trace's times have microseconds; the verdict's, whole seconds.
		return tr.DetectedAt.Time, true
	}
	return v.FailedAt.Time, true
}

func clamp(t, lo, hi time.Time) time.Time {
	if t.Before(lo) {
		return lo
	}
	if t.After(hi) {
		return hi
	}
	return t
}

// field is the ledger's duration of part p.
func field(l *v1alpha1.GoodputLedger, p Part) *metav1.Duration {
	switch p {
	case Queued:
		return &l.Queued
	case Scheduling:
		return &l.Scheduling
	case Starting:
		return &l.Starting
	case Detection:
		return &l.Detection
	case Hung:
		return &l.Hung
	case Teardown:
		return &l.Teardown
	case Redone:
		return &l.Redone
	}
	return &l.Training
}

// add puts d into the ledger's part p.
func add(l *v1alpha1.GoodputLedger, p Part, d time.Duration) {
	if d > 0 {
		field(l, p).Duration += d
	}
}

// Named is one part of a ledger, by the name status.goodput gives its field.
type Named struct {
	Name     string
	Duration time.Duration
}

// partNames are the parts' names, training first, then the time lost in the order a run
// meets it.
var partNames = []struct {
	part Part
	name string
}{{Training, "training"}, {Queued, "queued"}, {Scheduling, "scheduling"}, {Starting, "starting"}, {Detection, "detection"}, {Hung, "hung"}, {Teardown, "teardown"}, {Redone, "redone"}}

// Parts are the ledger's parts, training first.
func Parts(l *v1alpha1.GoodputLedger) []Named {
	out := make([]Named, 0, len(partNames))
	for _, p := range partNames {
		out = append(out, Named{Name: p.name, Duration: field(l, p.part).Duration})
	}
	return out
}

// Wall is the time the ledger covers: from the run's creation to its Through.
func Wall(l *v1alpha1.GoodputLedger, created time.Time) time.Duration {
	return l.Through.Sub(created)
}

// Lost is the time the ledger's parts other than training hold.
func Lost(l *v1alpha1.GoodputLedger) time.Duration {
	var lost time.Duration
	for _, p := range Parts(l)[1:] {
		lost += p.Duration
	}
	return lost
}

// Share is the run's goodput: the training's share of the wall time, 0 before any time.
func Share(l *v1alpha1.GoodputLedger, created time.Time) float64 {
	wall := Wall(l, created)
	if wall <= 0 {
		return 0
	}
	return float64(l.Training.Duration) / float64(wall)
}
