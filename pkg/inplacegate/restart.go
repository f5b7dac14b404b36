package inplacegate

import (
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// RestartDecidedAt is when the restart into the current attempt was decided: the end of the
// attempt before.
func RestartDecidedAt(run *v1alpha1.TrainingRun) (time.Time, bool) {
	h := run.Status.Attempts
	if len(h) < 2 || h[len(h)-2].EndTime == nil {
		return time.Time{}, false
	}
	return h[len(h)-2].EndTime.Time, true
}

// Overdue are the waits that have run out at now.
func Overdue(waits []Wait, now time.Time) []Wait {
	var out []Wait
	for _, w := range waits {
		if w.Overdue(now) {
			out = append(out, w)
		}
	}
	return out
}

// Superseded are the pods of current (the current attempt's, see observe) that an in-place
// restart moved: made for an attempt before the current one, of an index the attempt's
// record moved or that has a pod made for the current attempt; and a pod made for the
// current attempt, of an index the record moved, that is being deleted before its barrier
// opened for the attempt (a fallback retired it): it ran nothing of the
// attempt, and its end is no failure of it. Pure.
func Superseded(run *v1alpha1.TrainingRun, current []*corev1.Pod) map[types.UID]bool {
	rec := attempt.Record(run)
	if rec == nil || rec.RestartMode != v1alpha1.RestartModeInPlace {
		return nil
	}
	n := run.Status.Attempt
	recorded := map[int]bool{}
	for _, i := range rec.MovedIndexes {
		recorded[int(i)] = true
	}
	moved := maps.Clone(recorded)
	for _, p := range current {
		if k, _ := attempt.Number(p); k == n {
			moved[attempt.IndexOrNone(p)] = true
		}
	}
	out := map[types.UID]bool{}
	for _, p := range current {
		k, _ := attempt.Number(p)
		i := attempt.IndexOrNone(p)
		if k < n && moved[i] || k == n && recorded[i] && p.DeletionTimestamp != nil && !OpenedFor(p, n) {
			out[p.UID] = true
		}
	}
	return out
}

// NotEndingByShutdown sorts the old pods of moved indexes for removal. Those that their own
// kubelet is ending, their node having announced a graceful shutdown under them
// (exitclass.ShutdownEndsBy) whose bound has not passed, are left to it; endsBy is the
// earliest such bound, when to look again. Deleting a pod its kubelet is killing ends it no
// sooner, and costs that kubelet's status manager, which writes one pod after another, a
// status write and a removal more per pod, ahead of the terminal statuses of its node's
// other pods (a 32-worker gang: the last at +11 s after the decision with the deletions, +6
// to +9 s without). Of those, the pods whose node agent attests that the shutdown stopped
// them at the runtime (exitclass.StoppedByShutdown: sandbox down, no container running) are
// removed at once, without a grace period (stopped): no process of theirs runs, and the
// index need not wait for that kubelet's status write, one pod after another, to show it.
// Every other pod is removed (remove), an ended one at once: the API server removes it
// without its kubelet.
func NotEndingByShutdown(old []*corev1.Pod, now time.Time) (remove, stopped []*corev1.Pod, endsBy time.Time) {
	for _, p := range old {
		at, ending := exitclass.ShutdownEndsBy(p)
		switch {
		case !ending || !now.Before(at):
			remove = append(remove, p)
		case exitclass.StoppedByShutdown(p):
			stopped = append(stopped, p)
		case endsBy.IsZero() || at.Before(endsBy):
			endsBy = at
		}
	}
	return remove, stopped, endsBy
}
