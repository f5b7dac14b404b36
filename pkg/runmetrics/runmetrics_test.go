package runmetrics

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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
	if err := testutil.CollectAndCompare(c, strings.NewReader(exp), MetricBudgetRemaining); err != nil {
		t.Error(err)
	}
	failing := Collector{List: func(context.Context) ([]v1alpha1.TrainingRun, error) { return nil, errors.New("forbidden") }}
	if n := testutil.CollectAndCount(failing); n != 0 {
		t.Errorf("a list that fails reported %d series, want none", n)
	}
}

// TestRunTimes: each run with a ledger reports its parts as of the scrape, the time since the
// ledger's last write added to what the run is doing; a run without one reports none.
func TestRunTimes(t *testing.T) {
	created := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	llm := run("llm", v1alpha1.PhaseRunning, v1alpha1.RestartBudgets{}, v1alpha1.RestartCounts{})
	llm.CreationTimestamp = metav1.NewTime(created)
	llm.Status.Goodput = &v1alpha1.GoodputLedger{Through: metav1.NewMicroTime(created.Add(10 * time.Second)),
		Scheduling: metav1.Duration{Duration: 4 * time.Second}, Training: metav1.Duration{Duration: 6 * time.Second}}
	old := run("old", v1alpha1.PhaseRunning, v1alpha1.RestartBudgets{}, v1alpha1.RestartCounts{})
	c := Collector{List: func(context.Context) ([]v1alpha1.TrainingRun, error) { return []v1alpha1.TrainingRun{llm, old}, nil },
		Now: func() time.Time { return created.Add(30 * time.Second) }}
	exp := `# HELP faultline_run_time_seconds A TrainingRun's wall-clock time since its creation, by part of its goodput ledger (status.goodput as of the scrape): training, and the time lost to queued, scheduling, starting, detection, hung, teardown and redone; its goodput is the training's share of the sum.
# TYPE faultline_run_time_seconds gauge
faultline_run_time_seconds{namespace="ml",part="detection",run="llm"} 0
faultline_run_time_seconds{namespace="ml",part="hung",run="llm"} 0
faultline_run_time_seconds{namespace="ml",part="queued",run="llm"} 0
faultline_run_time_seconds{namespace="ml",part="redone",run="llm"} 0
faultline_run_time_seconds{namespace="ml",part="scheduling",run="llm"} 4
faultline_run_time_seconds{namespace="ml",part="starting",run="llm"} 0
faultline_run_time_seconds{namespace="ml",part="teardown",run="llm"} 0
faultline_run_time_seconds{namespace="ml",part="training",run="llm"} 26
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(exp), MetricRunTime); err != nil {
		t.Error(err)
	}
}
