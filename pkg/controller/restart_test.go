package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/faultline-dev/faultline/api/scheme"
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// TestTeardownDropsFinalizersBeforeDeletingTheJob: a Job's deletion makes the Job controller
// drop the tracking finalizer of every pod it still shows with one, on the client that
// creates the next attempt's pods (measured at 2,048 workers: a minute of its rate limit).
// So the teardown drops those of the running pods first, once per pod, then deletes the old
// Job, then deletes the old pods without dropping their finalizers a second time. A failed
// pod keeps its finalizer until its Job is being deleted: the Job counts it through it, and
// would replace an uncounted one (a pod faultline did not ask for). So does a running pod
// that the node agent marked: it is about to end. The next attempt's Job is not created
// while the old one, held by its finalizer, is still there.
func TestTeardownDropsFinalizersBeforeDeletingTheJob(t *testing.T) {
	ctx := context.Background()
	run, job, old := runWithJob(4, v1alpha1.TrainingRunStatus{Attempt: 2, Phase: v1alpha1.PhaseRestarting})
	pods := trackedWorkers(4, old, job)
	failed := pods[0]
	failed.Status = corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 143},
	}}}}
	marked := pods[3]
	marked.Status.Conditions = []corev1.PodCondition{{Type: v1alpha1.PodConditionInfrastructureFault, Status: corev1.ConditionTrue, Reason: string(v1alpha1.CauseNodeShutdown)}}
	rec := &writes{}
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithIndex(&corev1.Pod{}, podsByRun, runOfPod).
		WithObjects(run, job, pods[0], pods[1], pods[2], pods[3]).
		WithStatusSubresource(&v1alpha1.TrainingRun{}).
		WithInterceptorFuncs(rec.funcs(nil)).Build()
	r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clocktesting.NewFakeClock(t0), Frameworks: &spyFrameworks{}}

	if _, err := r.teardown(ctx, run, &observed{job: job, all: pods, older: pods, nodes: map[string]exitclass.NodeFacts{}}); err != nil {
		t.Fatal(err)
	}
	ops := rec.ops
	at := func(op string) int {
		i := slices.Index(ops, op)
		if i < 0 {
			t.Fatalf("no %q among %q", op, ops)
		}
		return i
	}
	deleted := at("delete *v1.Job llm")
	if slices.Contains(ops, "create *v1.Job llm") {
		t.Errorf("attempt 2's Job created while attempt 1's is still there: %q", ops)
	}
	for _, p := range pods {
		patch := "patch *v1.Pod " + p.Name
		if n := count(ops, patch); n != 1 {
			t.Errorf("pod %s: %d finalizer patches, want 1: %q", p.Name, n, ops)
		}
		if p == failed || p == marked {
			if at(patch) < deleted {
				t.Errorf("%s pod %s: finalizer dropped while its Job could replace it uncounted: %q", p.Status.Phase, p.Name, ops)
			}
		} else if at(patch) > deleted {
			t.Errorf("running pod %s: finalizer dropped after its Job was deleted: %q", p.Name, ops)
		}
		if at("delete *v1.Pod "+p.Name) < deleted {
			t.Errorf("pod %s deleted while its Job could still replace it: %q", p.Name, ops)
		}
		got := &corev1.Pod{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			t.Fatal(err)
		}
		if hasTrackingFinalizer(got) || got.DeletionTimestamp == nil {
			t.Errorf("pod %s: finalizers %q, deleting %v; want no tracking finalizer and being deleted", p.Name, got.Finalizers, got.DeletionTimestamp != nil)
		}
	}
	held := &batchv1.Job{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(job), held); err != nil {
		t.Fatalf("attempt 1's Job: %v; want it held by its finalizer while its pods go", err)
	}
	if held.DeletionTimestamp == nil {
		t.Error("attempt 1's Job is not being deleted")
	}
}

// TestJobHeldUntilTheJobControllerIsDone: a deleted attempt's Job stays, held by
// FinalizerAttemptJob, while a pod of it may still run, while its status still counts pods
// (no sync that saw the deletion has written it yet: one that began before may still be
// creating pods), and while the API server shows a pod of it that the cache does not. Then it
// goes, and only then is the next attempt's Job created.
func TestJobHeldUntilTheJobControllerIsDone(t *testing.T) {
	ctx := context.Background()
	run, job, old := runWithJob(2, v1alpha1.TrainingRunStatus{Attempt: 2, Phase: v1alpha1.PhaseRestarting})
	job.Finalizers = []string{v1alpha1.FinalizerAttemptJob}
	job.Status.Active = 2
	pods := trackedWorkers(2, old, job)
	late := trackedWorkers(3, old, job)[2] // created a moment ago: the cache has not shown it
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithIndex(&corev1.Pod{}, podsByRun, runOfPod).
		WithObjects(run, job, pods[0], pods[1], late).WithStatusSubresource(&v1alpha1.TrainingRun{}, &batchv1.Job{}).Build()
	r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clocktesting.NewFakeClock(t0), Frameworks: &spyFrameworks{}}
	current := func() *batchv1.Job {
		t.Helper()
		j := &batchv1.Job{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(job), j); err != nil {
			t.Fatalf("attempt 1's Job: %v", err)
		}
		return j
	}
	gone := func(p *corev1.Pod) { // the kubelet has stopped it
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"$deleteFromPrimitiveList/finalizers":[%q]}}`, kubeletStopping)
		if err := cl.Patch(ctx, p.DeepCopy(), client.RawPatch(types.StrategicMergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}
	step := func(what string, cached []*corev1.Pod, wantHeld bool) {
		t.Helper()
		j := current()
		r.deletions.saw(j) // the informer sees every version
		if _, err := r.teardown(ctx, run, &observed{job: j, all: cached, older: cached, nodes: map[string]exitclass.NodeFacts{}}); err != nil {
			t.Fatal(err)
		}
		got := &batchv1.Job{}
		err := cl.Get(ctx, client.ObjectKeyFromObject(job), got)
		if held := err == nil && got.UID == job.UID; held != wantHeld {
			t.Errorf("%s: attempt 1's Job held %v, want %v", what, held, wantHeld)
		}
	}
	step("its pods stopping", pods, true)
	gone(pods[0])
	gone(pods[1])
	step("its pods gone, its status still counting them", nil, true)
	j := current()
	j.Status.Active = 0
	if err := cl.Status().Update(ctx, j); err != nil {
		t.Fatal(err)
	}
	step("a pod of it that only the API server shows", nil, true)
	step("that pod, now in the cache, stopping", []*corev1.Pod{late}, true)
	gone(late)
	step("done: no pod left, a status that saw the deletion", nil, false)
	next := &batchv1.Job{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(job), next); err != nil {
		t.Fatalf("attempt 2's Job: %v", err)
	}
	if n, _ := attempt.Number(next); n != 2 || !slices.Contains(next.Finalizers, v1alpha1.FinalizerAttemptJob) {
		t.Errorf("the next Job is attempt %d with finalizers %q; want attempt 2, held by its own", n, next.Finalizers)
	}
}

// TestJobHeldWhileAnEarlierSyncMayCreatePods: a Job deleted while the Job controller's
// first sync of it still creates its pods (its status not written yet, none of its pods
// in the API yet) stays until a sync that saw the deletion has written it: the pods still
// to come land on it, not on the next attempt's Job of the same name (the CI failure of
// TestE2EFaultWhileTheJobCreatesPods: attempt 2's Job got no pod for minutes).
func TestJobHeldWhileAnEarlierSyncMayCreatePods(t *testing.T) {
	ctx := context.Background()
	run, job, _ := runWithJob(2, v1alpha1.TrainingRunStatus{Attempt: 2, Phase: v1alpha1.PhaseRestarting})
	job.Finalizers = []string{v1alpha1.FinalizerAttemptJob}
	job.DeletionTimestamp = &metav1.Time{Time: t0}
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithIndex(&corev1.Pod{}, podsByRun, runOfPod).
		WithObjects(run, job).WithStatusSubresource(&v1alpha1.TrainingRun{}, &batchv1.Job{}).Build()
	clk := clocktesting.NewFakeClock(t0.Add(time.Second))
	r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clk, Frameworks: &spyFrameworks{}}
	step := func(what string, wantHeld bool) {
		t.Helper()
		j := &batchv1.Job{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(job), j); err != nil {
			t.Fatalf("%s: attempt 1's Job: %v", what, err)
		}
		r.deletions.saw(j)
		if _, err := r.teardown(ctx, run, &observed{job: j, nodes: map[string]exitclass.NodeFacts{}}); err != nil {
			t.Fatal(err)
		}
		got := &batchv1.Job{}
		err := cl.Get(ctx, client.ObjectKeyFromObject(job), got)
		if held := err == nil && got.UID == job.UID; held != wantHeld {
			t.Errorf("%s: attempt 1's Job held %v, want %v", what, held, wantHeld)
		}
	}
	step("deleted before the Job controller first wrote it", true)
	j := &batchv1.Job{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(job), j); err != nil {
		t.Fatal(err)
	}
	j.Status.StartTime = &metav1.Time{Time: t0}
	j.Status.Ready = ptr.To[int32](0)
	j.Status.Terminating = ptr.To[int32](0)
	if err := cl.Status().Update(ctx, j); err != nil {
		t.Fatal(err)
	}
	step("written by a sync that saw the deletion", false)
}

// TestEachPodRemovedOnceWhateverTheCacheShows: the cache shows a pod unchanged for most of
// a second after faultline dropped its finalizer and deleted it, and the reconciles in
// between must not request either again (the audit log of a 256-worker teardown showed 50
// such requests, some pods deleted four times). A removal that failed is tried again.
func TestEachPodRemovedOnceWhateverTheCacheShows(t *testing.T) {
	ctx := context.Background()
	_, job, labels := runWithJob(3, v1alpha1.TrainingRunStatus{})
	pods := trackedWorkers(3, labels, job)
	rec := &writes{}
	failed := false
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(pods[0], pods[1], pods[2]).
		WithInterceptorFuncs(rec.funcs(func(op string, obj client.Object) error {
			if op == "delete" && obj.GetName() == "llm-2" && !failed {
				failed = true
				return fmt.Errorf("etcdserver: request timed out")
			}
			return nil
		})).Build()
	r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clocktesting.NewFakeClock(t0)}
	for i, want := range [][]string{
		{"patch *v1.Pod llm-0", "delete *v1.Pod llm-0", "patch *v1.Pod llm-1", "delete *v1.Pod llm-1", "patch *v1.Pod llm-2", "delete *v1.Pod llm-2"},
		{"patch *v1.Pod llm-2", "delete *v1.Pod llm-2"}, // the failed one, again
		nil,
	} {
		rec.ops = nil
		err := r.removePods(ctx, pods, true) // the same stale copies every time
		ops := rec.ops
		if (err != nil) != (i == 0) {
			t.Errorf("call %d: error %v", i+1, err)
		}
		slices.Sort(ops)
		slices.Sort(want)
		if !slices.Equal(ops, want) {
			t.Errorf("call %d: requests %q, want %q", i+1, ops, want)
		}
	}
}

// trackedWorkers are n running pods ml/llm-<i> of job with those labels and the Job's
// tracking finalizer.
func trackedWorkers(n int, labels map[string]string, job *batchv1.Job) []*corev1.Pod {
	var pods []*corev1.Pod
	for i := range n {
		pods = append(pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("llm-%d", i), Namespace: "ml", UID: types.UID(fmt.Sprintf("uid-llm-%d", i)), Labels: labels,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
				// The kubelet keeps each one until its containers have stopped.
				Finalizers: []string{batchv1.JobTrackingFinalizer, kubeletStopping},
			},
			Spec:   corev1.PodSpec{NodeName: "gpu-1", Containers: []corev1.Container{{Name: "worker"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	return pods
}

// writes records the writes a fake client takes, "verb *Type name" in order; fail, if set,
// may refuse one before it reaches the client.
type writes struct {
	mu  sync.Mutex
	ops []string
}

func (w *writes) funcs(fail func(op string, obj client.Object) error) interceptor.Funcs {
	record := func(op string, obj client.Object) error {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.ops = append(w.ops, fmt.Sprintf("%s %T %s", op, obj, obj.GetName()))
		if fail != nil {
			return fail(op, obj)
		}
		return nil
	}
	return interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := record("patch", obj); err != nil {
				return err
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := record("delete", obj); err != nil {
				return err
			}
			return c.Delete(ctx, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := record("create", obj); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
	}
}

func count(ops []string, op string) int {
	n := 0
	for _, o := range ops {
		if o == op {
			n++
		}
	}
	return n
}

// runWithJob is ml/llm, a run of that many workers and that status, with its Job of attempt
// 1 and that attempt's labels.
func runWithJob(workers int32, st v1alpha1.TrainingRunStatus) (*v1alpha1.TrainingRun, *batchv1.Job, map[string]string) {
	run := &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "uid-llm", Generation: 1},
		Spec: v1alpha1.TrainingRunSpec{
			Workers: workers, Framework: v1alpha1.FrameworkNone,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "trainer"}}}},
		},
		Status: st,
	}
	owner := []metav1.OwnerReference{*metav1.NewControllerRef(run, v1alpha1.GroupVersion.WithKind(v1alpha1.KindTrainingRun))}
	labels := map[string]string{v1alpha1.LabelRun: "llm", v1alpha1.LabelRunUID: "uid-llm", v1alpha1.LabelAttempt: "1"}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "uid-job-1", OwnerReferences: owner, Labels: labels,
		Finalizers: []string{v1alpha1.FinalizerAttemptJob}}}
	return run, job, labels
}

// TestReadyCountWrittenAtMostOncePerInterval: while a gang becomes ready worker by worker,
// the run's status records the count at most once per progressInterval; the moment every
// worker is ready (the phase Running, the end of a restart) is written at once.
func TestReadyCountWrittenAtMostOncePerInterval(t *testing.T) {
	ctx := context.Background()
	const workers = 4
	run, job, labels := runWithJob(workers, v1alpha1.TrainingRunStatus{Attempt: 1, Phase: v1alpha1.PhasePending, Attempts: []v1alpha1.AttemptRecord{{Attempt: 1}}})
	job.CreationTimestamp = metav1.NewTime(t0.Add(-time.Minute))
	writes := 0
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(run, job).WithStatusSubresource(&v1alpha1.TrainingRun{}).
		WithInterceptorFuncs(interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			writes++
			return c.SubResource(sub).Update(ctx, obj, opts...)
		}}).Build()
	clock := clocktesting.NewFakeClock(t0)
	r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clock, Frameworks: &spyFrameworks{}}
	var pods []*corev1.Pod
	for i := range workers {
		pods = append(pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("llm-%d", i), Namespace: "ml", Labels: labels,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
			Spec:   corev1.PodSpec{NodeName: "gpu-1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	for _, step := range []struct {
		at           time.Duration
		ready        int
		writes       int
		recorded     int32
		requeueAfter time.Duration
	}{
		{at: 0, ready: 1, writes: 1, recorded: 1},
		{at: 100 * time.Millisecond, ready: 2, writes: 1, recorded: 1, requeueAfter: 900 * time.Millisecond},
		{at: 300 * time.Millisecond, ready: 2, writes: 1, recorded: 1, requeueAfter: 700 * time.Millisecond},
		{at: time.Second, ready: 3, writes: 2, recorded: 3},
		{at: 1100 * time.Millisecond, ready: 4, writes: 3, recorded: 4}, // Running: at once
	} {
		clock.SetTime(t0.Add(step.at))
		for _, p := range pods[:step.ready] {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		current := &v1alpha1.TrainingRun{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(run), current); err != nil {
			t.Fatal(err)
		}
		res, err := r.updateProgress(ctx, current, &observed{job: job, current: pods})
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(run), current); err != nil {
			t.Fatal(err)
		}
		if writes != step.writes || current.Status.ReadyWorkers != step.recorded || res.RequeueAfter != step.requeueAfter {
			t.Errorf("at %s with %d ready: %d writes, %d ready recorded, requeue after %s; want %d, %d, %s",
				step.at, step.ready, writes, current.Status.ReadyWorkers, res.RequeueAfter, step.writes, step.recorded, step.requeueAfter)
		}
	}
}

// TestForcedRemovalAsksBothAtOnce: the removal of a pod that its agent saw stop drops its
// finalizer and deletes it with two requests in flight together, not one after the other:
// on an API server busy with a node's shutdown each takes a round trip of most of a second,
// which a moved index's new pod waits for.
func TestForcedRemovalAsksBothAtOnce(t *testing.T) {
	ctx := context.Background()
	_, job, labels := runWithJob(1, v1alpha1.TrainingRunStatus{})
	pod := trackedWorkers(1, labels, job)[0]
	deleting := make(chan struct{})
	var overlapped bool
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(pod).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			select { // the finalizer's drop answers only once the deletion was asked, or after a second
			case <-deleting:
				overlapped = true
			case <-time.After(time.Second):
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			close(deleting)
			return c.Delete(ctx, obj, opts...)
		},
	}).Build()
	r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clocktesting.NewFakeClock(t0)}
	if err := r.forceRemovePods(ctx, []*corev1.Pod{pod}); err != nil {
		t.Fatal(err)
	}
	if !overlapped {
		t.Error("the deletion was asked only after the finalizer's drop returned, want both in flight together")
	}
	got := &corev1.Pod{}
	err := cl.Get(ctx, client.ObjectKeyFromObject(pod), got)
	if err == nil && (got.DeletionTimestamp == nil || slices.Contains(got.Finalizers, batchv1.JobTrackingFinalizer)) {
		t.Errorf("the pod after its removal: deletion %v, finalizers %v; want it deleted without the Job's finalizer", got.DeletionTimestamp, got.Finalizers)
	}
}
