package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// TestDryRunClientChecks: `run --dry-run` checks the run before printing it: the issue's
// `--framework jaxx --workers 0 --name X_bad` is refused with every field named (exit 2),
// the unknown framework is a warning; a valid run is printed.
func TestDryRunClientChecks(t *testing.T) {
	run, err := RunSpec{Name: "X_bad", Image: "i", Workers: 0, Framework: "jaxx"}.TrainingRun()
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	_, err = Create(context.Background(), &Runs{}, run, DryRunClient, &out, &errOut)
	msg, code := Message(err, "")
	if code != ExitUsage || !strings.Contains(msg, `metadata.name: "X_bad"`) || !strings.Contains(msg, "spec.workers: 0: must be 1 to 10000") {
		t.Errorf("exit %d, %q: want a usage error naming metadata.name and spec.workers", code, msg)
	}
	if !strings.Contains(errOut.String(), `warning: spec.framework "jaxx" is not a shipped plugin`) || out.Len() > 0 {
		t.Errorf("stdout %q, stderr %q: want nothing printed and the framework warned about", out.String(), errOut.String())
	}

	for name, s := range map[string]RunSpec{
		"index scope with a rule": {Name: "r", Image: "i", Workers: 2, RestartScope: "Index", ExcludeFaultyNodes: true},
		"bad scope":               {Name: "r", Image: "i", Workers: 2, RestartScope: "gang"},
		"settle too long":         {Name: "r", Image: "i", Workers: 2, SettleSeconds: ptrInt32(301)},
		"digit first":             {Name: "1r", Image: "i", Workers: 2},
	} {
		run, err := s.TrainingRun()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ValidateRun(run); err == nil {
			t.Errorf("%s: ValidateRun accepted %+v", name, run.Spec)
		}
	}
	ok, _ := RunSpec{Name: "llm", Image: "i", Workers: 16, Framework: "jax"}.TrainingRun()
	out.Reset()
	if _, err := Create(context.Background(), &Runs{}, ok, DryRunClient, &out, &errOut); err != nil || !strings.Contains(out.String(), "name: llm") {
		t.Errorf("a valid run: %v, printed %q", err, out.String())
	}
}

// TestSubmitDryRunClient: `submit --dry-run=client` decodes each run strictly and checks it,
// without a cluster.
func TestSubmitDryRunClient(t *testing.T) {
	docs, err := Documents(strings.NewReader("apiVersion: faultline.dev/v1alpha1\nkind: TrainingRun\nmetadata: {name: a}\nspec:\n  workers: 2\n  wokers: 3\n  template: {spec: {containers: [{name: w, image: i}]}}\n"), "a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_, err = Submit(context.Background(), &Runs{}, docs, false, DryRunClient, &out, &out)
	if msg, code := Message(err, ""); code != ExitUsage || !strings.Contains(msg, `trainingrun "a" is not valid: unknown field "wokers"`) {
		t.Errorf("exit %d, %q: want the misspelled field refused", code, msg)
	}
	docs, _ = Documents(strings.NewReader("apiVersion: faultline.dev/v1alpha1\nkind: TrainingRun\nmetadata: {name: a}\nspec:\n  workers: 2\n  template: {spec: {containers: [{name: w, image: i}]}}\n"), "a.yaml")
	out.Reset()
	if _, err := Submit(context.Background(), &Runs{}, docs, false, DryRunClient, &out, &out); err != nil || out.String() != "trainingrun.faultline.dev/a created (dry run)\n" {
		t.Errorf("%v, %q", err, out.String())
	}
}

// TestValidateBoundsAreTheCRDs: the bounds ValidateRun checks are the CRD's, so that the
// client's dry run refuses exactly what the API server would.
func TestValidateBoundsAreTheCRDs(t *testing.T) {
	b, err := os.ReadFile("../../deploy/crd/faultline.dev_trainingruns.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(b, crd); err != nil {
		t.Fatal(err)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	workers := spec.Properties["workers"]
	settle := spec.Properties["failurePolicy"].Properties["settleSeconds"]
	for name, c := range map[string]struct {
		got  float64
		want *float64
	}{
		"spec.workers minimum": {minWorkers, workers.Minimum}, "spec.workers maximum": {maxWorkers, workers.Maximum},
		"settleSeconds maximum": {maxSettleSeconds, settle.Maximum},
	} {
		if c.want == nil || *c.want != c.got {
			t.Errorf("%s: ValidateRun checks %v, the CRD says %v", name, c.got, c.want)
		}
	}
	if p := spec.Properties["framework"].Pattern; p != `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$` {
		t.Errorf("spec.framework's pattern is %q: ValidateRun checks a DNS-1123 label", p)
	}
}

func ptrInt32(n int32) *int32 { return &n }
