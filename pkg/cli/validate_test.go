package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
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
	if code != ExitUsage || !strings.Contains(msg, `metadata.name: "X_bad"`) || !strings.Contains(msg, "spec.workers: Invalid value: 0: spec.workers in body should be greater than or equal to 1") {
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
	if msg, code := Message(err, ""); code != ExitUsage || !strings.Contains(msg, `spec.wokers: Unsupported value: unknown field`) {
		t.Errorf("exit %d, %q: want the misspelled field refused", code, msg)
	}
	docs, _ = Documents(strings.NewReader("apiVersion: faultline.dev/v1alpha1\nkind: TrainingRun\nmetadata: {name: a}\nspec:\n  workers: 2\n  template: {spec: {containers: [{name: w, image: i}]}}\n"), "a.yaml")
	out.Reset()
	if _, err := Submit(context.Background(), &Runs{}, docs, false, DryRunClient, &out, &out); err != nil || out.String() != "trainingrun.faultline.dev/a created (dry run)\n" {
		t.Errorf("%v, %q", err, out.String())
	}
}

// TestDryRunClientReportsEveryErrorByField (issue 59): `submit --dry-run=client` refuses,
// offline, what the API server would: every mistake of a run at once, each by its field path
// with the CRD's own words (its schema's enums and patterns, its CEL rules), none by a Go
// type's name: an enum value it does not have, a cause misspelled, a rule name that is no
// DNS label, a key faultline reserves, a misspelled field, a wrong type, and a key given
// twice (which a YAML decoder would otherwise take the last of, silently).
func TestDryRunClientReportsEveryErrorByField(t *testing.T) {
	const doc = `apiVersion: faultline.dev/v1alpha1
kind: TrainingRun
metadata: {name: llm}
spec:
  workers: 4
  workers: 8
  settleSecond: 3
  failurePolicy:
    restartMode: Sometimes
    settleSeconds: "one"
    rules:
    - name: Bad_Name
      action: Restart
      onCauses: [GPUFalt]
  template:
    metadata:
      annotations: {faultline.dev/fault-evidence: forged}
    spec:
      containers: [{name: w, image: i}]
`
	docs, err := Documents(strings.NewReader(doc), "llm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	_, err = Submit(context.Background(), &Runs{}, docs, false, DryRunClient, &out, &errOut)
	msg, code := Message(err, "")
	if code != ExitUsage || out.Len() > 0 {
		t.Fatalf("exit %d, stdout %q: want a usage error and nothing created", code, out.String())
	}
	for _, want := range []string{
		`llm.yaml: document 1: line 6: key "workers" already set in map`,
		`spec.failurePolicy.restartMode: Unsupported value: "Sometimes": supported values: "Auto", "InPlace", "Recreate"`,
		`spec.failurePolicy.settleSeconds: Invalid value: "string": spec.failurePolicy.settleSeconds in body must be of type integer`,
		`spec.failurePolicy.rules[0].action: Unsupported value: "Restart"`,
		`spec.failurePolicy.rules[0].onCauses[0]: Unsupported value: "GPUFalt"`,
		`spec.failurePolicy.rules[0].name: Invalid value: "Bad_Name"`,
		`spec.template.metadata.annotations: Invalid value: spec.template.metadata.annotations must not use keys under faultline.dev/`,
		`spec.settleSecond: Unsupported value: unknown field`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, msg)
		}
	}
	for _, goName := range []string{"v1alpha1.", "TrainingRunSpec", "FailurePolicy{", "json: cannot unmarshal"} {
		if strings.Contains(msg, goName) {
			t.Errorf("the refusal speaks Go (%q):\n%s", goName, msg)
		}
	}
}

func ptrInt32(n int32) *int32 { return &n }
