package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

// TestPodCreationsMissing: an index is asked for when it has no pod and none was created here
// within creationTTL; what the cache shows is forgotten.
func TestPodCreationsMissing(t *testing.T) {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{UID: "job-1"}}
	now := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	var c podCreations
	if got := c.missing(job, nil, 4, now); !cmp.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("nothing created: missing %v, want all four", got)
	}
	c.created(job.UID, 1, now)
	c.created(job.UID, 2, now)
	workers := []*corev1.Pod{indexPod("0", corev1.PodRunning), indexPod("2", corev1.PodFailed)}
	if got := c.missing(job, workers, 4, now.Add(time.Second)); !cmp.Equal(got, []int{3}) {
		t.Errorf("0 and 2 shown, 1 created a second ago: missing %v, want [3]", got)
	}
	if _, ok := c.jobs[job.UID][2]; ok {
		t.Error("index 2, shown by the cache, is still remembered")
	}
	if got := c.missing(job, workers, 4, now.Add(creationTTL)); !cmp.Equal(got, []int{1, 3}) {
		t.Errorf("1 created %s ago and never shown: missing %v, want [1 3]", creationTTL, got)
	}
	c.forget(job.UID)
	if len(c.jobs) != 0 {
		t.Errorf("forget left %v", c.jobs)
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
