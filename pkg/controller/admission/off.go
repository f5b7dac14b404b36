package admission

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/kueue"
)

// off is the gate of a controller without the Kueue integration: a run that names a queue
// starts no worker that would bypass it, and says so; every other run goes on.
type off struct{}

var _ Gate = off{}

func (off) Sync(_ context.Context, run *v1alpha1.TrainingRun) (Admission, error) {
	if kueue.QueueName(run) == "" || finished(run) {
		return Admission{Proceed: true}, nil
	}
	return Admission{Stall: &Stall{Reason: v1alpha1.ReasonKueueOff, Message: fmt.Sprintf("the run names Kueue queue %q (label %s) and this controller runs without the Kueue integration: it starts no worker that would bypass the queue (launcher controller --kueue)", kueue.QueueName(run), v1alpha1.LabelQueueName)}}, nil
}

func (off) ReleaseQuota(context.Context, *v1alpha1.TrainingRun) error { return nil }

func (off) Place(context.Context, *v1alpha1.TrainingRun, *batchv1.Job, []framework.Role) (Placement, error) {
	return Placement{Ready: true}, nil
}

func (off) Watches(b *builder.Builder, _ handler.MapFunc) *builder.Builder { return b }

func finished(run *v1alpha1.TrainingRun) bool {
	return run.Status.Phase == v1alpha1.PhaseSucceeded || run.Status.Phase == v1alpha1.PhaseFailed
}
