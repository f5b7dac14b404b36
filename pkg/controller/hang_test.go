package controller

import (
	"context"
	"encoding/json"
	"strings"
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

// hangFixture is a run of two workers, both running since start, on nodes gpu-0 and gpu-1;
// mark changes the workers before the reconciler sees them.
func hangFixture(t *testing.T, start time.Time, mark func(workers []*corev1.Pod)) (*Reconciler, *clocktesting.FakeClock, client.Client, *v1alpha1.TrainingRun) {
	t.Helper()
	run := &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "uid-llm", Generation: 1},
		Spec: v1alpha1.TrainingRunSpec{
			Workers: 2, Framework: v1alpha1.FrameworkNone,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "trainer"}}}},
		},
		Status: v1alpha1.TrainingRunStatus{Attempt: 1, Phase: v1alpha1.PhaseRunning, ReadyWorkers: 2,
			Attempts: []v1alpha1.AttemptRecord{{Attempt: 1, StartTime: &metav1.Time{Time: start}, RunningTime: &metav1.Time{Time: start}}}},
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{
		Name: "llm", Namespace: "ml", UID: "uid-job-1",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(run, v1alpha1.GroupVersion.WithKind(v1alpha1.KindTrainingRun))},
		Labels:          map[string]string{v1alpha1.LabelRun: "llm", v1alpha1.LabelRunUID: "uid-llm", v1alpha1.LabelAttempt: "1"},
	}}
	var workers []*corev1.Pod
	for i, name := range []string{"llm-0", "llm-1"} {
		workers = append(workers, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(start),
				Labels:          map[string]string{v1alpha1.LabelRun: "llm", v1alpha1.LabelRunUID: "uid-llm", v1alpha1.LabelAttempt: "1"},
				Annotations:     map[string]string{batchv1.JobCompletionIndexAnnotation: string(rune('0' + i))},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
			Spec: corev1.PodSpec{NodeName: "gpu-" + string(rune('0'+i)), Containers: []corev1.Container{{Name: "worker"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "worker",
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(start)}}}}},
		})
	}
	mark(workers)
	objs := []client.Object{run, job, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}}}
	for _, w := range workers {
		objs = append(objs, w)
	}
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithIndex(&corev1.Pod{}, podsByRun, runOfPod).
		WithObjects(objs...).WithStatusSubresource(&v1alpha1.TrainingRun{}, &batchv1.Job{}).Build()
	clock := clocktesting.NewFakeClock(start)
	r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clock, Frameworks: &spyFrameworks{}}
	return r, clock, cl, run
}

// reconcileRun reconciles the run once and returns it as stored.
func reconcileRun(t *testing.T, r *Reconciler, cl client.Client, run *v1alpha1.TrainingRun) (*v1alpha1.TrainingRun, ctrl.Result) {
	t.Helper()
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(run)})
	if err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.TrainingRun{}
	if err := cl.Get(context.Background(), client.ObjectKeyFromObject(run), got); err != nil {
		t.Fatal(err)
	}
	return got, res
}

// agentMark puts on pod what the node agent writes for ev (the condition for an
// infrastructure cause, the evidence beside it).
func agentMark(pod *corev1.Pod, ev v1alpha1.FaultEvidence, at time.Time) {
	raw, _ := json.Marshal(ev)
	pod.Annotations[v1alpha1.AnnotationFaultEvidence] = string(raw)
	if ev.Cause.Class() == v1alpha1.ClassInfrastructure {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: v1alpha1.PodConditionInfrastructureFault,
			Status: corev1.ConditionTrue, Reason: string(ev.Cause), LastTransitionTime: metav1.NewTime(at)})
	}
}

// A worker that hangs on a fatal XID (it never exits): the attempt ends once the settle
// window after the evidence is over, as the evidence says (infrastructure, the node
// excluded), and the verdict says the worker was still running.
func TestAWorkerHungOnAFatalXIDEndsItsAttempt(t *testing.T) {
	start := time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC)
	xid := start.Add(time.Minute)
	r, clock, cl, run := hangFixture(t, start, func(w []*corev1.Pod) {
		agentMark(w[1], v1alpha1.FaultEvidence{Source: v1alpha1.EvidenceSourceNVMLEvent, Node: "gpu-1", Cause: v1alpha1.CauseGPUFault,
			DetectedAt: xid.Format(time.RFC3339Nano), GPU: &v1alpha1.GPUEvidence{UUID: "GPU-1", Index: 0, XID: 79}}, xid)
	})
	clock.SetTime(xid.Add(500 * time.Millisecond))
	got, res := reconcileRun(t, r, cl, run)
	if got.Status.Attempt != 1 || res.RequeueAfter <= 0 {
		t.Fatalf("inside the settle window: attempt %d, requeue %s; want attempt 1 and a look at the window's end", got.Status.Attempt, res.RequeueAfter)
	}
	clock.SetTime(xid.Add(3 * time.Second))
	got, _ = reconcileRun(t, r, cl, run)
	if got.Status.Attempt != 2 || got.Status.Restarts != (v1alpha1.RestartCounts{Infrastructure: 1}) {
		t.Fatalf("past the window: attempt %d restarts %+v; want attempt 2, one infrastructure restart", got.Status.Attempt, got.Status.Restarts)
	}
	f := got.Status.LastFailure
	if f == nil || f.Cause != v1alpha1.CauseGPUFault || f.Pod != "llm-1" || !f.StillRunning || f.ExitCode != nil || f.XID != 79 ||
		!strings.Contains(f.Explanation, "was still running 3.0 s after XID 79") {
		t.Errorf("verdict %+v", f)
	}
	if len(got.Status.ExcludedNodes) != 1 || got.Status.ExcludedNodes[0] != "gpu-1" {
		t.Errorf("excluded nodes %v, want the XID's node gpu-1", got.Status.ExcludedNodes)
	}
}

// A program's XID on a running worker (31) is no reason to end its attempt.
func TestAProgramXIDOnARunningWorkerEndsNothing(t *testing.T) {
	start := time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC)
	xid := start.Add(time.Minute)
	r, clock, cl, run := hangFixture(t, start, func(w []*corev1.Pod) {
		agentMark(w[1], v1alpha1.FaultEvidence{Source: v1alpha1.EvidenceSourceNVMLEvent, Node: "gpu-1", Cause: v1alpha1.CauseAppGPUError,
			DetectedAt: xid.Format(time.RFC3339Nano), GPU: &v1alpha1.GPUEvidence{UUID: "GPU-1", Index: 0, XID: 31}}, xid)
	})
	clock.SetTime(xid.Add(time.Hour))
	if got, _ := reconcileRun(t, r, cl, run); got.Status.Attempt != 1 || got.Status.LastFailure != nil {
		t.Fatalf("an hour after XID 31 on a running worker: attempt %d, last failure %+v; want attempt 1, none", got.Status.Attempt, got.Status.LastFailure)
	}
}

// A gang none of whose workers progresses restarts, on the NoProgress budget.
func TestASilentGangRestartsOnItsOwnBudget(t *testing.T) {
	start := time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC)
	silent := func(p *corev1.Pod, since time.Time) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: v1alpha1.PodConditionNoProgress, Status: corev1.ConditionTrue,
			Reason: v1alpha1.ProgressSignalLog, Message: "no output for 60 s", LastTransitionTime: metav1.NewTime(since)})
	}
	r, clock, cl, run := hangFixture(t, start, func(w []*corev1.Pod) {
		silent(w[0], start.Add(time.Minute))
	})
	clock.SetTime(start.Add(5 * time.Minute))
	if got, _ := reconcileRun(t, r, cl, run); got.Status.Attempt != 1 {
		t.Fatalf("one worker silent, the other not: attempt %d, want 1", got.Status.Attempt)
	}
	p := &corev1.Pod{}
	if err := cl.Get(context.Background(), client.ObjectKey{Namespace: "ml", Name: "llm-1"}, p); err != nil {
		t.Fatal(err)
	}
	silent(p, start.Add(2*time.Minute))
	if err := cl.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	// Judged first now: the settle window (1 s) counts from here, for a failure that may
	// still show.
	if got, _ := reconcileRun(t, r, cl, run); got.Status.Attempt != 1 {
		t.Fatalf("every worker silent, at the first judgement: attempt %d, want 1 until the settle window is over", got.Status.Attempt)
	}
	clock.Step(2 * time.Second)
	got, _ := reconcileRun(t, r, cl, run)
	if got.Status.Attempt != 2 || got.Status.Restarts != (v1alpha1.RestartCounts{NoProgress: 1}) {
		t.Fatalf("every worker silent: attempt %d restarts %+v; want attempt 2, one NoProgress restart", got.Status.Attempt, got.Status.Restarts)
	}
	if f := got.Status.LastFailure; f == nil || f.Cause != v1alpha1.CauseNoProgress || f.Class != v1alpha1.ClassUnknown || f.Pod != "llm-0" || !f.StillRunning ||
		f.Rule != "default-no-progress" || f.FailedAt == nil || !f.FailedAt.Time.Equal(start.Add(2*time.Minute)) {
		t.Errorf("verdict %+v", f)
	}
}
