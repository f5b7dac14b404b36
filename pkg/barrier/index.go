package barrier

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/faultline-dev/faultline/pkg/envexpand"
)

// The variables of a worker's index, v1alpha1's (barrier_test.go holds them equal).
const (
	// EnvIndex is v1alpha1.EnvIndex, EnvCompletionIndex v1alpha1.EnvCompletionIndex: a
	// worker's index, which a warm spare's environment lacks until its barrier sets it.
	EnvIndex           = "FAULTLINE_INDEX"
	EnvCompletionIndex = "JOB_COMPLETION_INDEX"
	// EnvIndexTemplates is v1alpha1.EnvIndexTemplates: a spare's variables that depend on
	// the index, unexpanded.
	EnvIndexTemplates = "FAULTLINE_INDEX_TEMPLATES"
)

// NoIndex is the index of a barrier whose pod holds none (a warm spare's), and of an open
// that names none.
const NoIndex = -1

// ErrNoIndex is an open's refusal when neither the barrier's pod nor the open names an
// index: a spare runs none of the workers' program before it holds one.
var ErrNoIndex = errors.New("no index: a spare runs no worker before the open hands it one")

// Identity is who a barrier's worker is: its index (NoIndex until a spare is handed one)
// and, for a spare, the variables that depend on it (Templates) and whether its command
// was left unexpanded for the barrier (Spare).
type Identity struct {
	Index int
	// Spare: the pod was made without an index; its command and args, and Templates, wait
	// for the index the open hands it, unexpanded ($$ escaped in the pod's spec, which the
	// kubelet turned into $).
	Spare     bool
	Templates []envexpand.Var
}

// ReadIdentity reads a barrier's identity from its environment: its index
// (JOB_COMPLETION_INDEX, empty in a spare) and a spare's templates (EnvIndexTemplates).
func ReadIdentity(getenv func(string) string) (Identity, error) {
	id := Identity{Index: NoIndex}
	if v := getenv(EnvCompletionIndex); v != "" {
		i, err := strconv.Atoi(v)
		if err != nil || i < 0 {
			return id, fmt.Errorf("%s=%q: want the pod's completion index (a number, 0 or more)", EnvCompletionIndex, v)
		}
		id.Index = i
	}
	raw := getenv(EnvIndexTemplates)
	if raw == "" {
		return id, nil
	}
	id.Spare = true
	var vars []struct{ Name, Value string }
	if err := json.Unmarshal([]byte(raw), &vars); err != nil {
		return id, fmt.Errorf("%s: %w", EnvIndexTemplates, err)
	}
	for _, v := range vars {
		id.Templates = append(id.Templates, envexpand.Var{Name: v.Name, Value: v.Value})
	}
	return id, nil
}

// Take judges the index an open names (NoIndex: none) against the barrier's own: the index
// the worker runs as, or why not. An index, once held, is the pod's for its life: an open
// naming another is refused, and so is one that names none to a spare that holds none.
func (id Identity) Take(named int) (int, error) {
	switch {
	case named == NoIndex && id.Index == NoIndex && id.Spare:
		return NoIndex, ErrNoIndex
	case named == NoIndex:
		return id.Index, nil
	case id.Index != NoIndex && named != id.Index:
		return NoIndex, fmt.Errorf("the open names index %d, and this pod holds index %d", named, id.Index)
	}
	return named, nil
}

// Env is the environment of the worker of index i, from environ (the barrier's): a spare's
// with the index's variables set to i, then its templates expanded in their order, each with
// what is defined before it, as the kubelet expands a container's env; anyone else's as it
// is (the kubelet made it with the pod's index).
func (id Identity) Env(environ []string, i int) []string {
	if !id.Spare {
		return environ
	}
	vals := make(map[string]string, len(environ))
	var order []string
	set := func(name, value string) {
		if _, ok := vals[name]; !ok {
			order = append(order, name)
		}
		vals[name] = value
	}
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		set(name, value)
	}
	index := strconv.Itoa(i)
	set(EnvCompletionIndex, index)
	set(EnvIndex, index)
	lookup := func(name string) (string, bool) { v, ok := vals[name]; return v, ok }
	for _, t := range id.Templates {
		set(t.Name, envexpand.Expand(t.Value, lookup))
	}
	out := make([]string, len(order))
	for k, name := range order {
		out[k] = name + "=" + vals[name]
	}
	return out
}

// Argv is the worker's command as it runs with env (Env): a spare's, which the kubelet left
// unexpanded, expanded as the kubelet would have with the index; anyone else's as it is.
func (id Identity) Argv(argv, env []string) []string {
	if !id.Spare {
		return argv
	}
	vals := make(map[string]string, len(env))
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		vals[name] = value
	}
	lookup := func(name string) (string, bool) { v, ok := vals[name]; return v, ok }
	out := make([]string, len(argv))
	for k, a := range argv {
		out[k] = envexpand.Expand(a, lookup)
	}
	return out
}
