package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/policy"
	"github.com/faultline-dev/faultline/pkg/rendezvous"
)

// restart persists a restart decision (attempt+1, budget, verdict, history, excluded node,
// backoff deadline, phase Restarting), then starts tearing the old attempt down.
func (r *Reconciler) restart(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed, v *v1alpha1.FailureVerdict, d policy.Decision, tr *v1alpha1.TraceStatus) (ctrl.Result, error) {
	now := r.now()
	st := &run.Status
	ended := st.Attempt
	unfinished, unfinishedSpan, isUnfinished := unfinishedRestart(run, now.Time, fmt.Sprintf("attempt %d failed before all its workers were Running", ended))
	started := st.Trace.DeepCopy()
	endAttempt(run, now, v, policy.OutcomeRestarted)
	if d.SpendsBudget {
		st.Restarts = policy.Spend(st.Restarts, v.Class)
	}
	st.LastFailure = v
	if d.ExcludeNode != "" && !slices.Contains(st.ExcludedNodes, d.ExcludeNode) {
		st.ExcludedNodes = append(st.ExcludedNodes, d.ExcludeNode)
	}
	st.Attempt++
	appendRecord(run, v1alpha1.AttemptRecord{Attempt: st.Attempt, ExcludedNodes: slices.Clone(st.ExcludedNodes)})
	st.Phase = v1alpha1.PhaseRestarting
	st.ReadyWorkers = 0
	st.NextAttemptAt = ptr.To(metav1.NewTime(now.Add(d.Backoff)))
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionRestarting, Status: metav1.ConditionTrue, Reason: string(v.Cause), Message: d.Reason})
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonRestarting, Message: fmt.Sprintf("attempt %d ended: %s", st.Attempt-1, v.Cause)})
	st.Trace = tr
	if err := r.writeStatus(ctx, run); err != nil {
		return ctrl.Result{}, err
	}
	r.emitUnfinished(ctx, unfinished, unfinishedSpan, isUnfinished)
	r.attemptEnded(ctx, run, ended, started, decidedAt(tr, now), episodeRoot(tr))
	r.crash(CrashRestartPersisted)
	r.event(run, corev1.EventTypeWarning, string(v.Cause), ActionRestart, "attempt %d failed, starting attempt %d: %s. %s", st.Attempt-1, st.Attempt, d.Reason, v.Explanation)
	restartsTotal.WithLabelValues(string(v.Class), string(v.Cause)).Inc()
	// Every pod seen so far now belongs to an older attempt.
	return r.teardown(ctx, run, &observed{job: obs.job, older: append(obs.older, obs.current...)})
}

// teardown removes the Job and every pod of attempts before the current one. Two pods of one
// index must never run at once (TensorFlow and JAX refuse a duplicate task), but the next
// attempt's Job need not wait for the old pods to be gone: where the Job controller creates
// pods slowly (see overlapTeardown), it is created first, as soon as the backoff allows,
// with its pods held by a scheduling gate until release sees no old pod left. So the Job
// controller creates the new pods, at its own rate limit, while the old ones go, instead of
// after.
func (r *Reconciler) teardown(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, error) {
	// stripped: pods whose finalizer retireJob has just dropped, which the cache's copies
	// still show (dropping it again would double the requests); strip: the others.
	stripped, strip := []*corev1.Pod(nil), obs.older
	sg := r.seen.of(run)
	if obs.job == nil || obs.jobAttempt() < run.Status.Attempt {
		// The next Job is still to be created: when, depends on the old pods (see nextjob.go).
		if sg.overlap == nil && len(obs.older) > 0 {
			sg.overlap = ptr.To(overlapTeardown(obs.older))
		}
		sg.olderPodCreated(lastLateCreation(run, obs.older))
	}
	if old := obs.job; old != nil && obs.jobAttempt() < run.Status.Attempt {
		var err error
		if stripped, strip, err = r.retireJob(ctx, old, obs.older); err != nil {
			return ctrl.Result{}, err
		}
		r.crash(CrashOldJobDeleted)
		obs.job = nil
		// What the cache shows now includes the workers that ended while their finalizers went.
		pods, err := r.podsOf(ctx, run)
		if err != nil {
			return ctrl.Result{}, err
		}
		if jobMayCreate(old, pods, stripped) {
			sg.olderPodCreated(r.now().Time)
		}
	}
	var (
		res       ctrl.Result
		createErr error
	)
	if obs.job == nil {
		res, createErr = r.createAttempt(ctx, run, len(obs.older) > 0)
	}
	// The old pods' Job is gone: deleted above or before, or replaced by the current
	// attempt's, which has its name. Nothing counts them any more. A Job that could not be
	// created holds back none of this.
	return res, errors.Join(createErr, r.removePods(ctx, sg, stripped, false), r.removePods(ctx, sg, strip, true))
}

// retireJob deletes an attempt's Job, once the tracking finalizers of its running pods are
// gone. A Job's deletion makes the Job controller drop the finalizer of every pod of it that
// its cache still shows with one, one request after another, on the same rate-limited client
// (QPS 20 by default) that creates the next attempt's pods: measured at 2,048 workers, it
// spent its whole budget on them for a minute after the next Job was created, and created
// no pod meanwhile. Only running pods lose it here: the Job counts a pod that has ended (or
// is ending) only through its finalizer, and would replace an uncounted one, behind
// faultline's back. A running pod that ends in the moment before the Job is deleted may be
// replaced all the same: by a pod of the old attempt, which the teardown removes like the
// others (release waits for it). It returns the running pods and the others.
func (r *Reconciler) retireJob(ctx context.Context, job *batchv1.Job, pods []*corev1.Pod) (running, others []*corev1.Pod, err error) {
	running, others = splitRunning(pods)
	tracked := slices.DeleteFunc(slices.Clone(running), func(p *corev1.Pod) bool { return !slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer) })
	if err := forEachPod(tracked, "drop the finalizer of", func(p *corev1.Pod) error { return r.dropTrackingFinalizer(ctx, p) }); err != nil {
		return nil, nil, err
	}
	return running, others, r.deleteJob(ctx, job)
}

// splitRunning separates the pods that run from the others: those that have ended, or are
// being stopped, or have a failed container, or are about to be stopped (the node agent's
// InfrastructureFault or the control plane's DisruptionTarget): the workers most likely to
// end while their finalizers go.
func splitRunning(pods []*corev1.Pod) (running, others []*corev1.Pod) {
	for _, p := range pods {
		if podLive(p) && p.DeletionTimestamp == nil && !podFailed(p) && !podStopping(p) {
			running = append(running, p)
		} else {
			others = append(others, p)
		}
	}
	return running, others
}

// podStopping reports whether the infrastructure announced that it stops the pod.
func podStopping(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Status == corev1.ConditionTrue && slices.Contains(attempt.StopConditions, c.Type)
	})
}

// deleteJob deletes a Job; its pods go with it, but removePods does not wait for the
// garbage collector, which is rate-limited inside kube-controller-manager.
func (r *Reconciler) deleteJob(ctx context.Context, job *batchv1.Job) error {
	err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &job.UID})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete job %s/%s: %w", job.Namespace, job.Name, err)
	}
	return nil
}

// removePods deletes pods and, with strip, drops the Job controller's tracking finalizer:
// it only exists so that the Job counts the pod, and waiting for the rate-limited Job
// controller to drop it costs seconds per hundred pods (26 s for 256 pods at its default
// QPS). Strip only when no Job will count the pods: once their Job is gone or, for running
// pods, about to go (retireJob), or suspended (a suspended Job neither counts nor replaces
// the pods it loses). Dropping it never makes a pod vanish before the kubelet has stopped its
// containers: that is graceful deletion's job. Each pod is removed once by this process (see
// sighting.removed), whatever the cache still shows of it.
func (r *Reconciler) removePods(ctx context.Context, sg *sighting, pods []*corev1.Pod, strip bool) error {
	stripOf := func(p *corev1.Pod) bool { return strip && slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer) }
	work := slices.DeleteFunc(slices.Clone(pods), func(p *corev1.Pod) bool {
		return sg.removed[p.UID] || p.DeletionTimestamp != nil && !stripOf(p)
	})
	if sg.removed == nil {
		sg.removed = map[types.UID]bool{}
	}
	var mu sync.Mutex
	return forEachPod(work, "remove", func(p *corev1.Pod) error {
		if err := r.removePod(ctx, p, stripOf(p)); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		sg.removed[p.UID] = true
		return nil
	})
}

// forEachPod calls write for every pod, 32 at a time: one request per pod, since a
// DeleteCollection would save requests but not time (the API server deletes its items one
// after another: no faster at 256 workers), and a patch has no collection form.
func forEachPod(pods []*corev1.Pod, what string, write func(*corev1.Pod) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, 32)
	)
	for _, p := range pods {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := write(p); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%s %d pods: %w", what, len(errs), errs[0])
	}
	return nil
}

func (r *Reconciler) removePod(ctx context.Context, p *corev1.Pod, strip bool) error {
	if strip {
		if err := r.dropTrackingFinalizer(ctx, p); err != nil {
			return err
		}
	}
	if p.DeletionTimestamp == nil {
		if err := r.Delete(ctx, p, client.Preconditions{UID: &p.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// dropTrackingFinalizer removes the Job-tracking finalizer from p, and nothing else: a
// strategic merge patch that deletes the one value (as the Job controller does), so that it
// needs no resourceVersion and cannot conflict with a cache that lags; p's UID guards
// against a new pod of the same name.
func (r *Reconciler) dropTrackingFinalizer(ctx context.Context, p *corev1.Pod) error {
	patch := fmt.Sprintf(`{"metadata":{"uid":%q,"$deleteFromPrimitiveList/finalizers":[%q]}}`, p.UID, batchv1.JobTrackingFinalizer)
	if err := r.Patch(ctx, p.DeepCopy(), client.RawPatch(types.StrategicMergePatchType, []byte(patch))); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("drop finalizer of pod %s: %w", p.Name, err)
	}
	return nil
}

// jobLost handles workers of the current attempt without their Job, which someone deleted
// (or which the cache has not seen yet). The garbage collector stops such workers, but
// gracefully: a Job created at once would start a second pod of every index while the first
// is still running. So the orphans are stopped first, and createAttempt makes the Job again
// once none is left; the attempt and its budget are unchanged.
func (r *Reconciler) jobLost(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, error) {
	live := &batchv1.Job{}
	var liveUID types.UID
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: run.Name}, live); {
	case err == nil:
		liveUID = live.UID
	case !apierrors.IsNotFound(err):
		return ctrl.Result{}, fmt.Errorf("get job %s: %w", run.Name, err)
	}
	var orphans []*corev1.Pod
	fresh := 0
	for _, p := range obs.current {
		if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != liveUID {
			orphans = append(orphans, p)
			if p.DeletionTimestamp == nil {
				fresh++
			}
		}
	}
	if len(orphans) == 0 {
		return ctrl.Result{}, nil // the cache is behind the Job: its event comes
	}
	if fresh > 0 { // once, not at every pod event while they go
		r.event(run, corev1.EventTypeWarning, ReasonJobDeleted, ActionStopWorkers, "attempt %d: its Job %s was deleted; stopping its %d workers before the Job is created again",
			run.Status.Attempt, run.Name, fresh)
	}
	// No Job counts them any more, so their tracking finalizers go too.
	return ctrl.Result{}, r.removePods(ctx, r.seen.of(run), orphans, true)
}

// recheck is how soon to look again when the API server shows a leftover that the cache
// did not: no event may come for it.
const recheck = 250 * time.Millisecond

// createAttempt creates the current attempt's Service and Job, after the backoff. With
// tearingDown, the cache still shows pods of an earlier attempt.
func (r *Reconciler) createAttempt(ctx context.Context, run *v1alpha1.TrainingRun, tearingDown bool) (ctrl.Result, error) {
	if now, next := r.now(), run.Status.NextAttemptAt; tearingDown && next != nil && now.Before(next) {
		// Nothing to do before the backoff's end, or the old pods' deletions, wake us.
		return ctrl.Result{RequeueAfter: next.Sub(now.Time)}, nil
	}
	sg := r.seen.of(run)
	if tearingDown && sg.overlap != nil && !*sg.overlap {
		return ctrl.Result{}, nil // the old pods' deletions wake us
	}
	older, current, err := r.leftovers(ctx, run)
	if err != nil {
		return ctrl.Result{}, err
	}
	if current {
		return ctrl.Result{RequeueAfter: recheck}, nil
	}
	now := r.now()
	if wait := sg.quietAt().Sub(now.Time); wait > 0 {
		// The Job controller may still be creating pods of an earlier attempt's Job.
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if tr := run.Status.Trace; tr != nil && tr.Traceparent != "" && tr.TornDownAt == nil && older == 0 {
		tr.TornDownAt = micro(now.Time) // the teardown is over; the backoff, if any, goes on
		if next := run.Status.NextAttemptAt; next != nil && now.Before(next) {
			if err := r.writeStatus(ctx, run); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	if next := run.Status.NextAttemptAt; next != nil && now.Before(next) {
		return ctrl.Result{RequeueAfter: next.Sub(now.Time)}, nil
	}
	creating := r.now()
	fw, err := r.Frameworks.Resolve(withCurrentEpisode(ctx, run), run)
	if err != nil {
		return r.pluginNotReady(ctx, run, err)
	}
	if err := r.pluginReady(ctx, run); err != nil {
		return ctrl.Result{}, err
	}
	svc := rendezvous.Service(run)
	svc.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(run, v1alpha1.GroupVersion.WithKind(v1alpha1.KindTrainingRun))}
	if err := r.Create(ctx, svc); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, fmt.Errorf("create service %s: %w", svc.Name, err)
	}
	job := attempt.Job(run, attempt.Options{
		Attempt:       run.Status.Attempt,
		ExcludedNodes: run.Status.ExcludedNodes,
		Env:           fw.Env,
		Ports:         fw.Ports,
		Gated:         older > 0,
		Traceparent:   run.Annotations[v1alpha1.AnnotationTraceparent],
	})
	if err := r.Create(ctx, job); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return ctrl.Result{RequeueAfter: recheck}, nil // an older Job still being deleted, or ours
		}
		return ctrl.Result{}, fmt.Errorf("create job %s attempt %d: %w", job.Name, run.Status.Attempt, err)
	}
	// Written now rather than when the Job is next seen: the trace's create phase ends here.
	if r.Tracing.Enabled() {
		if run.Status.Trace == nil {
			run.Status.Trace = &v1alpha1.TraceStatus{}
		}
		tr := run.Status.Trace
		if tr.CreatingAt == nil {
			tr.CreatingAt = micro(creating.Time)
		}
		tr.CreatedAt = micro(r.now().Time)
	}
	attemptCreated(run, job)
	if older > 0 {
		r.event(run, corev1.EventTypeNormal, ReasonAttemptCreated, ActionCreateAttempt, "attempt %d: created Job %s with %d workers, held until the %d pods of earlier attempts are gone", run.Status.Attempt, job.Name, run.Spec.Workers, older)
	} else {
		r.event(run, corev1.EventTypeNormal, ReasonAttemptCreated, ActionCreateAttempt, "attempt %d: created Job %s with %d workers", run.Status.Attempt, job.Name, run.Spec.Workers)
	}
	if err := r.writeStatus(ctx, run); err != nil {
		return ctrl.Result{}, err // updateProgress writes it down when it next sees the Job
	}
	return ctrl.Result{}, nil
}

// leftovers counts, at the API server, the pods of earlier attempts that are left, and says
// whether a pod of the current attempt is there although the cache shows no Job: one that
// outlived its deleted Job (see jobLost), or one of a Job the cache has not shown yet. The
// cache may lag behind deletions, and may not show a pod that an old Job's controller
// created late. Their metadata is enough: a worker pod's spec carries the framework's
// rendezvous, which grows with the gang.
func (r *Reconciler) leftovers(ctx context.Context, run *v1alpha1.TrainingRun) (older int, current bool, err error) {
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := r.APIReader.List(ctx, pods, client.InNamespace(run.Namespace), client.MatchingLabels{v1alpha1.LabelRun: run.Name}); err != nil {
		return 0, false, fmt.Errorf("list pods of %s: %w", run.Name, err)
	}
	var earlier []*metav1.PartialObjectMetadata
	for i := range pods.Items {
		switch n, ok := attempt.Number(&pods.Items[i]); {
		case !ok || n > run.Status.Attempt:
		case n == run.Status.Attempt:
			current = true
		default:
			earlier = append(earlier, &pods.Items[i])
		}
	}
	r.seen.of(run).olderPodCreated(lastLateCreation(run, earlier))
	return len(earlier), current, nil
}

// release lets the current attempt's held pods be scheduled, once no pod of an earlier
// attempt is left: the cache shows none (Reconcile comes here only then), and the API
// server confirms it, once per attempt. The teardown ends here for the trace, written
// before the pods go so that a crash cannot lose it; the Job controller may still be
// creating pods, which later reconciles release as they come.
func (r *Reconciler) release(ctx context.Context, run *v1alpha1.TrainingRun, held []*corev1.Pod) (ctrl.Result, error) {
	sg := r.seen.of(run)
	if !sg.released {
		older, _, err := r.leftovers(ctx, run) // the current attempt's pods are the held ones
		if err != nil {
			return ctrl.Result{}, err
		}
		if older > 0 {
			return ctrl.Result{RequeueAfter: recheck}, nil
		}
		sg.released = true
	}
	if tr := run.Status.Trace; tr != nil && tr.Traceparent != "" && tr.TornDownAt == nil {
		tr.TornDownAt = micro(r.now().Time)
		if err := r.writeStatus(ctx, run); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, forEachPod(held, "release", func(p *corev1.Pod) error {
		patch := fmt.Sprintf(`{"metadata":{"uid":%q},"spec":{"schedulingGates":[{"$patch":"delete","name":%q}]}}`, p.UID, v1alpha1.SchedulingGatePreviousAttempt)
		if err := r.Patch(ctx, p.DeepCopy(), client.RawPatch(types.StrategicMergePatchType, []byte(patch))); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("release pod %s: %w", p.Name, err)
		}
		return nil
	})
}

// heldPods are the pods that wait for release.
func heldPods(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if attempt.Held(&p.Spec) && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// pluginReady clears a PluginReady=False left by an earlier failure of the plugin.
func (r *Reconciler) pluginReady(ctx context.Context, run *v1alpha1.TrainingRun) error {
	if !meta.IsStatusConditionFalse(run.Status.Conditions, ConditionPluginReady) {
		return nil
	}
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
		Type: ConditionPluginReady, Status: metav1.ConditionTrue, Reason: ReasonPluginOK,
		Message: fmt.Sprintf("framework %q answered", run.Spec.Framework),
	})
	return r.writeStatus(ctx, run)
}

func (r *Reconciler) pluginNotReady(ctx context.Context, run *v1alpha1.TrainingRun, cause error) (ctrl.Result, error) {
	changed := meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
		Type: ConditionPluginReady, Status: metav1.ConditionFalse, Reason: ReasonPluginError, Message: cause.Error(),
	})
	if changed {
		r.event(run, corev1.EventTypeWarning, ReasonPluginError, ActionLoadPlugin, "framework %q: %v", run.Spec.Framework, cause)
		if err := r.writeStatus(ctx, run); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: pluginRetry}, nil
}
