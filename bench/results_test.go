package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	for _, sc := range []string{scenarioFail, scenarioShutdown, scenarioXID} {
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
