package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/controller/savegate"
)

// saveStep carries out a step of a checkpoint on notice (pkg/controller/savegate): its
// events, and the status write where the step waits (a wait is the step's own write) or
// write says so; a step that lets the move or the judgement go on leaves the status to
// their write.
func (r *Reconciler) saveStep(ctx context.Context, run *v1alpha1.TrainingRun, st savegate.Step, write bool) error {
	for _, e := range st.Events {
		r.event(run, corev1.EventTypeNormal, e.Reason, e.Action, "%s", e.Message)
	}
	if st.Changed && (st.Wait || write) {
		return r.writeStatus(ctx, run)
	}
	return nil
}

// disruptionBudget gives a run with spec.checkpoint its PodDisruptionBudget, and takes a
// run's away once it has none (savegate.Budget).
func (r *Reconciler) disruptionBudget(ctx context.Context, run *v1alpha1.TrainingRun) (ctrl.Result, bool, error) {
	return savegate.Budget(ctx, r.APIReader, r.Client, run, func(pdb client.Object) (ctrl.Result, bool, error) {
		return r.ensureOwned(ctx, run, pdb, "a drain must wait for the workers to save")
	})
}
