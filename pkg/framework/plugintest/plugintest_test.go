package plugintest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/framework/expansion"
)

func run(fw string, workers int32) *v1alpha1.TrainingRun {
	return &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "team-a"},
		Spec: v1alpha1.TrainingRunSpec{Framework: fw, Workers: workers,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "trainer", Image: "x",
				Env: []corev1.EnvVar{{Name: "OWN", Value: "mine"}}}}}}},
	}
}

// The env PodEnvs shows is the env of the Job the controller builds (pkg/attempt), resolved
// the same way: a plugin's golden file says what its pods get.
func TestContainerEnvIsTheJobsEnv(t *testing.T) {
	p := &framework.FakePlugin{InfoValue: framework.Info{Name: "fake"}, RendezvousFunc: func(_ context.Context, r framework.RunSpec) (framework.Rendezvous, error) {
		return framework.Rendezvous{Env: []framework.EnvVar{{Name: "PEER", Value: r.Address(0)}, {Name: "ME", Value: framework.IndexRef}}}, nil
	}}
	r := run("fake", 3)
	res := Resolve(t, p, r)
	job := attempt.Job(r, attempt.Options{Attempt: Attempt, Env: res.Env})
	for i := range 3 {
		fromJob, err := expansion.Worker(job.Spec.Template.Spec.Containers[0].Env, i)
		if err != nil {
			t.Fatal(err)
		}
		delete(fromJob, "OWN") // the template's own variables are no plugin's
		if diff := cmp.Diff(fromJob, PodEnvs(t, p, r)[i]); diff != "" {
			t.Errorf("index %d: the Job's env (-) and PodEnvs (+) differ:\n%s", i, diff)
		}
	}
}

// Framework none: the pods get the common variables only.
func TestFrameworkNoneGolden(t *testing.T) {
	Golden(t, filepath.Join("testdata", "none.golden"), FormatEnvs(PodEnvs(t, nil, run(v1alpha1.FrameworkNone, 3))))
}

// With roles, PodEnvs is still the Job's env: the role variables after the common ones,
// resolved from the labels the roles policy gives each pod.
func TestContainerEnvWithRolesIsTheJobsEnv(t *testing.T) {
	roles := []framework.Role{{Name: "chief", Replicas: 1}, {Name: "ps", Replicas: 2}, {Name: "worker", Replicas: 2}}
	p := &framework.FakePlugin{InfoValue: framework.Info{Name: "fake"}, RendezvousFunc: func(context.Context, framework.RunSpec) (framework.Rendezvous, error) {
		return framework.Rendezvous{Roles: roles, Env: []framework.EnvVar{{Name: "TASK", Value: framework.RoleRef + "/" + framework.RoleIndexRef}}}, nil
	}}
	r := run("fake", 5)
	res := Resolve(t, p, r)
	job := attempt.Job(r, attempt.Options{Attempt: Attempt, Env: res.Env, RoleRanges: framework.RoleRanges(res.Roles)})
	layout := job.Spec.Template.Annotations[v1alpha1.AnnotationRoles]
	envs := PodEnvs(t, p, r)
	want := []string{"chief/0", "ps/0", "ps/1", "worker/0", "worker/1"}
	for i := range 5 {
		fields, err := PodFields(layout, i)
		if err != nil {
			t.Fatal(err)
		}
		fromJob, err := expansion.Container(job.Spec.Template.Spec.Containers[0].Env, fields)
		if err != nil {
			t.Fatal(err)
		}
		delete(fromJob, "OWN")
		if diff := cmp.Diff(fromJob, envs[i]); diff != "" {
			t.Errorf("index %d: the Job's env (-) and PodEnvs (+) differ:\n%s", i, diff)
		}
		if envs[i]["TASK"] != want[i] {
			t.Errorf("index %d: TASK=%q, want %q", i, envs[i]["TASK"], want[i])
		}
	}
}

// RoleLabels reads the layout the controller writes as framework.RoleOf lays the indexes
// out, and refuses an index outside it (as the policy refuses the pod).
func TestRoleLabels(t *testing.T) {
	for _, roles := range [][]framework.Role{
		{{Name: "worker", Replicas: 1}},
		{{Name: "chief", Replicas: 1}, {Name: "ps", Replicas: 3}, {Name: "worker", Replicas: 12}, {Name: "evaluator", Replicas: 1}},
	} {
		layout := framework.RoleRanges(roles)
		n := 0
		for _, r := range roles {
			n += int(r.Replicas)
		}
		for i := range n {
			wantRole, wantIndex, _ := framework.RoleOf(roles, i)
			role, index, err := RoleLabels(layout, i)
			if err != nil || role != wantRole || index != wantIndex {
				t.Errorf("%s index %d: %s/%d, %v; want %s/%d", layout, i, role, index, err, wantRole, wantIndex)
			}
		}
		if _, _, err := RoleLabels(layout, n); err == nil {
			t.Errorf("%s index %d: no error for an index past the layout", layout, n)
		}
	}
}
