package controller

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

var (
	restartsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "faultline_restarts_total",
		Help: "Gang restarts decided, by failure class and root cause.",
	}, []string{"class", "cause"})
	timeToRestart = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "faultline_time_to_restart_seconds",
		Help:    "From the root failure of an attempt to every worker of the next attempt Running, by how the next attempt started (status.attempts[].restartMode: InPlace or Recreate).",
		Buckets: prometheus.ExponentialBuckets(0.25, 2, 14),
	}, []string{"restart_mode"})
	decisionLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "faultline_decision_latency_seconds",
		Help:    "From the root failure of an attempt to the decision on it (includes the settle window when evidence was missing).",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
	})
	decisionSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: MetricDecisionSeconds,
		Help: "The controller's own decision latency: from its informer delivering the first failed worker of an attempt " +
			"to the decision on the attempt: the work queue's wait, reading the run, the plugin's hints, classifying, and the settle window " +
			"when evidence was missing; not persisting the decision.",
		// Fine around the 100 ms target, so that a p99 near it is read to within 25-50 ms.
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.5, 1, 2.5, 5, 10},
	})
	runReads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricRunReads,
		Help: "Reads of a TrainingRun at the start of a reconcile, by source: cache (at the version this controller last wrote or read), " +
			"apiserver (a version it does not know), deferred (the cache is behind its own write, whose watch event reconciles again).",
	}, []string{"source"})
	runsDesc = prometheus.NewDesc("faultline_runs", "TrainingRuns by phase, read from the controller's cache at scrape time.", []string{"phase"}, nil)
)

// Names of the controller's metrics that the benchmarks read.
const (
	MetricDecisionSeconds = "faultline_decision_seconds"
	MetricRunReads        = "faultline_run_reads_total"
)

func init() {
	metrics.Registry.MustRegister(restartsTotal, timeToRestart, decisionLatency, decisionSeconds, runReads)
}

// observeRunning records the time to restart when an attempt after a failure is all Running.
func (r *Reconciler) observeRunning(run *v1alpha1.TrainingRun) {
	lf := run.Status.LastFailure
	if run.Status.Attempt < 2 || lf == nil || lf.FailedAt == nil {
		return
	}
	mode := v1alpha1.RestartModeRecreate
	if rec := attempt.Record(run); rec != nil && rec.RestartMode == v1alpha1.RestartModeInPlace {
		mode = v1alpha1.RestartModeInPlace
	}
	timeToRestart.WithLabelValues(string(mode)).Observe(r.Clock.Since(lf.FailedAt.Time).Seconds())
}

// runsCollector counts runs by phase when scraped, so the gauge can never drift from the
// cluster (a gauge updated on reconcile would keep deleted runs).
type runsCollector struct{ reader client.Reader }

func (c runsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- runsDesc }

func (c runsCollector) Collect(ch chan<- prometheus.Metric) {
	runs := &v1alpha1.TrainingRunList{}
	if err := c.reader.List(context.Background(), runs); err != nil {
		return
	}
	counts := map[v1alpha1.Phase]int{}
	for _, r := range runs.Items {
		counts[r.Status.Phase]++
	}
	for _, p := range []v1alpha1.Phase{v1alpha1.PhasePending, v1alpha1.PhaseRunning, v1alpha1.PhaseRestarting, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseSuspended} {
		ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.GaugeValue, float64(counts[p]), string(p))
	}
}

// failureClock remembers, per run, when the informer first delivered a failed worker of its
// latest attempt: where faultline_decision_seconds and the trace's settle phase (without
// the agent's evidence) start. A reconcile cannot know it: it runs after the work queue's
// wait, which is part of the latency. One entry per run: the
// pods of an attempt already decided on fail too as they are torn down, and must neither
// start a measurement nor pile up.
type failureClock struct {
	mu    sync.Mutex
	first map[types.NamespacedName]attemptFailure
}

type attemptFailure struct {
	attempt int32
	at      time.Time
}

// saw notes o's failure if o is a failed worker of a run's latest attempt seen so far.
func (f *failureClock) saw(o client.Object, now time.Time) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	// The attempt of the worker that failed: a pod restarted in place keeps the label of
	// the attempt it was made for, and its report or restart names the one that failed.
	name := p.Labels[v1alpha1.LabelRun]
	n, failed, ok := exitclass.FailedAttempt(p, now) // the pod alone: no event of its node wakes the clock
	if !ok || name == "" {
		return
	}
	if !failed {
		return
	}
	f.note(types.NamespacedName{Namespace: p.Namespace, Name: name}, n, now)
}

// note records a failure of attempt n of the run key at now, unless one of n (or later) is
// recorded.
func (f *failureClock) note(key types.NamespacedName, n int32, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur, seen := f.first[key]; seen && cur.attempt >= n {
		return
	}
	if f.first == nil {
		f.first = map[types.NamespacedName]attemptFailure{}
	}
	f.first[key] = attemptFailure{attempt: n, at: now}
}

// firstSeen is when a failed worker of run's current attempt was first delivered.
func (f *failureClock) firstSeen(run *v1alpha1.TrainingRun) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, ok := f.first[runKey(run)]
	if !ok || cur.attempt != run.Status.Attempt {
		return time.Time{}, false
	}
	return cur.at, true
}

// decided observes the latency of the decision on run's current attempt.
func (f *failureClock) decided(run *v1alpha1.TrainingRun, now time.Time) {
	key := runKey(run)
	f.mu.Lock()
	cur, ok := f.first[key]
	if ok && cur.attempt == run.Status.Attempt {
		delete(f.first, key)
	}
	f.mu.Unlock()
	if ok && cur.attempt == run.Status.Attempt {
		decisionSeconds.Observe(now.Sub(cur.at).Seconds())
	}
}

// forget drops a deleted run.
func (f *failureClock) forget(run types.NamespacedName) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.first, run)
}
