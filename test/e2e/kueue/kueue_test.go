package kueue

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/kueue"
	"github.com/faultline-dev/faultline/pkg/policy"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestKueueAdmitsTheRun: a run that names a queue is one Workload (owned by the run, one pod
// set of its workers, the template's resources), makes no Job before Kueue admits it, and
// runs once admitted; Kueue queues no Workload of its own for the attempt's Job (it knows the
// Job for a TrainingRun's child); PodsReady says Started. It also measures submit → Running
// through Kueue against a run in no queue, on the same controller.
func TestKueueAdmitsTheRun(t *testing.T) {
	t.Parallel()
	e := scenario(t, queueSpec{gpus: 16})

	// The controller's first run waits for its informers: not part of either figure.
	warm := e.newRun("warm", 1)
	delete(warm.Labels, v1alpha1.LabelQueueName)
	e.createRun(warm)
	e.waitRun(warm.Name, "warm-up run Running", runningAttempt(1))
	submit := func(name string, queued bool) time.Duration {
		r := e.newRun(name, 2)
		if !queued {
			delete(r.Labels, v1alpha1.LabelQueueName)
		}
		start := time.Now()
		e.createRun(r)
		e.waitRun(r.Name, "Running", runningAttempt(1))
		return time.Since(start).Round(time.Millisecond)
	}
	var with, without []time.Duration
	for i := range 3 {
		with = append(with, submit(fmt.Sprintf("queued-%d", i), true))
		without = append(without, submit(fmt.Sprintf("plain-%d", i), false))
	}
	t.Logf("submit → every worker Running (2 workers, same controller, alternating): through Kueue %v, without %v", with, without)

	run := e.createRun(e.newRun("admitted", 4))
	running := e.waitRun(run.Name, "attempt 1 Running", runningAttempt(1))

	// One Workload per queued run, none for the unqueued ones nor for any attempt's Job.
	wls := e.listWorkloads()
	if len(wls) != 4 {
		t.Fatalf("%d Workloads in the namespace, want the 4 queued runs': %v", len(wls), wls)
	}
	var wl *kueue.Workload
	for _, w := range wls {
		if w.Name == kueue.WorkloadName(running) {
			wl = w
		}
	}
	if wl == nil {
		t.Fatalf("no Workload %s among %v", kueue.WorkloadName(running), wls)
	}
	if owner := metav1.GetControllerOf(wl); owner == nil || owner.UID != running.UID || owner.Kind != v1alpha1.KindTrainingRun {
		t.Errorf("Workload %s is controlled by %+v, want TrainingRun %s", wl.Name, owner, running.UID)
	}
	if len(wl.Spec.PodSets) != 1 || wl.Spec.PodSets[0].Name != v1alpha1.PodSetWorkers || wl.Spec.PodSets[0].Count != 4 {
		t.Errorf("Workload pod sets %+v, want one %q of 4", wl.Spec.PodSets, v1alpha1.PodSetWorkers)
	} else if got := wl.Spec.PodSets[0].Template.Spec.Containers[0].Resources.Limits[v1alpha1.ResourceGPU]; got.String() != "1" {
		t.Errorf("pod set's worker requests %s GPUs, want the template's 1", got.String())
	}
	if wl.Spec.QueueName != e.queue {
		t.Errorf("Workload queue %q, want %q", wl.Spec.QueueName, e.queue)
	}
	wl = e.waitWorkload(wl.Name, "PodsReady Started", func(w *kueue.Workload) bool {
		return condIs(w, kueue.ConditionPodsReady, metav1.ConditionTrue, kueue.ReasonStarted)
	})
	admittedAt := meta.FindStatusCondition(wl.Status.Conditions, kueue.ConditionAdmitted).LastTransitionTime
	job, err := e.c.Client.BatchV1().Jobs(e.ns).Get(e.ctx, run.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Both have whole seconds: the Job may share the admission's second, never precede it.
	if job.CreationTimestamp.Before(&admittedAt) {
		t.Errorf("attempt 1's Job created at %s, before Kueue admitted the Workload at %s", job.CreationTimestamp, admittedAt)
	}
	q := running.Status.Queue
	if q == nil || q.Workload != wl.Name || q.ClusterQueue != e.cq || q.Flavors[v1alpha1.ResourceGPU] != e.flavor || q.AdmittedAt == nil {
		t.Errorf("status.queue = %+v, want workload %s admitted by %s with flavor %s", q, wl.Name, e.cq, e.flavor)
	}
	if c := meta.FindStatusCondition(running.Status.Conditions, v1alpha1.ConditionAdmitted); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Admitted condition %+v, want True", c)
	}
}

// TestKueueQuotaHoldsTheRunUntilAdmitted: with quota for one gang, a second run waits
// suspended in the queue (no Job, no pod, no attempt) while the first runs; when the first
// succeeds its Workload is Finished, the quota goes back, and the second is admitted and runs.
func TestKueueQuotaHoldsTheRunUntilAdmitted(t *testing.T) {
	t.Parallel()
	e := scenario(t, queueSpec{gpus: 3})
	first := e.createRun(e.newRun("first", 3))
	e.waitRun(first.Name, "first Running", runningAttempt(1))
	pods := e.waitWorkers(first.Name, 1, 3)

	second := e.createRun(e.newRun("second", 3))
	queued := e.waitRun(second.Name, "second queued", func(r *v1alpha1.TrainingRun) bool {
		c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionSuspended)
		return r.Status.Phase == v1alpha1.PhaseSuspended && c != nil && c.Reason == v1alpha1.ReasonQueued
	})
	if a := meta.FindStatusCondition(queued.Status.Conditions, v1alpha1.ConditionAdmitted); a == nil || a.Status != metav1.ConditionFalse {
		t.Errorf("queued run's Admitted condition %+v, want False", a)
	}
	e.requireRunStays(second.Name, 3*time.Second, "held by the quota: no attempt, no Job", func(r *v1alpha1.TrainingRun) bool {
		if r.Status.Attempt != 0 || r.Status.Phase != v1alpha1.PhaseSuspended {
			return true
		}
		_, err := e.c.Client.BatchV1().Jobs(e.ns).Get(e.ctx, second.Name, metav1.GetOptions{})
		return err == nil
	})
	if pods, err := e.c.Client.CoreV1().Pods(e.ns).List(e.ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRun + "=" + second.Name}); err != nil || len(pods.Items) > 0 {
		t.Fatalf("queued run has pods: %v %v", err, pods)
	}

	for _, p := range pods {
		if err := e.c.CompletePod(e.ctx, e.ns, p.Name); err != nil {
			t.Fatal(err)
		}
	}
	e.waitRun(first.Name, "first Succeeded", func(r *v1alpha1.TrainingRun) bool { return r.Status.Phase == v1alpha1.PhaseSucceeded })
	freed := time.Now()
	e.waitWorkload(kueue.WorkloadName(first), "first's Workload Finished", func(w *kueue.Workload) bool {
		return condIs(w, kueue.ConditionFinished, metav1.ConditionTrue, kueue.ReasonSucceeded)
	})
	ran := e.waitRun(second.Name, "second Running once admitted", runningAttempt(1))
	t.Logf("first Succeeded → second's workers all Running: %s", time.Since(freed).Round(time.Millisecond))
	if ran.Status.Restarts != (v1alpha1.RestartCounts{}) {
		t.Errorf("second run restarts %+v, want none", ran.Status.Restarts)
	}
}

// TestKueueRestartKeepsTheAdmission: a gang restart held for longer than Kueue's
// WaitForPodsReady recovery timeout (the old worker slow to stop) stays inside one admission:
// the same Workload, never evicted nor requeued, its quota never released and never counted
// twice (the ClusterQueue's reservation stays one gang's), PodsReady False/GangRestarting
// while held and True/Recovered after. It says what Kueue saw.
func TestKueueRestartKeepsTheAdmission(t *testing.T) {
	t.Parallel()
	e := scenario(t, queueSpec{gpus: 3})
	run := e.createRun(e.newRun("restart", 3))
	e.waitRun(run.Name, "attempt 1 Running", runningAttempt(1))
	pods := e.waitWorkers(run.Name, 1, 3)
	name := kueue.WorkloadName(run)
	e.waitWorkload(name, "PodsReady Started", func(w *kueue.Workload) bool {
		return condIs(w, kueue.ConditionPodsReady, metav1.ConditionTrue, kueue.ReasonStarted)
	})
	rec := e.recordWorkload(name)
	usage := e.recordReservation(3)

	release := e.holdPod(pods[2])
	start := time.Now()
	e.infraFault(pods[0])
	held := e.waitWorkload(name, "PodsReady GangRestarting while the restart is held, or an eviction", func(w *kueue.Workload) bool {
		return condIs(w, kueue.ConditionPodsReady, metav1.ConditionFalse, v1alpha1.ReasonGangRestarting) || w.Eviction() != nil
	})
	if ev := held.Eviction(); ev != nil {
		t.Fatalf("Kueue evicted the Workload during the restart (%s: %s): %s", ev.Reason, ev.Message, describeWorkload(held))
	}
	// Held past the recovery timeout: a Workload Kueue took for one waiting to recover would
	// be evicted now. Watched, not slept: any eviction fails at once.
	hold := 2 * podsReadyRecoveryTimeout
	ctx, cancel := context.WithTimeout(e.ctx, hold)
	w, err := e.watchWorkload(ctx, name, func(w *kueue.Workload) bool { return w.Eviction() != nil || !w.HoldsQuota() })
	cancel()
	if err == nil {
		t.Fatalf("the held restart lost the admission within %s: %s", hold, describeWorkload(w))
	}
	release()
	restarted := e.waitRun(run.Name, "attempt 2 Running", runningAttempt(2))
	t.Logf("restart held %s by a slow worker, then attempt 2 Running %s after the fault", hold, time.Since(start).Round(time.Millisecond))
	e.waitWorkload(name, "PodsReady Recovered", func(w *kueue.Workload) bool {
		return condIs(w, kueue.ConditionPodsReady, metav1.ConditionTrue, kueue.ReasonRecovered)
	})
	rec.stop()
	usage.stop()

	t.Logf("Kueue saw during the restart: PodsReady %v, evictions %v, requeued %t, workload UIDs %d, ClusterQueue GPU reservation %v",
		rec.podsReady, rec.evicted, rec.requeued, len(rec.uids), usage.seen)
	if len(rec.evicted) > 0 || rec.requeued || rec.unadmitted {
		t.Errorf("the restart cost the admission: evicted %v, requeued %t, quota released %t", rec.evicted, rec.requeued, rec.unadmitted)
	}
	if len(rec.uids) != 1 || len(e.listWorkloads()) != 1 {
		t.Errorf("the restart made another Workload: UIDs %v, %d Workloads", rec.uids, len(e.listWorkloads()))
	}
	for _, g := range usage.seen {
		if g != 3 {
			t.Errorf("the ClusterQueue's GPU reservation went to %d during the restart, want one gang's 3 throughout (%v)", g, usage.seen)
			break
		}
	}
	if restarted.Status.Restarts.Infrastructure != 1 || restarted.Status.Queue.Evictions != 0 {
		t.Errorf("restarts %+v, evictions %d: want 1 infrastructure restart, no eviction", restarted.Status.Restarts, restarted.Status.Queue.Evictions)
	}
}

// TestKueuePreemptionSpendsNoBudget: a higher-priority run preempts a running one through
// Kueue. The preempted run is suspended (reason Preempted, naming the preemptor), spends no
// restart, gives the quota back only once its workers are gone, and, admitted again when the
// preemptor is deleted, resumes with a fresh attempt.
func TestKueuePreemptionSpendsNoBudget(t *testing.T) {
	t.Parallel()
	e := scenario(t, queueSpec{gpus: 3, preemptLowerPriority: true})
	low, high := "low-"+e.ns, "high-"+e.ns
	for name, v := range map[string]int32{low: 100, high: 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v}
		if _, err := e.c.Client.SchedulingV1().PriorityClasses().Create(e.ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = e.c.Client.SchedulingV1().PriorityClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	victim := e.newRun("victim", 3)
	victim.Spec.Template.Spec.PriorityClassName = low
	e.createRun(victim)
	e.waitRun(victim.Name, "victim Running", runningAttempt(1))

	preemptor := e.newRun("preemptor", 3)
	preemptor.Spec.Template.Spec.PriorityClassName = high
	e.createRun(preemptor)
	preempted := e.waitRun(victim.Name, "victim suspended as preempted", func(r *v1alpha1.TrainingRun) bool {
		c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionSuspended)
		return r.Status.Phase == v1alpha1.PhaseSuspended && c != nil && c.Reason == v1alpha1.ReasonPreempted
	})
	if preempted.Status.Restarts != (v1alpha1.RestartCounts{}) {
		t.Errorf("preemption spent restarts: %+v", preempted.Status.Restarts)
	}
	rec := preempted.Status.Attempts[len(preempted.Status.Attempts)-1]
	if rec.Outcome != policy.OutcomeSuspended || !strings.Contains(rec.Suspension, "Preempted") || rec.Verdict != nil {
		t.Errorf("attempt 1's record %+v, want Suspended by Kueue's preemption, no verdict", rec)
	}
	q := preempted.Status.Queue
	if q == nil || q.Evictions != 1 || q.LastEviction == nil || q.LastEviction.Reason != kueue.EvictedByPreemption {
		t.Fatalf("status.queue %+v, want one eviction, Preempted", q)
	}
	if want := "TrainingRun " + e.ns + "/" + preemptor.Name; !strings.Contains(q.LastEviction.Preemptor, want) || !strings.Contains(rec.Suspension, want) {
		t.Errorf("the preemptor is not named: lastEviction.preemptor %q, attempt 1 suspended by %q, want both to name %s", q.LastEviction.Preemptor, rec.Suspension, want)
	}
	pre := e.waitRun(preemptor.Name, "preemptor Running", runningAttempt(1))
	// The preemptor's workers run only on the victim's freed quota: none of the victim's may
	// still run then.
	left, err := e.c.Client.CoreV1().Pods(e.ns).List(e.ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRun + "=" + victim.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range left.Items {
		if cluster.PodLive(&p) {
			t.Errorf("victim's pod %s is still live while the preemptor runs", p.Name)
		}
	}
	t.Logf("preemptor admitted and Running; victim suspended with: %s", q.LastEviction.Message)

	if err := e.cl.Delete(e.ctx, pre); err != nil {
		t.Fatal(err)
	}
	resumed := e.waitRun(victim.Name, "victim resumed as attempt 2", runningAttempt(2))
	if resumed.Status.Restarts != (v1alpha1.RestartCounts{}) {
		t.Errorf("the resumed run spent restarts: %+v", resumed.Status.Restarts)
	}
	if resumed.Status.Queue.Evictions != 1 {
		t.Errorf("evictions %d after resuming, want 1", resumed.Status.Queue.Evictions)
	}
}

// TestKueueFlavorLandsOnEveryAttempt: the admitted flavor's node labels and tolerations are
// on every attempt's pods, which land only on the flavor's (tainted) nodes, before and after a
// gang restart.
func TestKueueFlavorLandsOnEveryAttempt(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	const poolKey = "kueue-test.faultline.dev/pool"
	pool := fmt.Sprintf("pool-%d", time.Now().UnixNano()%1e6)
	taint := corev1.Taint{Key: poolKey, Value: pool, Effect: corev1.TaintEffectNoSchedule}
	e := scenario(t, queueSpec{
		gpus:        4,
		nodeLabels:  map[string]string{poolKey: pool},
		tolerations: []corev1.Toleration{{Key: poolKey, Operator: corev1.TolerationOpEqual, Value: pool, Effect: corev1.TaintEffectNoSchedule}},
	})
	var nodes []string
	for i := range 2 {
		name := fmt.Sprintf("%s-%d", pool, i)
		if err := c.AddNode(e.ctx, name, cluster.NodeSpec{}, taint); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, poolKey, pool)
		if _, err := c.Client.CoreV1().Nodes().Patch(e.ctx, name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, name)
	}
	run := e.createRun(e.newRun("flavored", 2))
	e.waitRun(run.Name, "attempt 1 Running", runningAttempt(1))
	check := func(n int32) {
		t.Helper()
		for i, p := range e.waitWorkers(run.Name, n, 2) {
			if p.Spec.NodeSelector[poolKey] != pool {
				t.Errorf("attempt %d index %d: nodeSelector %v, want %s=%s from the flavor", n, i, p.Spec.NodeSelector, poolKey, pool)
			}
			tolerated := false
			for _, tol := range p.Spec.Tolerations {
				tolerated = tolerated || (tol.Key == taint.Key && tol.Value == taint.Value && tol.Effect == taint.Effect)
			}
			if !tolerated {
				t.Errorf("attempt %d index %d: tolerations %v do not tolerate the flavor's taint", n, i, p.Spec.Tolerations)
			}
			if !strings.HasPrefix(p.Spec.NodeName, pool) {
				t.Errorf("attempt %d index %d on node %s, want one of the flavor's %v", n, i, p.Spec.NodeName, nodes)
			}
		}
	}
	check(1)
	pods := e.waitWorkers(run.Name, 1, 2)
	start := time.Now()
	e.infraFault(pods[0])
	e.waitRun(run.Name, "attempt 2 Running", runningAttempt(2))
	t.Logf("restart with Kueue in the loop (2 workers): fault → attempt 2 Running in %s", time.Since(start).Round(time.Millisecond))
	check(2)
	if r := e.getRun(run.Name); ptr.Deref(r.Spec.Suspend, false) || r.Status.Queue == nil || r.Status.Queue.Evictions != 0 {
		t.Errorf("after the restart: %s", describeRun(r))
	}
}

// TestKueueAdmissionCheckGatesTheRun: with quota reserved but an admission check Pending, the
// run waits (no attempt, no Job); once the check's controller says Ready, with labels for the
// workers' pods (podSetUpdates), it runs with them; when the check turns to Retry, Kueue
// evicts the Workload and the run is suspended without spending a restart; Ready again, it
// resumes with a fresh attempt that carries the labels too.
func TestKueueAdmissionCheckGatesTheRun(t *testing.T) {
	t.Parallel()
	// AdmissionChecks are cluster-scoped: one of its own per scenario.
	checkName := fmt.Sprintf("provisioned-%d", time.Now().UnixNano()%1e6)
	e := scenario(t, queueSpec{gpus: 4, admissionCheck: checkName})
	run := e.createRun(e.newRun("checked", 2))
	name := kueue.WorkloadName(run)
	e.waitWorkload(name, "quota reserved, the check Pending", func(w *kueue.Workload) bool {
		return condIs(w, kueue.ConditionQuotaReserved, metav1.ConditionTrue, "") && len(w.Status.AdmissionChecks) == 1
	})
	e.requireRunStays(run.Name, 2*time.Second, "held by the Pending check: no attempt", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt != 0
	})
	waiting := e.getRun(run.Name)
	if c := meta.FindStatusCondition(waiting.Status.Conditions, v1alpha1.ConditionAdmitted); c == nil || !strings.Contains(c.Message, "admission check "+checkName+" is Pending") {
		t.Errorf("Admitted condition %+v does not name the Pending check", c)
	}

	labels := map[string]string{"kueue-test.faultline.dev/provisioned-by": "check"}
	e.setCheck(name, checkName, kueue.CheckStateReady, labels)
	e.waitRun(run.Name, "attempt 1 Running once the check is Ready", runningAttempt(1))
	for i, p := range e.waitWorkers(run.Name, 1, 2) {
		if p.Labels["kueue-test.faultline.dev/provisioned-by"] != "check" {
			t.Errorf("attempt 1 index %d has labels %v, without the check's podSetUpdates", i, p.Labels)
		}
	}

	e.setCheck(name, checkName, kueue.CheckStateRetry, nil)
	evicted := e.waitRun(run.Name, "suspended by Kueue's eviction", func(r *v1alpha1.TrainingRun) bool {
		c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionSuspended)
		return r.Status.Phase == v1alpha1.PhaseSuspended && c != nil && c.Reason == v1alpha1.ReasonEvictedByKueue
	})
	if evicted.Status.Restarts != (v1alpha1.RestartCounts{}) || evicted.Status.Queue.LastEviction == nil {
		t.Fatalf("after the check's Retry: %s", describeRun(evicted))
	}
	t.Logf("check Retry: the run was suspended with: %s", evicted.Status.Queue.LastEviction.Message)

	// Kueue requeues the Workload, reserves quota again and asks the check afresh.
	e.waitWorkload(name, "quota reserved again, the check Pending", func(w *kueue.Workload) bool {
		return condIs(w, kueue.ConditionQuotaReserved, metav1.ConditionTrue, "") && w.Eviction() == nil &&
			len(w.Status.AdmissionChecks) == 1 && w.Status.AdmissionChecks[0].State == kueue.CheckStatePending
	})
	e.setCheck(name, checkName, kueue.CheckStateReady, labels)
	resumed := e.waitRun(run.Name, "resumed as attempt 2", runningAttempt(2))
	if resumed.Status.Restarts != (v1alpha1.RestartCounts{}) {
		t.Errorf("the resumed run spent restarts: %+v", resumed.Status.Restarts)
	}
	for i, p := range e.waitWorkers(run.Name, 2, 2) {
		if p.Labels["kueue-test.faultline.dev/provisioned-by"] != "check" {
			t.Errorf("attempt 2 index %d has labels %v, without the check's podSetUpdates", i, p.Labels)
		}
	}
}

// TestKueueSuspendGivesTheQuotaBack: a user's suspend of an admitted run deactivates its
// Workload, and Kueue has the quota back once the run's workers are gone, so that a run
// waiting in the queue is admitted; resumed, the run queues again and runs a fresh attempt
// when the quota is free.
func TestKueueSuspendGivesTheQuotaBack(t *testing.T) {
	t.Parallel()
	e := scenario(t, queueSpec{gpus: 2})
	first := e.createRun(e.newRun("suspended", 2))
	e.waitRun(first.Name, "first Running", runningAttempt(1))
	second := e.createRun(e.newRun("waiting", 2))
	e.waitRun(second.Name, "second queued", func(r *v1alpha1.TrainingRun) bool {
		c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionSuspended)
		return c != nil && c.Reason == v1alpha1.ReasonQueued
	})

	patch := func(name string, suspend bool) {
		t.Helper()
		body := fmt.Sprintf(`{"spec":{"suspend":%t}}`, suspend)
		if err := e.cl.Patch(e.ctx, &v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name}}, client.RawPatch(types.MergePatchType, []byte(body))); err != nil {
			t.Fatal(err)
		}
	}
	patch(first.Name, true)
	e.waitWorkload(kueue.WorkloadName(first), "deactivated", func(w *kueue.Workload) bool { return !w.Active() })
	e.waitRun(second.Name, "second Running on the quota the suspend gave back", runningAttempt(1))
	suspended := e.getRun(first.Name)
	if suspended.Status.Phase != v1alpha1.PhaseSuspended || suspended.Status.Restarts != (v1alpha1.RestartCounts{}) {
		t.Errorf("the suspended run: %s", describeRun(suspended))
	}

	patch(first.Name, false)
	e.waitWorkload(kueue.WorkloadName(first), "active again, waiting for quota", func(w *kueue.Workload) bool { return w.Active() && !w.HoldsQuota() })
	if err := e.cl.Delete(e.ctx, second); err != nil {
		t.Fatal(err)
	}
	resumed := e.waitRun(first.Name, "resumed as attempt 2 once the quota is free", runningAttempt(2))
	if resumed.Status.Restarts != (v1alpha1.RestartCounts{}) {
		t.Errorf("the resumed run spent restarts: %+v", resumed.Status.Restarts)
	}
}
