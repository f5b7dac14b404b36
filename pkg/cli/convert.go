package cli

import (
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/faultline-dev/faultline/pkg/convert"
)

// ConvertFile converts every document of a YAML or JSON stream (a JobSet, a PyTorchJob or a
// TrainJob each) with pkg/convert: it prints the TrainingRuns on out, as one YAML stream,
// and on errOut, one a line, what each could not carry over and why. When a run would
// behave differently from its source, the runs are still printed and the error's exit code
// is ExitDiffers, so that a script notices.
func ConvertFile(r io.Reader, source string, o convert.Options, out, errOut io.Writer) error {
	dec := yaml.NewYAMLOrJSONDecoder(r, 64<<10)
	var results []*convert.Result
	for n := 1; ; n++ {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return UsageError("%s: document %d is not valid YAML or JSON: %v", source, n, err)
		}
		if len(doc) == 0 {
			continue
		}
		res, err := convert.Convert(&unstructured.Unstructured{Object: doc}, o)
		if err != nil {
			return UsageError("%s: document %d: %v", source, n, err)
		}
		results = append(results, res)
	}
	if len(results) == 0 {
		return UsageError("%s holds no document to convert", source)
	}
	var differ []string
	for i, res := range results {
		if i > 0 {
			fmt.Fprintln(out, "---")
		}
		if err := YAML(out, res.Run); err != nil {
			return err
		}
		for _, is := range res.Issues {
			fmt.Fprintf(errOut, "%s: %s\n", res.Source, is)
		}
		if res.Differs() {
			differ = append(differ, res.Source)
		}
	}
	switch len(differ) {
	case 0:
		return nil
	case 1:
		return &ExitError{Code: ExitDiffers, Err: fmt.Errorf("the TrainingRun of %s would not behave as it did where a line above says \"differs\" "+
			"(docs/migration.md maps every field)", differ[0])}
	}
	return &ExitError{Code: ExitDiffers, Err: fmt.Errorf("the TrainingRuns of %d documents (%v) would not behave as they did where a line above says \"differs\" "+
		"(docs/migration.md maps every field)", len(differ), differ)}
}
