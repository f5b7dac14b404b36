package controller

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/faultline-dev/faultline/api/scheme"
	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// A failure the informer's check never delivered (the failure clock has no sighting of it)
// is still decided once its settle window is over: the window counts from the first
// judgement, not from each one, which would never end.
func TestSettleWindowEndsForAFailureTheClockMissed(t *testing.T) {
	ctx := context.Background()
	failed := time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC)
	run := &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "uid-llm", Generation: 1},
		Spec: v1alpha1.TrainingRunSpec{
			Workers: 2, Framework: v1alpha1.FrameworkNone,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "trainer"}}}},
		},
		Status: v1alpha1.TrainingRunStatus{Attempt: 1, Phase: v1alpha1.PhaseRunning, ReadyWorkers: 2,
			Attempts: []v1alpha1.AttemptRecord{{Attempt: 1, StartTime: &metav1.Time{Time: failed.Add(-time.Hour)}}}},
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{
		Name: "llm", Namespace: "ml", UID: "uid-job-1",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(run, v1alpha1.GroupVersion.WithKind(v1alpha1.KindTrainingRun))},
		Labels:          map[string]string{v1alpha1.LabelRun: "llm", v1alpha1.LabelRunUID: "uid-llm", v1alpha1.LabelAttempt: "1"},
	}}
	worker := func(name, index string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name),
				Labels:          map[string]string{v1alpha1.LabelRun: "llm", v1alpha1.LabelRunUID: "uid-llm", v1alpha1.LabelAttempt: "1"},
				Annotations:     map[string]string{batchv1.JobCompletionIndexAnnotation: index},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
			Spec:   corev1.PodSpec{NodeName: "gpu-1", Containers: []corev1.Container{{Name: "worker"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
	}
	// A SIGTERM with no evidence: Unknown, which waits out the settle window (1 s).
	sigterm := worker("llm-1", "1")
	sigterm.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 143, FinishedAt: metav1.NewTime(failed)}}}}
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithIndex(&corev1.Pod{}, podsByRun, runOfPod).
		WithObjects(run, job, worker("llm-0", "0"), sigterm, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}}).
		WithStatusSubresource(&v1alpha1.TrainingRun{}, &batchv1.Job{}).Build()
	clock := clocktesting.NewFakeClock(failed.Add(500 * time.Millisecond))
	r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clock, Frameworks: &spyFrameworks{}}
	attempt := func() int32 {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(run)}); err != nil {
			t.Fatal(err)
		}
		got := &v1alpha1.TrainingRun{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(run), got); err != nil {
			t.Fatal(err)
		}
		return got.Status.Attempt
	}
	if n := attempt(); n != 1 {
		t.Fatalf("0.5 s after the failure, inside the settle window: attempt %d, want 1", n)
	}
	clock.SetTime(failed.Add(3 * time.Second)) // past the window of the first judgement
	if n := attempt(); n != 2 {
		t.Fatalf("3 s after the failure, the window long over: attempt %d, want 2 (a restart on Unknown)", n)
	}
}
