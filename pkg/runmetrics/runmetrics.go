// Package runmetrics exports what a dashboard needs to know of each TrainingRun that the
// controller's event-driven metrics cannot say: the restart budget each run has left, per
// failure class, and where its time has gone (its goodput ledger, as of the scrape). The values are read from the runs when Prometheus scrapes, never kept, so
// that they cannot drift from the cluster (a deleted run is simply gone).
package runmetrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/goodput"
	"github.com/faultline-dev/faultline/pkg/policy"
)

// MetricBudgetRemaining is the gauge of the restarts a run has left, by class.
const MetricBudgetRemaining = "faultline_restart_budget_remaining"

var budgetDesc = prometheus.NewDesc(MetricBudgetRemaining,
	"Restarts a TrainingRun that has not ended may still spend, by failure class (spec.failurePolicy.maxRestarts less status.restarts, never below 0; class NoProgress, for a run with a progress deadline, is the budget of attempts that stopped making progress), read from the runs at scrape time.",
	[]string{"namespace", "run", "class"}, nil)

// MetricRunTime is the gauge of each run's wall-clock time by part of its goodput ledger.
const MetricRunTime = "faultline_run_time_seconds"

var runTimeDesc = prometheus.NewDesc(MetricRunTime,
	"A TrainingRun's wall-clock time since its creation, by part of its goodput ledger (status.goodput as of the scrape): training, and the time lost to queued, scheduling, starting, detection, hung, teardown and redone; its goodput is the training's share of the sum.",
	[]string{"namespace", "run", "part"}, nil)

// Lister lists the runs to report: the controller's client, of its namespace or the cluster.
type Lister func(ctx context.Context) ([]v1alpha1.TrainingRun, error)

// Collector reports each run's remaining budgets when scraped.
type Collector struct {
	List Lister
	// Timeout bounds one scrape's list (default 10 s).
	Timeout time.Duration
	// Now is the scrape's clock (default time.Now).
	Now func() time.Time
}

var _ prometheus.Collector = Collector{}

func (c Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- budgetDesc
	ch <- runTimeDesc
}

// Collect reports nothing when the runs cannot be listed: an absent series is a gap on the
// dashboard, a made-up one a lie.
func (c Collector) Collect(ch chan<- prometheus.Metric) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	runs, err := c.List(ctx)
	if err != nil {
		return
	}
	for _, m := range Budgets(runs) {
		ch <- prometheus.MustNewConstMetric(budgetDesc, prometheus.GaugeValue, float64(m.Remaining), m.Namespace, m.Run, m.Class)
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	for _, t := range RunTimes(runs, now()) {
		ch <- prometheus.MustNewConstMetric(runTimeDesc, prometheus.GaugeValue, t.Seconds, t.Namespace, t.Run, t.Part)
	}
}

// RunTime is one part of one run's ledger.
type RunTime struct {
	Namespace, Run, Part string
	Seconds              float64
}

// RunTimes are the parts of each run's goodput ledger as of now, for the runs whose
// controller keeps one.
func RunTimes(runs []v1alpha1.TrainingRun, now time.Time) []RunTime {
	var out []RunTime
	for i := range runs {
		r := &runs[i]
		if r.Status.Goodput == nil {
			continue
		}
		for _, p := range goodput.Parts(goodput.AsOf(r, now)) {
			out = append(out, RunTime{Namespace: r.Namespace, Run: r.Name, Part: p.Name, Seconds: p.Duration.Seconds()})
		}
	}
	return out
}

// Budget is one run's remaining restarts of one class.
type Budget struct {
	Namespace, Run, Class string
	Remaining             int32
}

// Budgets are the remaining budgets of the runs that have not ended, the class named as
// faultline_restarts_total labels it (Infrastructure, Application, Unknown), and, for a run
// whose attempts can end for want of progress (failurePolicy.progressDeadlineSeconds, or one
// that already did), its own budget as class NoProgress.
func Budgets(runs []v1alpha1.TrainingRun) []Budget {
	var out []Budget
	for i := range runs {
		r := &runs[i]
		if r.Status.Phase == v1alpha1.PhaseSucceeded || r.Status.Phase == v1alpha1.PhaseFailed {
			continue
		}
		for _, l := range policy.Lines(r) {
			left := max(policy.LineBudget(r.Spec.FailurePolicy.MaxRestarts, l)-policy.LineSpent(r.Status.Restarts, l), 0)
			out = append(out, Budget{Namespace: r.Namespace, Run: r.Name, Class: string(l), Remaining: left})
		}
	}
	return out
}
