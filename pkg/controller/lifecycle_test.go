package controller

import (
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
)

// TestFailedRunReleasesItsPods: once a run has failed, its Job is suspended and every pod
// that may still run leaves at once, without waiting for the rate-limited Job controller to
// drop its tracking finalizer (26 s for 256 pods at the controller-manager's default QPS):
// that is when a queue can admit the next workload. Failed pods stay, for their logs.
func TestFailedRunReleasesItsPods(t *testing.T) {
	ctx := context.Background()
	run, job, attemptLabels := runWithJob(3, v1alpha1.TrainingRunStatus{Attempt: 1, Phase: v1alpha1.PhaseFailed, CompletionTime: ptr.To(metav1.NewTime(t0))})
	pod := func(name string, phase corev1.PodPhase, deleting bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name), Labels: attemptLabels, Finalizers: []string{batchv1.JobTrackingFinalizer}},
			Spec:       corev1.PodSpec{NodeName: "gpu-1", Containers: []corev1.Container{{Name: "worker"}}},
			Status:     corev1.PodStatus{Phase: phase},
		}
		if deleting {
			p.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
		}
		return p
	}
	crashed := pod("llm-0", corev1.PodFailed, false)
	running := pod("llm-1", corev1.PodRunning, false)
	stopping := pod("llm-2", corev1.PodRunning, true) // the Job controller is deleting it already
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithIndex(&corev1.Pod{}, podsByRun, runOfPod).
		WithObjects(run, job, crashed, running, stopping).
		WithStatusSubresource(&v1alpha1.TrainingRun{}).Build()
	r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clocktesting.NewFakeClock(t0)}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(run)}); err != nil {
		t.Fatal(err)
	}

	got := &batchv1.Job{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(job), got); err != nil {
		t.Fatal(err)
	}
	if !ptr.Deref(got.Spec.Suspend, false) {
		t.Error("the failed run's Job is not suspended: it would replace the pods that leave")
	}
	for _, p := range []*corev1.Pod{running, stopping} {
		err := cl.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("pod %s (%s): got %v, want it gone without waiting for the Job controller", p.Name, p.Status.Phase, err)
		}
	}
	kept := &corev1.Pod{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(crashed), kept); err != nil {
		t.Errorf("failed pod %s: %v, want it kept for its logs", crashed.Name, err)
	} else if kept.DeletionTimestamp != nil {
		t.Errorf("failed pod %s is being deleted, want it kept for its logs", crashed.Name)
	}
}

// TestFinishedRunLiftsNoMaintenance: a finished run that still keeps a node off for a
// maintenance now over says nothing of it: it starts no attempt the node would matter to,
// and an event of each reconcile that a Node's change brings would repeat without end (the
// lift of a finished run is never written).
func TestFinishedRunLiftsNoMaintenance(t *testing.T) {
	ctx := context.Background()
	run, job, _ := runWithJob(2, v1alpha1.TrainingRunStatus{Attempt: 2, Phase: v1alpha1.PhaseSucceeded, CompletionTime: ptr.To(metav1.NewTime(t0)),
		MaintenanceExcludedNodes: []string{"gpu-1"}})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}} // uncordoned: its maintenance is over
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithIndex(&corev1.Pod{}, podsByRun, runOfPod).
		WithObjects(run, job, node).WithStatusSubresource(&v1alpha1.TrainingRun{}).Build()
	rec := events.NewFakeRecorder(100)
	r := &Reconciler{Client: cl, APIReader: cl, Recorder: rec, Clock: clocktesting.NewFakeClock(t0)}
	for range 3 {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(run)}); err != nil {
			t.Fatal(err)
		}
	}
	close(rec.Events)
	for e := range rec.Events {
		if strings.Contains(e, v1alpha1.ReasonMaintenanceOver) {
			t.Errorf("a finished run told: %s", e)
		}
	}
}
