package barrier

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/envexpand"
)

func TestIndexNamesMatchTheAPI(t *testing.T) {
	for _, c := range []struct{ here, api string }{
		{EnvIndex, v1alpha1.EnvIndex},
		{EnvCompletionIndex, v1alpha1.EnvCompletionIndex},
		{EnvIndexTemplates, v1alpha1.EnvIndexTemplates},
	} {
		if c.here != c.api {
			t.Errorf("barrier has %q where api/v1alpha1 has %q", c.here, c.api)
		}
	}
}

// TestASpareTakesOneIndexOnly: a spare's barrier refuses an open that names no index, takes
// the one it is handed, and a pod made with its index refuses any other.
func TestASpareTakesOneIndexOnly(t *testing.T) {
	spare := Identity{Index: NoIndex, Spare: true}
	if _, err := spare.Take(NoIndex); !errors.Is(err, ErrNoIndex) {
		t.Errorf("a spare opened without an index: %v, want ErrNoIndex", err)
	}
	if i, err := spare.Take(3); err != nil || i != 3 {
		t.Errorf("a spare handed index 3: %d, %v", i, err)
	}
	spare.Index = 3 // held for good
	if _, err := spare.Take(4); err == nil {
		t.Error("a spare that holds index 3 took index 4")
	}
	if i, err := spare.Take(NoIndex); err != nil || i != 3 {
		t.Errorf("a spare that holds index 3, opened without one: %d, %v", i, err)
	}
	own := Identity{Index: 2}
	if i, err := own.Take(NoIndex); err != nil || i != 2 {
		t.Errorf("a pod of index 2 opened as before: %d, %v", i, err)
	}
	if _, err := own.Take(5); err == nil {
		t.Error("a pod of index 2 took index 5")
	}
}

// TestASparesWorkerGetsItsIndexsEnvironment: the variables that depend on the index, which
// the kubelet expanded without one, and the command, which it left unexpanded, are the
// index's once the barrier has it; a pod made with its index keeps what the kubelet made.
func TestASparesWorkerGetsItsIndexsEnvironment(t *testing.T) {
	environ := []string{"PATH=/bin", "FAULTLINE_INDEX=", "JOB_COMPLETION_INDEX=", "FAULTLINE_RUN=r", "RANK=", "TF_CONFIG={\"task\":{\"index\":}}"}
	spare := Identity{Index: NoIndex, Spare: true, Templates: []envexpand.Var{
		{Name: "RANK", Value: "$(FAULTLINE_INDEX)"},
		{Name: "TF_CONFIG", Value: `{"task":{"index":$(RANK)}}`},
		{Name: "ADDR", Value: "$(FAULTLINE_RUN)-$(JOB_COMPLETION_INDEX).svc"},
	}}
	env := spare.Env(environ, 3)
	want := []string{"PATH=/bin", "FAULTLINE_INDEX=3", "JOB_COMPLETION_INDEX=3", "FAULTLINE_RUN=r", "RANK=3", `TF_CONFIG={"task":{"index":3}}`, "ADDR=r-3.svc"}
	if diff := cmp.Diff(want, env); diff != "" {
		t.Errorf("the spare's worker's environment (-want +got):\n%s", diff)
	}
	argv := spare.Argv([]string{"/train", "--rank=$(RANK)", "$$(LITERAL)"}, env)
	if diff := cmp.Diff([]string{"/train", "--rank=3", "$(LITERAL)"}, argv); diff != "" {
		t.Errorf("the spare's worker's command (-want +got):\n%s", diff)
	}
	own := Identity{Index: 1}
	if got := own.Env(environ, 1); !slices.Equal(got, environ) {
		t.Errorf("a pod made with its index: environment %v, want the kubelet's %v", got, environ)
	}
	if got := own.Argv([]string{"--rank=$(RANK)"}, environ); !slices.Equal(got, []string{"--rank=$(RANK)"}) {
		t.Errorf("a pod made with its index: command %v, want as the kubelet expanded it", got)
	}
}

func TestReadIdentity(t *testing.T) {
	env := map[string]string{EnvCompletionIndex: "", EnvIndexTemplates: `[{"name":"RANK","value":"$(FAULTLINE_INDEX)"}]`}
	id, err := ReadIdentity(func(k string) string { return env[k] })
	if err != nil || id.Index != NoIndex || !id.Spare || len(id.Templates) != 1 || id.Templates[0].Value != "$(FAULTLINE_INDEX)" {
		t.Errorf("a spare's identity: %+v, %v", id, err)
	}
	env = map[string]string{EnvCompletionIndex: "4"}
	if id, err := ReadIdentity(func(k string) string { return env[k] }); err != nil || id.Index != 4 || id.Spare {
		t.Errorf("index 4's identity: %+v, %v", id, err)
	}
	env = map[string]string{EnvCompletionIndex: "x"}
	if _, err := ReadIdentity(func(k string) string { return env[k] }); err == nil {
		t.Error("a garbled index was taken")
	}
}
