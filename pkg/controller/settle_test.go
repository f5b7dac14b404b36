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
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// judging is a run of workers on the fake client, reconciled at the fake clock's time: the
// judgement of an attempt with the test's pods.
type judging struct {
	t     *testing.T
	cl    client.Client
	clock *clocktesting.FakeClock
	r     *Reconciler
	run   *v1alpha1.TrainingRun
}

// failedAt is the time of the failures of these tests.
var failedAt = time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC)

func newJudging(t *testing.T, workers int32, fw Frameworks, pods ...*corev1.Pod) *judging {
	t.Helper()
	run := &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "uid-llm", Generation: 1},
		Spec: v1alpha1.TrainingRunSpec{
			Workers: workers, Framework: v1alpha1.FrameworkNone,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "trainer"}}}},
		},
		Status: v1alpha1.TrainingRunStatus{Attempt: 1, Phase: v1alpha1.PhaseRunning, ReadyWorkers: workers,
			Attempts: []v1alpha1.AttemptRecord{{Attempt: 1, StartTime: &metav1.Time{Time: failedAt.Add(-time.Hour)}}}},
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{
		Name: "llm", Namespace: "ml", UID: "uid-job-1",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(run, v1alpha1.GroupVersion.WithKind(v1alpha1.KindTrainingRun))},
		Labels:          map[string]string{v1alpha1.LabelRun: "llm", v1alpha1.LabelRunUID: "uid-llm", v1alpha1.LabelAttempt: "1"},
	}}
	objs := []client.Object{run, job, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}}}
	for _, p := range pods {
		p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}
		objs = append(objs, p)
	}
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithIndex(&corev1.Pod{}, podsByRun, runOfPod).
		WithObjects(objs...).WithStatusSubresource(&v1alpha1.TrainingRun{}, &batchv1.Job{}).Build()
	clock := clocktesting.NewFakeClock(failedAt)
	return &judging{t: t, cl: cl, clock: clock, run: run,
		r: &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clock, Frameworks: fw}}
}

// at reconciles the run at failedAt+d and returns its status.
func (j *judging) at(d time.Duration) v1alpha1.TrainingRunStatus {
	j.t.Helper()
	j.clock.SetTime(failedAt.Add(d))
	ctx := context.Background()
	if _, err := j.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(j.run)}); err != nil {
		j.t.Fatal(err)
	}
	got := &v1alpha1.TrainingRun{}
	if err := j.cl.Get(ctx, client.ObjectKeyFromObject(j.run), got); err != nil {
		j.t.Fatal(err)
	}
	return got.Status
}

// judgedWorker is a worker pod of the run, running unless exited says how it ended.
func judgedWorker(name, index string, exited *corev1.ContainerStateTerminated) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name),
			Labels:      map[string]string{v1alpha1.LabelRun: "llm", v1alpha1.LabelRunUID: "uid-llm", v1alpha1.LabelAttempt: "1"},
			Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: index}},
		Spec:   corev1.PodSpec{NodeName: "gpu-1", Containers: []corev1.Container{{Name: "worker"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if exited != nil {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{Terminated: exited}}}
	}
	return p
}

// A failure the informer's check never delivered (the failure clock has no sighting of it)
// is still decided once its settle window is over: the window counts from the first
// judgement, not from each one, which would never end.
func TestSettleWindowEndsForAFailureTheClockMissed(t *testing.T) {
	// A SIGTERM with no evidence: Unknown, which waits out the settle window (1 s).
	sigterm := judgedWorker("llm-1", "1", &corev1.ContainerStateTerminated{ExitCode: 143, FinishedAt: metav1.NewTime(failedAt)})
	j := newJudging(t, 2, &spyFrameworks{}, judgedWorker("llm-0", "0", nil), sigterm)
	if n := j.at(500 * time.Millisecond).Attempt; n != 1 {
		t.Fatalf("0.5 s after the failure, inside the settle window: attempt %d, want 1", n)
	}
	if n := j.at(3 * time.Second).Attempt; n != 2 {
		t.Fatalf("3 s after the failure, the window long over: attempt %d, want 2 (a restart on Unknown)", n)
	}
}

// namedHints name the lost task as XLA's coordination service does.
type namedHints struct{ spyFrameworks }

func (namedHints) Hints(context.Context, *v1alpha1.TrainingRun) ([]exitclass.Hint, error) {
	return exitclass.CompileHints([]exitclass.HintPattern{{Pattern: `Task (?P<peer>\d+) heartbeat timeout`, Cause: v1alpha1.CausePeerFailure, Source: "jax"}})
}

// TestJudgeWaitsForTheNamedWorker: the survivors' output names index 2 as the worker that
// failed, and its own exit has not reached the API: past the settle window the judgement
// still waits for it (a root among the survivors would be wrong), up to namedWait, and then
// judges without it.
func TestJudgeWaitsForTheNamedWorker(t *testing.T) {
	aborted := func(name, index string) *corev1.Pod {
		return judgedWorker(name, index, &corev1.ContainerStateTerminated{ExitCode: 134, FinishedAt: metav1.NewTime(failedAt),
			Message: "E coordination_service.cc: Task 2 heartbeat timeout"})
	}
	j := newJudging(t, 3, &namedHints{}, aborted("llm-0", "0"), aborted("llm-1", "1"), judgedWorker("llm-2", "2", nil))
	if n := j.at(3 * time.Second).Attempt; n != 1 {
		t.Fatalf("3 s after the failures, the named worker's exit not in: attempt %d, want 1 (waiting for it)", n)
	}
	st := j.at(3*time.Second + namedWait + time.Second) // the wait counts from the first judgement
	if st.Attempt != 2 || st.LastFailure == nil || st.LastFailure.Class != v1alpha1.ClassUnknown {
		t.Fatalf("past namedWait: attempt %d, last failure %+v; want attempt 2 judged without it (Unknown)", st.Attempt, st.LastFailure)
	}
}
