package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// The teardown of an attempt: its Job deleted, its pods stopped, and the Job let go once the
// Job controller is done with it. Two pods of one index must never run at once (TensorFlow
// and JAX refuse a second registration of a task), and the next attempt's Job has the old
// one's name (stable rendezvous addresses), so it is created only once both are gone.

// retire stops job, a Job of faultline's that is not wanted any more (an earlier attempt's, a
// deleted run's, or one someone deleted), and lets it go once the Job controller is done
// with it (see jobDone). pods are the pods the cache shows under the run's name; nodes what
// is known of their nodes. It reports whether the Job is gone.
//
// A Job's deletion makes the Job controller drop the tracking finalizer of every pod of it
// that it still shows with one, one request after another, on the same rate-limited client
// (QPS 20 by default) that creates the next attempt's pods: measured at 2,048 workers, that
// was a minute of its budget. So the running pods lose theirs first. Only running pods: the
// Job counts a pod that has ended (or is ending) only through its finalizer, and would
// replace an uncounted one. Once the Job is being deleted the Job controller creates no pod
// for it (its manageJob runs only for a Job without a deletion timestamp), and the rest lose
// theirs too.
func (r *Reconciler) retire(ctx context.Context, job *batchv1.Job, pods []*corev1.Pod, nodes map[string]exitclass.NodeFacts) (bool, error) {
	own := controlledBy(pods, job.UID)
	// The cache shows the Job's deletion a moment after it: until then, it is known here.
	if job.DeletionTimestamp == nil && !r.removed.has(job.UID) {
		running, others := splitRunning(own)
		tracked := slices.DeleteFunc(slices.Clone(running), func(p *corev1.Pod) bool { return !hasTrackingFinalizer(p) })
		if err := forEachPod(tracked, "drop the finalizer of", func(p *corev1.Pod) error { return r.dropTrackingFinalizer(ctx, p) }); err != nil {
			return false, err
		}
		if err := r.deleteJob(ctx, job); err != nil {
			return false, err
		}
		r.removed.add(job.UID, r.Clock.Now())
		r.crash(CrashOldJobDeleted)
		// The cache does not show the finalizers just dropped: dropping them again would
		// double the requests.
		return false, errors.Join(r.removePods(ctx, running, false), r.removePods(ctx, others, true))
	}
	if err := r.removePods(ctx, own, true); err != nil {
		return false, err
	}
	if job.DeletionTimestamp == nil || !jobDone(job, own, nodes, r.syncedSinceDeletion(job)) {
		return false, nil // the Job's own events bring it back
	}
	if !slices.Contains(job.Finalizers, v1alpha1.FinalizerAttemptJob) {
		return false, nil // a Job made before the finalizer: the API server removes it
	}
	// The cache may not show a pod that the Job controller created a moment ago.
	left, err := r.livePodsAt(ctx, job.Namespace, job.Labels[v1alpha1.LabelRun], func(p *metav1.PartialObjectMetadata) bool {
		ref := metav1.GetControllerOfNoCopy(p)
		return ref != nil && ref.UID == job.UID
	}, pods, nodes)
	if err != nil || left > 0 {
		return false, err
	}
	if err := r.releaseJob(ctx, job); err != nil {
		return false, err
	}
	r.deletions.forget(job.UID)
	r.creations.Forget(job.UID)
	return true, nil
}

// jobDone reports whether the Job controller is done with a Job being deleted: no pod of it
// that may still run is left (pods are its pods; see exitclass.Gone), its status counts no pod
// active, ready or terminating, and no sync of it that began before the deletion can still
// be creating pods (synced). Until then the Job stays, held by FinalizerAttemptJob, so that
// a creation still in flight lands on it (and is removed with it) rather than on the next
// attempt's Job of the same name: the Job controller keys what it expects to see by the
// Job's name, and a pod of the old Job that it sees once the new one has that name is never
// counted, so the new Job gets no pod until the expectation expires (5 minutes).
func jobDone(job *batchv1.Job, pods []*corev1.Pod, nodes map[string]exitclass.NodeFacts, synced bool) bool {
	st := job.Status
	if !synced || st.Active > 0 || ptr.Deref(st.Ready, 0) > 0 || ptr.Deref(st.Terminating, 0) > 0 {
		return false
	}
	return !slices.ContainsFunc(pods, func(p *corev1.Pod) bool { return !exitclass.Gone(p, nodes) })
}

// jobControllerExpectationsTimeout is how long the Job controller waits for pods it created
// to appear before it creates more regardless (its controller.ExpectationsTimeout).
const jobControllerExpectationsTimeout = 5 * time.Minute

// syncedSinceDeletion reports whether every sync of a deleted Job that began before its
// deletion has ended, so that no creation of it is in flight. The Job controller creates
// pods only in a sync that read the Job without a deletion timestamp, and ends that sync
// with a status write carrying the resourceVersion it read: after the deletion that write
// conflicts, and the Job is synced again. It syncs one Job at a time. So a write of the Job
// after its deletion (the Job controller's status; nothing else writes a Job being deleted)
// comes from a sync that saw the deletion, once every earlier sync has ended. A Job that
// has finished (or is about to: its terminal targets) creates no pod. Without a record of
// the deletion (this process started after it) or a write since (the status needed no
// change), the Job controller's own bound applies: by then any expectation a lost creation
// left has expired.
func (r *Reconciler) syncedSinceDeletion(job *batchv1.Job) bool {
	// A Job the Job controller does not manage has no sync of its: faultline's own creations
	// run inside the reconcile that would now retire it.
	return attempt.Managed(job) || jobFinished(job) || r.deletions.writtenSince(job) ||
		!r.Clock.Now().Before(job.DeletionTimestamp.Add(jobControllerExpectationsTimeout))
}

// jobDeletions remembers, for each Job held by FinalizerAttemptJob, its resourceVersion
// when this process first saw it deleted: its watch shows every version, so for a Job
// deleted while the process watched, that is the deletion's own. It is filled from the
// Job informer's events, before any reconcile can read the version from the cache.
type jobDeletions struct {
	mu  sync.Mutex
	rvs map[types.UID]string
}

// saw notes a version of a Job.
func (d *jobDeletions) saw(job *batchv1.Job) {
	if job.DeletionTimestamp == nil || !slices.Contains(job.Finalizers, v1alpha1.FinalizerAttemptJob) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.rvs == nil {
		d.rvs = map[types.UID]string{}
	}
	if _, ok := d.rvs[job.UID]; !ok {
		d.rvs[job.UID] = job.ResourceVersion
	}
}

// writtenSince reports whether job is a later version than the first one seen deleted.
func (d *jobDeletions) writtenSince(job *batchv1.Job) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	rv, ok := d.rvs[job.UID]
	return ok && rv != job.ResourceVersion
}

func (d *jobDeletions) forget(uid types.UID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.rvs, uid)
}

// releaseJob drops FinalizerAttemptJob from a Job that is being deleted: the API server
// then removes it.
func (r *Reconciler) releaseJob(ctx context.Context, job *batchv1.Job) error {
	patch := fmt.Sprintf(`{"metadata":{"uid":%q,"$deleteFromPrimitiveList/finalizers":[%q]}}`, job.UID, v1alpha1.FinalizerAttemptJob)
	if err := r.Patch(ctx, job.DeepCopy(), client.RawPatch(types.StrategicMergePatchType, []byte(patch))); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("release job %s/%s: %w", job.Namespace, job.Name, err)
	}
	return nil
}

// splitRunning separates the pods that run from the others: those that have ended, or are
// being stopped, or have a failed container, or are about to be stopped (the node agent's
// InfrastructureFault or the control plane's DisruptionTarget): the workers most likely to
// end while their finalizers go.
func splitRunning(pods []*corev1.Pod) (running, others []*corev1.Pod) {
	for _, p := range pods {
		if podLive(p) && p.DeletionTimestamp == nil && !exitclass.Failed(p, nil, time.Time{}) && !podStopping(p) {
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

// controlledBy are the pods whose controller is uid.
func controlledBy(pods []*corev1.Pod, uid types.UID) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if ref := metav1.GetControllerOfNoCopy(p); ref != nil && ref.UID == uid {
			out = append(out, p)
		}
	}
	return out
}

func hasTrackingFinalizer(p *corev1.Pod) bool {
	return slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer)
}

// deleteJob deletes a Job; it stays, held by FinalizerAttemptJob, until retire lets it go.
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
// QPS). Strip only when no Job will count the pods: once their Job is being deleted or, for
// running pods, about to be (retire), or suspended (a suspended Job neither counts nor
// replaces the pods it loses). Dropping it never makes a pod vanish before the kubelet has
// stopped its containers: that is graceful deletion's job. Each pod is removed once by this
// process (see removals), whatever the cache still shows of it.
func (r *Reconciler) removePods(ctx context.Context, pods []*corev1.Pod, strip bool) error {
	stripOf := func(p *corev1.Pod) bool { return strip && hasTrackingFinalizer(p) }
	work := slices.DeleteFunc(slices.Clone(pods), func(p *corev1.Pod) bool {
		return r.removed.has(p.UID) || p.DeletionTimestamp != nil && !stripOf(p)
	})
	return forEachPod(work, "remove", func(p *corev1.Pod) error {
		if err := r.removePod(ctx, p, stripOf(p)); err != nil {
			return err
		}
		r.removed.add(p.UID, r.Clock.Now())
		return nil
	})
}

// forceRemovePods removes pods whose node agent attests that no process of theirs runs
// (exitclass.StoppedByShutdown): their finalizer dropped and a deletion without a grace
// period, so that the API server removes them at once, as it does an ended pod, and their
// kubelet only cleans up after them. A pod deleted gracefully before is deleted again so.
func (r *Reconciler) forceRemovePods(ctx context.Context, pods []*corev1.Pod) error {
	work := slices.DeleteFunc(slices.Clone(pods), func(p *corev1.Pod) bool { return r.forced.has(p.UID) })
	return forEachPod(work, "remove", func(p *corev1.Pod) error {
		if err := r.removePod(ctx, p, hasTrackingFinalizer(p), client.GracePeriodSeconds(0)); err != nil {
			return err
		}
		r.forced.add(p.UID, r.Clock.Now())
		return nil
	})
}

// removals remembers the pods (and Jobs) whose removal this process requested and the API
// server took.
// The cache shows such a pod unchanged until its update arrives, most of a second under
// load, and every reconcile in between would request it again: 50 requests a teardown of
// 256 workers, some pods deleted four times (2026-11-24-s12-256-qps200-audit-before.md).
// A pod's UID is never reused, so an entry is only forgotten to bound the memory.
type removals struct {
	mu   sync.Mutex
	uids map[types.UID]time.Time
}

// removalMemory is how long a removal is remembered: far longer than any cache lag.
const removalMemory = 10 * time.Minute

func (m *removals) has(uid types.UID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.uids[uid]
	return ok
}

func (m *removals) add(uid types.UID, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.uids == nil {
		m.uids = map[types.UID]time.Time{}
	}
	if len(m.uids)%1024 == 0 {
		for u, t := range m.uids {
			if now.Sub(t) > removalMemory {
				delete(m.uids, u)
			}
		}
	}
	m.uids[uid] = now
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

// removePod drops p's tracking finalizer (strip) and deletes it, unless it is being deleted
// already; with more delete options (a grace period of 0), it is deleted again with them.
// The two requests go at once: whichever lands second ends the pod (a pod deleted with its
// finalizer stays, terminating, until the finalizer goes; one without it is deleted as its
// deletion asks), so the pod is gone one round trip to a busy API server sooner than after
// one request and then the other, and a moved index's new pod waits for that. Neither order
// lets the Job count the pod: with podReplacementPolicy Failed a terminating pod that has not
// failed is no failure of it.
func (r *Reconciler) removePod(ctx context.Context, p *corev1.Pod, strip bool, opts ...client.DeleteOption) error {
	var g errgroup.Group
	if strip {
		g.Go(func() error { return r.dropTrackingFinalizer(ctx, p) })
	}
	if p.DeletionTimestamp == nil || len(opts) > 0 {
		opts = append(opts, client.Preconditions{UID: &p.UID})
		g.Go(func() error {
			if err := r.Delete(ctx, p.DeepCopy(), opts...); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return fmt.Errorf("delete pod %s: %w", p.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// releaseUnscheduled drops the finalizer of the pods deleted before any node took them: no
// kubelet will ever end them, and nothing of them needs judging.
func (r *Reconciler) releaseUnscheduled(ctx context.Context, pods []*corev1.Pod) error {
	held := slices.DeleteFunc(slices.Clone(pods), func(p *corev1.Pod) bool {
		return p.DeletionTimestamp == nil || p.Spec.NodeName != "" || !hasTrackingFinalizer(p)
	})
	return forEachPod(held, "release", func(p *corev1.Pod) error { return r.dropTrackingFinalizer(ctx, p) })
}

// releaseEnded drops the finalizer of the pods of a finished run's managed Job that ended:
// they stay for their logs, and nothing judges them any more.
func (r *Reconciler) releaseEnded(ctx context.Context, job *batchv1.Job, pods []*corev1.Pod) error {
	if !attempt.Managed(job) {
		return nil // the Job controller drops its own once it has counted them
	}
	ended := slices.DeleteFunc(controlledBy(pods, job.UID), func(p *corev1.Pod) bool { return podLive(p) || !hasTrackingFinalizer(p) })
	return forEachPod(ended, "release", func(p *corev1.Pod) error { return r.dropTrackingFinalizer(ctx, p) })
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

// livePodsAt counts, at the API server, the pods under a run's name for which match holds and
// that may still run (podsAt, livePods).
func (r *Reconciler) livePodsAt(ctx context.Context, namespace, run string, match func(*metav1.PartialObjectMetadata) bool, cached []*corev1.Pod, nodes map[string]exitclass.NodeFacts) (int, error) {
	list, err := r.podsAt(ctx, namespace, run)
	if err != nil {
		return 0, err
	}
	return exitclass.LiveCount(list, match, cached, nodes), nil
}

// podsAt lists, at the API server, the pods under a run's name: the cache may lag behind
// deletions, and may not show a pod created a moment ago. Their metadata is enough: a
// worker's spec carries the framework's rendezvous, which grows with the gang.
func (r *Reconciler) podsAt(ctx context.Context, namespace, run string) ([]metav1.PartialObjectMetadata, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := r.APIReader.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{v1alpha1.LabelRun: run}); err != nil {
		return nil, fmt.Errorf("list pods of %s: %w", run, err)
	}
	return list.Items, nil
}
