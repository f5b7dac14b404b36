// Package plugintest shows a plugin's environment as a run's pods will see it, for the
// tests of framework plugins: the plugin is served in process over gRPC to a real Host (as
// the controller uses it), its answer put after the controller's common FAULTLINE_*
// variables (package rendezvous), the completion index (and, for a layout in roles, the role
// labels the faultline-roles admission policy sets) resolved and $(VAR) references expanded
// as the kubelet does; and golden files hold the result per index.
package plugintest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/framework/expansion"
	"github.com/faultline-dev/faultline/pkg/rendezvous"
)

var update = flag.Bool("update", false, "rewrite the golden files of plugintest.Golden with what the test got")

// Attempt is the attempt number PodEnvs gives FAULTLINE_ATTEMPT.
const Attempt = 1

// ContainerEnv is a worker container's env list as the controller writes it for attempt:
// the common FAULTLINE_* variables, FAULTLINE_INDEX first, then the framework's (the
// template's own variables would follow).
func ContainerEnv(run *v1alpha1.TrainingRun, attempt int32, framework []corev1.EnvVar) []corev1.EnvVar {
	return append(rendezvous.Env(run, attempt), framework...)
}

// Resolve is what the controller gets for run from plugin p, through a Host; a nil p is
// framework none.
func Resolve(t testing.TB, p framework.Plugin, run *v1alpha1.TrainingRun) framework.Resolved {
	t.Helper()
	plugins := map[string]framework.Plugin{}
	if p != nil {
		plugins[run.Spec.Framework] = p
	}
	h := framework.NewTestHost(t, framework.HostOptions{}, plugins)
	res, err := h.Resolve(context.Background(), run)
	if err != nil {
		t.Fatalf("Resolve(%s): %v", run.Spec.Framework, err)
	}
	return res
}

// PodEnvs is the environment of each worker container of run (index 0 to workers-1) as
// the kubelet makes it, with the env plugin p answers; a nil p is framework none. For an
// answer with Roles, each pod carries the labels that the faultline-roles admission policy
// (deploy/admission/roles.yaml) gives it (RoleLabels), and the role variables come before
// the plugin's, as the controller writes them.
func PodEnvs(t testing.TB, p framework.Plugin, run *v1alpha1.TrainingRun) []map[string]string {
	t.Helper()
	res := Resolve(t, p, run)
	env := rendezvous.Env(run, Attempt)
	layout := framework.RoleRanges(res.Roles)
	if layout != "" {
		env = append(env, rendezvous.RoleEnv()...)
	}
	env = append(env, res.Env...)
	envs := make([]map[string]string, run.Spec.Workers)
	for i := range envs {
		fields, err := PodFields(layout, i)
		if err != nil {
			t.Fatalf("index %d: %v", i, err)
		}
		vars, err := expansion.Container(env, fields)
		if err != nil {
			t.Fatalf("index %d: %v", i, err)
		}
		envs[i] = vars
	}
	return envs
}

// PodFields are the downward-API fields the controller's env reads, as the kubelet resolves
// them in the pod of completion index index: the index, and for a run with roles (layout,
// the value of v1alpha1.AnnotationRoles; "" for none) the pod's role labels.
func PodFields(layout string, index int) (map[string]string, error) {
	fields := map[string]string{rendezvous.IndexFieldPath: strconv.Itoa(index)}
	if layout == "" {
		return fields, nil
	}
	role, roleIndex, err := RoleLabels(layout, index)
	if err != nil {
		return nil, err
	}
	fields[rendezvous.RoleFieldPath] = role
	fields[rendezvous.RoleIndexFieldPath] = strconv.Itoa(roleIndex)
	return fields, nil
}

// RoleLabels is the role and role index that the faultline-roles admission policy
// (deploy/admission/roles.yaml) labels the pod of completion index index with, computed as
// its CEL does from the layout annotation ("chief:0-0,ps:1-2,worker:3-6"): the first range
// "name:first-last" that holds the index names the role, and the index less first is the
// role index. An index in no range is an error, as the policy refuses that pod.
func RoleLabels(layout string, index int) (role string, roleIndex int, err error) {
	for _, r := range strings.Split(layout, ",") {
		name, span, _ := strings.Cut(r, ":")
		from, to, _ := strings.Cut(span, "-")
		first, err1 := strconv.Atoi(from)
		last, err2 := strconv.Atoi(to)
		if err1 != nil || err2 != nil {
			return "", 0, fmt.Errorf("role layout %q: range %q is not name:first-last", layout, r)
		}
		if first <= index && index <= last {
			return name, index - first, nil
		}
	}
	return "", 0, fmt.Errorf("role layout %q has no range for index %d: the faultline-roles policy refuses the pod", layout, index)
}

// FormatEnvs renders envs as text, one block per index with its variables sorted.
func FormatEnvs(envs []map[string]string) string {
	var b strings.Builder
	for i, env := range envs {
		fmt.Fprintf(&b, "# index %d\n", i)
		names := make([]string, 0, len(env))
		for name := range env {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			fmt.Fprintf(&b, "%s=%s\n", name, env[name])
		}
	}
	return b.String()
}

// Golden compares got with the file at path (under the test's testdata, usually); go test
// -update writes got there instead, for a reviewer to read in the diff.
func Golden(t testing.TB, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from what the test got (go test -update rewrites it):\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}
