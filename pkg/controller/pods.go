package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

// createPods creates the pods of the indexes of job (a Job faultline manages: attempt.Managed)
// that have none: workers are the Job's pods the cache shows. The pods' names are fixed by
// the Job and the index, so a creation the cache does not show yet, made again, is refused
// by the API server rather than doubled; pods created here a moment ago are not even asked
// for again (creations), which spares the API server a refusal per pod while the cache
// catches up with a large gang.
//
// Creations go in three rounds, of one pod, then creationProbe, then the rest at once: a
// refusal of every pod (a quota, an admission policy) costs one request, not one per worker,
// and a gang waits three round trips, not the log2(workers) of the Job controller's batches
// that double (measured at 256 workers on a loaded API server: 9 rounds took 4-12 s). A
// refusal is reported as the Job controller reports it, a FailedCreate event on the Job,
// which creationStall turns into the run's Stalled condition.
//
// o says what the pods of an attempt later than the Job's (an in-place restart's moved
// indexes) differ in; for the Job's own attempt it changes nothing.
func (r *Reconciler) createPods(ctx context.Context, run *v1alpha1.TrainingRun, job *batchv1.Job, workers []*corev1.Pod, o attempt.PodOptions) error {
	missing := r.creations.Missing(job, workers, int(run.Spec.Workers), r.Clock.Now())
	for round, batch := 0, 1; len(missing) > 0; round++ {
		if round == 1 {
			batch = creationProbe
		} else if round > 1 {
			batch = len(missing)
		}
		n := min(batch, len(missing))
		errs := make([]error, n)
		var wg sync.WaitGroup
		for k, i := range missing[:n] {
			wg.Go(func() { errs[k] = r.createPod(ctx, job, i, o) })
		}
		wg.Wait()
		missing = missing[n:]
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	return nil
}

// createPod creates index i's pod of job.
func (r *Reconciler) createPod(ctx context.Context, job *batchv1.Job, i int, o attempt.PodOptions) error {
	pod, err := attempt.Pod(job, i, o)
	if err != nil {
		return err
	}
	err = r.Create(ctx, pod)
	switch {
	case err == nil:
		r.creations.Created(job.UID, i, r.Clock.Now())
		return nil
	case apierrors.IsAlreadyExists(err):
		// The cache does not show it yet (this process made it before a restart, or
		// made it a moment ago and forgot nothing): it comes.
		return nil
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return nil // nothing will run here any more; the run goes with its namespace
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err):
		// Refused as it is: trying again at once changes nothing. Said where the Job
		// controller says it, for `kubectl describe job` and for creationStall.
		r.Recorder.Eventf(job, nil, corev1.EventTypeWarning, reasonFailedCreate, v1alpha1.ActionCreateAttempt, "Error creating: %s", apiMessage(err))
		return fmt.Errorf("create pod %s of job %s: %w", pod.Name, job.Name, errPodRefused)
	}
	return fmt.Errorf("create pod %s of job %s: %w", pod.Name, job.Name, err)
}

// creationProbe is the second round of a gang's pod creations: enough to learn that the
// quota or a policy lets some through but not all, before asking for the rest.
const creationProbe = 16

// errPodRefused marks a pod the API server refused as it is.
var errPodRefused = errors.New("refused by the API server")

// managedSucceeded reports whether every index of a managed Job has a pod that succeeded:
// the Job controller's Complete, which nobody writes on a Job it does not manage.
func managedSucceeded(run *v1alpha1.TrainingRun, job *batchv1.Job, workers []*corev1.Pod) bool {
	if !attempt.Managed(job) {
		return false
	}
	done := make([]bool, run.Spec.Workers)
	left := len(done)
	for _, p := range workers {
		if i, ok := attempt.Index(p); ok && i < len(done) && !done[i] && p.Status.Phase == corev1.PodSucceeded {
			done[i] = true
			left--
		}
	}
	return left == 0
}
