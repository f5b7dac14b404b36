package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/controller/spares"
)

// keepSpares keeps the addresses of the indexes run's spares hold; once its attempt runs it
// makes the missing spares and removes the ended (spares.Due, Keep, Keeper).
func (r *Reconciler) keepSpares(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed, o attempt.PodOptions) error {
	if run.Spec.Spares == 0 || !attempt.Managed(obs.job) || obs.job.DeletionTimestamp != nil {
		return nil
	}
	if err := r.spares.Publish(ctx, r.Client, run, obs.workers()); err != nil || !spares.Due(run) {
		return err
	}
	slots, ended := spares.Keep(run, obs.spares, obs.nodes)
	if err := r.removePods(ctx, ended, true); err != nil {
		return err
	}
	unavailable, err := r.spares.Make(ctx, r.Client, run, obs.job, slots, o)
	if unavailable != nil {
		r.event(run, corev1.EventTypeWarning, v1alpha1.ReasonSparesUnavailable, v1alpha1.ActionCreateAttempt,
			"spec.spares: attempt %d makes no spare: %v", run.Status.Attempt, unavailable)
	}
	return err
}

// handOver gives the indexes of run's attempt that have no pod among holders (nor one created
// a moment ago) to ready spares, where createPods after it would make new pods (Keeper.HandOver).
func (r *Reconciler) handOver(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed, holders []*corev1.Pod, o attempt.PodOptions) error {
	if run.Spec.Spares == 0 || len(obs.spares) == 0 || !attempt.Managed(obs.job) {
		return nil
	}
	now := r.Clock.Now()
	hs, err := r.spares.HandOver(ctx, r.Client, run, obs.spares, holders, r.creations.Missing(obs.job, holders, int(run.Spec.Workers), now), obs.nodes, o.ExcludedNodes, now)
	for _, h := range hs {
		r.creations.Created(obs.job.UID, h.Index, now)
	}
	if len(hs) > 0 {
		r.event(run, corev1.EventTypeNormal, v1alpha1.ReasonSpareTookIndex, v1alpha1.ActionCreateAttempt,
			"attempt %d: spares take indexes %s", run.Status.Attempt, spares.Named(hs))
	}
	return err
}
