package controller

import (
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/faultline-dev/faultline/api/scheme"
	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// TestAttemptJoinsTheRunsPodGroup: where the cluster serves PodGroups, an attempt of a gang
// run first has the run's PodGroup (gang policy: every worker, controlled by the run), and
// its workers name it (spec.schedulingGroup); an Index-scope run, whose indexes come and go
// one by one, and a cluster without the API get none. A PodGroup of that name that is not
// the run's holds the attempt and says so.
func TestAttemptJoinsTheRunsPodGroup(t *testing.T) {
	for name, tc := range map[string]struct {
		served bool
		scope  v1alpha1.RestartScope
		other  bool // a PodGroup of the run's name that is not the run's
		want   bool
	}{
		"served, gang":                  {served: true, want: true},
		"served, index scope":           {served: true, scope: v1alpha1.RestartScopeIndex},
		"not served":                    {},
		"served, the name is not yours": {served: true, other: true},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			run := makeRun("llm", 4).obj()
			run.Spec.RestartScope = tc.scope
			run.Status.Phase = v1alpha1.PhasePending
			run.Spec.Template.Spec.Containers = []corev1.Container{{Name: "worker", Image: "trainer"}}
			objs := []client.Object{run}
			if tc.other {
				objs = append(objs, &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: run.Name, Namespace: run.Namespace}})
			}
			cl := reconcileOnce(t, run, objs, func(r *Reconciler) { r.PodGroups = tc.served })

			job := &batchv1.Job{}
			jobErr := cl.Get(ctx, client.ObjectKeyFromObject(run), job)
			pg := &schedulingv1beta1.PodGroup{}
			pgErr := cl.Get(ctx, client.ObjectKeyFromObject(run), pg)
			if tc.other {
				if !apierrors.IsNotFound(jobErr) {
					t.Errorf("attempt's Job: %v, want none while the PodGroup's name is somebody else's", jobErr)
				}
				got := &v1alpha1.TrainingRun{}
				if err := cl.Get(ctx, client.ObjectKeyFromObject(run), got); err != nil {
					t.Fatal(err)
				}
				if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionStalled); c == nil || c.Reason != v1alpha1.ReasonNameTaken ||
					!strings.Contains(c.Message, "PodGroup ml/llm is not this run's") {
					t.Errorf("condition Stalled %+v, want reason %s naming the PodGroup", c, v1alpha1.ReasonNameTaken)
				}
				return
			}
			if jobErr != nil {
				t.Fatalf("attempt's Job: %v", jobErr)
			}
			group := job.Spec.Template.Spec.SchedulingGroup
			if !tc.want {
				if !apierrors.IsNotFound(pgErr) {
					t.Errorf("PodGroup: %v, want none", pgErr)
				}
				if group != nil {
					t.Errorf("workers' schedulingGroup %+v, want none", group)
				}
				return
			}
			if pgErr != nil {
				t.Fatalf("PodGroup: %v", pgErr)
			}
			if g := pg.Spec.SchedulingPolicy.Gang; g == nil || g.MinCount != 4 {
				t.Errorf("PodGroup policy %+v, want gang of 4", pg.Spec.SchedulingPolicy)
			}
			if !metav1.IsControlledBy(pg, run) {
				t.Errorf("PodGroup owners %+v, want the run as controller", pg.OwnerReferences)
			}
			if group == nil || ptr.Deref(group.PodGroupName, "") != run.Name {
				t.Errorf("workers' schedulingGroup %+v, want podGroupName %s", group, run.Name)
			}
		})
	}
}

// reconcileOnce reconciles run once, as the controller's first pass does, on a fake client
// holding objs (the run among them), with a Reconciler that with may configure; it returns the
// client, to read what the pass made.
func reconcileOnce(t *testing.T, run *v1alpha1.TrainingRun, objs []client.Object, with func(*Reconciler)) client.Client {
	t.Helper()
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithIndex(&corev1.Pod{}, podsByRun, runOfPod).
		WithObjects(objs...).WithStatusSubresource(&v1alpha1.TrainingRun{}).Build()
	r := &Reconciler{Client: cl, APIReader: cl, Recorder: events.NewFakeRecorder(100), Clock: clocktesting.NewFakeClock(t0),
		Frameworks: &spyFrameworks{}}
	if with != nil {
		with(r)
	}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(run)}); err != nil {
		t.Fatal(err)
	}
	return cl
}
