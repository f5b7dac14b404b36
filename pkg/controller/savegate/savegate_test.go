package savegate

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/checkpoint"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

var t0 = time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)

// gang is a 2-worker run with spec.checkpoint, attempt 1 running under supervising barriers.
func gang() (*v1alpha1.TrainingRun, []*corev1.Pod) {
	run := &v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "uid-1"},
		Spec: v1alpha1.TrainingRunSpec{Workers: 2, Checkpoint: &v1alpha1.CheckpointPolicy{TimeoutSeconds: 60},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "train", Command: []string{"train"}}}}}}}
	run.Status.Attempt, run.Status.Phase = 1, v1alpha1.PhaseRunning
	var pods []*corev1.Pod
	for i := range 2 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "llm-" + strconv.Itoa(i), Namespace: "ml",
			Labels:      map[string]string{v1alpha1.LabelAttempt: "1"},
			Annotations: map[string]string{"batch.kubernetes.io/job-completion-index": strconv.Itoa(i)}},
			Spec: attempt.Job(run, attempt.Options{Attempt: 1, BarrierImage: "barrier:v1", BarrierInWorker: true}).Spec.Template.Spec}
		p.Spec.NodeName = "n" + strconv.Itoa(i)
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", ContainerID: "containerd://c" + strconv.Itoa(i),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0.Add(-time.Hour))}}}}
		pods = append(pods, p)
	}
	answer(pods[0], nil)
	answer(pods[1], nil)
	return run, pods
}

// answer writes the agent's record of pod, with its answer ck (nil: none).
func answer(pod *corev1.Pod, ck *v1alpha1.BarrierCheckpoint) {
	raw, _ := json.Marshal(v1alpha1.BarrierRecord{ContainerID: "c" + pod.Name[len(pod.Name)-1:], Attempt: 1, Checkpoint: ck})
	pod.Annotations[v1alpha1.AnnotationBarrierRecord] = string(raw)
}

// A planned move asks first (a request, a wait until its deadline), waits while a worker has
// not answered, and goes on once both did, the request closed for the move's write.
func TestAskHoldsTheMoveUntilEveryWorkerAnswered(t *testing.T) {
	run, pods := gang()
	st := Ask(run, pods, "planned maintenance of n1", []string{"n1"}, t0)
	if !st.Wait || !st.Changed || st.After != time.Minute || len(st.Events) != 1 || st.Events[0].Reason != v1alpha1.ReasonCheckpointRequested || run.Status.Checkpoint == nil {
		t.Fatalf("first notice: %+v, request %+v; want a request, a wait of its minute, its event", st, run.Status.Checkpoint)
	}
	req := run.Status.Checkpoint
	answer(pods[0], &v1alpha1.BarrierCheckpoint{RequestedAt: checkpoint.Key(req), At: t0.Add(time.Second).Format(time.RFC3339Nano), Saved: true})
	if st := Ask(run, pods, "", nil, t0.Add(2*time.Second)); !st.Wait || !st.Changed || len(req.Acks) != 1 {
		t.Fatalf("one answer: %+v, acks %+v; want a wait, the answer gathered", st, req.Acks)
	}
	answer(pods[1], &v1alpha1.BarrierCheckpoint{RequestedAt: checkpoint.Key(req), At: t0.Add(3 * time.Second).Format(time.RFC3339Nano), Saved: true})
	st = Ask(run, pods, "", nil, t0.Add(4*time.Second))
	if st.Wait || req.EndedAt == nil || len(st.Events) != 1 || st.Events[0].Reason != v1alpha1.ReasonCheckpointDone {
		t.Fatalf("both answered: %+v, request %+v; want the move, the request closed", st, req)
	}
	rec := &v1alpha1.AttemptRecord{Attempt: 1}
	Close(run, rec, metav1.NewTime(t0.Add(5*time.Second)))
	if rec.Checkpoint != req || run.Status.Checkpoint != nil {
		t.Errorf("closed into the record: %+v, status %+v", rec.Checkpoint, run.Status.Checkpoint)
	}
	run.Spec.Checkpoint = nil
	if st := Ask(run, pods, "x", nil, t0); st.Wait || st.Changed {
		t.Errorf("a run without spec.checkpoint: %+v", st)
	}
}

// A node's shutdown announced while the workers ran asks them, due by their grace period; an
// announcement from before the attempt's workers started asks nothing.
func TestOnShutdownAsksByTheGracePeriod(t *testing.T) {
	run, pods := gang()
	old := t0.Add(-2 * time.Hour)
	if st := OnShutdown(run, pods, map[string]exitclass.NodeFacts{"n1": {ShutdownDetectedAt: &old}}, t0); st.Changed {
		t.Errorf("an announcement before the workers started asked: %+v", st)
	}
	at := t0.Add(-time.Second)
	st := OnShutdown(run, pods, map[string]exitclass.NodeFacts{"n1": {ShutdownDetectedAt: &at}}, t0)
	req := run.Status.Checkpoint
	if !st.Changed || req == nil || !req.Deadline.Time.Equal(at.Add(30*time.Second)) {
		t.Fatalf("%+v, request %+v; want a request due 30 s (the grace period) after the announcement", st, req)
	}
}

// The judgement of a failed attempt waits for the others' save only where the worker that
// failed answered first.
func TestHoldWaitsOnlyBehindAnsweredFailures(t *testing.T) {
	run, pods := gang()
	Ask(run, pods, "planned", []string{"n1"}, t0)
	failed := &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 143, FinishedAt: metav1.NewTime(t0.Add(time.Second))}}
	pods[1].Status.Phase, pods[1].Status.ContainerStatuses[0].State = corev1.PodFailed, *failed
	if st := Hold(run, pods, nil, t0.Add(2*time.Second)); st.Wait {
		t.Errorf("held behind a worker that failed without a word: %+v", st)
	}
	// On a node that announced its shutdown, the worker saved on the container's SIGTERM and
	// ended: its answer may reach its record after its end, for lateAnswer.
	shutdown := t0.Add(-time.Second)
	nodes := map[string]exitclass.NodeFacts{pods[1].Spec.NodeName: {ShutdownDetectedAt: &shutdown}}
	if st := Hold(run, pods, nodes, t0.Add(2*time.Second)); !st.Wait || st.After != lateAnswer-time.Second {
		t.Errorf("not held for the answer of a worker that ended in its node's shutdown: %+v", st)
	}
	if st := Hold(run, pods, nodes, t0.Add(time.Second+lateAnswer)); st.Wait {
		t.Errorf("held past lateAnswer after its end: %+v", st)
	}
	answer(pods[1], &v1alpha1.BarrierCheckpoint{RequestedAt: checkpoint.Key(run.Status.Checkpoint), At: t0.Add(time.Second).Format(time.RFC3339Nano), Saved: true})
	if st := Hold(run, pods, nil, t0.Add(2*time.Second)); !st.Wait {
		t.Errorf("not held while index 0 saves and index 1 saved before it ended: %+v", st)
	}
}

// budgetClient counts the reads and deletes of Budget.
type budgetClient struct {
	client.Reader
	client.Writer
	gets, deletes int
	have          *policyv1.PodDisruptionBudget
}

func (b *budgetClient) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	b.gets++
	if b.have == nil {
		return apierrors.NewNotFound(schema.GroupResource{Group: "policy", Resource: "poddisruptionbudgets"}, "llm")
	}
	b.have.DeepCopyInto(obj.(*policyv1.PodDisruptionBudget))
	return nil
}

func (b *budgetClient) Delete(context.Context, client.Object, ...client.DeleteOption) error {
	b.deletes++
	return nil
}

// A run with spec.checkpoint gets its budget; one whose spec never changed reads nothing (the
// attempt's creation is a restart's path); one edited since reads, and deletes the budget it
// owns, and only that.
func TestBudget(t *testing.T) {
	run, _ := gang()
	run.Generation = 1
	c := &budgetClient{}
	var ensured client.Object
	ensure := func(o client.Object) (ctrl.Result, bool, error) { ensured = o; return ctrl.Result{}, true, nil }
	if _, ok, err := Budget(context.Background(), c, c, run, ensure); !ok || err != nil || ensured == nil || ensured.GetName() != "llm" {
		t.Fatalf("with spec.checkpoint: %v %v, ensured %v", ok, err, ensured)
	}
	run.Spec.Checkpoint, ensured = nil, nil
	if _, ok, err := Budget(context.Background(), c, c, run, ensure); !ok || err != nil || c.gets != 0 || ensured != nil {
		t.Fatalf("as created, without it: %v %v, %d reads, ensured %v; want nothing", ok, err, c.gets, ensured)
	}
	run.Generation = 2
	c.have = checkpoint.Budget(run)
	if _, _, err := Budget(context.Background(), c, c, run, ensure); err != nil || c.gets != 1 || c.deletes != 0 {
		t.Fatalf("someone else's budget of the name: %v, %d reads, %d deletes; want it left", err, c.gets, c.deletes)
	}
	c.have.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(run, v1alpha1.GroupVersion.WithKind(v1alpha1.KindTrainingRun))}
	if _, _, err := Budget(context.Background(), c, c, run, ensure); err != nil || c.deletes != 1 {
		t.Fatalf("its own budget, spec.checkpoint removed: %v, %d deletes; want it deleted", err, c.deletes)
	}
}
