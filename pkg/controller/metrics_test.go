package controller

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/faultline-dev/faultline/api/scheme"
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

func decisionSamples(t *testing.T) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := decisionSeconds.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// The decision latency starts at the first failed worker of the attempt the informer
// delivers, and is observed once, by the decision on that attempt.
func TestDecisionSecondsFromTheFirstFailureSeen(t *testing.T) {
	worker := func(name string, attempt string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", Labels: map[string]string{v1alpha1.LabelRun: "llm", v1alpha1.LabelAttempt: attempt}},
			Status:     corev1.PodStatus{Phase: phase},
		}
	}
	run := &v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml"}, Status: v1alpha1.TrainingRunStatus{Attempt: 2}}
	t0 := time.Unix(1000, 0)
	var f failureClock
	f.saw(worker("llm-2-0", "2", corev1.PodRunning), t0)                   // not failed: no start
	f.saw(worker("llm-1-0", "1", corev1.PodFailed), t0)                    // an older attempt's
	f.saw(worker("llm-2-1", "2", corev1.PodFailed), t0.Add(time.Second))   // the start
	f.saw(worker("llm-2-2", "2", corev1.PodFailed), t0.Add(2*time.Second)) // a later one: ignored
	if seen, ok := f.firstSeen(run); !ok || !seen.Equal(t0.Add(time.Second)) {
		t.Fatalf("first failure seen at %v (%v), want %v: the trace's settle phase starts there", seen, ok, t0.Add(time.Second))
	}

	n0, sum0 := decisionSamples(t)
	f.decided(run, t0.Add(1500*time.Millisecond))
	n1, sum1 := decisionSamples(t)
	if n1 != n0+1 || sum1-sum0 < 0.499 || sum1-sum0 > 0.501 {
		t.Fatalf("decision observed %d time(s), %.3f s; want once, 0.5 s", n1-n0, sum1-sum0)
	}
	f.decided(run, t0.Add(3*time.Second))
	if n2, _ := decisionSamples(t); n2 != n1 {
		t.Fatal("a second decision on the same attempt was observed again")
	}

	// The decided attempt's pods fail as they are torn down; the next attempt's first
	// failure still starts its own measurement.
	f.saw(worker("llm-2-3", "2", corev1.PodFailed), t0.Add(4*time.Second))
	f.saw(worker("llm-3-0", "3", corev1.PodFailed), t0.Add(10*time.Second))
	run.Status.Attempt = 3
	f.decided(run, t0.Add(10200*time.Millisecond))
	if n4, sum4 := decisionSamples(t); n4 != n1+1 || sum4-sum1 < 0.199 || sum4-sum1 > 0.201 {
		t.Fatalf("attempt 3's decision observed %d time(s), %.3f s; want once, 0.2 s", n4-n1, sum4-sum1)
	}
	n1, _ = decisionSamples(t)

	// A worker whose container exited non-zero has failed before its phase says so, for
	// the clock as for the reconciler.
	crashing := worker("llm-3-1", "3", corev1.PodRunning)
	crashing.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}
	f.saw(crashing, t0.Add(11*time.Second))
	if seen, ok := f.firstSeen(run); !ok || !seen.Equal(t0.Add(11*time.Second)) {
		t.Fatalf("a worker exited 1, phase Running: first failure seen at %v (%v), want %v", seen, ok, t0.Add(11*time.Second))
	}
	// A worker of a pod that restarts in place is back at its barrier (no exit in its
	// status); its node agent's report of attempt 4 is the failure.
	run.Status.Attempt = 4
	f.decided(run, t0.Add(11*time.Second))
	report, _ := json.Marshal(v1alpha1.WorkerExit{Attempt: 4, Container: "worker", ExitCode: 143, Node: "n1"})
	inPlace := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "llm-3-1", Namespace: "ml", Labels: map[string]string{v1alpha1.LabelAttempt: "1", v1alpha1.LabelRun: "llm"},
			Annotations: map[string]string{v1alpha1.AnnotationWorkerExit: string(report)}},
		Spec: corev1.PodSpec{NodeName: "n1", InitContainers: []corev1.Container{{Name: v1alpha1.BarrierContainer}}, Containers: []corev1.Container{{Name: "worker"}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "worker", RestartCount: 1,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}},
	}
	f.saw(inPlace, t0.Add(20*time.Second))
	if seen, ok := f.firstSeen(run); !ok || !seen.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("a worker restarted in place with its exit reported: first failure seen at %v (%v), want %v", seen, ok, t0.Add(20*time.Second))
	}
	f.forget(types.NamespacedName{Namespace: "ml", Name: "llm"})
	f.decided(run, t0.Add(12*time.Second))
	if n3, _ := decisionSamples(t); n3 != n1 {
		t.Fatal("a deleted run's attempt was still remembered")
	}
}

// A worker whose barrier supervises it, restarted in place and then failed on its own: its
// pod's labels and own record say attempt 1, its node's heartbeat records its open for
// attempt 3 (the container before the one its status shows waiting). Its failure starts the
// clock of attempt 3, as the reconciler reads the pod.
func TestFailureSeenWithTheNodesRecord(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	run := supervisedRun(v1alpha1.AttemptRecord{Attempt: 2}, metav1.NewTime(now))
	run.Status.Attempt = 3
	job := attempt.Job(run, attempt.Options{Attempt: 1, BarrierImage: "barrier", BarrierInWorker: true})
	p, err := attempt.Pod(job, 0, attempt.PodOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.UID, p.Spec.NodeName = "uid-0", "gpu-0"
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "worker", ContainerID: "containerd://c1", RestartCount: 1,
		State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}}}
	l := agentlease.New("gpu-0", now, agentlease.Duration)
	if err := agentlease.SetRecords(l, map[types.UID]v1alpha1.BarrierRecord{p.UID: {ContainerID: "c0", Attempt: 3}}); err != nil {
		t.Fatal(err)
	}
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(l).Build()
	r := &Reconciler{Client: cl, Clock: clocktesting.NewFakeClock(now)}
	r.podSeen(context.Background(), p)
	if seen, ok := r.failures.firstSeen(run); !ok || !seen.Equal(now) {
		t.Errorf("attempt 3's first failure seen at %v (%v), want %v", seen, ok, now)
	}
}
