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

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

// TestTeardownDropsFinalizersBeforeDeletingTheJob: a Job's deletion makes the Job controller
// drop the tracking finalizer of every pod it still shows with one, on the client that
// creates the next attempt's pods (measured at 2,048 workers: a minute of its rate limit).
// So the teardown drops those of the running pods first, once per pod, then deletes the old
// Job, then creates the next one held, then deletes the old pods without dropping their
// finalizers a second time. A failed pod keeps its finalizer while the Job lives: the Job
// counts it through it, and would replace an uncounted one (a pod faultline did not ask for).
// So does a running pod that the node agent marked: it is about to end.
func TestTeardownDropsFinalizersBeforeDeletingTheJob(t *testing.T) {
	ctx := context.Background()
	run, job, old := runWithJob(4, v1alpha1.TrainingRunStatus{Attempt: 2, Phase: v1alpha1.PhaseRestarting})
	pods := trackedWorkers(4, old)
	failed := pods[0]
	failed.Status = corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 143},
	}}}}
	marked := pods[3]
	marked.Status.Conditions = []corev1.PodCondition{{Type: v1alpha1.PodConditionInfrastructureFault, Status: corev1.ConditionTrue, Reason: string(v1alpha1.CauseNodeShutdown)}}
	rec := &writes{}
	cl := fake.NewClientBuilder().WithScheme(Scheme()).WithIndex(&corev1.Pod{}, podsByRun, runOfPod).
		WithObjects(run, job, pods[0], pods[1], pods[2], pods[3]).
		WithStatusSubresource(&v1alpha1.TrainingRun{}).
		WithInterceptorFuncs(rec.funcs(nil)).Build()
	r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clocktesting.NewFakeClock(t0), Frameworks: &spyFrameworks{}}

	if _, err := r.teardown(ctx, run, &observed{job: job, older: pods}); err != nil {
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
	if created := at("create *v1.Job llm"); created < deleted {
		t.Errorf("attempt 2's Job created before attempt 1's was deleted: %q", ops)
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
		if slices.Contains(got.Finalizers, batchv1.JobTrackingFinalizer) || got.DeletionTimestamp == nil {
			t.Errorf("pod %s: finalizers %q, deleting %v; want no tracking finalizer and being deleted", p.Name, got.Finalizers, got.DeletionTimestamp != nil)
		}
	}
	next := &batchv1.Job{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(job), next); err != nil {
		t.Fatal(err)
	}
	if n, _ := attempt.Number(next); n != 2 || !attempt.Held(&next.Spec.Template.Spec) {
		t.Errorf("the Job is attempt %d, held %v; want attempt 2, held while attempt 1's pods go", n, attempt.Held(&next.Spec.Template.Spec))
	}
}

// TestEachPodRemovedOnceWhateverTheCacheShows: the cache shows a pod unchanged for most of
// a second after faultline dropped its finalizer and deleted it, and the reconciles in
// between must not request either again (the audit log of a 256-worker teardown showed 50
// such requests, some pods deleted four times). A removal that failed is tried again.
func TestEachPodRemovedOnceWhateverTheCacheShows(t *testing.T) {
	ctx := context.Background()
	_, _, labels := runWithJob(3, v1alpha1.TrainingRunStatus{})
	pods := trackedWorkers(3, labels)
	rec := &writes{}
	failed := false
	cl := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(pods[0], pods[1], pods[2]).
		WithInterceptorFuncs(rec.funcs(func(op string, obj client.Object) error {
			if op == "delete" && obj.GetName() == "llm-2" && !failed {
				failed = true
				return fmt.Errorf("etcdserver: request timed out")
			}
			return nil
		})).Build()
	r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clocktesting.NewFakeClock(t0)}
	sg := &sighting{}
	for i, want := range [][]string{
		{"patch *v1.Pod llm-0", "delete *v1.Pod llm-0", "patch *v1.Pod llm-1", "delete *v1.Pod llm-1", "patch *v1.Pod llm-2", "delete *v1.Pod llm-2"},
		{"patch *v1.Pod llm-2", "delete *v1.Pod llm-2"}, // the failed one, again
		nil,
	} {
		rec.ops = nil
		err := r.removePods(ctx, sg, pods, true) // the same stale copies every time
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

// trackedWorkers are n running pods ml/llm-<i> with those labels and the Job's tracking
// finalizer.
func trackedWorkers(n int, labels map[string]string) []*corev1.Pod {
	var pods []*corev1.Pod
	for i := range n {
		pods = append(pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("llm-%d", i), Namespace: "ml", UID: types.UID(fmt.Sprintf("uid-llm-%d", i)), Labels: labels,
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
	labels := map[string]string{v1alpha1.LabelRun: "llm", v1alpha1.LabelAttempt: "1"}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "uid-job-1", OwnerReferences: owner, Labels: labels}}
	return run, job, labels
}

// TestJobMayCreate: the Job controller can create a pod for an index that no pod holds: none
// was created yet, or its pod ended uncounted, because the teardown dropped its tracking
// finalizer while it ran. A pod that has not ended holds its index (podReplacementPolicy
// Failed), and so does one that ended with its finalizer, or whose finalizer the Job
// controller dropped once it had counted it.
func TestJobMayCreate(t *testing.T) {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "uid-job-1"},
		Spec:       batchv1.JobSpec{Completions: ptr.To[int32](3)},
	}
	pod := func(index int, phase corev1.PodPhase, tracked bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("llm-%d", index), UID: types.UID(fmt.Sprintf("uid-llm-%d", index)),
				Annotations:     map[string]string{batchv1.JobCompletionIndexAnnotation: fmt.Sprint(index)},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
			},
			Status: corev1.PodStatus{Phase: phase},
		}
		if tracked {
			p.Finalizers = []string{batchv1.JobTrackingFinalizer}
		}
		return p
	}
	running := func(i int) *corev1.Pod { return pod(i, corev1.PodRunning, false) }
	ended := pod(2, corev1.PodFailed, false)
	stranger := running(2)
	stranger.OwnerReferences[0].UID = "uid-job-0"
	finished := job.DeepCopy()
	finished.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}
	cases := map[string]struct {
		job            *batchv1.Job
		pods, stripped []*corev1.Pod
		want           bool
	}{
		"every index running":              {pods: []*corev1.Pod{running(0), running(1), running(2)}, stripped: []*corev1.Pod{running(1)}, want: false},
		"an index not created yet":         {pods: []*corev1.Pod{running(0), running(1)}, want: true},
		"ended, finalizer still on":        {pods: []*corev1.Pod{running(0), running(1), pod(2, corev1.PodFailed, true)}, want: false},
		"ended, counted by the Job":        {pods: []*corev1.Pod{running(0), running(1), ended}, want: false},
		"ended after the teardown's strip": {pods: []*corev1.Pod{running(0), running(1), ended}, stripped: []*corev1.Pod{running(2)}, want: true},
		"another Job's pod holds none":     {pods: []*corev1.Pod{running(0), running(1), stranger}, want: true},
		"finished: the Job creates none":   {job: finished, pods: []*corev1.Pod{running(0)}, want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			j := job
			if tc.job != nil {
				j = tc.job
			}
			if got := jobMayCreate(j, tc.pods, tc.stripped); got != tc.want {
				t.Errorf("jobMayCreate = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestNextJobWaitsForTheOldJobsCreations: the Job controller keys what it expects by the
// Job's name, which the next attempt's Job shares; pods a deleted Job was still creating
// would leave the next Job with an expectation it never meets (no pod for 5 minutes and
// more, measured). So while the old Job may have been creating pods when it was deleted, or
// a pod of the old attempt created after the attempt ended is younger than
// quietAfterCreation, the next Job waits. A young attempt that had all its pods does not.
func TestNextJobWaitsForTheOldJobsCreations(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		age     time.Duration // of the old attempt's pods
		ended   time.Duration // how long ago the old attempt ended
		workers int           // of the old attempt's 2 pods, those the Job had created
		wait    time.Duration // before the next Job is created
	}{
		"a settled attempt":                 {age: time.Hour, ended: time.Second, workers: 2, wait: 0},
		"a young attempt with all its pods": {age: time.Second, ended: 500 * time.Millisecond, workers: 2, wait: 0},
		"a pod created after the end":       {age: time.Second, ended: 2500 * time.Millisecond, workers: 2, wait: quietAfterCreation - time.Second},
		"the Job was still creating":        {age: time.Hour, ended: time.Second, workers: 1, wait: quietAfterCreation},
		"both: the later one counts":        {age: time.Second, ended: 2500 * time.Millisecond, workers: 1, wait: quietAfterCreation},
	} {
		t.Run(name, func(t *testing.T) {
			run, job, old := runWithJob(2, v1alpha1.TrainingRunStatus{Attempt: 2, Phase: v1alpha1.PhaseRestarting, Attempts: []v1alpha1.AttemptRecord{
				{Attempt: 1, EndTime: ptr.To(metav1.NewTime(t0.Add(-tc.ended)))}, {Attempt: 2},
			}})
			job.Spec.Completions = ptr.To[int32](2)
			r, cl, pods := oldAttempt(run, job, old, tc.workers, t0.Add(-tc.age))

			res, err := r.teardown(ctx, run, &observed{job: job, older: pods})
			if err != nil {
				t.Fatal(err)
			}
			next := &batchv1.Job{}
			err = cl.Get(ctx, client.ObjectKeyFromObject(job), next)
			switch {
			case tc.wait == 0 && err != nil:
				t.Fatalf("no next Job after a settled attempt: %v", err)
			case tc.wait == 0:
				if n, _ := attempt.Number(next); n != 2 {
					t.Errorf("the Job is attempt %d, want 2", n)
				}
			case err == nil:
				t.Errorf("the next Job was created at once; want it %s later", tc.wait)
			case res.RequeueAfter != tc.wait:
				t.Errorf("requeued after %s, want %s", res.RequeueAfter, tc.wait)
			}
		})
	}
}

// TestLastLateCreation: a pod that the old Job created after its attempt ended, or to
// replace a worker it did not count, says that the Job was still creating pods.
func TestLastLateCreation(t *testing.T) {
	run := &v1alpha1.TrainingRun{Status: v1alpha1.TrainingRunStatus{Attempt: 3, Attempts: []v1alpha1.AttemptRecord{
		{Attempt: 1, EndTime: ptr.To(metav1.NewTime(t0.Add(-time.Minute)))},
		{Attempt: 2, EndTime: ptr.To(metav1.NewTime(t0.Add(300 * time.Millisecond)))},
		{Attempt: 3},
	}}}
	pod := func(attemptN, index int, created time.Time) metav1.Object {
		return &metav1.ObjectMeta{
			Labels:            map[string]string{v1alpha1.LabelAttempt: fmt.Sprint(attemptN)},
			Annotations:       map[string]string{batchv1.JobCompletionIndexAnnotation: fmt.Sprint(index)},
			CreationTimestamp: metav1.NewTime(created),
		}
	}
	for name, tc := range map[string]struct {
		pods []metav1.Object
		want time.Time
	}{
		"none":                              {nil, time.Time{}},
		"created before the end":            {[]metav1.Object{pod(2, 0, t0.Add(-time.Hour)), pod(2, 1, t0.Add(-time.Hour))}, time.Time{}},
		"created in the second it ended":    {[]metav1.Object{pod(2, 0, t0)}, time.Time{}},
		"created a second after":            {[]metav1.Object{pod(2, 0, t0.Add(-time.Hour)), pod(2, 1, t0.Add(time.Second))}, t0.Add(time.Second)},
		"a replacement, in the same second": {[]metav1.Object{pod(2, 1, t0.Add(-time.Hour)), pod(2, 0, t0.Add(-time.Hour)), pod(2, 1, t0)}, t0},
		"one pod per index of two attempts": {[]metav1.Object{pod(1, 0, t0.Add(-time.Hour)), pod(2, 0, t0.Add(-time.Hour))}, time.Time{}},
		"an attempt with no end recorded":   {[]metav1.Object{pod(3, 0, t0.Add(time.Hour))}, time.Time{}},
	} {
		t.Run(name, func(t *testing.T) {
			if got := lastLateCreation(run, tc.pods); !got.Equal(tc.want) {
				t.Errorf("lastLateCreation = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestOverlapTeardown: the next Job is created during the teardown when the Job controller
// created the last attempt's pods slowly (its default rate limit: 20 a second), and after it
// when it created them about as fast as the scheduler binds them or faster (QPS 50 and more).
func TestOverlapTeardown(t *testing.T) {
	pod := func(attemptN, index int, created time.Time) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Labels:            map[string]string{v1alpha1.LabelAttempt: fmt.Sprint(attemptN)},
			Annotations:       map[string]string{batchv1.JobCompletionIndexAnnotation: fmt.Sprint(index)},
			CreationTimestamp: metav1.NewTime(created.Truncate(time.Second)),
		}}
	}
	pods := func(attemptN, n int, over time.Duration) []*corev1.Pod {
		var out []*corev1.Pod
		for i := range n {
			out = append(out, pod(attemptN, i, t0.Add(over*time.Duration(i)/time.Duration(max(n-1, 1)))))
		}
		return out
	}
	for name, tc := range map[string]struct {
		pods []*corev1.Pod
		want bool
	}{
		"256 in 12 s (default rate limit)":     {pods(1, 256, 12*time.Second), true},
		"256 in 1 s (QPS 200)":                 {pods(1, 256, time.Second), false},
		"256 in 2 s (QPS 100)":                 {pods(1, 256, 2*time.Second), false},
		"256 in 4 s (QPS 50)":                  {pods(1, 256, 4*time.Second), false},
		"2048 in 42 s (QPS 50)":                {pods(1, 2048, 42*time.Second), false},
		"256 in 10 s":                          {pods(1, 256, 10*time.Second), true},
		"2048 in 9 s (QPS 200)":                {pods(1, 2048, 9*time.Second), false},
		"2048 in 100 s (default rate limit)":   {pods(1, 2048, 100*time.Second), true},
		"16 at once":                           {pods(1, 16, 0), true},
		"the newest attempt's pods count":      {slices.Concat(pods(1, 256, 0), pods(2, 256, 12*time.Second)), true},
		"an older attempt's leftovers ignored": {slices.Concat(pods(2, 256, 0), pods(1, 3, time.Hour)), false},
		"a replacement an hour later ignored":  {append(pods(1, 256, 0), pod(1, 7, t0.Add(time.Hour))), false},
		"no pod with an index":                 {[]*corev1.Pod{{}}, true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := overlapTeardown(tc.pods); got != tc.want {
				t.Errorf("overlapTeardown = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFastCreationsWaitForTheTeardown: when the Job controller created the last attempt's
// pods fast, the next Job is created only once the old pods are gone, without the gate. A pod
// the old Job created late may be gone by then, before the API server is asked: the
// teardown's sight of it still holds the next Job back until the Job controller is quiet.
func TestFastCreationsWaitForTheTeardown(t *testing.T) {
	ctx := context.Background()
	const workers = 64 // created in one second: faster than fastCreation
	for name, late := range map[string]bool{"every pod on time": false, "a late replacement seen only by the teardown": true} {
		t.Run(name, func(t *testing.T) {
			run, job, old := runWithJob(workers, v1alpha1.TrainingRunStatus{Attempt: 2, Phase: v1alpha1.PhaseRestarting, Attempts: []v1alpha1.AttemptRecord{
				{Attempt: 1, EndTime: ptr.To(metav1.NewTime(t0))}, {Attempt: 2},
			}})
			job.Spec.Completions = ptr.To[int32](workers)
			r, cl, pods := oldAttempt(run, job, old, workers, t0.Add(-time.Hour)) // all in one second
			seen := pods
			if late { // in the cache, never at the API server by the time it is asked
				replacement := pods[0].DeepCopy()
				replacement.Name, replacement.UID = "llm-0-late", "uid-llm-0-late"
				replacement.CreationTimestamp = metav1.NewTime(t0.Add(time.Second))
				seen = append(slices.Clone(pods), replacement)
			}

			if _, err := r.teardown(ctx, run, &observed{job: job, older: seen}); err != nil {
				t.Fatal(err)
			}
			next := &batchv1.Job{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(job), next); err == nil {
				t.Fatalf("attempt %s's Job created while the old pods go, though the Job controller creates them fast", next.Labels[v1alpha1.LabelAttempt])
			}
			for _, p := range pods { // the kubelet is done with them
				if err := cl.Patch(ctx, p.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
					t.Fatal(err)
				}
			}
			res, err := r.createAttempt(ctx, run, false)
			if err != nil {
				t.Fatal(err)
			}
			err = cl.Get(ctx, client.ObjectKeyFromObject(job), next)
			if late {
				if want := time.Second + quietAfterCreation; err == nil || res.RequeueAfter != want {
					t.Fatalf("next Job created: %v, requeued after %s; want none yet, and a look again after %s", err == nil, res.RequeueAfter, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("no Job once the old pods are gone: %v", err)
			}
			if n, _ := attempt.Number(next); n != 2 || attempt.Held(&next.Spec.Template.Spec) {
				t.Errorf("the Job is attempt %d, held %v; want attempt 2, not held", n, attempt.Held(&next.Spec.Template.Spec))
			}
		})
	}
}

// oldAttempt is a reconciler on a fake API server holding run, its Job of attempt 1 and that
// many running workers of it, all created at created, that the kubelet keeps once deleted.
func oldAttempt(run *v1alpha1.TrainingRun, job *batchv1.Job, labels map[string]string, workers int, created time.Time) (*Reconciler, client.Client, []*corev1.Pod) {
	objs := []client.Object{run, job}
	var pods []*corev1.Pod
	for i := range workers {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("llm-%d", i), Namespace: "ml", UID: types.UID(fmt.Sprintf("uid-llm-%d", i)), Labels: labels,
				Annotations:       map[string]string{batchv1.JobCompletionIndexAnnotation: fmt.Sprint(i)},
				OwnerReferences:   []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
				CreationTimestamp: metav1.NewTime(created),
				Finalizers:        []string{batchv1.JobTrackingFinalizer, kubeletStopping},
			},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
		pods = append(pods, p)
		objs = append(objs, p)
	}
	cl := fake.NewClientBuilder().WithScheme(Scheme()).WithIndex(&corev1.Pod{}, podsByRun, runOfPod).
		WithObjects(objs...).WithStatusSubresource(&v1alpha1.TrainingRun{}).Build()
	r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(1000), Clock: clocktesting.NewFakeClock(t0), Frameworks: &spyFrameworks{}}
	return r, cl, pods
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
	cl := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(run, job).WithStatusSubresource(&v1alpha1.TrainingRun{}).
		WithInterceptorFuncs(interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			writes++
			return c.SubResource(sub).Update(ctx, obj, opts...)
		}}).Build()
	clock := clocktesting.NewFakeClock(t0)
	r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clock, Frameworks: &spyFrameworks{}}
	var pods []*corev1.Pod
	for i := range workers {
		pods = append(pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("llm-%d", i), Namespace: "ml", Labels: labels},
			Spec:       corev1.PodSpec{NodeName: "gpu-1"},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning},
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
