package admission

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/kueue"
)

func TestReflectWorkload(t *testing.T) {
	t1 := metav1.NewTime(time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC))
	t2 := metav1.NewTime(t1.Add(time.Minute))
	admitted := func(at metav1.Time) []metav1.Condition {
		return []metav1.Condition{
			{Type: kueue.ConditionQuotaReserved, Status: metav1.ConditionTrue, Reason: "QuotaReserved", LastTransitionTime: at},
			{Type: kueue.ConditionAdmitted, Status: metav1.ConditionTrue, Reason: "Admitted", LastTransitionTime: at},
		}
	}
	evicted := func(at metav1.Time) []metav1.Condition {
		return append(admitted(t1), metav1.Condition{Type: kueue.ConditionEvicted, Status: metav1.ConditionTrue, Reason: kueue.EvictedByPreemption, Message: "Preempted to accommodate a workload (UID: x)", LastTransitionTime: at})
	}
	adm := &kueue.Admission{ClusterQueue: "cq", PodSetAssignments: []kueue.PodSetAssignment{{Name: v1alpha1.PodSetWorkers, Flavors: map[string]string{v1alpha1.ResourceGPU: "h100"}}}}
	run := &v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Name: "r", Labels: map[string]string{v1alpha1.LabelQueueName: "lq"}}}

	// Admitted: the run shows the ClusterQueue and flavors, once newly.
	wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Name: "wl"}, Status: kueue.WorkloadStatus{Conditions: admitted(t1), Admission: adm}}
	if !reflectWorkload(run, wl, t1) {
		t.Error("first admission not reported as new")
	}
	q := run.Status.Queue
	if q.ClusterQueue != "cq" || q.Flavors[v1alpha1.ResourceGPU] != "h100" || q.AdmittedAt == nil || !q.AdmittedAt.Equal(&t1) {
		t.Errorf("queue status %+v after the admission", q)
	}
	if reflectWorkload(run, wl, t1) {
		t.Error("the same admission reported as new twice")
	}

	// Evicted by a preemption: counted once however often it is seen.
	wl.Status.Conditions = evicted(t2)
	for range 3 {
		reflectWorkload(run, wl, t2)
	}
	q = run.Status.Queue
	if q.Evictions != 1 || q.LastEviction == nil || q.LastEviction.Reason != kueue.EvictedByPreemption || q.ClusterQueue != "" {
		t.Errorf("queue status %+v after one preemption", q)
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionAdmitted); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonPreempted {
		t.Errorf("Admitted condition %+v, want False/Preempted", c)
	}

	// Admitted again, then a second preemption: two evictions in all.
	wl.Status.Conditions = admitted(t2)
	if !reflectWorkload(run, wl, t2) {
		t.Error("readmission not reported as new")
	}
	t3 := metav1.NewTime(t2.Add(time.Minute))
	wl.Status.Conditions = evicted(t3)
	reflectWorkload(run, wl, t3)
	if run.Status.Queue.Evictions != 2 {
		t.Errorf("evictions %d after two preemptions", run.Status.Queue.Evictions)
	}
}
