package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// The lifecycles every cluster sees: a run deleted and submitted again under its name, a
// node that dies hard, a Job deleted under a run, a Job controller that creates slowly, a
// run that succeeds while its peers fail, evidence that arrives late, a template the API
// server refuses, a suspend in the middle of a restart.

// dedicatedNode adds a fake node that only this test's runs tolerate (and prefer), so that
// what the test does to it touches no other test's pods; it is deleted when the test ends.
func dedicatedNode(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) (string, runOption) {
	t.Helper()
	taint := corev1.Taint{Key: "test.faultline.dev/dedicated", Value: name, Effect: corev1.TaintEffectNoSchedule}
	if err := c.AddNode(ctx, name, cluster.DefaultNode, taint); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name, func(r *v1alpha1.TrainingRun) {
		withPreferredNode(name)(r)
		r.Spec.Template.Spec.Tolerations = append(r.Spec.Template.Spec.Tolerations,
			corev1.Toleration{Key: taint.Key, Operator: corev1.TolerationOpEqual, Value: taint.Value, Effect: taint.Effect})
	}
}

func podsWithUID(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string, uid types.UID) []corev1.Pod {
	t.Helper()
	list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{v1alpha1.LabelRunUID: string(uid)}).String()})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestE2ERecreatedRunUnderTheSameNameNeverOverlaps: `kubectl delete tr X && kubectl apply -f
// x.yaml` while X's workers are still stopping. The new run is another run (another UID): it
// starts no worker while the old ones may still run, retires the old run's Job, and runs
// once they are gone, with a Service of its own; no index ever has two live pods.
func TestE2ERecreatedRunUnderTheSameNameNeverOverlaps(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	first, pods := runningRun(ctx, t, c, ns, newRun("resubmit", 4, withoutGPUs()))
	var stops []func()
	for _, p := range pods {
		stops = append(stops, stopSlowly(ctx, t, c, p))
	}
	overlaps := monitorOverlaps(ctx, t, c, ns, first.Name)
	if err := runClient(t, c).Delete(ctx, first); err != nil {
		t.Fatalf("delete the first run: %v", err)
	}
	second := createRun(ctx, t, c, ns, newRun("resubmit", 4, withoutGPUs()))
	if second.UID == first.UID {
		t.Fatalf("the second run has the first's UID %s", first.UID)
	}
	requireRunStays(ctx, t, c, ns, second.Name, 3*time.Second, "no worker of the new run while the old ones stop", func(r *v1alpha1.TrainingRun) bool {
		return len(podsWithUID(ctx, t, c, ns, second.UID)) > 0
	})

	for _, stopped := range stops {
		stopped()
	}
	running := waitRun(ctx, t, c, ns, second.Name, "the new run Running", runningAttempt(1))
	if running.UID != second.UID {
		t.Fatalf("the run Running is %s, want the second %s", running.UID, second.UID)
	}
	for i, p := range waitWorkers(ctx, t, c, ns, second.Name, 1, 4) {
		if p.Labels[v1alpha1.LabelRunUID] != string(second.UID) {
			t.Errorf("index %d pod %s has run-uid %q, want the new run's %s", i, p.Name, p.Labels[v1alpha1.LabelRunUID], second.UID)
		}
	}
	svc, err := c.Client.CoreV1().Services(ns).Get(ctx, second.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(svc); ref == nil || ref.UID != second.UID {
		t.Errorf("Service %s is controlled by %v, want the new run %s", svc.Name, ref, second.UID)
	}
	if svc.Spec.Selector[v1alpha1.LabelRunUID] != string(second.UID) {
		t.Errorf("Service %s selects %v: an old worker of the same hostname could be resolved", svc.Name, svc.Spec.Selector)
	}
	requireRestarts(t, running, v1alpha1.RestartCounts{})
	overlaps.check(t)
}

// TestE2ENodeLostRestartsTheGang: a node dies hard (kwok stops simulating it: no heartbeat,
// and its pods stay Running in the API forever). Once the node lifecycle controller marks it
// unreachable and the workers' toleration of that (2 s here) has run out, the run is judged
// NodeLost and restarts (a kwok node has no node agent whose silence would say so sooner);
// the teardown cannot see the old workers stop, so it waits and says so (Stalled,
// NodeUnreachable, naming the node and the fix); once the operator taints the node
// out-of-service, the gang runs elsewhere.
func TestE2ENodeLostRestartsTheGang(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	node, onNode := dedicatedNode(ctx, t, c, "lost-"+ns)
	tolerate := func(r *v1alpha1.TrainingRun) {
		r.Spec.Template.Spec.Tolerations = append(r.Spec.Template.Spec.Tolerations, corev1.Toleration{
			Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](2)})
	}
	run, pods := runningRun(ctx, t, c, ns, newRun("node-lost", 2, onNode, tolerate))
	for i, p := range pods {
		if p.Spec.NodeName != node {
			t.Fatalf("index %d runs on %s, want the dedicated node %s", i, p.Spec.NodeName, node)
		}
	}
	if err := c.StopNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	restarting := waitRun(ctx, t, c, ns, run.Name, "a restart for the lost node", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt == 2 && r.Status.LastFailure != nil
	})
	t.Logf("node stopped → judged in %s", time.Since(start).Round(time.Second))
	if lf := restarting.Status.LastFailure; lf.Cause != v1alpha1.CauseNodeLost || lf.Class != v1alpha1.ClassInfrastructure || lf.Node != node {
		t.Errorf("lastFailure = %s/%s on %q, want Infrastructure/NodeLost on %s", lf.Class, lf.Cause, lf.Node, node)
	}
	stalled := waitRun(ctx, t, c, ns, run.Name, "Stalled on the unreachable node", func(r *v1alpha1.TrainingRun) bool {
		cond := runCondition(r, v1alpha1.ConditionStalled)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == v1alpha1.ReasonNodeUnreachable
	})
	msg := runCondition(stalled, v1alpha1.ConditionStalled).Message
	for _, want := range []string{node, "node.kubernetes.io/out-of-service"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Stalled message %q does not say %q", msg, want)
		}
	}
	if n := len(podsOfAttempt(ctx, t, c, ns, run.Name, 2)); n > 0 {
		t.Fatalf("%d pods of attempt 2 while the lost workers may still run", n)
	}

	// The operator: the node is down.
	taint := fmt.Sprintf(`{"spec":{"taints":[{"key":%q,"value":"nodeshutdown","effect":"NoExecute"},{"key":"test.faultline.dev/dedicated","value":%q,"effect":"NoSchedule"}]}}`,
		corev1.TaintNodeOutOfService, node)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(taint), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	restarted := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	for i, p := range waitWorkers(ctx, t, c, ns, run.Name, 2, 2) {
		if p.Spec.NodeName == node {
			t.Errorf("attempt 2 index %d runs on the lost node", i)
		}
	}
	requireRestarts(t, restarted, v1alpha1.RestartCounts{Infrastructure: 1})
	if cond := runCondition(restarted, v1alpha1.ConditionStalled); cond == nil || cond.Status != metav1.ConditionFalse {
		t.Errorf("Stalled after the restart: %+v, want False", cond)
	}
}

// TestE2ENextJobGetsPodsAfterSlowCreations: every pod creation in the namespace takes 700 ms
// longer (a slow API server), and a worker fails while the Job controller is still creating
// the gang. The old Job's creations go on after the restart's decision; held by faultline's
// finalizer, the old Job takes them, and the next Job of the same name gets every pod of its
// own (not, as a Job that inherited the old one's expectations, none for minutes).
func TestE2ENextJobGetsPodsAfterSlowCreations(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	stop, err := c.SlowPodCreations(ctx, ns, 700*time.Millisecond, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	const workers = 24 // slow-start batches of 1, 2, 4, 8 and 9: about 3.5 s of creations
	run := createRun(ctx, t, c, ns, newRun("slow", workers, withoutGPUs()))
	overlaps := monitorOverlaps(ctx, t, c, ns, run.Name)
	var first *corev1.Pod
	all, err := c.WaitPods(ctx, ns, attemptSelector(run.Name, 1), func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			if cluster.PodRunning(p) {
				first = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d pods created when the first runs", len(all), workers)
	infraFault(ctx, t, c, first, v1alpha1.CauseNodeShutdown)
	restarted := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	requireRestarts(t, restarted, v1alpha1.RestartCounts{Infrastructure: 1})
	overlaps.check(t)
}

// TestE2EDeletedJobsPodsSpendNoBudget: someone deletes the run's Job in the middle of an
// attempt. Its workers are stopped and the Job is made again for the same attempt; a worker
// of the deleted Job that ended with 143 on the way (the SIGTERM of that deletion), still in
// the API, is not the new Job's, and is never judged: no budget is spent.
func TestE2EDeletedJobsPodsSpendNoBudget(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	run, pods := runningRun(ctx, t, c, ns, newRun("job-deleted", 3, withoutGPUs()))
	stale := pods[0]
	stopped := stopSlowly(ctx, t, c, stale)
	t.Cleanup(stopped)
	if err := c.Client.BatchV1().Jobs(ns).Delete(ctx, run.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	// Its kubelet stops it: exit 143, and the pod, held, stays in the API.
	if _, err := c.WaitPods(ctx, ns, runSelector(run.Name), func(ps []*corev1.Pod) (bool, error) {
		for _, p := range ps {
			if p.UID == stale.UID {
				return p.DeletionTimestamp != nil, nil
			}
		}
		return false, fmt.Errorf("pod %s is gone", stale.Name)
	}); err != nil {
		t.Fatal(err)
	}
	exited := fmt.Sprintf(`{"status":{"phase":"Failed","containerStatuses":[{"name":"worker","image":"trainer:latest","ready":false,"restartCount":0,`+
		`"state":{"terminated":{"exitCode":143,"reason":"Error","startedAt":%q,"finishedAt":%q}}}]}}`,
		stale.CreationTimestamp.UTC().Format(time.RFC3339), time.Now().UTC().Format(time.RFC3339))
	if _, err := c.Client.CoreV1().Pods(ns).Patch(ctx, stale.Name, types.StrategicMergePatchType, []byte(exited), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	// The Job made again: three new workers of attempt 1 Running beside the stale one. (Waited
	// for on the pods' own events: the run's status need not change while its Job is made
	// again, and a wait on the run's events alone would not see them.)
	if _, err := c.WaitPods(ctx, ns, attemptSelector(run.Name, 1), func(ps []*corev1.Pod) (bool, error) {
		running := 0
		for _, p := range ps {
			if p.UID != stale.UID && cluster.PodRunning(p) {
				running++
			}
		}
		return running == 3, nil
	}); err != nil {
		t.Fatalf("the Job made again with 3 workers Running: %v", err)
	}
	again := waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running again", runningAttempt(1))
	requireRestarts(t, again, v1alpha1.RestartCounts{})
	requireRunStays(ctx, t, c, ns, run.Name, 3*time.Second, "no judgement of the deleted Job's worker", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt != 1 || r.Status.Restarts != (v1alpha1.RestartCounts{}) || r.Status.LastFailure != nil
	})
}

// TestE2ELeaderSuccessIsNeverAFailure: under successPolicy Leader, index 0 exits 0 and a peer,
// losing its leader, is OOM-killed right after (a conclusive application failure), perhaps
// before the controller has seen the leader's success: the run has succeeded.
func TestE2ELeaderSuccessIsNeverAFailure(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	run, pods := runningRun(ctx, t, c, ns, newRun("leader", 3, withoutGPUs(), func(r *v1alpha1.TrainingRun) { r.Spec.SuccessPolicy = v1alpha1.SuccessPolicyLeader }))
	completeWorker(ctx, t, c, pods[0])
	if _, err := c.WaitPods(ctx, ns, runSelector(run.Name), func(ps []*corev1.Pod) (bool, error) {
		for _, p := range ps {
			if p.UID == pods[0].UID {
				return p.Status.Phase == corev1.PodSucceeded, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	// The controller stops the other workers once it has seen the leader's success: the
	// peer may be gone already, which is that success seen first.
	if err := c.FailPod(ctx, pods[1].Namespace, pods[1].Name, cluster.Failure{ExitCode: 137, Reason: "OOMKilled"}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	done := waitRun(ctx, t, c, ns, run.Name, "Succeeded or Failed", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Phase == v1alpha1.PhaseSucceeded || r.Status.Phase == v1alpha1.PhaseFailed
	})
	if done.Status.Phase != v1alpha1.PhaseSucceeded || done.Status.LastFailure != nil {
		t.Fatalf("the leader succeeded, the run ended %s", describeRun(done))
	}
	requireRestarts(t, done, v1alpha1.RestartCounts{})
}

// TestE2ELateEvidenceWithinSettleWindowRestarts: a worker exits 1 at every tenth of a
// second's phase in turn, and the node agent's evidence (detected at the exit) lands 300 ms
// later, well inside the settle window of 1 s. Kubernetes records the exit in whole seconds:
// counted from that, the window was up to a second short, and some of these were failed as
// AppExit. Every one must restart as the node's fault.
func TestE2ELateEvidenceWithinSettleWindowRestarts(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	const tries = 8
	run, pods := runningRun(ctx, t, c, ns, newRun("late-evidence", 2, withSettleSeconds(1), withoutGPUs(),
		withMaxRestarts(v1alpha1.RestartBudgets{Infrastructure: ptr.To[int32](tries)})))
	for i := range tries {
		// Exit at phase i/tries of a second: the deliberate timing of the fault, not a wait.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + time.Duration(i)*time.Second/tries)))
		victim := pods[i%2]
		detected := time.Now()
		failWorker(ctx, t, c, victim, cluster.Failure{ExitCode: 1, Reason: "Error", Message: "RuntimeError: NCCL communicator was aborted"})
		time.Sleep(300 * time.Millisecond)
		markAsAgent(ctx, t, c, victim, v1alpha1.FaultEvidence{Source: v1alpha1.EvidenceSourceLogind, Cause: v1alpha1.CauseNodeShutdown,
			DetectedAt: detected.UTC().Format(time.RFC3339Nano)})
		next := int32(i + 2)
		judged := waitRun(ctx, t, c, ns, run.Name, fmt.Sprintf("try %d judged", i+1), func(r *v1alpha1.TrainingRun) bool {
			return r.Status.Attempt == next || r.Status.Phase == v1alpha1.PhaseFailed
		})
		if lf := judged.Status.LastFailure; judged.Status.Phase == v1alpha1.PhaseFailed || lf == nil || lf.Cause != v1alpha1.CauseNodeShutdown {
			t.Fatalf("try %d (exit at +%d ms into its second): %s; want a restart for NodeShutdown", i+1, i*1000/tries, describeRun(judged))
		}
		waitRun(ctx, t, c, ns, run.Name, fmt.Sprintf("attempt %d Running", next), runningAttempt(next))
		pods = waitWorkers(ctx, t, c, ns, run.Name, next, 2)
	}
}

// TestE2EInvalidTemplateIsReported: what the API server refuses is said on the run, with its
// own words. A template the CRD accepts but the Job's validation does not (a container name
// that is no DNS label): Stalled, JobRejected, naming the field. Workers the Job accepts
// but the API server then refuses (a quota of one pod): Stalled, PodsNotCreated, with the
// Job controller's FailedCreate message.
func TestE2EInvalidTemplateIsReported(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	bad := createRun(ctx, t, c, ns, newRun("bad-template", 2, func(r *v1alpha1.TrainingRun) { r.Spec.Template.Spec.Containers[0].Name = "Worker_1" }, withoutGPUs()))
	rejected := waitRun(ctx, t, c, ns, bad.Name, "Stalled, JobRejected", func(r *v1alpha1.TrainingRun) bool {
		cond := runCondition(r, v1alpha1.ConditionStalled)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == v1alpha1.ReasonJobRejected
	})
	if msg := runCondition(rejected, v1alpha1.ConditionStalled).Message; !strings.Contains(msg, "spec.template.spec.containers[0].name") {
		t.Errorf("Stalled message %q does not name the field", msg)
	}

	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "one-pod", Namespace: ns},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}},
	}
	if _, err := c.Client.CoreV1().ResourceQuotas(ns).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The quota controller counts the namespace's pods first; until then it admits none.
	if _, err := c.WaitResourceQuota(ctx, ns, quota.Name, nil); err != nil {
		t.Fatal(err)
	}
	capped := createRun(ctx, t, c, ns, newRun("capped", 3, withoutGPUs()))
	stalled := waitRun(ctx, t, c, ns, capped.Name, "Stalled, PodsNotCreated", func(r *v1alpha1.TrainingRun) bool {
		cond := runCondition(r, v1alpha1.ConditionStalled)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == v1alpha1.ReasonPodsNotCreated
	})
	if msg := runCondition(stalled, v1alpha1.ConditionStalled).Message; !strings.Contains(msg, "exceeded quota") {
		t.Errorf("Stalled message %q does not give the Job controller's reason (the quota)", msg)
	}
}

// TestE2ESuspendDuringRestart: a run is suspended while a restart's teardown waits for an old
// worker. It stays suspended, makes no Job while suspended, spends nothing more; resumed, it
// runs a fresh attempt with the restart's budget as it was.
func TestE2ESuspendDuringRestart(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	run, pods := runningRun(ctx, t, c, ns, newRun("suspend-restart", 3, withoutGPUs()))
	stopped := stopSlowly(ctx, t, c, pods[2])
	infraFault(ctx, t, c, pods[0], v1alpha1.CauseNodeShutdown)
	waitRun(ctx, t, c, ns, run.Name, "restarting", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt == 2 && r.Status.Phase == v1alpha1.PhaseRestarting
	})
	patchRunSpec(ctx, t, c, ns, run.Name, map[string]any{"suspend": true})
	suspended := waitRun(ctx, t, c, ns, run.Name, "Suspended", phaseIs(v1alpha1.PhaseSuspended))
	stopped()
	requireRunStays(ctx, t, c, ns, run.Name, 3*time.Second, "suspended: no Job, no new attempt", func(r *v1alpha1.TrainingRun) bool {
		if r.Status.Phase != v1alpha1.PhaseSuspended || r.Status.Attempt != suspended.Status.Attempt {
			return true
		}
		job, err := c.Client.BatchV1().Jobs(ns).Get(ctx, run.Name, metav1.GetOptions{})
		return err == nil && job.DeletionTimestamp == nil
	})
	patchRunSpec(ctx, t, c, ns, run.Name, map[string]any{"suspend": false})
	resumed := waitRun(ctx, t, c, ns, run.Name, "resumed and Running", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt > suspended.Status.Attempt && runningAttempt(r.Status.Attempt)(r)
	})
	requireRestarts(t, resumed, v1alpha1.RestartCounts{Infrastructure: 1})
}

// TestE2EStaleShutdownDoesNotBlameLaterBugs: a node announced a shutdown an hour ago and the
// announcement was never taken back (an agent that died before clearing it). A worker
// started long after it exits 1: that is its own bug, not the shutdown.
func TestE2EStaleShutdownDoesNotBlameLaterBugs(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	node, onNode := dedicatedNode(ctx, t, c, "stale-"+ns)
	announce := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.AnnotationShutdownDetectedAt, time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano))
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(announce), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	run, pods := runningRun(ctx, t, c, ns, newRun("stale-shutdown", 2, onNode, withSettleSeconds(1)))
	if pods[1].Spec.NodeName != node {
		t.Fatalf("index 1 runs on %s, want %s", pods[1].Spec.NodeName, node)
	}
	failWorker(ctx, t, c, pods[1], cluster.Failure{ExitCode: 1, Reason: "Error", Message: "KeyError: 'labels'"})
	failed := waitRun(ctx, t, c, ns, run.Name, "Failed", phaseIs(v1alpha1.PhaseFailed))
	lf := failed.Status.LastFailure
	if lf == nil || lf.Cause != v1alpha1.CauseAppExit {
		t.Fatalf("run ended %s; want Failed as AppExit: the shutdown was announced before the container started", describeRun(failed))
	}
	if !strings.Contains(strings.Join(lf.Evidence, "\n"), "before the container started") {
		t.Errorf("the evidence does not say why the announcement was not counted: %q", lf.Evidence)
	}
	requireRestarts(t, failed, v1alpha1.RestartCounts{})
}
