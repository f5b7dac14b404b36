package inplace

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/checkpoint"
)

// WaitNode, which holds a node's shutdown, waits for the node's workers whose run saves on
// notice: while the controller has not asked yet, and while a worker asked has not answered
// before the request's deadline; never for a run without spec.checkpoint.
func TestWaitNodeWaitsForTheNodesAnswers(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	run := &v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "uid-1"},
		Spec: v1alpha1.TrainingRunSpec{Workers: 1, Checkpoint: &v1alpha1.CheckpointPolicy{TimeoutSeconds: 60},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "train", Command: []string{"train"}}}}}}}
	run.Status.Attempt, run.Status.Phase = 1, v1alpha1.PhaseRunning
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "llm-0", Namespace: "ml", UID: "p0",
		Labels:      map[string]string{v1alpha1.LabelRun: "llm", v1alpha1.LabelRunUID: "uid-1", v1alpha1.LabelAttempt: "1"},
		Annotations: map[string]string{"batch.kubernetes.io/job-completion-index": "0"}},
		Spec: attempt.Job(run, attempt.Options{Attempt: 1, BarrierImage: "barrier:v1", BarrierInWorker: true}).Spec.Template.Spec}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", ContainerID: "containerd://c0",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0.Add(-time.Hour))}}}}
	record := func(ck *v1alpha1.BarrierCheckpoint) {
		raw, _ := json.Marshal(v1alpha1.BarrierRecord{ContainerID: "c0", Attempt: 1, Checkpoint: ck})
		pod.Annotations[v1alpha1.AnnotationBarrierRecord] = string(raw)
	}
	record(nil)
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	runs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := pods.Add(pod); err != nil {
		t.Fatal(err)
	}
	if err := runs.Add(run); err != nil {
		t.Fatal(err)
	}
	c := &Checkpointer{Pods: corelisters.NewPodLister(pods), Runs: runs, Clock: clk}
	ctx := context.Background()

	if left := c.WaitNode(ctx, t0); len(left) != 1 || left[0] != "ml/llm-0" {
		t.Errorf("not asked yet: left %v, want ml/llm-0", left)
	}
	req := checkpoint.Request(run, "node n1 announced a shutdown", []string{"n1"}, t0, time.Time{})
	run.Status.Checkpoint = req
	if left := c.WaitNode(ctx, t0); len(left) != 1 {
		t.Errorf("asked, no answer: left %v, want ml/llm-0", left)
	}
	record(&v1alpha1.BarrierCheckpoint{RequestedAt: checkpoint.Key(req), At: t0.Add(time.Second).Format(time.RFC3339Nano), Saved: true})
	if left := c.WaitNode(ctx, t0); len(left) != 0 {
		t.Errorf("answered: left %v, want none", left)
	}
	record(nil)
	clk.SetTime(t0.Add(time.Minute))
	if left := c.WaitNode(ctx, t0); len(left) != 0 {
		t.Errorf("past the request's deadline: left %v, want none", left)
	}
	clk.SetTime(t0)
	run.Status.Checkpoint = nil
	if !c.SavesOnNotice(types.NamespacedName{Namespace: "ml", Name: "llm-0"}) {
		t.Error("a worker of a running run with spec.checkpoint does not save on notice")
	}
	run.Status.Phase = v1alpha1.PhaseRestarting
	if left := c.WaitNode(ctx, t0); len(left) != 0 || c.SavesOnNotice(types.NamespacedName{Namespace: "ml", Name: "llm-0"}) {
		t.Errorf("a run not Running (the controller asks no such run): left %v", left)
	}
	run.Status.Phase = v1alpha1.PhaseRunning
	run.Spec.Checkpoint = nil
	if left := c.WaitNode(ctx, t0); len(left) != 0 {
		t.Errorf("a run without spec.checkpoint: left %v, want none", left)
	}
}
