package controller

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

func indexPod(i string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: i}},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

// TestManagedSucceeded: a managed Job succeeds when every index has a pod that succeeded;
// a Job the Job controller manages says so itself.
func TestManagedSucceeded(t *testing.T) {
	run := &v1alpha1.TrainingRun{Spec: v1alpha1.TrainingRunSpec{Workers: 3}}
	managed := &batchv1.Job{Spec: batchv1.JobSpec{ManagedBy: ptr.To(v1alpha1.JobManagedBy)}}
	ok := corev1.PodSucceeded
	cases := map[string]struct {
		job     *batchv1.Job
		workers []*corev1.Pod
		want    bool
	}{
		"every index succeeded":        {managed, []*corev1.Pod{indexPod("0", ok), indexPod("1", ok), indexPod("2", ok)}, true},
		"one index running":            {managed, []*corev1.Pod{indexPod("0", ok), indexPod("1", ok), indexPod("2", corev1.PodRunning)}, false},
		"one index twice, one missing": {managed, []*corev1.Pod{indexPod("0", ok), indexPod("0", ok), indexPod("1", ok)}, false},
		"the Job controller's Job":     {&batchv1.Job{}, []*corev1.Pod{indexPod("0", ok), indexPod("1", ok), indexPod("2", ok)}, false},
	}
	for name, tc := range cases {
		if got := managedSucceeded(run, tc.job, tc.workers); got != tc.want {
			t.Errorf("%s: managedSucceeded = %v, want %v", name, got, tc.want)
		}
	}
}
