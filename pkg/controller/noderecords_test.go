package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/faultline-dev/faultline/api/scheme"
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

// TestInPlaceOpensOnTheNodesRecords: a gang of supervising barriers restarted in place, each
// worker recorded on its pod as running attempt 1; the agents record the stops for attempt 2
// on their heartbeats (agentlease.Records), one write per node. The gang's barrier opens on
// those records, and only on the records of a pod's own node: a record of gpu-0's pod on
// gpu-1's heartbeat (an agent writing for a pod of another node) counts for nothing.
func TestInPlaceOpensOnTheNodesRecords(t *testing.T) {
	for _, c := range []struct {
		name string
		// on names, for each pod, the node whose heartbeat carries its stop; "" none.
		on   [2]string
		open bool
	}{
		{"every stop on its node's heartbeat", [2]string{"gpu-0", "gpu-1"}, true},
		{"one stop not recorded yet", [2]string{"gpu-0", ""}, false},
		{"one stop on another node's heartbeat", [2]string{"gpu-1", "gpu-1"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Now().UTC().Truncate(time.Second)
			ran := []v1alpha1.BarrierRecord{{ContainerID: "c0", Attempt: 1}, {ContainerID: "c1", Attempt: 1}}
			run, job, pods := decidedGang(t, now, []string{"c0", "c1"}, []int32{0, 0}, ran)
			objs := []client.Object{run, job}
			leases := map[string]map[types.UID]v1alpha1.BarrierRecord{}
			for i, p := range pods {
				objs = append(objs, p, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: p.Spec.NodeName}})
				if on := c.on[i]; on != "" {
					stopped := ran[i]
					stopped.StoppedFor = 2
					if leases[on] == nil {
						leases[on] = map[types.UID]v1alpha1.BarrierRecord{}
					}
					leases[on][p.UID] = stopped
				}
			}
			for i := range 2 {
				node := fmt.Sprintf("gpu-%d", i)
				l := agentlease.New(node, now, agentlease.Duration)
				if err := agentlease.SetRecords(l, leases[node]); err != nil {
					t.Fatal(err)
				}
				objs = append(objs, l)
			}
			cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithIndex(&corev1.Pod{}, podsByRun, runOfPod).
				WithObjects(objs...).WithStatusSubresource(&v1alpha1.TrainingRun{}, &batchv1.Job{}, &corev1.Pod{}).Build()
			r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clocktesting.NewFakeClock(now),
				Frameworks: &spyFrameworks{}, BarrierImage: "barrier", BarrierInWorker: true}
			got, _ := reconcileRun(t, r, cl, run)
			if opened := attempt.Record(got).BarrierOpenedAt != nil; opened != c.open {
				t.Errorf("the gang's barrier open: %v, want %v (conditions %+v)", opened, c.open, got.Status.Conditions)
			}
			// The cache's pods are read, never written: the records stay on the heartbeats.
			p := &corev1.Pod{}
			if err := cl.Get(context.Background(), client.ObjectKey{Namespace: "ml", Name: attempt.PodName(job, 0, 1)}, p); err != nil {
				t.Fatal(err)
			}
			if rec := attempt.BarrierRecord(p); rec == nil || rec.StoppedFor != 0 {
				t.Errorf("pod 0's own record %+v: want attempt 1's, unchanged", rec)
			}
		})
	}
}

// TestInPlaceRunningOnTheNodesRecords: once the gang's barrier opened, a moved index's new
// pod whose agent recorded its open (on its heartbeat) counts as ready before its kubelet
// shows it started: the run is Running on the records. A worker with a readiness probe
// waits for the kubelet's Ready, which only the kubelet can tell.
func TestInPlaceRunningOnTheNodesRecords(t *testing.T) {
	for _, probe := range []bool{false, true} {
		t.Run(fmt.Sprintf("readiness probe %v", probe), func(t *testing.T) {
			now := time.Now().UTC().Truncate(time.Second)
			opened := metav1.NewTime(now.Add(-2 * time.Second))
			run := supervisedRun(v1alpha1.AttemptRecord{Attempt: 2, RestartMode: v1alpha1.RestartModeInPlace, JobAttempt: 1,
				MovedIndexes: []int32{1}, StartTime: &opened, BarrierOpenedAt: &opened}, opened)
			if probe {
				run.Spec.Template.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
			}
			job := attempt.Job(run, attempt.Options{Attempt: 1, BarrierImage: "barrier", BarrierInWorker: true})
			job.UID = "uid-job-1"
			// Index 0 kept in place on gpu-0, Ready all along; index 1's new pod on gpu-0, made
			// for attempt 2, its status not written since its kubelet bound it.
			kept, err := attempt.Pod(job, 0, attempt.PodOptions{})
			if err != nil {
				t.Fatal(err)
			}
			moved, err := attempt.Pod(job, 1, attempt.PodOptions{Attempt: 2})
			if err != nil {
				t.Fatal(err)
			}
			kept.UID, moved.UID = "uid-0", "uid-1-2"
			kept.Spec.NodeName, moved.Spec.NodeName = "gpu-0", "gpu-0"
			kept.Status = corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "worker", ContainerID: "containerd://c0", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: opened}}}}}
			moved.Status = corev1.PodStatus{Phase: corev1.PodPending}
			l := agentlease.New("gpu-0", now, agentlease.Duration)
			if err := agentlease.SetRecords(l, map[types.UID]v1alpha1.BarrierRecord{
				kept.UID:  {ContainerID: "c0", Attempt: 2, StoppedFor: 2},
				moved.UID: {ContainerID: "c1", Attempt: 2},
			}); err != nil {
				t.Fatal(err)
			}
			cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithIndex(&corev1.Pod{}, podsByRun, runOfPod).
				WithObjects(run, job, kept, moved, l, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0"}}).
				WithStatusSubresource(&v1alpha1.TrainingRun{}, &batchv1.Job{}, &corev1.Pod{}).Build()
			r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clocktesting.NewFakeClock(now),
				Frameworks: &spyFrameworks{}, BarrierImage: "barrier", BarrierInWorker: true}
			got, _ := reconcileRun(t, r, cl, run)
			if running := got.Status.Phase == v1alpha1.PhaseRunning; running == probe {
				t.Errorf("phase %s, ready workers %d; want Running %v", got.Status.Phase, got.Status.ReadyWorkers, !probe)
			}
		})
	}
}

// supervisedRun is ml/llm, two workers with a command (their barrier can be their
// entrypoint), restarting in place from attempt 1, ended at ended, into second.
func supervisedRun(second v1alpha1.AttemptRecord, ended metav1.Time) *v1alpha1.TrainingRun {
	return &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "uid-llm", Generation: 1},
		Spec: v1alpha1.TrainingRunSpec{
			Workers: 2, Framework: v1alpha1.FrameworkNone,
			FailurePolicy: v1alpha1.FailurePolicy{RestartMode: v1alpha1.RestartModeInPlace},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
				{Name: "worker", Image: "trainer", Command: []string{"train"}}}}},
		},
		Status: v1alpha1.TrainingRunStatus{Attempt: 2, Phase: v1alpha1.PhaseRestarting, Restarts: v1alpha1.RestartCounts{Infrastructure: 1},
			Attempts: []v1alpha1.AttemptRecord{{Attempt: 1, EndTime: &ended}, second}},
	}
}

// TestInPlaceOpensOnlyOnTheAPIServersRecords: the cache shows index 1's new container (restart
// 1) waiting at its barrier, its record naming the container before (attempt 1): stopped for
// attempt 2. Its agent has just recorded that it opened that new container for attempt 1,
// on the pod or on its heartbeat, and the cache has not caught up: the worker runs attempt
// 1, and the gang's barrier for attempt 2 must not open. It opens where the API server has
// what the cache has.
func TestInPlaceOpensOnlyOnTheAPIServersRecords(t *testing.T) {
	for _, c := range []struct {
		name string
		// onPod, onLease: where the API server has index 1's later record.
		onPod, onLease, open bool
	}{
		{name: "the API server has what the cache has", open: true},
		{name: "a later record on the pod", onPod: true},
		{name: "a later record on its node's heartbeat", onLease: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Now().UTC().Truncate(time.Second)
			run, job, pods := decidedGang(t, now, []string{"c0", "c1-1"}, []int32{0, 1},
				[]v1alpha1.BarrierRecord{{ContainerID: "c0", Attempt: 1, StoppedFor: 2}, {ContainerID: "c1-0", Attempt: 1}})
			opened := v1alpha1.BarrierRecord{ContainerID: "c1-1", Restart: 1, Attempt: 1}
			cached, at := []client.Object{run, job}, []client.Object{run.DeepCopy(), job.DeepCopy()}
			for i, p := range pods {
				fresh := p.DeepCopy()
				if i == 1 && c.onPod {
					raw, _ := json.Marshal(opened)
					fresh.Annotations[v1alpha1.AnnotationBarrierRecord] = string(raw)
				}
				l := agentlease.New(p.Spec.NodeName, now, agentlease.Duration)
				freshLease := l.DeepCopy()
				if i == 1 && c.onLease {
					if err := agentlease.SetRecords(freshLease, map[types.UID]v1alpha1.BarrierRecord{p.UID: opened}); err != nil {
						t.Fatal(err)
					}
				}
				n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: p.Spec.NodeName}}
				cached = append(cached, p, l, n)
				at = append(at, fresh, freshLease, n.DeepCopy())
			}
			build := func(objs []client.Object) client.Client {
				return fake.NewClientBuilder().WithScheme(scheme.New()).WithIndex(&corev1.Pod{}, podsByRun, runOfPod).
					WithObjects(objs...).WithStatusSubresource(&v1alpha1.TrainingRun{}, &batchv1.Job{}, &corev1.Pod{}).Build()
			}
			cl := build(cached)
			r := &Reconciler{Client: cl, APIReader: build(at), Recorder: events.NewFakeRecorder(100), Clock: clocktesting.NewFakeClock(now),
				Frameworks: &spyFrameworks{}, BarrierImage: "barrier", BarrierInWorker: true}
			got, res := reconcileRun(t, r, cl, run)
			if opened := attempt.Record(got).BarrierOpenedAt != nil; opened != c.open {
				t.Errorf("the gang's barrier open: %v, want %v (conditions %+v)", opened, c.open, got.Status.Conditions)
			}
			if !c.open && res.RequeueAfter == 0 {
				t.Errorf("not opened, and no look again: %+v", res)
			}
		})
	}
}

// decidedGang is a gang of two supervising barriers, attempt 2 decided in place 2 s before
// now: its pods on gpu-0 and gpu-1, each its worker container ids[i] running (its restart
// count restarts[i]) and recs[i] recorded on the pod.
func decidedGang(t *testing.T, now time.Time, ids []string, restarts []int32, recs []v1alpha1.BarrierRecord) (*v1alpha1.TrainingRun, *batchv1.Job, []*corev1.Pod) {
	t.Helper()
	decided := metav1.NewTime(now.Add(-2 * time.Second))
	run := supervisedRun(v1alpha1.AttemptRecord{Attempt: 2, RestartMode: v1alpha1.RestartModeInPlace, JobAttempt: 1, StartTime: &decided}, decided)
	job := attempt.Job(run, attempt.Options{Attempt: 1, BarrierImage: "barrier", BarrierInWorker: true})
	job.UID = "uid-job-1"
	pods := runningPods(t, job, len(ids))
	for i, p := range pods {
		id := ids[i]
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", ContainerID: "containerd://" + id, RestartCount: restarts[i],
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: decided}}}}
		raw, _ := json.Marshal(recs[i])
		p.Annotations[v1alpha1.AnnotationBarrierRecord] = string(raw)
	}
	return run, job, pods
}
