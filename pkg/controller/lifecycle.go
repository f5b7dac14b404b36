package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/controller/admission"
	"github.com/faultline-dev/faultline/pkg/controller/savegate"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/policy"
)

// pluginRetry is how often a run whose plugin failed is tried again.
const pluginRetry = 30 * time.Second

// fail persists a FailRun decision, then stops whatever still runs.
func (r *Reconciler) fail(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed, v *v1alpha1.FailureVerdict, d policy.Decision, tr *v1alpha1.TraceStatus) (ctrl.Result, error) {
	now := r.now()
	st := &run.Status
	endAttempt(run, now, v, policy.OutcomeFailed)
	st.LastFailure = v
	st.Phase = v1alpha1.PhaseFailed
	st.ReadyWorkers = 0
	st.CompletionTime = &now
	st.NextAttemptAt = nil
	msg := v.Explanation
	if d.BudgetExhausted {
		msg = d.Reason + ". " + msg // what the run's event quotes as the reason (transitioned)
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionFailed, Status: metav1.ConditionTrue, Reason: string(v.Cause), Message: msg})
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: string(v.Cause), Message: "the run failed"})
	st.Trace = tr
	if err := r.writeStatus(ctx, run); err != nil {
		return ctrl.Result{}, err
	}
	return r.finished(ctx, run, obs)
}

// succeed persists success; with a Leader success policy the Job controller stops the rest.
func (r *Reconciler) succeed(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) error {
	now := r.now()
	st := &run.Status
	endAttempt(run, now, nil, policy.OutcomeSucceeded)
	st.Phase = v1alpha1.PhaseSucceeded
	st.CompletionTime = &now
	st.ReadyWorkers = 0
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionSucceeded, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonJobCompleted, Message: fmt.Sprintf("attempt %d completed", st.Attempt)})
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonJobCompleted, Message: "the run succeeded"})
	return r.writeStatus(ctx, run)
}

// finished keeps a finished run quiet: no pod of it keeps running, and the TTL is honoured.
func (r *Reconciler) finished(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, error) {
	// A run that succeeded under successPolicy Leader may leave workers running: the Job
	// controller stops them for a Job it manages, faultline for one it manages itself.
	if run.Status.Phase == v1alpha1.PhaseFailed || attempt.Managed(obs.job) {
		if obs.job != nil && !attempt.Managed(obs.job) && !jobFinished(obs.job) && !ptr.Deref(obs.job.Spec.Suspend, false) {
			// Suspending keeps the Job and its failed pods (for logs) but stops replacements.
			patched := obs.job.DeepCopy()
			patched.Spec.Suspend = ptr.To(true)
			if err := r.Patch(ctx, patched, client.MergeFrom(obs.job)); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, fmt.Errorf("suspend job %s: %w", obs.job.Name, err)
			}
		}
		var live []*corev1.Pod
		for _, p := range slices.Concat(obs.current, obs.older, obs.spares) {
			if podLive(p) {
				live = append(live, p)
			}
		}
		// The Job is suspended (or gone): the stopped pods may leave without it, so that the
		// run frees its nodes at once (when a queue such as Kueue admits the next workload).
		if err := r.removePods(ctx, live, true); err != nil {
			return ctrl.Result{}, err
		}
		if obs.job != nil {
			if err := r.releaseEnded(ctx, obs.job, obs.current); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	ttl := run.Spec.TTLSecondsAfterFinished
	if ttl == nil || run.Status.CompletionTime == nil {
		return ctrl.Result{}, nil
	}
	expiry := run.Status.CompletionTime.Add(time.Duration(*ttl) * time.Second)
	if left := expiry.Sub(r.Clock.Now()); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	if err := r.Delete(ctx, run, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("delete expired run: %w", err)
	}
	return ctrl.Result{}, nil
}

// suspend stops every worker without counting anything; the attempt ends as Suspended.
func (r *Reconciler) suspend(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, error) {
	return r.suspendFor(ctx, run, obs, v1alpha1.ReasonSuspended, "spec.suspend")
}

// suspendFor is suspend for a reason (the Suspended condition's and the event's) and by
// whom (why: spec.suspend, or Kueue's eviction of the run's Workload), which the attempt's
// record keeps for explain and timeline.
func (r *Reconciler) suspendFor(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed, reason, why string) (ctrl.Result, error) {
	st := &run.Status
	if st.Phase != v1alpha1.PhaseSuspended {
		now := r.now()
		endAttempt(run, now, nil, policy.OutcomeSuspended)
		currentRecord(run).Suspension = why
		st.Phase = v1alpha1.PhaseSuspended
		st.ReadyWorkers = 0
		st.NextAttemptAt = nil
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionSuspended, Status: metav1.ConditionTrue, Reason: reason, Message: fmt.Sprintf("attempt %d suspended by %s", st.Attempt, why)})
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: "the run is suspended"})
		if err := r.writeStatus(ctx, run); err != nil {
			return ctrl.Result{}, err
		}
	}
	// The Job is retired (and made again on resume); pods no Job counts go at once.
	var rest []*corev1.Pod
	for _, p := range slices.Concat(obs.current, obs.older) {
		if obs.job == nil || !metav1.IsControlledBy(p, obs.job) {
			rest = append(rest, p)
		}
	}
	var err error
	if obs.job != nil {
		_, err = r.retire(ctx, obs.job, obs.all, obs.nodes)
	}
	return ctrl.Result{}, errors.Join(err, r.removePods(ctx, rest, true))
}

// admit keeps the run in step with its admission (admission.Gate) and reports whether the
// reconcile ends here (done): a run that may not run yet holds, and every change of its
// admission is written first, then told.
func (r *Reconciler) admit(ctx context.Context, run *v1alpha1.TrainingRun) (ctrl.Result, bool, error) {
	before := run.Status.DeepCopy()
	a, err := r.gate().Sync(ctx, run)
	var res ctrl.Result
	switch {
	case err != nil:
	case a.Stall != nil:
		res, err = r.stall(ctx, run, a.Stall.Reason, a.Stall.Message)
	case a.PluginErr != nil:
		res, err = r.pluginNotReady(ctx, run, a.PluginErr)
	case a.Hold != nil && run.Status.Attempt > 0:
		res, err = r.hold(ctx, run, *a.Hold)
	case !equality.Semantic.DeepEqual(before, &run.Status):
		if err = r.writeStatus(ctx, run); err == nil {
			for _, e := range a.Events {
				r.event(run, e.Type, e.Reason, e.Action, "%s", e.Message)
			}
		}
	default:
		return res, !a.Proceed, nil
	}
	return res, true, err
}

// hold keeps a run whose admission is gone from running: its attempt is suspended (as a
// preemption, which spends no restart) and, once its last worker is gone, the quota it
// still holds is given back.
func (r *Reconciler) hold(ctx context.Context, run *v1alpha1.TrainingRun, h admission.Hold) (ctrl.Result, error) {
	obs, err := r.observe(ctx, run)
	if err != nil {
		return ctrl.Result{}, err
	}
	var res ctrl.Result
	if ptr.Deref(run.Spec.Suspend, false) {
		res, err = r.suspend(ctx, run, obs) // the user's suspend: the run's own step says so
	} else {
		res, err = r.suspendFor(ctx, run, obs, h.Reason, h.Message)
	}
	if err != nil || !h.ReleaseQuota || obs.job != nil || slices.ContainsFunc(obs.all, func(p *corev1.Pod) bool { return !exitclass.Gone(p, obs.nodes) }) {
		return res, err // the workers' deletions wake the run again
	}
	return res, r.gate().ReleaseQuota(ctx, run)
}

// gate is the run's admission gate: a reconciler built without one admits as one without
// the Kueue integration.
func (r *Reconciler) gate() admission.Gate {
	if r.Admission == nil {
		return admission.New(admission.Config{})
	}
	return r.Admission
}

// resume starts a fresh attempt after a suspend; it spends no budget.
func (r *Reconciler) resume(ctx context.Context, run *v1alpha1.TrainingRun) error {
	st := &run.Status
	st.Attempt++
	appendRecord(run, v1alpha1.AttemptRecord{Attempt: st.Attempt, ExcludedNodes: st.ExcludedNodes})
	st.Phase = v1alpha1.PhasePending
	st.Trace = nil // no failure starts this attempt
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionSuspended, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonResumed, Message: fmt.Sprintf("resumed as attempt %d", st.Attempt)})
	if err := r.writeStatus(ctx, run); err != nil {
		return err
	}
	r.event(run, corev1.EventTypeNormal, v1alpha1.ReasonResumed, v1alpha1.ActionResume, "resumed as attempt %d", st.Attempt)
	return nil
}

// currentRecord is the history entry of the current attempt, created if missing.
func currentRecord(run *v1alpha1.TrainingRun) *v1alpha1.AttemptRecord {
	h := run.Status.Attempts
	if len(h) == 0 || h[len(h)-1].Attempt != run.Status.Attempt {
		appendRecord(run, v1alpha1.AttemptRecord{Attempt: run.Status.Attempt})
		h = run.Status.Attempts
	}
	return &h[len(h)-1]
}

// appendRecord adds an attempt to the bounded history.
func appendRecord(run *v1alpha1.TrainingRun, rec v1alpha1.AttemptRecord) {
	h := append(run.Status.Attempts, rec)
	if len(h) > v1alpha1.MaxAttemptHistory {
		h = h[len(h)-v1alpha1.MaxAttemptHistory:]
	}
	run.Status.Attempts = h
}

// endAttempt closes the current attempt's history entry.
func endAttempt(run *v1alpha1.TrainingRun, now metav1.Time, v *v1alpha1.FailureVerdict, outcome string) {
	rec := currentRecord(run)
	rec.EndTime = &now
	rec.Verdict = v
	rec.Outcome = outcome
	savegate.Close(run, rec, now)
}

func jobCondition(job *batchv1.Job, types ...batchv1.JobConditionType) bool {
	if job == nil {
		return false
	}
	for _, c := range job.Status.Conditions {
		for _, t := range types {
			if c.Type == t && c.Status == corev1.ConditionTrue {
				return true
			}
		}
	}
	return false
}

func jobSucceeded(job *batchv1.Job) bool {
	return jobCondition(job, batchv1.JobComplete, batchv1.JobSuccessCriteriaMet)
}

func jobFailed(job *batchv1.Job) bool {
	return jobCondition(job, batchv1.JobFailed, batchv1.JobFailureTarget)
}

func jobFinished(job *batchv1.Job) bool { return jobSucceeded(job) || jobFailed(job) }
