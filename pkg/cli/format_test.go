package cli

import (
	"testing"

	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// TestBudgetsShowNoProgressWhereItCounts: the restarts line names the NoProgress budget
// (issue 42) for a run with a progress deadline, or one that already spent it, and stays as
// it was for every other run.
func TestBudgetsShowNoProgressWhereItCounts(t *testing.T) {
	plain := &v1alpha1.TrainingRun{}
	plain.Status.Restarts = v1alpha1.RestartCounts{Infrastructure: 1}
	if got, want := budgets(plain), "infrastructure 1/10, application 0/0, unknown 0/1"; got != want {
		t.Errorf("budgets without a progress deadline = %q, want %q", got, want)
	}
	watched := plain.DeepCopy()
	watched.Spec.FailurePolicy.ProgressDeadlineSeconds = ptr.To[int32](600)
	watched.Spec.FailurePolicy.MaxRestarts.NoProgress = ptr.To[int32](3)
	watched.Status.Restarts.NoProgress = 2
	if got, want := budgets(watched), "infrastructure 1/10, application 0/0, unknown 0/1, no progress 2/3"; got != want {
		t.Errorf("budgets with a progress deadline = %q, want %q", got, want)
	}
}

// TestRestartsShortCountsNoProgress: launcher get's RESTARTS column counts the restarts of
// attempts that stopped making progress, which status.restarts keeps apart from Unknown.
func TestRestartsShortCountsNoProgress(t *testing.T) {
	if got, want := restartsShort(v1alpha1.RestartCounts{Infrastructure: 1, NoProgress: 2}), "1 infra, 2 no progress"; got != want {
		t.Errorf("restartsShort = %q, want %q", got, want)
	}
}
