package controller

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/policy"
)

// A reconcile reads observe → judge → decide → persist → act. What tells the world about a
// change (the restart's trace spans, the metrics, the run's events) is not done by the step
// that made the change: it is derived here, after each status write, from what the API server
// held before the write and what the write made it hold. So a span, a count or an event exists
// only for a change the API server took, once, whichever step of the state machine made it.

// persisted is the run's status that the API server holds, as far as one reconcile knows: the
// one read with the run, then the one of each status write (see answered).
type persisted struct{ status *v1alpha1.TrainingRunStatus }

// answered is run's status as the API server answered a write of written: its times are
// those every later read sees (status.trace's to the microsecond), so that a phase's span
// ends where the next one starts. Only the attempts' end times are taken as written: the API
// keeps a metav1.Time to the second, and an attempt's span and its restart's root end when
// the controller ended it.
func answered(run *v1alpha1.TrainingRun, written *v1alpha1.TrainingRunStatus) *v1alpha1.TrainingRunStatus {
	out := run.Status.DeepCopy()
	for i := range out.Attempts {
		if w := attempt.RecordOf(written, out.Attempts[i].Attempt); w != nil && w.EndTime != nil && out.Attempts[i].EndTime != nil {
			out.Attempts[i].EndTime = w.EndTime.DeepCopy()
		}
	}
	return out
}

type persistedKey struct{}

// withPersisted is ctx carrying run's status as read, for writeStatus to compare against.
func withPersisted(ctx context.Context, run *v1alpha1.TrainingRun) context.Context {
	return context.WithValue(ctx, persistedKey{}, &persisted{status: run.Status.DeepCopy()})
}

// transitioned tells the world about one status write of run: before is what the API server
// held, after what the write made it hold (run carries after too, as the API server answered).
func (r *Reconciler) transitioned(ctx context.Context, run *v1alpha1.TrainingRun, before, after *v1alpha1.TrainingRunStatus) {
	was, is := withStatus(run, before), withStatus(run, after)
	r.Episodes.Written(ctx, was, is)
	if v := after.LastFailure; v != nil && v.DecidedAt != nil && (before.LastFailure == nil || before.LastFailure.DecidedAt == nil || !v.DecidedAt.Equal(before.LastFailure.DecidedAt)) {
		// A new decision, on the attempt that was current before the write.
		if v.FailedAt != nil {
			decisionLatency.Observe(v.DecidedAt.Sub(v.FailedAt.Time).Seconds())
		}
		r.failures.decided(was, v.DecidedAt.Time)
	}
	if forgotten := slices.DeleteFunc(slices.Clone(before.ExcludedNodes), func(n string) bool { return slices.Contains(after.ExcludedNodes, n) }); len(forgotten) > 0 {
		r.event(run, corev1.EventTypeWarning, v1alpha1.ReasonExclusionsForgotten, v1alpha1.ActionRestart, "more than %d nodes excluded: the oldest exclusions (%s) are forgotten",
			v1alpha1.MaxExcludedNodes, strings.Join(forgotten, ", "))
	}
	for i := range after.Attempts {
		rec := &after.Attempts[i]
		if rec.EndTime != nil && !attempt.Ended(before, rec.Attempt) {
			r.attemptEnded(is, rec)
		}
	}
	if rec := attempt.RecordOf(after, after.Attempt); rec != nil && rec.RunningTime != nil {
		if old := attempt.RecordOf(before, after.Attempt); old == nil || old.RunningTime == nil {
			r.observeRunning(is)
		}
	}
}

// attemptEnded tells of attempt rec, which ended in the write that made is: the run's event,
// and the restart count (its spans are the episode recorder's).
func (r *Reconciler) attemptEnded(is *v1alpha1.TrainingRun, rec *v1alpha1.AttemptRecord) {
	st := &is.Status
	v := rec.Verdict
	switch rec.Outcome {
	case policy.OutcomeRestarted:
		why := conditionMessage(st, v1alpha1.ConditionRestarting)
		if v.Cause == v1alpha1.CausePlannedMaintenance {
			// Planned, not failed: a Normal event, which alerting on Warnings leaves alone.
			r.event(is, corev1.EventTypeNormal, string(v.Cause), v1alpha1.ActionRestart, "attempt %d moved for a planned maintenance, starting attempt %d: %s. %s", rec.Attempt, rec.Attempt+1, why, v.Explanation)
		} else {
			r.event(is, corev1.EventTypeWarning, string(v.Cause), v1alpha1.ActionRestart, "attempt %d failed, starting attempt %d: %s. %s", rec.Attempt, rec.Attempt+1, why, v.Explanation)
		}
		restartsTotal.WithLabelValues(string(v.Class), string(v.Cause)).Inc()
	case policy.OutcomeFailed:
		r.event(is, corev1.EventTypeWarning, string(v.Cause), v1alpha1.ActionFail, "run failed (%s): %s", failReason(st, v), v.Explanation)
	case policy.OutcomeSucceeded:
		r.event(is, corev1.EventTypeNormal, v1alpha1.ReasonJobCompleted, v1alpha1.ActionSucceed, "run succeeded in attempt %d", rec.Attempt)
	case policy.OutcomeSuspended:
		reason := v1alpha1.ReasonSuspended
		if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSuspended); c != nil {
			reason = c.Reason
		}
		r.event(is, corev1.EventTypeNormal, reason, v1alpha1.ActionSuspend, "attempt %d suspended by %s; no restart is counted", rec.Attempt, rec.Suspension)
	}
}

// failReason is the reason of the decision that failed the run: a budget exhausted, which
// the Failed condition's message starts with, or the rule's own.
func failReason(st *v1alpha1.TrainingRunStatus, v *v1alpha1.FailureVerdict) string {
	if why, ok := strings.CutSuffix(conditionMessage(st, v1alpha1.ConditionFailed), ". "+v.Explanation); ok {
		return why
	}
	return policy.FailRunReason(v.Rule, v.Cause, v.Class)
}

func conditionMessage(st *v1alpha1.TrainingRunStatus, typ string) string {
	if c := meta.FindStatusCondition(st.Conditions, typ); c != nil {
		return c.Message
	}
	return ""
}

// withStatus is run with status st instead of its own (a shallow copy: read only).
func withStatus(run *v1alpha1.TrainingRun, st *v1alpha1.TrainingRunStatus) *v1alpha1.TrainingRun {
	out := *run
	out.Status = *st
	return &out
}
