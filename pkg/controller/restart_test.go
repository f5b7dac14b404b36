package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
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
func TestTeardownDropsFinalizersBeforeDeletingTheJob(t *testing.T) {
	ctx := context.Background()
	run, job, old := runWithJob(3, v1alpha1.TrainingRunStatus{Attempt: 2, Phase: v1alpha1.PhaseRestarting})
	var pods []*corev1.Pod
	for i := range 3 {
		pods = append(pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("llm-%d", i), Namespace: "ml", UID: types.UID(fmt.Sprintf("uid-llm-%d", i)), Labels: old,
				// The kubelet keeps each one until its containers have stopped.
				Finalizers: []string{batchv1.JobTrackingFinalizer, kubeletStopping},
			},
			Spec:   corev1.PodSpec{NodeName: "gpu-1", Containers: []corev1.Container{{Name: "worker"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	failed := pods[0]
	failed.Status = corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 143},
	}}}}
	var (
		mu  sync.Mutex
		ops []string
	)
	record := func(op string, obj client.Object) {
		mu.Lock()
		defer mu.Unlock()
		ops = append(ops, fmt.Sprintf("%s %T %s", op, obj, obj.GetName()))
	}
	cl := fake.NewClientBuilder().WithScheme(Scheme()).WithIndex(&corev1.Pod{}, podsByRun, runOfPod).
		WithObjects(run, job, pods[0], pods[1], pods[2]).
		WithStatusSubresource(&v1alpha1.TrainingRun{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				record("patch", obj)
				return c.Patch(ctx, obj, patch, opts...)
			},
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				record("delete", obj)
				return c.Delete(ctx, obj, opts...)
			},
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				record("create", obj)
				return c.Create(ctx, obj, opts...)
			},
		}).Build()
	r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clocktesting.NewFakeClock(t0), Frameworks: &spyFrameworks{}}

	if _, err := r.teardown(ctx, run, &observed{job: job, older: pods}); err != nil {
		t.Fatal(err)
	}

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
		if p == failed {
			if at(patch) < deleted {
				t.Errorf("failed pod %s: finalizer dropped while its Job could replace it uncounted: %q", p.Name, ops)
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
