package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// A run is Stalled (the condition, True) while something outside faultline keeps it from
// its next step: a worker that cannot be seen to stop, a Job the Job controller does not
// let go, a name somebody else holds, workers the API server refuses. The message names what
// it waits on and what would free it; waits that end by themselves are not stalls.

// stuckAfter is how long past its grace period a pod may take to go, or the Job controller to
// acknowledge a deletion, before the run says that it waits on it.
const stuckAfter = 30 * time.Second

// stalledRecheck is how often a stalled run looks again: what it waits on may change without
// an event of the run's (a Node tainted out-of-service, a finalizer removed elsewhere).
const stalledRecheck = 15 * time.Second

// jobRejectedRetry is how often a run whose Job the API server refused tries again.
const jobRejectedRetry = 30 * time.Second

// waitingFor waits for the pods and Jobs that hold the run's next Job: every pod under the
// run's name that may still run, and a deleted Job of faultline's not yet let go. When
// something there is stuck (see stuck), the Stalled condition says so.
func (r *Reconciler) waitingFor(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, error) {
	reason, msg := stuck(obs, r.now().Time)
	if reason == "" {
		if unstall(run) {
			return ctrl.Result{}, r.writeStatus(ctx, run)
		}
		return ctrl.Result{RequeueAfter: stuckAfter}, nil // a pod that may get stuck: look again then
	}
	return r.stall(ctx, run, reason, msg)
}

// stuck says what the run waits on that does not go by itself, or "". Pure.
func stuck(obs *observed, now time.Time) (reason, msg string) {
	var unreachable, stopping []string
	for _, p := range slices.Concat(obs.older, obs.leftovers, jobPods(obs), deleting(obs.current)) {
		if exitclass.Gone(p, obs.nodes) {
			continue
		}
		f := obs.nodes[p.Spec.NodeName]
		switch {
		case f.Unreachable:
			since := ""
			if f.UnreachableSince != nil {
				since = " since " + f.UnreachableSince.UTC().Format(time.RFC3339)
			}
			unreachable = append(unreachable, fmt.Sprintf("pod %s on node %s (unreachable%s)", p.Name, p.Spec.NodeName, since))
		case p.DeletionTimestamp != nil && now.After(p.DeletionTimestamp.Add(stuckAfter)):
			held := ""
			if len(p.Finalizers) > 0 {
				held = ", held by finalizers " + strings.Join(p.Finalizers, ", ")
			}
			stopping = append(stopping, fmt.Sprintf("pod %s on node %s (stopping since %s%s)", p.Name, orNone(p.Spec.NodeName),
				p.DeletionTimestamp.Add(-time.Duration(ptr.Deref(p.DeletionGracePeriodSeconds, 0))*time.Second).UTC().Format(time.RFC3339), held))
		}
	}
	switch {
	case len(unreachable) > 0:
		return v1alpha1.ReasonNodeUnreachable, "waiting for " + exitclass.Named(unreachable) + " to stop: the process may still run, and would meet the next attempt's. " +
			"Once the node is down, taint it node.kubernetes.io/out-of-service=nodeshutdown:NoExecute, or delete the Node; faultline then goes on"
	case len(stopping) > 0:
		return v1alpha1.ReasonPodsStuck, "waiting for " + exitclass.Named(stopping) + " to stop"
	}
	for _, j := range []*batchv1.Job{obs.job, obs.other} {
		if j != nil && j.DeletionTimestamp != nil && now.After(j.DeletionTimestamp.Add(stuckAfter)) &&
			!slices.ContainsFunc(controlledBy(obs.all, j.UID), func(p *corev1.Pod) bool { return !exitclass.Gone(p, obs.nodes) }) {
			st := j.Status
			return v1alpha1.ReasonJobNotReleased, fmt.Sprintf("waiting for the Job controller to sync Job %s since its deletion (its status counts %d active, %d ready, %d terminating), "+
				"so that no pod it may still be creating meets the next Job of the same name; released by %s at the latest: is kube-controller-manager running?",
				j.Name, st.Active, ptr.Deref(st.Ready, 0), ptr.Deref(st.Terminating, 0), j.DeletionTimestamp.Add(jobControllerExpectationsTimeout).UTC().Format(time.RFC3339))
		}
	}
	return "", ""
}

// deleting are the pods being deleted of pods: in a restart in place, the old pods of the
// indexes that move, which the gang's barrier waits for.
func deleting(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			out = append(out, p)
		}
	}
	return out
}

// jobPods are the pods of the Jobs the run waits for.
func jobPods(obs *observed) []*corev1.Pod {
	var out []*corev1.Pod
	for _, j := range []*batchv1.Job{obs.job, obs.other} {
		if j != nil && j.DeletionTimestamp != nil {
			out = append(out, controlledBy(obs.all, j.UID)...)
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// stall records that the run is Stalled for reason (written only when it changes, with an
// event), and looks again after stalledRecheck.
func (r *Reconciler) stall(ctx context.Context, run *v1alpha1.TrainingRun, reason, msg string) (ctrl.Result, error) {
	return r.stallFor(ctx, run, reason, stalledRecheck, msg)
}

func (r *Reconciler) stallFor(ctx context.Context, run *v1alpha1.TrainingRun, reason string, again time.Duration, msg string) (ctrl.Result, error) {
	changed := meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: reason, Message: msg})
	if changed {
		if err := r.writeStatus(ctx, run); err != nil {
			return ctrl.Result{}, err
		}
		r.event(run, corev1.EventTypeWarning, reason, v1alpha1.ActionWait, "%s", msg)
	}
	return ctrl.Result{RequeueAfter: again}, nil
}

// unstall sets Stalled=False where it was True, and reports whether it did (the caller
// writes the status).
func unstall(run *v1alpha1.TrainingRun) bool {
	if !meta.IsStatusConditionTrue(run.Status.Conditions, v1alpha1.ConditionStalled) {
		return false
	}
	return meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonProgressing, Message: "nothing outside faultline holds the run"})
}

// podsNotCreated says, for a Job that has fewer pods than workers and has created none for
// stuckAfter, why: the Job controller's last FailedCreate event (the API server's refusal:
// a quota, an admission policy), or that it has reported none.
func podsNotCreated(job *batchv1.Job, workers []*corev1.Pod, want int32, lastFailedCreate string, now time.Time) string {
	if int32(len(workers)) >= want {
		return ""
	}
	last := job.CreationTimestamp.Time
	for _, p := range workers {
		if p.CreationTimestamp.After(last) {
			last = p.CreationTimestamp.Time
		}
	}
	if last.IsZero() || now.Sub(last) < stuckAfter {
		return ""
	}
	msg := fmt.Sprintf("Job %s has %d of %d workers and has created none for %s", job.Name, len(workers), want, now.Sub(last).Round(time.Second))
	if lastFailedCreate != "" {
		return msg + ": the Job controller reports: " + lastFailedCreate
	}
	return msg + ", and reports no failed creation: is kube-controller-manager running?"
}
