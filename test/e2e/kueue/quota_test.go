package kueue

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/kueue"
)

// Issue 38, item 3: what Kueue admitted is what runs, every attempt.

// requireRefused fails the test unless err is the API server's refusal (Forbidden) whose
// message has every one of want.
func requireRefused(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("%s: the API server answered %v, want a refusal (Forbidden)", what, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: refusal %q does not say %q", what, err.Error(), w)
		}
	}
}

func setGPUs(n string) func(*v1alpha1.TrainingRun) {
	return func(r *v1alpha1.TrainingRun) {
		r.Spec.Template.Spec.Containers[0].Resources.Limits[v1alpha1.ResourceGPU] = resource.MustParse(n)
	}
}

// TestKueueAdmittedTemplateCannotGrow: a run admitted for 1-GPU workers never runs bigger
// ones. Where the faultline-queue policy is installed, the API server refuses a change of
// spec.template or spec.roles of the queued run, naming the field and the fix. Where it is
// not, the change is stored, and the controller, before the next attempt, finds the run's
// pods no longer those its Workload was made with: the run stalls (WorkloadOutdated) and no
// pod of 8 GPUs is ever made inside the 1-GPU admission.
func TestKueueAdmittedTemplateCannotGrow(t *testing.T) {
	t.Parallel()
	t.Run("refused by the policy", func(t *testing.T) {
		t.Parallel()
		e := scenario(t, queueSpec{gpus: 2})
		run := e.createRun(e.newRun("grow", 2))
		e.waitRun(run.Name, "attempt 1 Running", runningAttempt(1))
		what := "TrainingRun " + e.ns + "/" + run.Name
		requireRefused(t, "8 GPUs per worker", e.updateRun(run.Name, setGPUs("8")), "spec.template of "+what+" is fixed", "delete the run and create it again")
		requireRefused(t, "spec.roles added", e.updateRun(run.Name, func(r *v1alpha1.TrainingRun) {
			r.Spec.Roles = []v1alpha1.RoleTemplate{{Name: "worker"}}
		}), "spec.roles of "+what+" is fixed")
		// What Kueue does not count stays the user's to change.
		if err := e.updateRun(run.Name, func(r *v1alpha1.TrainingRun) {
			r.Spec.FailurePolicy.MaxRestarts.Infrastructure = ptrInt32(3)
		}); err != nil {
			t.Errorf("a change of spec.failurePolicy was refused: %v", err)
		}
	})
	t.Run("checked by the controller without the policy", func(t *testing.T) {
		t.Parallel()
		e := scenario(t, queueSpec{gpus: 2, withoutQueuePolicy: true})
		r := e.newRun("grow", 2)
		r.Spec.FailurePolicy.RestartMode = v1alpha1.RestartModeRecreate // attempt 2 is new pods
		run := e.createRun(r)
		e.waitRun(run.Name, "attempt 1 Running", runningAttempt(1))
		pods := e.waitWorkers(run.Name, 1, 2)
		if err := e.updateRun(run.Name, setGPUs("8")); err != nil {
			t.Fatalf("without the policy the change is stored: %v", err)
		}
		e.infraFault(pods[0])
		stalled := e.waitRun(run.Name, "Stalled WorkloadOutdated", func(r *v1alpha1.TrainingRun) bool {
			c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionStalled)
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonWorkloadOutdated
		})
		msg := meta.FindStatusCondition(stalled.Status.Conditions, v1alpha1.ConditionStalled).Message
		for _, want := range []string{"spec.template or spec.roles changed", kueue.WorkloadName(run), v1alpha1.QueuePolicyName} {
			if !strings.Contains(msg, want) {
				t.Errorf("Stalled message %q does not say %q", msg, want)
			}
		}
		list, err := e.c.Client.CoreV1().Pods(e.ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			if q := p.Spec.Containers[0].Resources.Limits[v1alpha1.ResourceGPU]; q.Value() != 1 {
				t.Errorf("pod %s (attempt %s) asks for %s GPUs inside an admission of 1 per worker", p.Name, p.Labels[v1alpha1.LabelAttempt], q.String())
			}
		}
		if stalled.Status.Attempt != 2 || stalled.Status.Restarts.Infrastructure != 1 {
			t.Errorf("attempt %d, restarts %+v: want attempt 2 held before its Job, after one infrastructure restart", stalled.Status.Attempt, stalled.Status.Restarts)
		}
	})
}

func ptrInt32(v int32) *int32 { return &v }

// psRun is TensorFlow's parameter-server layout as issue 38 found it: the template asks for
// no GPU, the workers' role for one each. Six pods: chief 0, ps 1-2, worker 3-5.
func (e *env) psRun(name string) *v1alpha1.TrainingRun {
	r := e.newRun(name, 6)
	r.Spec.Framework = "tensorflow"
	r.Spec.FrameworkOptions = map[string]string{"strategy": "parameter-server", "ps": "2"}
	r.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	r.Spec.Roles = []v1alpha1.RoleTemplate{{Name: "worker", Containers: []v1alpha1.RoleContainer{{Name: "worker", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{v1alpha1.ResourceGPU: resource.MustParse("1")},
	}}}}}
	return r
}

// TestKueueRolesAreCounted: a run laid out in roles is one pod set per role, each counted
// for its own resources: the parameter-server run's three 1-GPU workers ask for 3 GPUs, so a
// queue of 2 does not admit it (Kueue says why, naming the workers' pod set), and a queue of
// 3 admits it and reserves all 3 while it runs.
func TestKueueRolesAreCounted(t *testing.T) {
	t.Parallel()
	t.Run("over quota", func(t *testing.T) {
		t.Parallel()
		e := scenario(t, queueSpec{gpus: 2})
		run := e.createRun(e.psRun("ps"))
		name := kueue.WorkloadName(run)
		wl := e.waitWorkload(name, "QuotaReserved False, Kueue's reason given", func(w *kueue.Workload) bool {
			c := w.Condition(kueue.ConditionQuotaReserved)
			return c != nil && c.Status == metav1.ConditionFalse && c.Message != ""
		})
		sets := map[string]int32{}
		gpus := int64(0)
		for _, ps := range wl.Spec.PodSets {
			sets[ps.Name] = ps.Count
			q := ps.Template.Spec.Containers[0].Resources.Limits[v1alpha1.ResourceGPU]
			gpus += q.Value() * int64(ps.Count)
		}
		if len(sets) != 3 || sets["chief"] != 1 || sets["ps"] != 2 || sets["worker"] != 3 || gpus != 3 {
			t.Errorf("Workload pod sets %v asking for %d GPUs, want chief 1, ps 2, worker 3 asking for 3", sets, gpus)
		}
		if c := wl.Condition(kueue.ConditionQuotaReserved); !strings.Contains(c.Message, "worker") {
			t.Errorf("Kueue's reason %q does not name the workers' pod set", c.Message)
		}
		e.requireRunStays(run.Name, 2*podsReadyRecoveryTimeout, "no attempt over quota", func(r *v1alpha1.TrainingRun) bool {
			return r.Status.Attempt > 0
		})
	})
	t.Run("within quota", func(t *testing.T) {
		t.Parallel()
		e := scenario(t, queueSpec{gpus: 3})
		run := e.createRun(e.psRun("ps"))
		e.waitRun(run.Name, "attempt 1 Running", runningAttempt(1))
		usage := e.recordReservation(3)
		usage.stop()
		workers := e.waitWorkers(run.Name, 1, 6)
		for i, p := range workers {
			want := int64(0)
			if i >= 3 {
				want = 1
			}
			if q := p.Spec.Containers[0].Resources.Limits[v1alpha1.ResourceGPU]; q.Value() != want {
				t.Errorf("index %d (%s, role %s) asks for %s GPUs, want %d", i, p.Name, p.Labels[v1alpha1.LabelRole], q.String(), want)
			}
		}
	})
}

// TestKueueQueueLabelIsFixedWhileAdmitted: the queue label of a queued run can be neither
// removed (a preempted run would resume without admission) nor changed, while it runs
// admitted nor while it waits; the API server says so and the run stays in its queue.
func TestKueueQueueLabelIsFixedWhileAdmitted(t *testing.T) {
	t.Parallel()
	e := scenario(t, queueSpec{gpus: 1})
	admitted := e.createRun(e.newRun("first", 1))
	e.waitRun(admitted.Name, "attempt 1 Running", runningAttempt(1))
	waiting := e.createRun(e.newRun("second", 1))
	e.waitRun(waiting.Name, "queued, not admitted", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Queue != nil && meta.IsStatusConditionFalse(r.Status.Conditions, v1alpha1.ConditionAdmitted)
	})
	for _, name := range []string{admitted.Name, waiting.Name} {
		what := "label " + v1alpha1.LabelQueueName + " of TrainingRun " + e.ns + "/" + name + " is fixed"
		requireRefused(t, name+": label removed", e.updateRun(name, func(r *v1alpha1.TrainingRun) {
			delete(r.Labels, v1alpha1.LabelQueueName)
		}), what, "in Kueue queue "+e.queue)
		requireRefused(t, name+": label changed", e.updateRun(name, func(r *v1alpha1.TrainingRun) {
			r.Labels[v1alpha1.LabelQueueName] = "elsewhere"
		}), what)
	}
	e.requireRunStays(waiting.Name, 2*podsReadyRecoveryTimeout, "the waiting run stays queued", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt > 0 || r.Labels[v1alpha1.LabelQueueName] != e.queue
	})
	if r := e.getRun(admitted.Name); r.Labels[v1alpha1.LabelQueueName] != e.queue || r.Status.Attempt != 1 {
		t.Errorf("the admitted run: label %q, attempt %d; want queue %s, attempt 1", r.Labels[v1alpha1.LabelQueueName], r.Status.Attempt, e.queue)
	}
}

// TestE2ESparesAreCountedByKueue: a run's warm spares hold a worker's resources each, so its
// Workload's workers pod set counts spec.workers + spec.spares pods: two one-GPU workers and
// one spare are not admitted by a queue of 2 GPUs (Kueue says so), and are by a queue of 3.
func TestE2ESparesAreCountedByKueue(t *testing.T) {
	t.Parallel()
	withSpare := func(e *env, name string) *v1alpha1.TrainingRun {
		r := e.newRun(name, 2)
		r.Spec.Spares = 1
		return r
	}
	t.Run("over quota", func(t *testing.T) {
		t.Parallel()
		e := scenario(t, queueSpec{gpus: 2})
		run := e.createRun(withSpare(e, "spare"))
		wl := e.waitWorkload(kueue.WorkloadName(run), "QuotaReserved False, Kueue's reason given", func(w *kueue.Workload) bool {
			c := w.Condition(kueue.ConditionQuotaReserved)
			return c != nil && c.Status == metav1.ConditionFalse && c.Message != ""
		})
		if len(wl.Spec.PodSets) != 1 || wl.Spec.PodSets[0].Name != v1alpha1.PodSetWorkers || wl.Spec.PodSets[0].Count != 3 {
			t.Errorf("Workload pod sets %+v, want one, %s, of 3 pods (2 workers and a spare)", wl.Spec.PodSets, v1alpha1.PodSetWorkers)
		}
		e.requireRunStays(run.Name, 2*podsReadyRecoveryTimeout, "no attempt over quota", func(r *v1alpha1.TrainingRun) bool {
			return r.Status.Attempt > 0
		})
	})
	t.Run("within quota", func(t *testing.T) {
		t.Parallel()
		e := scenario(t, queueSpec{gpus: 3})
		run := e.createRun(withSpare(e, "spare"))
		e.waitRun(run.Name, "attempt 1 Running", runningAttempt(1))
		usage := e.recordReservation(3)
		usage.stop()
	})
}
