package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/workeraccess"
)

// settleSpec writes into the run's spec the restart scope and success policy its framework
// chose for it where the user left them unset (framework.Resolved), before the first
// attempt: every later step reads them from the spec (the Job's policies, judge, track), a
// restarted controller included, and the user sees what the run runs under. Both fields
// are immutable once set (CRD), and deploy/admission/controller.yaml lets the controller
// change nothing else of a run.
func (r *Reconciler) settleSpec(ctx context.Context, run *v1alpha1.TrainingRun, fw framework.Resolved) error {
	if run.Spec.RestartScope != "" && run.Spec.SuccessPolicy != "" {
		return nil
	}
	orig := run.DeepCopy()
	if run.Spec.RestartScope == "" {
		run.Spec.RestartScope = fw.RestartScope
	}
	if run.Spec.SuccessPolicy == "" {
		run.Spec.SuccessPolicy = fw.SuccessPolicy
	}
	from := run.ResourceVersion
	// The answer carries the stored status: the status this reconcile has changed and not
	// written yet (e.g. the trace's TornDownAt) must survive it.
	status := run.Status.DeepCopy()
	if err := r.Patch(ctx, run, ctrl.MergeFromWithOptions(orig, ctrl.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("write the framework's restart scope and success policy into %s/%s: %w", run.Namespace, run.Name, err)
	}
	run.Status = *status
	r.versions.wrote(run, from)
	return nil
}

// workerServiceAccount gives the run's workers the service account its framework asks for
// (framework.Resolved.ReadJobAndPods; see package workeraccess) and returns its name, or ""
// when the workers need none or the template names its own (whose owner then grants what
// workeraccess.Rules lists). The ServiceAccount, Role and RoleBinding are owned by the run:
// the garbage collector deletes them with it.
func (r *Reconciler) workerServiceAccount(ctx context.Context, run *v1alpha1.TrainingRun, fw framework.Resolved) (string, error) {
	if !fw.ReadJobAndPods || run.Spec.Template.Spec.ServiceAccountName != "" {
		return "", nil
	}
	objs := []ctrl.Object{workeraccess.ServiceAccount(run), workeraccess.Role(run), workeraccess.RoleBinding(run)}
	for _, obj := range objs {
		if err := r.Create(ctx, obj); err != nil {
			if !apierrors.IsAlreadyExists(err) {
				return "", fmt.Errorf("create %T %s/%s for the workers of %s: %w", obj, obj.GetNamespace(), obj.GetName(), run.Name, err)
			}
			// Ours from an earlier attempt, or somebody else's: the Role and RoleBinding
			// are checked to be the run's, so a stranger's binding never gets our grant.
			existing := obj.DeepCopyObject().(ctrl.Object)
			if err := r.APIReader.Get(ctx, ctrl.ObjectKeyFromObject(obj), existing); err != nil {
				return "", fmt.Errorf("get %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), err)
			}
			if !metav1.IsControlledBy(existing, run) {
				return "", fmt.Errorf("%T %s/%s is not run %s's: the workers' service account needs that name; delete it or rename the run", obj, obj.GetNamespace(), obj.GetName(), run.Name)
			}
		}
	}
	return workeraccess.Name(run), nil
}
