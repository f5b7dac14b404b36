package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func mt(ms int) *metav1.MicroTime {
	t := metav1.NewMicroTime(t0.Add(time.Duration(ms) * time.Millisecond))
	return &t
}

func TestPhasesOf(t *testing.T) {
	full := &v1alpha1.TraceStatus{
		DetectedAt: mt(0), SeenAt: mt(50), JudgedAt: mt(150), DecidedAt: mt(151), TornDownAt: mt(1151),
		CreatingAt: mt(1151), CreatedAt: mt(1161), ScheduledAt: mt(3161), RunningAt: mt(3200),
	}
	want := map[string]time.Duration{
		"detect": 50 * time.Millisecond, "settle": 100 * time.Millisecond, "classify": time.Millisecond,
		"teardown": time.Second, "backoff": 0, "create": 10 * time.Millisecond,
		"schedule": 2 * time.Second, "running": 39 * time.Millisecond,
	}
	got := phasesOf(full)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("phases (-want +got):\n%s", diff)
	}
	var sum time.Duration
	for _, d := range got {
		sum += d
	}
	if sum != full.RunningAt.Sub(full.DetectedAt.Time) {
		t.Errorf("phases add up to %s, want the whole restart %s", sum, full.RunningAt.Sub(full.DetectedAt.Time))
	}
	// The Job created during the teardown, its pods held until it ended: the phases are the
	// critical path, so create counts nothing, backoff nothing, and schedule counts from the
	// release; they still add up to the restart.
	held := full.DeepCopy()
	held.CreatingAt, held.CreatedAt = mt(160), mt(170)
	want["create"], want["schedule"] = 0, 2010*time.Millisecond
	got = phasesOf(held)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("phases of a held attempt (-want +got):\n%s", diff)
	}
	sum = 0
	for _, d := range got {
		sum += d
	}
	if sum != held.RunningAt.Sub(held.DetectedAt.Time) {
		t.Errorf("phases of a held attempt add up to %s, want the whole restart %s", sum, held.RunningAt.Sub(held.DetectedAt.Time))
	}
	// A missing boundary (tracing off, an older controller) gives no phases rather than wrong ones.
	partial := full.DeepCopy()
	partial.ScheduledAt = nil
	if got := phasesOf(partial); got != nil {
		t.Errorf("phases with a missing boundary: %v, want none", got)
	}
	if got := phasesOf(nil); got != nil {
		t.Errorf("phases of no trace: %v", got)
	}
}

func TestSummaryAndRatio(t *testing.T) {
	s := summarize([]time.Duration{3 * time.Second, time.Second, 2 * time.Second})
	if s.median != 2*time.Second || s.min != time.Second || s.max != 3*time.Second || s.String() != "2.00 s (1.00 s–3.00 s)" {
		t.Errorf("summary %+v (%s)", s, s)
	}
	if got := summarize([]time.Duration{2 * time.Second, time.Second}).String(); got != "1.50 s (1.00 s–2.00 s)" {
		t.Errorf("the median of two rounds is their mean, got %q", got)
	}
	if got := summarize(nil).String(); got != "–" {
		t.Errorf("empty summary %q", got)
	}
	if got := summarize([]time.Duration{1500 * time.Millisecond}).String(); got != "1.50 s" {
		t.Errorf("one sample %q", got)
	}
	if got := ratio(time.Second, 4*time.Second); got != "0.25×" {
		t.Errorf("ratio %q", got)
	}
	if got := ratio(time.Second, 0); got != "–" {
		t.Errorf("ratio to nothing %q", got)
	}
}

func TestQPSLabelStatesTheRateLimit(t *testing.T) {
	for qps, want := range map[int]string{0: "upstream default (QPS 20, burst 30)", 200: "QPS 200, burst 400"} {
		if got := qpsLabel(qps); got != want {
			t.Errorf("qpsLabel(%d) = %q, want %q", qps, got, want)
		}
	}
}

// Every gang's name must be a valid object name for every system (a TrainingRun, Job and
// JobSet name; pods append an index and a suffix).
func TestGangNamesAreValid(t *testing.T) {
	systems := []system{faultline{}, bareJob{}, jobSet{best: true}, jobSet{}}
	seen := map[string]bool{}
	for _, sc := range []string{scenarioFail, scenarioShutdown, scenarioXID, scenarioHung} {
		for _, s := range systems {
			name := gangName(sc, s, 2048, 1)
			if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
				t.Errorf("gang name %q (%s, %s): %s", name, sc, s.name(), strings.Join(errs, "; "))
			}
			if seen[name] {
				t.Errorf("gang name %q used twice", name)
			}
			seen[name] = true
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("gangName accepted a scenario flag for a scenario name")
		}
	}()
	gangName(scenarioFailFlag, faultline{}, 8, 0)
}

func TestInts(t *testing.T) {
	got, err := ints("8, 256,2048", 1)
	if err != nil || !cmp.Equal(got, []int{8, 256, 2048}) {
		t.Errorf("ints = %v, %v", got, err)
	}
	for _, bad := range []string{"8,x", "0", ""} {
		if _, err := ints(bad, 1); err == nil {
			t.Errorf("ints(%q) accepted", bad)
		}
	}
}

func TestParseHistogram(t *testing.T) {
	page := `# HELP faultline_decision_seconds x
# TYPE faultline_decision_seconds histogram
faultline_decision_seconds_bucket{le="0.01"} 2
faultline_decision_seconds_bucket{le="0.1"} 15
faultline_decision_seconds_bucket{le="1"} 19
faultline_decision_seconds_bucket{le="+Inf"} 20
faultline_decision_seconds_sum 9.5
faultline_decision_seconds_count 20
faultline_decision_latency_seconds_count 7
rest_client_requests_total{code="200",host="h",method="GET"} 10
rest_client_requests_total{code="201",host="h",method="POST"} 2.5
`
	h := parseHistogram(page, "faultline_decision_seconds")
	if h.count != 20 || h.atMost(0.1) != 15 {
		t.Fatalf("count %v, ≤ 100 ms %v; want 20, 15", h.count, h.atMost(0.1))
	}
	for q, want := range map[float64]string{0.05: "≤ 10 ms", 0.5: "≤ 100 ms", 0.95: "≤ 1000 ms", 0.99: "> 1000 ms"} {
		if got := h.quantile(q); got != want {
			t.Errorf("quantile(%v) = %q, want %q", q, got, want)
		}
	}
	if got := (histogram{}).quantile(0.5); got != "–" {
		t.Errorf("empty histogram's quantile = %q", got)
	}
	if got := sumSamples(page, "rest_client_requests_total{"); got != 12.5 {
		t.Errorf("requests = %v, want 12.5", got)
	}
}

// TestParseLabelledHistogram: controller-runtime's histograms carry labels; a series is
// picked by them, and a window's share is the end reading less the start's.
func TestParseLabelledHistogram(t *testing.T) {
	reading := func(fast, slow float64) string {
		return fmt.Sprintf(`workqueue_queue_duration_seconds_bucket{controller="trainingrun",name="trainingrun",le="1e-05"} %v
workqueue_queue_duration_seconds_bucket{controller="trainingrun",name="trainingrun",le="0.1"} %v
workqueue_queue_duration_seconds_bucket{controller="trainingrun",name="trainingrun",le="+Inf"} %v
workqueue_queue_duration_seconds_count{controller="trainingrun",name="trainingrun"} %v
workqueue_queue_duration_seconds_sum{controller="trainingrun",name="trainingrun"} %v
workqueue_queue_duration_seconds_bucket{controller="other",name="other",le="1e-05"} 1000
workqueue_queue_duration_seconds_bucket{controller="other",name="other",le="0.1"} 1000
workqueue_queue_duration_seconds_bucket{controller="other",name="other",le="+Inf"} 1000
workqueue_queue_duration_seconds_count{controller="other",name="other"} 1000
workqueue_queue_duration_seconds_sum{controller="other",name="other"} 1000
`, fast, fast+slow, fast+slow, fast+slow, fast*1e-5+slow*0.05)
	}
	const series = `controller="trainingrun"`
	before := parseHistogram(reading(10, 0), "workqueue_queue_duration_seconds", series)
	after := parseHistogram(reading(10, 4), "workqueue_queue_duration_seconds", series)
	if after.count != 14 || after.atMost(1e-5) != 10 {
		t.Fatalf("after: count %v, ≤ 10 µs %v; want 14, 10 (the other controller's series must not count)", after.count, after.atMost(1e-5))
	}
	window := after.since(before)
	if window.count != 4 || window.atMost(1e-5) != 0 {
		t.Fatalf("window: count %v, ≤ 10 µs %v; want 4, 0", window.count, window.atMost(1e-5))
	}
	if math.Abs(window.sum-0.2) > 1e-9 {
		t.Errorf("window: sum %v s, want 0.2 s (the four slow ones' 50 ms)", window.sum)
	}
	if got := window.quantile(0.5); got != "≤ 100 ms" {
		t.Errorf("window p50 = %q, want ≤ 100 ms", got)
	}
	if got := after.quantile(0.5); got != "≤ 0.01 ms" {
		t.Errorf("after p50 = %q, want ≤ 0.01 ms", got)
	}
}

// TestHeaderNamesOnlyWhatRan: a steady-state run compares nothing and repeats nothing, so
// its report must not speak of rounds or a floor.
func TestHeaderNamesOnlyWhatRan(t *testing.T) {
	for _, tc := range []struct {
		scenarios []string
		want      bool
	}{
		{[]string{scenarioSteadyFlag}, false},
		{[]string{scenarioShutdownFlag, scenarioSteadyFlag}, true},
	} {
		cfg := config{scenarios: tc.scenarios, systems: []string{flagFaultline}, rounds: 3, stem: filepath.Join(t.TempDir(), "r")}
		report, err := render(nil, cfg, cfg.stem+".md", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, phrase := range []string{"3 round(s)", "The floor:"} {
			if got := strings.Contains(report, phrase); got != tc.want {
				t.Errorf("scenarios %v: report mentions %q = %v, want %v:\n%s", tc.scenarios, phrase, got, tc.want, report)
			}
		}
	}
}

// TestPhaseTableShowsEveryRound: with several rounds, each round's phases are in the table,
// so that a slow round's lost time has a phase; one round is its own median.
func TestPhaseTableShowsEveryRound(t *testing.T) {
	phases := func(teardown time.Duration) map[string]time.Duration {
		m := map[string]time.Duration{}
		for _, p := range restartPhases {
			m[p] = time.Millisecond
		}
		m["teardown"] = teardown
		return m
	}
	r := &session{}
	for _, td := range []time.Duration{5 * time.Second, 13 * time.Second, 6 * time.Second} {
		r.add(sample{system: sysFaultline, workers: 256, scenario: scenarioShutdown, d: td + 15*time.Second, phases: phases(td),
			firstPodCreated: td - 5*time.Second, podsCreated: td + 6*time.Second, podsBound: td + 9*time.Second, podTimes: true})
	}
	r.add(sample{system: sysFaultline, workers: 8, scenario: scenarioShutdown, d: 2 * time.Second, phases: phases(time.Second)})
	var b strings.Builder
	r.phaseTable(&b, scenarioShutdown)
	got := b.String()
	requireRows(t, got,
		"| 256 | faultline | median | 21.00 s | 1 ms | 1 ms | 1 ms | 6000 ms | 1 ms | 1 ms | 1 ms | 1 ms | 1 s / 12 s, 15 s |",
		"| 256 | faultline | 1 | 20.00 s | 1 ms | 1 ms | 1 ms | 5000 ms | 1 ms | 1 ms | 1 ms | 1 ms | 0 s / 11 s, 14 s |",
		"| 256 | faultline | 2 | 28.00 s | 1 ms | 1 ms | 1 ms | 13000 ms | 1 ms | 1 ms | 1 ms | 1 ms | 8 s / 19 s, 22 s |",
		"| 256 | faultline | 3 | 21.00 s | 1 ms | 1 ms | 1 ms | 6000 ms | 1 ms | 1 ms | 1 ms | 1 ms | 1 s / 12 s, 15 s |",
		"| 8 | faultline | median | 2.00 s | 1 ms | 1 ms | 1 ms | 1000 ms | 1 ms | 1 ms | 1 ms | 1 ms | n/a |",
	)
	if strings.Contains(got, "| 8 | faultline | 1 |") {
		t.Errorf("a single round is listed again under its median:\n%s", got)
	}
}

// TestPodsProgress: the first and last pod created and the last bound, from the Job's creation; a pod
// not bound yet does not count as bound.
func TestPodsProgress(t *testing.T) {
	job := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	pod := func(created, bound int) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(job.Add(time.Duration(created) * time.Second))}}
		status := corev1.ConditionFalse
		if bound > 0 {
			status = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: status, LastTransitionTime: metav1.NewTime(job.Add(time.Duration(bound) * time.Second))}}
		return p
	}
	first, last, bound := podsProgress([]corev1.Pod{pod(4, 15), pod(11, 12), pod(1, 3), pod(12, 0)}, job)
	if first != time.Second || last != 12*time.Second || bound != 15*time.Second {
		t.Errorf("first created %v, last created %v, last bound %v; want 1s, 12s and 15s", first, last, bound)
	}
}

// requireRows fails t unless the markdown table holds each of rows.
func requireRows(t *testing.T, table string, rows ...string) {
	t.Helper()
	for _, row := range rows {
		if !strings.Contains(table, row) {
			t.Errorf("the table lacks %q:\n%s", row, table)
		}
	}
}

// The hung-worker table says which part of a system's time is the framework's timeout it
// waits for, and that it is the configured one, added rather than waited.
func TestHungTableSaysTheTimeoutIsConfigured(t *testing.T) {
	r := &session{samples: []sample{
		{system: sysFaultline, workers: 8, scenario: scenarioHung, d: 4 * time.Second},
		{system: sysJobSet, workers: 8, scenario: scenarioHung, d: 605 * time.Second, waited: 600 * time.Second},
		{system: sysJob, workers: 8, scenario: scenarioHung, d: 603 * time.Second, waited: 600 * time.Second},
	}}
	var b strings.Builder
	r.hungTable(&b)
	out := b.String()
	for _, want := range []string{
		"### e. Hung worker after a fatal XID",
		"here 600 s, configured (`-hang-timeout`",
		"| 8 | faultline | 4.00 s | 0 s | 1× |",
		"| 8 | JobSet (FailJobSet) | 605.00 s | 600 s | 0.0066× |",
		"| 8 | Indexed Job | 603.00 s | 600 s | 0.0066× |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the hung table does not say %q:\n%s", want, out)
		}
	}
	var none strings.Builder
	(&session{}).hungTable(&none)
	if none.Len() != 0 {
		t.Errorf("a session without the scenario: %q", none.String())
	}
}
