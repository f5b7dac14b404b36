// Package examples holds the TrainingRuns users start from, one file per framework and
// layout (README.md lists them), and reads them for the tests that check them: the unit test
// here (strict decoding, the programs' syntax) and TestE2EExamplesRun in test/e2e and
// test/e2e/kueue, which apply each file with kubectl as a user would.
package examples

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"

	"sigs.k8s.io/yaml"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

//go:embed *.yaml
var files embed.FS

// Example is one file of examples/ and the TrainingRun it holds.
type Example struct {
	// File is the file's name in examples/.
	File string
	Run  *v1alpha1.TrainingRun
}

// Queue is the Kueue LocalQueue the example's run names, "" for a run Kueue does not admit.
func (e Example) Queue() string { return e.Run.Labels[v1alpha1.LabelQueueName] }

// All reads every example, sorted by file name. Each file holds exactly one TrainingRun,
// so that `launcher submit -f` takes it as well as `kubectl apply -f`; a field the API does
// not have is an error, as the API server's strict field validation would make it.
func All() ([]Example, error) {
	names, err := fs.Glob(files, "*.yaml")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	out := make([]Example, 0, len(names))
	for _, name := range names {
		b, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		run := &v1alpha1.TrainingRun{}
		if err := yaml.UnmarshalStrict(b, run); err != nil {
			return nil, fmt.Errorf("examples/%s: %w", name, err)
		}
		if run.APIVersion != v1alpha1.GroupVersion.String() || run.Kind != v1alpha1.KindTrainingRun {
			return nil, fmt.Errorf("examples/%s: a %s %s, want one TrainingRun (%s)", name, run.APIVersion, run.Kind, v1alpha1.GroupVersion)
		}
		out = append(out, Example{File: name, Run: run})
	}
	return out, nil
}
