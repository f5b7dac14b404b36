package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/faultline-dev/faultline/api/scheme"
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/barrier"
)

// fallbackFixture is ml/llm, two workers restarted in place into attempt 2 in attempt 1's
// Job, its barrier opened 40 s ago: index 0's pod (node gpu-0) runs attempt 2; index 1's
// (node gpu-1, whose node agent is silent: no heartbeat) still waits at its barrier, held
// in the API by the kubelet once deleted (kubeletStopping).
func fallbackFixture(t *testing.T) (*Reconciler, client.Client, *v1alpha1.TrainingRun, *batchv1.Job, []*corev1.Pod) {
	t.Helper()
	// Now, not a fixed time: meta.SetStatusCondition stamps conditions with the wall clock.
	now := time.Now().UTC().Truncate(time.Second)
	opened := metav1.NewTime(now.Add(-40 * time.Second))
	run := &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "uid-llm", Generation: 1},
		Spec: v1alpha1.TrainingRunSpec{
			Workers: 2, Framework: v1alpha1.FrameworkNone,
			FailurePolicy: v1alpha1.FailurePolicy{RestartMode: v1alpha1.RestartModeInPlace},
			Template:      corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "trainer"}}}},
		},
		Status: v1alpha1.TrainingRunStatus{Attempt: 2, Phase: v1alpha1.PhasePending, Restarts: v1alpha1.RestartCounts{Unknown: 1}, Attempts: []v1alpha1.AttemptRecord{
			{Attempt: 1, EndTime: ptr.To(metav1.NewTime(now.Add(-time.Minute)))},
			{Attempt: 2, RestartMode: v1alpha1.RestartModeInPlace, JobAttempt: 1, BarrierOpenedAt: &opened, StartTime: &opened},
		}},
	}
	job := attempt.Job(run, attempt.Options{Attempt: 1, BarrierImage: "barrier"})
	job.UID = "uid-job-1"
	pods := runningPods(t, job, 2)
	pods[0].Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: v1alpha1.BarrierContainer,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Message: barrier.OpenedMessage(2)}}}}
	pods[0].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: opened}}}}
	pods[1].Finalizers = append(pods[1].Finalizers, kubeletStopping)
	pods[1].Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: v1alpha1.BarrierContainer,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: opened}}}}
	pods[1].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithIndex(&corev1.Pod{}, podsByRun, runOfPod).
		WithObjects(run, job, pods[0], pods[1], &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}}).
		WithStatusSubresource(&v1alpha1.TrainingRun{}, &batchv1.Job{}, &corev1.Pod{}).Build()
	r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clocktesting.NewFakeClock(now), Frameworks: &spyFrameworks{}}
	return r, cl, run, job, pods
}

// TestInPlaceFallbackAfterOpenIsNoFailure: after the barrier opened, a pod whose node agent
// is silent is retired (its index moves): the record names the moved index before the pod
// is deleted, the SIGTERM its deletion gives the barrier is no failure of the attempt, the
// index gets its new pod only once the old one is gone, off the silent node. Seen on a real
// node (CI, stop 45): the deleted pod's barrier exit was judged Unknown and failed the run.
func TestInPlaceFallbackAfterOpenIsNoFailure(t *testing.T) {
	ctx := context.Background()
	r, cl, run, job, pods := fallbackFixture(t)
	got, _ := reconcileRun(t, r, cl, run)
	rec := attempt.Record(got)
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionInPlaceWaiting); c == nil || c.Reason != v1alpha1.ReasonInPlaceFallback {
		t.Fatalf("InPlaceWaiting %+v, want the fallback", c)
	}
	if !slices.Equal(rec.MovedIndexes, []int32{1}) || !slices.Contains(rec.ExcludedNodes, "gpu-1") {
		t.Fatalf("record moved %v, excluded %v: want index 1 moved, gpu-1 excluded", rec.MovedIndexes, rec.ExcludedNodes)
	}
	old := &corev1.Pod{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(pods[1]), old); err != nil || old.DeletionTimestamp == nil {
		t.Fatalf("index 1's pod: %v, deleting %v; want it deleted", err, old.DeletionTimestamp)
	}

	// The kubelet stops the barrier (SIGTERM), then ends the pod, which stays in the API;
	// each is looked at past the settle window in which a failure is judged.
	clock := r.Clock.(*clocktesting.FakeClock)
	newName := attempt.PodName(job, 1, 2)
	for _, step := range []struct {
		phase   corev1.PodPhase
		holding bool // the old pod holds its index: its process may still run
	}{{corev1.PodRunning, true}, {corev1.PodFailed, false}} {
		old.Status.Phase = step.phase
		old.Status.InitContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 143, Reason: "Error"}}
		if err := cl.Status().Update(ctx, old); err != nil {
			t.Fatal(err)
		}
		reconcileRun(t, r, cl, run) // a failure would be seen here
		clock.Step(time.Minute)
		got, _ = reconcileRun(t, r, cl, run) // and judged here
		if got.Status.Attempt != 2 || got.Status.Phase == v1alpha1.PhaseFailed || got.Status.Restarts != (v1alpha1.RestartCounts{Unknown: 1}) {
			t.Fatalf("the retired pod %s: attempt %d phase %s restarts %+v lastFailure %+v; want attempt 2 going on, no failure judged",
				step.phase, got.Status.Attempt, got.Status.Phase, got.Status.Restarts, got.Status.LastFailure)
		}
		err := cl.Get(ctx, client.ObjectKey{Namespace: "ml", Name: newName}, &corev1.Pod{})
		if step.holding && !apierrors.IsNotFound(err) {
			t.Fatalf("index 1's new pod %s: %v; want none while the old one may run", newName, err)
		}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(pods[1]), old); err != nil {
			t.Fatal(err)
		}
	}

	// The kubelet lets the old pod go: the index has its new pod, made for attempt 2.
	old.Finalizers = slices.DeleteFunc(old.Finalizers, func(f string) bool { return f == kubeletStopping })
	if err := cl.Update(ctx, old); err != nil {
		t.Fatal(err)
	}
	reconcileRun(t, r, cl, run)
	fresh := &corev1.Pod{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "ml", Name: newName}, fresh); err != nil {
		t.Fatalf("index 1's new pod %s: %v", newName, err)
	}
	if fresh.Labels[v1alpha1.LabelAttempt] != "2" || !strings.Contains(fmt.Sprint(fresh.Spec.Affinity), "gpu-1") {
		t.Errorf("index 1's new pod: attempt %s, affinity %v; want attempt 2, kept off gpu-1", fresh.Labels[v1alpha1.LabelAttempt], fresh.Spec.Affinity)
	}
}

// TestInPlaceFallbackResumesAfterACrash: the controller wrote the fallback's record and
// crashed before it deleted the pod: the next reconcile deletes it, and judges nothing.
func TestInPlaceFallbackResumesAfterACrash(t *testing.T) {
	ctx := context.Background()
	r, cl, run, _, pods := fallbackFixture(t)
	stored := &v1alpha1.TrainingRun{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(run), stored); err != nil {
		t.Fatal(err)
	}
	rec := attempt.Record(stored)
	rec.MovedIndexes, rec.ExcludedNodes = []int32{1}, []string{"gpu-1"}
	if err := cl.Status().Update(ctx, stored); err != nil {
		t.Fatal(err)
	}
	got, _ := reconcileRun(t, r, cl, run)
	old := &corev1.Pod{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(pods[1]), old); err != nil || old.DeletionTimestamp == nil {
		t.Fatalf("index 1's pod, retired by the record: %v, deleting %v; want it deleted", err, old.DeletionTimestamp)
	}
	if slices.Contains(old.Finalizers, batchv1.JobTrackingFinalizer) {
		t.Errorf("index 1's retired pod keeps the tracking finalizer %v: nothing judges it", old.Finalizers)
	}
	if got.Status.Attempt != 2 || got.Status.Phase == v1alpha1.PhaseFailed {
		t.Errorf("attempt %d phase %s, want attempt 2 going on", got.Status.Attempt, got.Status.Phase)
	}
}

// TestInPlaceMovedIndexWaitsForItsOldPod: before the gang's barrier opens, a moved index gets
// its new pod only once its old pod can run nothing, wherever the old pod is: on a node the
// attempt excludes (a node shutting down, where a hung worker may still run) as on one the new
// pod may use. At most one bound pod per index; the gang's barrier stays shut meanwhile. A
// warm spare that took no index (not ready to) is no index's old pod: it holds nothing up.
func TestInPlaceMovedIndexWaitsForItsOldPod(t *testing.T) {
	for _, c := range []struct {
		name            string
		excluded, spare bool
	}{{"old pod on an excluded node", true, false}, {"old pod on a usable node", false, false}, {"beside a spare that took no index", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			r, cl, run, job, pods := fallbackFixture(t)
			if c.spare {
				sp := runningPods(t, job, 1)[0]
				sp.Name, sp.UID = attempt.SparePodName(job, 0, 1), "uid-spare-0"
				delete(sp.Labels, batchv1.JobCompletionIndexAnnotation)
				delete(sp.Annotations, batchv1.JobCompletionIndexAnnotation)
				sp.Labels[v1alpha1.LabelSpare] = "0"
				sp.Status.Phase = corev1.PodPending // not ready: it takes no index
				if err := cl.Create(ctx, sp); err != nil {
					t.Fatal(err)
				}
			}
			stored := &v1alpha1.TrainingRun{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(run), stored); err != nil {
				t.Fatal(err)
			}
			// Attempt 2 decided in place, its barrier not open yet; index 0 waits at its barrier.
			rec := attempt.Record(stored)
			rec.BarrierOpenedAt, rec.StartTime = nil, nil
			if c.excluded {
				rec.ExcludedNodes = []string{"gpu-1"}
			}
			stored.Status.Phase = v1alpha1.PhaseRestarting
			if err := cl.Status().Update(ctx, stored); err != nil {
				t.Fatal(err)
			}
			pods[0].Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: v1alpha1.BarrierContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
			pods[0].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
			// Index 1's old worker of attempt 1 still runs.
			pods[1].Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: v1alpha1.BarrierContainer,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Message: barrier.OpenedMessage(1)}}}}
			pods[1].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
			for _, p := range pods {
				if err := cl.Status().Update(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			if !c.excluded {
				if err := cl.Delete(ctx, pods[1]); err != nil { // an eviction: the index moves
					t.Fatal(err)
				}
			}

			newName := attempt.PodName(job, 1, 2)
			got, _ := reconcileRun(t, r, cl, run)
			err := cl.Get(ctx, client.ObjectKey{Namespace: "ml", Name: newName}, &corev1.Pod{})
			if !apierrors.IsNotFound(err) {
				t.Fatalf("index 1's new pod %s: %v; want none while the old one is bound and may run", newName, err)
			}
			if rec := attempt.Record(got); rec.BarrierOpenedAt != nil {
				t.Fatalf("the gang's barrier opened at %v while index 1's old pod is in the API", rec.BarrierOpenedAt)
			}

			// The old pod goes: the index has its new pod, and the gang's barrier opens.
			old := &corev1.Pod{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(pods[1]), old); err != nil || old.DeletionTimestamp == nil {
				t.Fatalf("index 1's old pod: %v, deleting %v; want it deleted", err, old.DeletionTimestamp)
			}
			old.Finalizers = nil
			if err := cl.Update(ctx, old); err != nil {
				t.Fatal(err)
			}
			got, _ = reconcileRun(t, r, cl, run)
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "ml", Name: newName}, &corev1.Pod{}); err != nil {
				t.Fatalf("index 1's new pod %s once the old one is gone: %v", newName, err)
			}
			if rec := attempt.Record(got); rec.BarrierOpenedAt == nil || !slices.Equal(rec.MovedIndexes, []int32{1}) {
				t.Errorf("attempt 2's record: barrierOpenedAt %v, movedIndexes %v; want the barrier open, index 1 moved", rec.BarrierOpenedAt, rec.MovedIndexes)
			}
		})
	}
}

// TestInPlaceLeavesAShuttingDownPodToItsKubelet: a moved index's old pod whose node announced
// a graceful shutdown is its kubelet's to end: the controller does not delete it (a deletion
// would add the pod's removal to that kubelet's own status writes, ahead of the terminal
// statuses of its node's other pods, which the gang's barrier waits for), and wakes at the
// shutdown's bound. Ended by its kubelet, the index gets its new pod and the barrier opens;
// still there at the bound, it is deleted.
func TestInPlaceLeavesAShuttingDownPodToItsKubelet(t *testing.T) {
	for _, c := range []struct {
		name    string
		ended   bool // the kubelet writes the pod Failed before the bound
		stopped bool // its agent attests that the shutdown stopped it at the runtime
	}{{"ended by its kubelet", true, false}, {"outlives the bound", false, false}, {"stopped, its agent says", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			r, cl, run, job, pods := fallbackFixture(t)
			deletes := &deleteRecorder{Client: r.Client}
			r.Client = deletes
			clock := r.Clock.(*clocktesting.FakeClock)
			stored := &v1alpha1.TrainingRun{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(run), stored); err != nil {
				t.Fatal(err)
			}
			// Attempt 2 decided in place off gpu-1, whose shutdown was announced a second ago.
			rec := attempt.Record(stored)
			rec.BarrierOpenedAt, rec.StartTime = nil, nil
			rec.ExcludedNodes = []string{"gpu-1"}
			stored.Status.Phase = v1alpha1.PhaseRestarting
			if err := cl.Status().Update(ctx, stored); err != nil {
				t.Fatal(err)
			}
			announced := clock.Now().Add(-time.Second)
			pods[1].Status.StartTime = ptr.To(metav1.NewTime(clock.Now().Add(-time.Minute)))
			pods[0].Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: v1alpha1.BarrierContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
			pods[0].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
			pods[1].Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: v1alpha1.BarrierContainer,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Message: barrier.OpenedMessage(1)}}}}
			pods[1].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
			agentMark(pods[1], v1alpha1.FaultEvidence{Source: v1alpha1.EvidenceSourceLogind, Node: "gpu-1", Cause: v1alpha1.CauseNodeShutdown,
				DetectedAt: announced.Format(time.RFC3339Nano)}, announced)
			for _, p := range pods {
				status := p.Status.DeepCopy() // an update returns the stored pod, status and all
				if err := cl.Update(ctx, p); err != nil {
					t.Fatal(err)
				}
				p.Status = *status
				if err := cl.Status().Update(ctx, p); err != nil {
					t.Fatal(err)
				}
			}

			newName := attempt.PodName(job, 1, 2)
			bound := announced.Add(30*time.Second + 5*time.Second) // the default grace period, the kubelet's report
			// wantMoved: index 1 has its new pod, and the gang's barrier is open.
			wantMoved := func(when string) {
				t.Helper()
				got, _ := reconcileRun(t, r, cl, run)
				if err := cl.Get(ctx, client.ObjectKey{Namespace: "ml", Name: newName}, &corev1.Pod{}); err != nil {
					t.Fatalf("index 1's new pod %s %s: %v", newName, when, err)
				}
				if rec := attempt.Record(got); rec.BarrierOpenedAt == nil || !slices.Equal(rec.MovedIndexes, []int32{1}) {
					t.Errorf("attempt 2's record: barrierOpenedAt %v, movedIndexes %v; want the barrier open, index 1 moved", rec.BarrierOpenedAt, rec.MovedIndexes)
				}
			}
			if c.stopped {
				// The sandbox and every container down at the runtime: no process of the
				// pod runs, though its status still shows the worker running.
				agentMark(pods[1], v1alpha1.FaultEvidence{Source: v1alpha1.EvidenceSourceLogind, Node: "gpu-1", Cause: v1alpha1.CauseNodeShutdown,
					DetectedAt: announced.Format(time.RFC3339Nano), PodStoppedAt: announced.Add(800 * time.Millisecond).Format(time.RFC3339Nano)}, announced)
				if err := cl.Update(ctx, pods[1]); err != nil {
					t.Fatal(err)
				}
				reconcileRun(t, r, cl, run)
				if g, ok := deletes.grace[pods[1].Name]; !ok || g == nil || *g != 0 {
					t.Fatalf("index 1's old pod deleted with grace period %v (deleted: %v); want 0: nothing of it runs", g, ok)
				}
				// The API server removes a pod deleted without a grace period at once; the
				// fixture's finalizer stands for a kubelet that would end it gracefully.
				gone := &corev1.Pod{}
				if err := cl.Get(ctx, client.ObjectKeyFromObject(pods[1]), gone); err != nil {
					t.Fatal(err)
				}
				gone.Finalizers = slices.DeleteFunc(gone.Finalizers, func(f string) bool { return f == kubeletStopping })
				if err := cl.Update(ctx, gone); err != nil {
					t.Fatal(err)
				}
				if err := cl.Get(ctx, client.ObjectKeyFromObject(pods[1]), &corev1.Pod{}); !apierrors.IsNotFound(err) {
					t.Fatalf("index 1's old pod, stopped by its node's shutdown: %v; want it removed", err)
				}
				wantMoved("once the old one is gone")
				return
			}
			_, res := reconcileRun(t, r, cl, run)
			old := &corev1.Pod{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(pods[1]), old); err != nil || old.DeletionTimestamp != nil {
				t.Fatalf("index 1's old pod, its node shutting down: %v, deleting %v; want it left to its kubelet", err, old.DeletionTimestamp)
			}
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "ml", Name: newName}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
				t.Fatalf("index 1's new pod %s: %v; want none while the old one may run", newName, err)
			}
			if wake := clock.Now().Add(res.RequeueAfter); res.RequeueAfter <= 0 || wake.After(bound) {
				t.Errorf("requeued after %v (at %v); want a wake by the shutdown's bound %v", res.RequeueAfter, wake, bound)
			}

			if c.ended {
				old.Status.Phase = corev1.PodFailed
				old.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 143}}
				if err := cl.Status().Update(ctx, old); err != nil {
					t.Fatal(err)
				}
				wantMoved("once its kubelet ended the old one")
				return
			}
			clock.SetTime(bound)
			got, _ := reconcileRun(t, r, cl, run)
			if err := cl.Get(ctx, client.ObjectKeyFromObject(pods[1]), old); err != nil || old.DeletionTimestamp == nil {
				t.Fatalf("index 1's old pod past the shutdown's bound: %v, deleting %v; want it deleted", err, old.DeletionTimestamp)
			}
			if rec := attempt.Record(got); rec.BarrierOpenedAt != nil {
				t.Errorf("the gang's barrier opened at %v while index 1's old pod is in the API", rec.BarrierOpenedAt)
			}
		})
	}
}

// deleteRecorder records the grace period of each pod deletion it passes on.
type deleteRecorder struct {
	client.Client
	grace map[string]*int64
}

func (d *deleteRecorder) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	o := &client.DeleteOptions{}
	o.ApplyOptions(opts)
	if d.grace == nil {
		d.grace = map[string]*int64{}
	}
	d.grace[obj.GetName()] = o.GracePeriodSeconds
	return d.Client.Delete(ctx, obj, opts...)
}

// runningPods are job's pods of indexes 0 to n-1, Running, pod i bound to gpu-i with the UID
// uid-llm-i.
func runningPods(t *testing.T, job *batchv1.Job, n int) []*corev1.Pod {
	t.Helper()
	var pods []*corev1.Pod
	for i := range n {
		p, err := attempt.Pod(job, i, attempt.PodOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.UID = types.UID(fmt.Sprintf("uid-llm-%d", i))
		p.Spec.NodeName = fmt.Sprintf("gpu-%d", i)
		p.Status.Phase = corev1.PodRunning
		pods = append(pods, p)
	}
	return pods
}
