package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// golden compares got with testdata/<name>.golden, or rewrites the file with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./pkg/cli -update` to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs from the golden file (-want +got; `go test ./pkg/cli -update` accepts it):\n%s", path, diff)
	}
}

func TestGoldenGet(t *testing.T) {
	runs := []v1alpha1.TrainingRun{*pendingRun(), *failedRun(), *succeededRun()}
	for name, tc := range map[string]struct {
		format Format
		runs   []v1alpha1.TrainingRun
		single bool
		all    bool
	}{
		"get-table":          {FormatTable, runs, false, false},
		"get-wide":           {FormatWide, runs, false, false},
		"get-name":           {FormatName, runs, false, false},
		"get-yaml":           {FormatYAML, []v1alpha1.TrainingRun{*succeededRun()}, true, false},
		"get-json":           {FormatJSON, []v1alpha1.TrainingRun{*pendingRun()}, false, false},
		"get-single":         {FormatTable, []v1alpha1.TrainingRun{*runningRun()}, true, false},
		"get-all-namespaces": {FormatTable, runs, false, true},
	} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := PrintRuns(&b, tc.runs, PrintOptions{Format: tc.format, Now: now, Single: tc.single, AllNamespaces: tc.all}); err != nil {
				t.Fatal(err)
			}
			golden(t, name, b.Bytes())
		})
	}
}

func TestGoldenDescribe(t *testing.T) {
	for name, tc := range map[string]struct {
		run    *v1alpha1.TrainingRun
		events []corev1.Event
	}{
		"describe-failed":    {failedRun(), runEvents()},
		"describe-running":   {runningRun(), runEvents()[:3]},
		"describe-in-place":  {inPlaceRun(), nil},
		"describe-succeeded": {succeededRun(), nil},
	} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Describe(&b, tc.run, tc.events, now); err != nil {
				t.Fatal(err)
			}
			golden(t, name, b.Bytes())
		})
	}
}

func TestGoldenExplainRun(t *testing.T) {
	for name, tc := range map[string]struct {
		run     *v1alpha1.TrainingRun
		attempt int32
	}{
		"explain-run-failed":    {failedRun(), 0},
		"explain-run-attempt-1": {failedRun(), 1},
		"explain-run-succeeded": {succeededRun(), 0},
		"explain-run-in-place":  {inPlaceRun(), 1},
	} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := ExplainRun(&b, tc.run, tc.attempt); err != nil {
				t.Fatal(err)
			}
			golden(t, name, b.Bytes())
		})
	}
}

func TestExplainRunUnknownAttempt(t *testing.T) {
	err := ExplainRun(&bytes.Buffer{}, failedRun(), 7)
	msg, code := Message(err, "")
	if code != ExitUsage || msg != "trainingrun llm has no attempt 7 in its history (attempts kept: 1, 2)" {
		t.Errorf("ExplainRun(attempt 7) = %q, exit %d", msg, code)
	}
}

func TestGoldenExplainPod(t *testing.T) {
	pods := attemptPods()
	v := exitclass.Classify(exitclass.Observation{Pods: pods, Nodes: map[string]exitclass.NodeFacts{}, Now: now, SettleDeadline: now})
	for name, pod := range map[string]int{"explain-pod-root": 2, "explain-pod-peer": 3, "explain-pod-running": 0} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := ExplainPod(&b, &PodVerdict{Pod: pods[pod], Run: "small", Attempt: "1", Pods: pods, Verdict: v}); err != nil {
				t.Fatal(err)
			}
			golden(t, name, b.Bytes())
		})
	}
}

func TestGoldenTimeline(t *testing.T) {
	for name, tc := range map[string]struct {
		run    *v1alpha1.TrainingRun
		events []corev1.Event
	}{
		"timeline-failed":    {failedRun(), runEvents()},
		"timeline-running":   {runningRun(), runEvents()[:3]},
		"timeline-succeeded": {succeededRun(), nil},
		"timeline-in-place":  {inPlaceRun(), nil},
		"timeline-pending":   {makeRun("new", 2).phase(v1alpha1.PhasePending, 1, 0).attempt(v1alpha1.AttemptRecord{Attempt: 1}).obj(), nil},
	} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Timeline(&b, tc.run, tc.events, now); err != nil {
				t.Fatal(err)
			}
			golden(t, name, b.Bytes())
		})
	}
	t.Run("timeline-failed-html", func(t *testing.T) {
		var b bytes.Buffer
		if err := TimelineHTML(&b, failedRun(), runEvents(), now); err != nil {
			t.Fatal(err)
		}
		golden(t, "timeline-failed.html", b.Bytes())
	})
}
