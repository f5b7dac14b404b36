package runmetrics

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

func run(name string, phase v1alpha1.Phase, budgets v1alpha1.RestartBudgets, spent v1alpha1.RestartCounts) v1alpha1.TrainingRun {
	r := v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name}}
	r.Spec.FailurePolicy.MaxRestarts = budgets
	r.Status.Phase, r.Status.Restarts = phase, spent
	return r
}

// TestBudgets: a run's remaining budget per class is its maxRestarts (the defaults where
// unset: 10, 0, 1) less what it spent, never negative; runs that ended report none.
func TestBudgets(t *testing.T) {
	runs := []v1alpha1.TrainingRun{
		run("llm", v1alpha1.PhaseRunning, v1alpha1.RestartBudgets{Infrastructure: ptr.To[int32](3)}, v1alpha1.RestartCounts{Infrastructure: 1, Unknown: 2}),
		run("done", v1alpha1.PhaseSucceeded, v1alpha1.RestartBudgets{}, v1alpha1.RestartCounts{}),
		run("silent", v1alpha1.PhaseRunning, v1alpha1.RestartBudgets{NoProgress: ptr.To[int32](3)}, v1alpha1.RestartCounts{NoProgress: 1}),
	}
	want := []Budget{
		{"ml", "llm", "Infrastructure", 2}, {"ml", "llm", "Application", 0}, {"ml", "llm", "Unknown", 0},
		// A run that stopped making progress once has its own budget, apart from Unknown.
		{"ml", "silent", "Infrastructure", 10}, {"ml", "silent", "Application", 0}, {"ml", "silent", "Unknown", 1}, {"ml", "silent", "NoProgress", 2},
	}
	if diff := cmp.Diff(want, Budgets(runs)); diff != "" {
		t.Errorf("Budgets (-want +got):\n%s", diff)
	}
	c := Collector{List: func(context.Context) ([]v1alpha1.TrainingRun, error) { return runs, nil }}
	exp := `# HELP faultline_restart_budget_remaining Restarts a TrainingRun that has not ended may still spend, by failure class (spec.failurePolicy.maxRestarts less status.restarts, never below 0; class NoProgress, for a run with a progress deadline, is the budget of attempts that stopped making progress), read from the runs at scrape time.
# TYPE faultline_restart_budget_remaining gauge
faultline_restart_budget_remaining{class="Application",namespace="ml",run="llm"} 0
faultline_restart_budget_remaining{class="Infrastructure",namespace="ml",run="llm"} 2
faultline_restart_budget_remaining{class="Unknown",namespace="ml",run="llm"} 0
faultline_restart_budget_remaining{class="Application",namespace="ml",run="silent"} 0
faultline_restart_budget_remaining{class="Infrastructure",namespace="ml",run="silent"} 10
faultline_restart_budget_remaining{class="NoProgress",namespace="ml",run="silent"} 2
faultline_restart_budget_remaining{class="Unknown",namespace="ml",run="silent"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(exp)); err != nil {
		t.Error(err)
	}
	failing := Collector{List: func(context.Context) ([]v1alpha1.TrainingRun, error) { return nil, errors.New("forbidden") }}
	if n := testutil.CollectAndCount(failing); n != 0 {
		t.Errorf("a list that fails reported %d series, want none", n)
	}
}
