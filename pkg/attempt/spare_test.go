package attempt

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework/expansion"
)

// TestSparePodHoldsNoIndexUntilHandedOne: a spare is the Job's pod without an index (no
// completion-index label or annotation, no hostname of its own, the spare label with its
// slot), its worker's index-dependent variables and command kept for the barrier, unexpanded
// as the kubelet leaves them; the hand-over makes it the index's pod of the attempt it joins.
func TestSparePodHoldsNoIndexUntilHandedOne(t *testing.T) {
	run := makeRun(func(r *v1alpha1.TrainingRun) {
		c := &r.Spec.Template.Spec.Containers[0]
		c.Command = []string{"/train", "--rank=$(FAULTLINE_INDEX)"}
		c.Args = []string{"$(RANK)", "$$(LITERAL)"}
	})
	job := Job(run, Options{Attempt: 1, BarrierImage: "barrier:1", BarrierInWorker: true, Env: []corev1.EnvVar{
		{Name: "RANK", Value: "$(FAULTLINE_INDEX)"},
		{Name: "MASTER", Value: "$(FAULTLINE_RUN)-0"},
		{Name: "TF_CONFIG", Value: `{"index":$(RANK)}`},
	}})
	job.UID = "job-uid-1"
	p, err := SparePod(job, 1, PodOptions{Attempt: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := Index(p); ok || !Spare(p) || p.Labels[v1alpha1.LabelSpare] != "1" || p.Spec.Hostname != "" {
		t.Errorf("spare %s: index label %q annotation %q spare %q hostname %q; want no index, slot 1, no hostname", p.Name,
			p.Labels[batchv1.JobCompletionIndexAnnotation], p.Annotations[batchv1.JobCompletionIndexAnnotation], p.Labels[v1alpha1.LabelSpare], p.Spec.Hostname)
	}
	if p.Name != SparePodName(job, 1, 2) || p.Labels[v1alpha1.LabelAttempt] != "2" {
		t.Errorf("spare %s attempt %s, want %s made for attempt 2", p.Name, p.Labels[v1alpha1.LabelAttempt], SparePodName(job, 1, 2))
	}
	// What the kubelet makes of the worker container: the spare's templates and command
	// come out as the spec had them before, for the barrier.
	c := p.Spec.Containers[0]
	env, err := expansion.Pod(c.Env, p)
	if err != nil {
		t.Fatal(err)
	}
	var got []IndexTemplate
	if err := json.Unmarshal([]byte(env[v1alpha1.EnvIndexTemplates]), &got); err != nil {
		t.Fatalf("%s=%q: %v", v1alpha1.EnvIndexTemplates, env[v1alpha1.EnvIndexTemplates], err)
	}
	want := []IndexTemplate{{Name: "RANK", Value: "$(FAULTLINE_INDEX)"}, {Name: "TF_CONFIG", Value: `{"index":$(RANK)}`}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the spare's index templates as its barrier reads them (-want +got):\n%s", diff)
	}
	if c.Command[len(c.Command)-1] != "--rank=$$(FAULTLINE_INDEX)" || c.Args[0] != "$$(RANK)" || c.Args[1] != "$$$$(LITERAL)" {
		t.Errorf("the spare's command %q args %q: want the worker's escaped for the barrier", c.Command, c.Args)
	}

	handed := HandOver(p, 3, 4)
	if i, ok := Index(handed); !ok || i != 3 || Spare(handed) || !MadeAsSpare(handed) || HandedIndex(handed) != 3 {
		t.Errorf("handed spare: index %d %v, spare %v, made as spare %v, handed %d; want index 3", i, ok, Spare(handed), MadeAsSpare(handed), HandedIndex(handed))
	}
	if n, _ := Number(handed); n != 4 {
		t.Errorf("handed spare made for attempt %d, want the attempt it joins, 4", n)
	}
	if _, ok := Index(p); ok {
		t.Error("HandOver changed the spare it was given")
	}
	if i := HandedIndex(mustPod(t, job, 2, PodOptions{})); i != NoIndex {
		t.Errorf("a pod made with its index is opened with index %d, want none named", i)
	}
}

// TestSparePodNeedsTheSupervisingBarrier: only a barrier that starts the worker can give it
// an index.
func TestSparePodNeedsTheSupervisingBarrier(t *testing.T) {
	for name, o := range map[string]Options{
		"no barrier":     {Attempt: 1},
		"init container": {Attempt: 1, BarrierImage: "barrier:1"},
	} {
		job := Job(makeRun(), o)
		if _, err := SparePod(job, 0, PodOptions{}); !errors.Is(err, ErrSpareNeedsSupervisingBarrier) {
			t.Errorf("%s: %v, want ErrSpareNeedsSupervisingBarrier", name, err)
		}
	}
}

func TestIndexTemplates(t *testing.T) {
	env := []corev1.EnvVar{
		{Name: v1alpha1.EnvIndex, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + batchv1.JobCompletionIndexAnnotation + "']"}}},
		{Name: "IDX", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['" + batchv1.JobCompletionIndexAnnotation + "']"}}},
		{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: "A", Value: "$(IDX)-$(NODE)"},
		{Name: "B", Value: "$(A)"},
		{Name: "C", Value: "$(NODE)"},
	}
	want := []IndexTemplate{{Name: "IDX", Value: "$(JOB_COMPLETION_INDEX)"}, {Name: "A", Value: "$(IDX)-$(NODE)"}, {Name: "B", Value: "$(A)"}}
	if diff := cmp.Diff(want, IndexTemplates(env)); diff != "" {
		t.Errorf("IndexTemplates (-want +got):\n%s", diff)
	}
}
