package controller

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// observed is what the reconciler knows of a run's world at one moment.
type observed struct {
	// job is the run's Job, whatever its attempt (nil if none).
	job *batchv1.Job
	// current are the pods of the run's current attempt; older are the pods of earlier
	// attempts, which must all be gone before the next attempt starts.
	current, older []*corev1.Pod
}

func (r *Reconciler) observe(ctx context.Context, run *v1alpha1.TrainingRun) (*observed, error) {
	o := &observed{}
	job := &batchv1.Job{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: run.Name}, job); {
	case err == nil:
		if metav1IsControlledBy(job, run) {
			o.job = job
		}
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("get job %s: %w", run.Name, err)
	}
	pods, err := r.podsOf(ctx, run)
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		n, ok := attempt.Number(p)
		switch {
		case !ok || n > run.Status.Attempt:
			// Not ours to judge (a label someone else wrote, or from a future we have not
			// persisted: impossible unless status was rolled back).
		case n == run.Status.Attempt:
			o.current = append(o.current, p)
		default:
			o.older = append(o.older, p)
		}
	}
	return o, nil
}

// podsOf lists the run's pods, of every attempt, from the cache.
func (r *Reconciler) podsOf(ctx context.Context, run *v1alpha1.TrainingRun) ([]*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := r.List(ctx, list, client.InNamespace(run.Namespace), client.MatchingFields{podsByRun: run.Name}); err != nil {
		return nil, fmt.Errorf("list pods of %s: %w", run.Name, err)
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return pods, nil
}

// jobAttempt is the attempt of the observed Job, 0 if there is none.
func (o *observed) jobAttempt() int32 {
	if o.job == nil {
		return 0
	}
	n, _ := attempt.Number(o.job)
	return n
}

// nodeFacts reads what exitclass needs to know about the nodes of the failed pods.
func (r *Reconciler) nodeFacts(ctx context.Context, pods []*corev1.Pod) map[string]exitclass.NodeFacts {
	facts := map[string]exitclass.NodeFacts{}
	for _, p := range pods {
		name := p.Spec.NodeName
		if name == "" {
			continue
		}
		if _, done := facts[name]; done {
			continue
		}
		node := &corev1.Node{}
		if err := r.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			if apierrors.IsNotFound(err) {
				facts[name] = exitclass.NodeFacts{Gone: true}
			}
			// Other errors: facts unknown, which exitclass treats as no evidence.
			continue
		}
		facts[name] = exitclass.FactsOfNode(node)
	}
	return facts
}

func metav1IsControlledBy(obj client.Object, run *v1alpha1.TrainingRun) bool {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller && ref.UID == run.UID {
			return true
		}
	}
	return false
}

// podFailed reports whether a pod of the current attempt has failed: enough to start
// judging the attempt (exitclass decides what the failure means).
func podFailed(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodFailed {
		return true
	}
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return true
		}
	}
	return false
}

func podLive(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
