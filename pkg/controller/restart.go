package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/controller/inplace"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/gpuclaim"
	"github.com/faultline-dev/faultline/pkg/inplacegate"
	"github.com/faultline-dev/faultline/pkg/podgroup"
	"github.com/faultline-dev/faultline/pkg/policy"
	"github.com/faultline-dev/faultline/pkg/rendezvous"
)

// restart persists a restart decision (attempt+1, budget, verdict, history, excluded node,
// backoff deadline, phase Restarting; the Restarting condition says why, for the event that
// transitioned writes), then starts tearing the old attempt down.
func (r *Reconciler) restart(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed, v *v1alpha1.FailureVerdict, d policy.Decision, tr *v1alpha1.TraceStatus) (ctrl.Result, error) {
	now := r.now()
	st := &run.Status
	endAttempt(run, now, v, policy.OutcomeRestarted)
	if d.SpendsBudget {
		st.Restarts = policy.SpendLine(st.Restarts, policy.LineOf(v.Class, v.Cause))
	}
	st.LastFailure = v
	if d.ExcludeNode != "" && !slices.Contains(st.ExcludedNodes, d.ExcludeNode) {
		st.ExcludedNodes = append(st.ExcludedNodes, d.ExcludeNode)
		if over := len(st.ExcludedNodes) - v1alpha1.MaxExcludedNodes; over > 0 {
			st.ExcludedNodes = slices.Clone(st.ExcludedNodes[over:]) // the oldest are forgotten (transitioned says so)
		}
	}
	next := v1alpha1.AttemptRecord{Attempt: st.Attempt + 1, ExcludedNodes: attempt.ExcludedNodes(run), RestartMode: v1alpha1.RestartModeRecreate}
	// The node of an infrastructure fault is left, excluded or not (a node shutting down
	// comes back later, but its pods end now).
	faulty := next.ExcludedNodes
	if v.Class == v1alpha1.ClassInfrastructure && v.Node != "" {
		faulty = append(slices.Clone(faulty), v.Node)
	}
	if moved, ok := r.coordinator().Plan(ctx, run, obs.view(r, run), faulty); ok {
		// The moved indexes' new pods keep off the fault's node too, for this attempt.
		next.RestartMode, next.JobAttempt, next.MovedIndexes, next.ExcludedNodes = v1alpha1.RestartModeInPlace, attempt.JobAttempt(run), moved, slices.Compact(slices.Sorted(slices.Values(faulty)))
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionInPlaceWaiting, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonStoppingOldWorkers,
			Message: fmt.Sprintf("attempt %d restarts in place: its barrier opens once every worker of attempt %d has stopped, each pod's within its grace period and %s of the decision (the last by %s); a pod whose node agent is silent moves to a new pod at once",
				st.Attempt+1, st.Attempt, inplacegate.StopMargin, now.Add(inplacegate.MaxGrace(obs.workers())+inplacegate.StopMargin).UTC().Format(time.RFC3339))})
	}
	st.Attempt++
	appendRecord(run, next)
	st.Phase = v1alpha1.PhaseRestarting
	st.ReadyWorkers = 0
	st.NextAttemptAt = ptr.To(metav1.NewTime(now.Add(d.Backoff)))
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionRestarting, Status: metav1.ConditionTrue, Reason: string(v.Cause), Message: d.Reason})
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonRestarting, Message: fmt.Sprintf("attempt %d ended: %s", st.Attempt-1, v.Cause)})
	st.Trace = tr
	if err := r.writeStatus(ctx, run); err != nil {
		return ctrl.Result{}, err
	}
	r.crash(CrashRestartPersisted)
	if next.RestartMode == v1alpha1.RestartModeInPlace {
		// The Job and the pods seen so far stay the current attempt's.
		return r.inPlace(ctx, run, obs)
	}
	// Every pod seen so far now belongs to an older attempt.
	return r.teardown(ctx, run, &observed{job: obs.job, older: append(obs.older, obs.current...)})
}

// teardown stops every pod of the run's earlier attempts and retires the Job they belong
// to (see retire); the next attempt's Job is created once they are gone, after the backoff.
// obs.job is the run's Job if the cache shows one: an earlier attempt's, or the current
// attempt's after someone deleted it (then its pods go too, and the Job is made again for
// the same attempt, with no budget spent).
func (r *Reconciler) teardown(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, error) {
	var errs []error
	jobGone := obs.job == nil
	if !jobGone {
		gone, err := r.retire(ctx, obs.job, obs.all, obs.nodes)
		jobGone = gone
		errs = append(errs, err)
	}
	// Pods of earlier attempts that no Job counts any more (their Job is gone); the retired
	// Job's own pods are retire's.
	var orphans []*corev1.Pod
	for _, p := range obs.older {
		if obs.job == nil || !metav1.IsControlledBy(p, obs.job) {
			orphans = append(orphans, p)
		}
	}
	errs = append(errs, r.removePods(ctx, orphans, true))
	if err := errors.Join(errs...); err != nil {
		return ctrl.Result{}, err
	}
	if !jobGone || slices.ContainsFunc(obs.older, func(p *corev1.Pod) bool { return !exitclass.Gone(p, obs.nodes) }) {
		return r.waitingFor(ctx, run, obs)
	}
	return r.createAttempt(ctx, run, obs)
}

// jobLost handles workers of the current attempt without their Job: it is gone, though it
// was held by FinalizerAttemptJob (someone removed the finalizer), or was made before it.
// The garbage collector stops such workers, but gracefully: a Job created at once would
// start a second pod of every index while the first is still running. So the orphans are
// stopped first, and createAttempt makes the Job again once none is left; the attempt and
// its budget are unchanged.
func (r *Reconciler) jobLost(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, error) {
	fresh := 0
	for _, p := range obs.current {
		if p.DeletionTimestamp == nil && !r.removed.has(p.UID) {
			fresh++
		}
	}
	if fresh > 0 { // once, not at every pod event while they go
		r.event(run, corev1.EventTypeWarning, v1alpha1.ReasonJobDeleted, v1alpha1.ActionStopWorkers, "attempt %d: its Job %s was deleted; stopping its %d workers before the Job is created again",
			run.Status.Attempt, run.Name, fresh)
	}
	// No Job counts them any more, so their tracking finalizers go too.
	return ctrl.Result{}, r.removePods(ctx, obs.current, true)
}

// clearLeftovers clears the way for a run that has the name of an earlier one: that run's
// Job, which faultline made, is retired like an earlier attempt's; its pods hold the run's
// Job until they are gone, as earlier attempts' do. A Job of that name that is not
// faultline's is somebody else's: the run waits, and says so.
func (r *Reconciler) clearLeftovers(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, error) {
	if j := obs.other; j != nil {
		if !faultlineJob(j) {
			return r.stall(ctx, run, v1alpha1.ReasonNameTaken, fmt.Sprintf("Job %s/%s is not this run's (it is not faultline's, or belongs to another owner): "+
				"the run's workers need that name; delete that Job or give the run another name", j.Namespace, j.Name))
		}
		if _, err := r.retire(ctx, j, obs.all, obs.nodes); err != nil {
			return ctrl.Result{}, err
		}
	}
	return r.waitingFor(ctx, run, obs)
}

// faultlineJob reports whether j is an attempt's Job that faultline made (for any run).
func faultlineJob(j *batchv1.Job) bool {
	ref := metav1.GetControllerOfNoCopy(j)
	return slices.Contains(j.Finalizers, v1alpha1.FinalizerAttemptJob) ||
		ref != nil && ref.Kind == v1alpha1.KindTrainingRun && strings.HasPrefix(ref.APIVersion, v1alpha1.GroupName+"/")
}

// recheck is how soon to look again when the API server shows something the cache does
// not: no event may come for it.
const recheck = 250 * time.Millisecond

// createAttempt creates the current attempt's Service and Job, after the backoff, once no
// pod under the run's name may still run (the API server confirms what the cache shows).
func (r *Reconciler) createAttempt(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, error) {
	left, err := r.livePodsAt(ctx, run.Namespace, run.Name, func(*metav1.PartialObjectMetadata) bool { return true }, obs.all, obs.nodes)
	if err != nil {
		return ctrl.Result{}, err
	}
	if left > 0 {
		return ctrl.Result{RequeueAfter: recheck}, nil
	}
	now := r.now()
	r.Episodes.SawTornDown(run, now.Time) // the backoff, if any, goes on
	if next := run.Status.NextAttemptAt; next != nil && now.Before(next) {
		return ctrl.Result{RequeueAfter: next.Sub(now.Time)}, nil
	}
	fw, err := r.Frameworks.Resolve(r.Episodes.Context(ctx, run), run)
	if err != nil {
		return r.pluginNotReady(ctx, run, err)
	}
	if err := r.pluginReady(ctx, run); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.settleSpec(ctx, run, fw); err != nil {
		return ctrl.Result{}, err
	}
	layout := framework.RoleRanges(fw.Roles)
	// A gang's pods are the controller's to create, with their role labels (attempt.Pod);
	// the Job controller creates an Index-scope run's, and only the admission policy labels
	// those.
	if layout != "" && run.Spec.RestartScope == v1alpha1.RestartScopeIndex {
		msg, err := r.rolesPolicyMissing(ctx, layout)
		if err != nil {
			return ctrl.Result{}, err
		}
		if msg != "" {
			return r.stallFor(ctx, run, v1alpha1.ReasonRolesPolicyMissing, stalledRecheck, msg)
		}
	}
	roles := make([]string, 0, len(fw.Roles))
	for _, role := range fw.Roles {
		roles = append(roles, role.Name)
	}
	if err := attempt.CheckRoles(run, roles); err != nil {
		return r.stallFor(ctx, run, v1alpha1.ReasonRolesInvalid, stalledRecheck, err.Error())
	}
	sa, err := r.workerServiceAccount(ctx, run, fw)
	if err != nil {
		return ctrl.Result{}, err
	}
	if res, ok, err := r.ensureOwned(ctx, run, rendezvous.Service(run), "the workers' addresses need that name"); !ok || err != nil {
		return res, err
	}
	if res, ok, err := r.disruptionBudget(ctx, run); !ok || err != nil {
		return res, err
	}
	var group string
	if r.PodGroups && podgroup.Gang(run) {
		group = podgroup.Name(run)
		if res, ok, err := r.ensureOwned(ctx, run, podgroup.For(run), "the workers' gang scheduling needs that name"); !ok || err != nil {
			return res, err
		}
	}
	if tmpl := gpuclaim.Template(run); tmpl != nil {
		if res, ok, err := r.deviceClassFound(ctx, run); !ok || err != nil {
			return res, err
		}
		if res, ok, err := r.ensureOwned(ctx, run, tmpl, "each worker's GPU claim is made from it"); !ok || err != nil {
			return res, err
		}
	}
	image, inWorker, why, err := r.coordinator().Shape(ctx, run)
	if err != nil {
		return ctrl.Result{}, err
	}
	if why != "" {
		return r.stallFor(ctx, run, v1alpha1.ReasonInPlaceUnsupported, stalledRecheck, why)
	}
	job := attempt.Job(run, attempt.Options{
		Attempt:         run.Status.Attempt,
		BarrierImage:    image,
		BarrierInWorker: inWorker,
		ExcludedNodes:   attempt.ExcludedNodes(run),
		Env:             fw.Env,
		Ports:           fw.Ports,
		Traceparent:     run.Annotations[v1alpha1.AnnotationTraceparent],

		RoleRanges:         layout,
		ServiceAccountName: sa,
		PodGroup:           group,
	})
	if pl, err := r.gate().Place(ctx, run, job, fw.Roles); err != nil || !pl.Ready {
		if err == nil && pl.Stall != nil {
			return r.stallFor(ctx, run, pl.Stall.Reason, jobRejectedRetry, pl.Stall.Message)
		}
		return ctrl.Result{}, err // the Workload's change brings the run back
	}
	if err := r.Create(ctx, job); err != nil {
		switch {
		case apierrors.IsAlreadyExists(err):
			return ctrl.Result{RequeueAfter: recheck}, nil // a Job of that name still going, or ours
		case apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err):
			// The API server, or an admission policy, refuses the run's workers as they are:
			// trying again changes nothing until the run or the cluster does.
			return r.stallFor(ctx, run, v1alpha1.ReasonJobRejected, jobRejectedRetry,
				fmt.Sprintf("the API server refused attempt %d's Job: %s; fix spec.template (or the policy that refuses it)", run.Status.Attempt, apiMessage(err)))
		}
		return ctrl.Result{}, fmt.Errorf("create job %s attempt %d: %w", job.Name, run.Status.Attempt, err)
	}
	if attempt.Managed(job) {
		// job is as the API server stored it: its template has the selector's labels. A
		// refusal is reported by creationStall, as for pods the Job controller creates.
		if err := r.createPods(ctx, run, job, nil, attempt.PodOptions{}); err != nil && !errors.Is(err, errPodRefused) {
			return ctrl.Result{}, err
		}
	}
	if rec := currentRecord(run); rec.JobAttempt != 0 {
		// An attempt that was to restart in place whose Job went (someone deleted it): it
		// starts in a Job of its own.
		rec.JobAttempt, rec.RestartMode, rec.MovedIndexes = 0, v1alpha1.RestartModeRecreate, nil
	}
	attemptCreated(run, job)
	unstall(run)
	r.event(run, corev1.EventTypeNormal, v1alpha1.ReasonAttemptCreated, v1alpha1.ActionCreateAttempt, "attempt %d: created Job %s with %d workers", run.Status.Attempt, job.Name, run.Spec.Workers)
	if err := r.writeStatus(ctx, run); err != nil {
		return ctrl.Result{}, err // updateProgress writes it down when it next sees the Job
	}
	return ctrl.Result{}, nil
}

// ensureOwned creates obj, one of the run's own objects (its headless Service, its PodGroup),
// or finds it. ok is false while an object of that name is not the run's: an earlier run's
// of the same name, which the garbage collector is deleting, or somebody else's; the run
// waits, and says why it needs the name.
func (r *Reconciler) ensureOwned(ctx context.Context, run *v1alpha1.TrainingRun, obj client.Object, why string) (ctrl.Result, bool, error) {
	obj.SetOwnerReferences([]metav1.OwnerReference{*metav1.NewControllerRef(run, v1alpha1.GroupVersion.WithKind(v1alpha1.KindTrainingRun))})
	gvk, err := apiutil.GVKForObject(obj, r.Scheme())
	if err != nil {
		return ctrl.Result{}, false, err
	}
	kind := gvk.Kind
	err = r.Create(ctx, obj)
	if err == nil {
		return ctrl.Result{}, true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, false, fmt.Errorf("create %s %s: %w", kind, obj.GetName(), err)
	}
	existing := obj.DeepCopyObject().(client.Object)
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{RequeueAfter: recheck}, false, nil
		}
		return ctrl.Result{}, false, fmt.Errorf("get %s %s: %w", kind, obj.GetName(), err)
	}
	if metav1IsControlledBy(existing, run) {
		return ctrl.Result{}, true, nil
	}
	if existing.GetDeletionTimestamp() != nil {
		return ctrl.Result{RequeueAfter: recheck}, false, nil // an earlier run's, going
	}
	res, err := r.stall(ctx, run, v1alpha1.ReasonNameTaken, fmt.Sprintf("%s %s/%s is not this run's: %s; "+
		"delete that %s or give the run another name", kind, existing.GetNamespace(), existing.GetName(), why, kind))
	return res, false, err
}

// deviceClassFound says whether the cluster has the DeviceClass of the run's spec.gpus; while
// it has not, the run waits Stalled and says so, instead of leaving every worker Pending on a
// claim that nothing can allocate.
func (r *Reconciler) deviceClassFound(ctx context.Context, run *v1alpha1.TrainingRun) (ctrl.Result, bool, error) {
	name := run.Spec.GPUs.DeviceClassName
	err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, &resourcev1.DeviceClass{})
	var why string
	switch {
	case err == nil:
		return ctrl.Result{}, true, nil
	case apierrors.IsNotFound(err):
		why = fmt.Sprintf("the cluster has no DeviceClass %q: install the DRA driver that provides it, or name one of `kubectl get deviceclasses`", name)
	case meta.IsNoMatchError(err):
		why = "the cluster does not serve DRA's resource.k8s.io/v1 (Kubernetes 1.34 or later): ask for GPUs with nvidia.com/gpu in spec.template instead"
	default:
		return ctrl.Result{}, false, fmt.Errorf("get DeviceClass %s: %w", name, err)
	}
	res, err := r.stallFor(ctx, run, v1alpha1.ReasonDeviceClassNotFound, stalledRecheck, "spec.gpus.deviceClassName: "+why)
	return res, false, err
}

// apiMessage is the API server's own message of a refusal.
func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}

// pluginReady clears a PluginReady=False left by an earlier failure of the plugin.
func (r *Reconciler) pluginReady(ctx context.Context, run *v1alpha1.TrainingRun) error {
	if !meta.IsStatusConditionFalse(run.Status.Conditions, v1alpha1.ConditionPluginReady) {
		return nil
	}
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionPluginReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPluginOK,
		Message: fmt.Sprintf("framework %q answered", run.Spec.Framework),
	})
	return r.writeStatus(ctx, run)
}

func (r *Reconciler) pluginNotReady(ctx context.Context, run *v1alpha1.TrainingRun, cause error) (ctrl.Result, error) {
	changed := meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionPluginReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPluginError, Message: cause.Error(),
	})
	if changed {
		r.event(run, corev1.EventTypeWarning, v1alpha1.ReasonPluginError, v1alpha1.ActionLoadPlugin, "framework %q: %v", run.Spec.Framework, cause)
		if err := r.writeStatus(ctx, run); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: pluginRetry}, nil
}

// coordinator coordinates the gang restarts in place, reading through the reconciler's
// cache and API reader.
func (r *Reconciler) coordinator() *inplace.Coordinator {
	return &inplace.Coordinator{Client: r.Client, APIReader: r.APIReader, Clock: r.Clock, BarrierImage: r.BarrierImage, BarrierInWorker: r.BarrierInWorker}
}

// inPlace moves a restart in place on (inplace.Coordinator): the old pods of moved indexes
// are stopped, and each gets its new pod once the old one is gone; once no worker of an older
// attempt runs in the gang, the barrier opens (one status write for the gang). What
// faultline cannot end is named in Stalled.
func (r *Reconciler) inPlace(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, error) {
	c, v := r.coordinator(), obs.view(r, run)
	s := c.Stop(ctx, run, v)
	if s.Fallback != nil {
		return r.fallback(ctx, run, s.Fallback)
	}
	if err := r.removePods(ctx, s.Remove, true); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.forceRemovePods(ctx, s.ForceRemove); err != nil {
		return ctrl.Result{}, err
	}
	o := attempt.PodOptions{Attempt: run.Status.Attempt, ExcludedNodes: attempt.Record(run).ExcludedNodes}
	if err := r.handOver(ctx, run, obs, s.Present, o); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.createPods(ctx, run, obs.job, s.Present, o); err != nil {
		return ctrl.Result{}, err
	}
	if s.Waiting {
		res, err := r.waitingFor(ctx, run, obs)
		res.RequeueAfter = earliest(res.RequeueAfter, s.RequeueAfter)
		return res, err
	}
	// The indexes spares hold answer at their spares' addresses before any worker starts.
	if err := r.spares.Publish(ctx, r.Client, run, v.Workers); err != nil {
		return ctrl.Result{}, err
	}
	open, err := c.Open(ctx, run, v, s.Moved)
	if err != nil || !open.Opened {
		return ctrl.Result{RequeueAfter: open.RequeueAfter}, err
	}
	unstall(run)
	if err := r.writeStatus(ctx, run); err != nil {
		return ctrl.Result{}, err
	}
	r.event(run, corev1.EventTypeNormal, v1alpha1.ReasonAttemptCreated, v1alpha1.ActionCreateAttempt, "%s", open.Message)
	return ctrl.Result{}, nil
}

// fallback writes an in-place fallback (inplace.Fallback), then deletes its pods.
func (r *Reconciler) fallback(ctx context.Context, run *v1alpha1.TrainingRun, f *inplace.Fallback) (ctrl.Result, error) {
	if f.Changed {
		if err := r.writeStatus(ctx, run); err != nil {
			return ctrl.Result{}, err
		}
		r.event(run, corev1.EventTypeWarning, v1alpha1.ReasonInPlaceFallback, v1alpha1.ActionStopWorkers, "%s", f.Message)
	}
	if err := r.removePods(ctx, f.Pods, true); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: recheck}, nil
}

// barrierUnpullable acts on a worker whose barrier image cannot be pulled on its node
// (inplace.Unpullable): restartMode InPlace stalls; Auto starts the attempt again without
// the barrier. done says it acted.
func (r *Reconciler) barrierUnpullable(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, bool, error) {
	msg, stall, found := inplace.Unpullable(run, obs.job, obs.workers())
	switch {
	case !found:
		if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionStalled); c != nil && c.Reason == v1alpha1.ReasonBarrierImageUnpullable && unstall(run) {
			return ctrl.Result{}, true, r.writeStatus(ctx, run) // pulled after all
		}
		return ctrl.Result{}, false, nil
	case stall:
		res, err := r.stall(ctx, run, v1alpha1.ReasonBarrierImageUnpullable, msg)
		return res, true, err
	}
	if err := r.writeStatus(ctx, run); err != nil {
		return ctrl.Result{}, true, err
	}
	r.event(run, corev1.EventTypeWarning, v1alpha1.ReasonBarrierImageUnpullable, v1alpha1.ActionCreateAttempt, "%s", msg)
	// The attempt's pods and Job go; the Job is made again for the same attempt, without
	// the barrier, once none is left.
	res, err := r.teardown(ctx, run, &observed{job: obs.job, older: append(obs.older, obs.current...), all: obs.all, nodes: obs.nodes})
	return res, true, err
}
