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

// TestGoldenGet: `get` prints through cli-runtime's printers, as kubectl get does: the
// table and its wide columns, json, yaml, name, jsonpath and go templates, custom columns,
// without headers, sorted by a field, with labels, across namespaces.
func TestGoldenGet(t *testing.T) {
	runs := []v1alpha1.TrainingRun{*pendingRun(), *failedRun(), *succeededRun()}
	labelled := func() []v1alpha1.TrainingRun {
		out := []v1alpha1.TrainingRun{*pendingRun(), *failedRun(), *succeededRun()}
		out[1].Labels = map[string]string{"team": "research"}
		out[2].Labels = map[string]string{"team": "infra", "tier": "batch"}
		return out
	}
	for name, tc := range map[string]struct {
		runs []v1alpha1.TrainingRun
		o    PrintOptions
	}{
		"get-table":                     {runs, PrintOptions{}},
		"get-wide":                      {runs, PrintOptions{Output: "wide"}},
		"get-name":                      {runs, PrintOptions{Output: "name"}},
		"get-yaml":                      {[]v1alpha1.TrainingRun{*succeededRun()}, PrintOptions{Output: "yaml", Single: true}},
		"get-json":                      {[]v1alpha1.TrainingRun{*pendingRun()}, PrintOptions{Output: "json"}},
		"get-single":                    {[]v1alpha1.TrainingRun{*runningRun()}, PrintOptions{Single: true}},
		"get-all-namespaces":            {runs, PrintOptions{AllNamespaces: true}},
		"get-no-headers":                {runs, PrintOptions{NoHeaders: true}},
		"get-sort-by":                   {runs, PrintOptions{SortBy: ".status.attempt"}},
		"get-sort-by-age":               {runs, PrintOptions{SortBy: "{.metadata.creationTimestamp}", Output: "name"}},
		"get-jsonpath":                  {runs, PrintOptions{Output: `jsonpath={range .items[*]}{.metadata.name}{"\t"}{.status.phase}{"\n"}{end}`}},
		"get-jsonpath-single":           {[]v1alpha1.TrainingRun{*failedRun()}, PrintOptions{Output: "jsonpath={.status.lastFailure.cause}", Single: true}},
		"get-go-template":               {runs, PrintOptions{Output: `go-template={{range .items}}{{.metadata.name}} {{.spec.workers}}{{"\n"}}{{end}}`}},
		"get-custom-columns":            {runs, PrintOptions{Output: "custom-columns=NAME:.metadata.name,ATTEMPT:.status.attempt,EXCLUDED:.status.excludedNodes[*],QUEUE:{.metadata.labels.kueue\\.x-k8s\\.io/queue-name}"}},
		"get-custom-columns-no-headers": {runs, PrintOptions{Output: "custom-columns=NAME:.metadata.name", NoHeaders: true}},
		"get-show-labels":               {labelled(), PrintOptions{ShowLabels: true, LabelColumns: []string{"team"}}},
	} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			tc.o.Now = now
			if err := PrintRuns(&b, tc.runs, tc.o); err != nil {
				t.Fatal(err)
			}
			golden(t, name, b.Bytes())
		})
	}
}

// TestGoldenGetWatch: `get -w` prints the list, then a row for each change under the same
// header, as kubectl get -w; -o yaml prints each object.
func TestGoldenGetWatch(t *testing.T) {
	for name, o := range map[string]PrintOptions{"get-watch": {}, "get-watch-yaml": {Output: "yaml"}} {
		t.Run(name, func(t *testing.T) {
			o.Now, o.Watch = now, true
			p, err := NewRunPrinter(o)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := p.Print(&b, []v1alpha1.TrainingRun{*pendingRun()}); err != nil {
				t.Fatal(err)
			}
			for _, r := range []*v1alpha1.TrainingRun{runningRun(), failedRun()} {
				if err := p.PrintChange(&b, r); err != nil {
					t.Fatal(err)
				}
			}
			golden(t, name, b.Bytes())
		})
	}
}

// TestGetOutputRefused: an output format, a template or a sort key that cannot be used is a
// usage error that names it, before anything is asked of the API server.
func TestGetOutputRefused(t *testing.T) {
	for _, o := range []PrintOptions{
		{Output: "xml"}, {Output: "wide=1"}, {Output: "jsonpath={.metadata.name"}, {Output: "custom-columns=NAME"},
		{Output: "custom-columns="}, {SortBy: "{.status.attempt"}, {Output: "custom-columns-file=/nonexistent"},
	} {
		_, err := NewRunPrinter(o)
		if msg, code := Message(err, ""); code != ExitUsage {
			t.Errorf("%+v: exit %d (%s), want a usage error", o, code, msg)
		}
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
