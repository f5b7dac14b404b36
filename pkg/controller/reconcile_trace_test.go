package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/faultline-dev/faultline/api/scheme"
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/controller/episode"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/tracing"
)

// spyFrameworks records the span context of the contexts it is called with.
type spyFrameworks struct{ resolve, hints []trace.SpanContext }

func (s *spyFrameworks) Resolve(ctx context.Context, _ *v1alpha1.TrainingRun) (framework.Resolved, error) {
	s.resolve = append(s.resolve, trace.SpanContextFromContext(ctx))
	return framework.Resolved{}, nil
}

func (s *spyFrameworks) Hints(ctx context.Context, _ *v1alpha1.TrainingRun) ([]exitclass.Hint, error) {
	s.hints = append(s.hints, trace.SpanContextFromContext(ctx))
	return nil, nil
}

// TestReconcileTracesARestart drives the reconciler through a restart (against the fake
// client: the Job controller's and the kubelet's parts are played by the test) and checks
// the wiring: the plugin calls carry the agent's episode, the episode is persisted, and each
// step emits the spans of the phases it ended, ending in the reserved root.
// kubeletStopping stands, on a pod being deleted, for the kubelet that has not stopped its
// containers yet: the fake client removes a pod at once when nothing holds it.
const kubeletStopping = "test.faultline.dev/kubelet-stopping"

func TestReconcileTracesARestart(t *testing.T) {
	ctx := context.Background()
	exp := tracetest.NewInMemoryExporter()
	provider := tracing.New(nil, sdktrace.WithSyncer(exp))
	agentRoot := provider.NewEpisode() // as the agent would have reserved it
	clock := clocktesting.NewFakeClock(t0)

	run := &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "uid-llm", Generation: 1},
		Spec: v1alpha1.TrainingRunSpec{
			Workers: 2, Framework: v1alpha1.FrameworkNone,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "trainer"}}}},
		},
		Status: v1alpha1.TrainingRunStatus{
			Attempt: 1, Phase: v1alpha1.PhaseRunning, ReadyWorkers: 2,
			Attempts: []v1alpha1.AttemptRecord{{Attempt: 1, StartTime: ptr.To(metav1.NewTime(at(-60000))), RunningTime: ptr.To(metav1.NewTime(at(-59000)))}},
			Trace:    &v1alpha1.TraceStatus{CreatingAt: mt(-60010), CreatedAt: mt(-60000)},
		},
	}
	owner := []metav1.OwnerReference{*metav1.NewControllerRef(run, v1alpha1.GroupVersion.WithKind(v1alpha1.KindTrainingRun))}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: "llm", Namespace: "ml", UID: "uid-job-1", OwnerReferences: owner,
			Labels:     map[string]string{v1alpha1.LabelRun: "llm", v1alpha1.LabelRunUID: "uid-llm", v1alpha1.LabelAttempt: "1"},
			Finalizers: []string{v1alpha1.FinalizerAttemptJob},
		},
		Status: batchv1.JobStatus{Active: 1},
	}
	evidence, _ := json.Marshal(v1alpha1.FaultEvidence{Source: "logind", Node: "gpu-1", Cause: v1alpha1.CauseNodeShutdown, DetectedAt: at(0).Format(time.RFC3339Nano)})
	worker := func(i int, a int32, failed bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("llm-%d-a%d", i, a), Namespace: "ml", UID: types.UID(fmt.Sprintf("uid-llm-%d-a%d", i, a)),
				Labels:          map[string]string{v1alpha1.LabelRun: "llm", v1alpha1.LabelRunUID: "uid-llm", v1alpha1.LabelAttempt: fmt.Sprint(a)},
				Annotations:     map[string]string{batchv1.JobCompletionIndexAnnotation: fmt.Sprint(i)},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
			},
			Spec:   corev1.PodSpec{NodeName: "gpu-1", Containers: []corev1.Container{{Name: "worker"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
		if a == 1 {
			p.Finalizers = []string{kubeletStopping}
			p.Annotations[v1alpha1.AnnotationFaultEvidence] = string(evidence)
			tracing.SetTraceparent(p.Annotations, agentRoot)
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
				Type: v1alpha1.PodConditionInfrastructureFault, Status: corev1.ConditionTrue, Reason: string(v1alpha1.CauseNodeShutdown),
			})
		}
		if failed {
			p.Status.Phase = corev1.PodFailed
			p.Status.Conditions[0].Status = corev1.ConditionFalse
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: 143, FinishedAt: metav1.NewTime(at(100))},
			}}}
		}
		return p
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}}
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithIndex(&corev1.Pod{}, podsByRun, runOfPod).
		WithObjects(run, job, worker(0, 1, true), worker(1, 1, false), node).
		WithStatusSubresource(&v1alpha1.TrainingRun{}, &batchv1.Job{}).Build()
	spy := &spyFrameworks{}
	r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clock, Frameworks: spy, Episodes: episode.New(provider, clock)}
	reconcile := func(step string, want ...string) {
		t.Helper()
		exp.Reset()
		if j := (&batchv1.Job{}); cl.Get(ctx, client.ObjectKeyFromObject(job), j) == nil {
			r.deletions.saw(j) // as the Job informer does, at every version
		}
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(run)}); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		var got []string
		for _, s := range exp.GetSpans() {
			got = append(got, s.Name)
			if s.Name != tracing.SpanAttempt && s.SpanContext.TraceID() != agentRoot.TraceID() {
				t.Errorf("%s: span %s in trace %s, not the agent's episode", step, s.Name, s.SpanContext.TraceID())
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: spans (-want +got):\n%s", step, diff)
		}
	}

	// The decision: the old workers are deleted, but the kubelet still stops their
	// containers (its finalizer stands for that), and the old Job is held by its own until
	// they are gone: no Job of attempt 2 yet.
	clock.SetTime(at(200))
	reconcile("judge, restart, tear down", tracing.SpanSettle, tracing.SpanClassify, tracing.SpanAttempt)
	if len(spy.hints) != 1 || !spy.hints[0].Equal(agentRoot) {
		t.Errorf("Hints called with span contexts %v, want the agent's episode %v", spy.hints, agentRoot)
	}
	got := &v1alpha1.TrainingRun{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(run), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Attempt != 2 || got.Status.Trace == nil || got.Status.Trace.Traceparent != tracing.Traceparent(agentRoot) {
		t.Fatalf("after the decision: attempt %d, trace %+v; want attempt 2 in the agent's episode", got.Status.Attempt, got.Status.Trace)
	}
	if tr := got.Status.Trace; !tr.DetectedAt.Time.Equal(at(0)) || !tr.DecidedAt.Time.Equal(at(200)) || tr.TornDownAt != nil {
		t.Errorf("episode detected %v, decided %v, torn down %v; want %v, %v, not yet", tr.DetectedAt, tr.DecidedAt, tr.TornDownAt, at(0), at(200))
	}
	clock.SetTime(at(300))
	reconcile("old workers still stopping")

	// The kubelet is done and the Job controller has seen the Job deleted: the old Job goes,
	// the teardown is over, attempt 2's Job is created.
	for i := range 2 {
		p := &corev1.Pod{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(worker(i, 1, false)), p); err != nil {
			t.Fatal(err)
		}
		p.Finalizers = nil
		if err := cl.Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	old := &batchv1.Job{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(job), old); err != nil {
		t.Fatal(err)
	}
	old.Status.Active = 0
	if err := cl.Status().Update(ctx, old); err != nil {
		t.Fatal(err)
	}
	clock.SetTime(at(500))
	reconcile("old Job released, attempt 2 created", tracing.SpanTeardown, tracing.SpanBackoff, tracing.SpanCreate)
	if len(spy.resolve) != 1 || !spy.resolve[0].Equal(agentRoot) {
		t.Errorf("Resolve called with span contexts %v, want the agent's episode %v", spy.resolve, agentRoot)
	}
	next := &batchv1.Job{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(job), next); err != nil {
		t.Fatal(err)
	}
	if next.Labels[v1alpha1.LabelAttempt] != "2" {
		t.Fatalf("Job after the teardown: attempt %s, want 2", next.Labels[v1alpha1.LabelAttempt])
	}
	for i := range 2 {
		p := worker(i, 2, false)
		p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(next, batchv1.SchemeGroupVersion.WithKind("Job"))}
		p.Spec.NodeName, p.Status = "", corev1.PodStatus{Phase: corev1.PodPending}
		if err := cl.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	// The scheduler and the kubelet: both workers Running.
	for i := range 2 {
		p := &corev1.Pod{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(worker(i, 2, false)), p); err != nil {
			t.Fatal(err)
		}
		p.Spec.NodeName = "gpu-1"
		if err := cl.Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status = worker(i, 2, false).Status
		if err := cl.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	clock.SetTime(at(800))
	reconcile("attempt 2 Running", tracing.SpanSchedule, tracing.SpanRunning, tracing.SpanRestart)
	clock.SetTime(at(900))
	reconcile("nothing new")
}
