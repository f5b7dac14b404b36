package creations

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func indexPod(i string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: i}},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

// TestCreationsMissing: an index is asked for when it has no pod and none was created here
// within TTL; what the cache shows is forgotten.
func TestCreationsMissing(t *testing.T) {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{UID: "job-1"}}
	now := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	var c Creations
	if got := c.Missing(job, nil, 4, now); !cmp.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("nothing created: missing %v, want all four", got)
	}
	c.Created(job.UID, 1, now)
	c.Created(job.UID, 2, now)
	workers := []*corev1.Pod{indexPod("0", corev1.PodRunning), indexPod("2", corev1.PodFailed)}
	if got := c.Missing(job, workers, 4, now.Add(time.Second)); !cmp.Equal(got, []int{3}) {
		t.Errorf("0 and 2 shown, 1 created a second ago: missing %v, want [3]", got)
	}
	if _, ok := c.jobs[job.UID][2]; ok {
		t.Error("index 2, shown by the cache, is still remembered")
	}
	if got := c.Missing(job, workers, 4, now.Add(TTL)); !cmp.Equal(got, []int{1, 3}) {
		t.Errorf("1 created %s ago and never shown: missing %v, want [1 3]", TTL, got)
	}
	c.Forget(job.UID)
	if len(c.jobs) != 0 {
		t.Errorf("forget left %v", c.jobs)
	}
}
