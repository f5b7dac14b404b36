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
