package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/controller"
	"github.com/faultline-dev/faultline/test/cluster"
)

// The scenarios below run the real controller (`launcher controller`, one process per test,
// scoped to the test's namespace) against the real Job controller and scheduler, with kwok
// pods that a test fails or completes at will. Every wait is a watch bounded by the test's
// context; "nothing else happens" is a watch over a short window, never a sleep.

const scenarioTimeout = 3 * time.Minute

// scenario is the common start of a controller test: a namespace and a controller of its own.
func scenario(t *testing.T, ctrlArgs ...string) (context.Context, *cluster.Cluster, string, *cluster.Process) {
	t.Helper()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	t.Cleanup(cancel)
	p := startController(t, ns, ctrlArgs...)
	dumpOnFailure(t, c, ns)
	return ctx, c, ns, p
}

// TestE2EAppErrorFailsFast: a worker's plain exit 1 is an application error: the run fails
// within the settle window (plus a little), with the root cause, and is not restarted.
func TestE2EAppErrorFailsFast(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	const settle = 1
	run, pods := runningRun(ctx, t, c, ns, newRun("app-error", 4, withSettleSeconds(settle)))
	victim := pods[2]

	start := time.Now()
	failWorker(ctx, t, c, victim, cluster.Failure{ExitCode: 1, Reason: "Error", Message: "ValueError: loss is NaN"})
	failed := waitRun(ctx, t, c, ns, run.Name, "phase Failed", phaseIs(v1alpha1.PhaseFailed))
	elapsed := time.Since(start)
	limit := settle*time.Second + 2*time.Second
	t.Logf("exit 1 → phase Failed in %s (limit %s)", elapsed.Round(time.Millisecond), limit)
	if elapsed > limit {
		t.Errorf("run took %s from the exit to phase Failed; want at most settleSeconds+2s = %s", elapsed.Round(time.Millisecond), limit)
	}

	if failed.Status.Attempt != 1 {
		t.Errorf("status.attempt = %d, want 1 (no restart)", failed.Status.Attempt)
	}
	requireRestarts(t, failed, v1alpha1.RestartCounts{})
	lf := failed.Status.LastFailure
	if lf == nil {
		t.Fatalf("status.lastFailure is empty: %s", describeRun(failed))
	}
	if lf.Class != v1alpha1.ClassApplication || lf.Cause != v1alpha1.CauseAppExit {
		t.Errorf("lastFailure class/cause = %s/%s, want Application/AppExit", lf.Class, lf.Cause)
	}
	if ptr.Deref(lf.Index, -1) != 2 {
		t.Errorf("lastFailure.index = %s, want 2", fmtPtr(lf.Index))
	}
	if lf.Pod != victim.Name {
		t.Errorf("lastFailure.pod = %q, want %q", lf.Pod, victim.Name)
	}
	if ptr.Deref(lf.ExitCode, -1) != 1 {
		t.Errorf("lastFailure.exitCode = %s, want 1", fmtPtr(lf.ExitCode))
	}
	if lf.Explanation == "" {
		t.Errorf("lastFailure.explanation is empty")
	}
	cond := runCondition(failed, v1alpha1.ConditionFailed)
	switch {
	case cond == nil || cond.Status != metav1.ConditionTrue:
		t.Errorf("no condition Failed=True: %s", describeRun(failed))
	default:
		if cond.Reason != string(v1alpha1.CauseAppExit) {
			t.Errorf("condition Failed reason = %q, want %q", cond.Reason, v1alpha1.CauseAppExit)
		}
		if cond.Message != lf.Explanation {
			t.Errorf("condition Failed message = %q, want the explanation %q", cond.Message, lf.Explanation)
		}
	}

	// A failed run stays failed: no new attempt, and no worker is left running.
	requireRunStays(ctx, t, c, ns, run.Name, 2*time.Second, "stays Failed in attempt 1", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt != 1 || r.Status.Phase != v1alpha1.PhaseFailed
	})
	if left, err := c.WaitPods(ctx, ns, runSelector(run.Name), func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			if cluster.PodLive(p) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Errorf("workers still live after the run failed: %v: %s", err, describePods(left))
	}
	switch kept, err := c.Client.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{}); {
	case err != nil:
		t.Errorf("failed worker %s: %v, want it kept for its logs", victim.Name, err)
	case kept.DeletionTimestamp != nil:
		t.Errorf("failed worker %s is being deleted, want it kept for its logs", victim.Name)
	}
}

// TestE2EMaintenanceRestarts: a node shutdown under one worker restarts the whole gang
// exactly once, and the next attempt never overlaps the old one on any index.
func TestE2EMaintenanceRestarts(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	run, pods := runningRun(ctx, t, c, ns, newRun("maintenance", 4))

	overlaps := monitorOverlaps(ctx, t, c, ns, run.Name)
	rec := recordRun(ctx, t, c, ns, run.Name)
	infraFault(ctx, t, c, pods[1], v1alpha1.CauseNodeShutdown)

	next := waitWorkers(ctx, t, c, ns, run.Name, 2, 4)
	restarted := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))

	// The workers of attempt 2 belong to the Job of attempt 2.
	job, err := c.Client.BatchV1().Jobs(ns).Get(ctx, run.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get job: %v", err)
	}
	if job.Labels[v1alpha1.LabelAttempt] != "2" {
		t.Errorf("job %s has attempt label %q, want 2", job.Name, job.Labels[v1alpha1.LabelAttempt])
	}
	for i, p := range next {
		if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != job.UID {
			t.Errorf("index %d pod %s is not controlled by the attempt-2 Job %s (%s)", i, p.Name, job.Name, job.UID)
		}
	}

	if restarted.Status.Attempt != 2 {
		t.Errorf("status.attempt = %d, want 2", restarted.Status.Attempt)
	}
	requireRestarts(t, restarted, v1alpha1.RestartCounts{Infrastructure: 1})
	if lf := restarted.Status.LastFailure; lf == nil {
		t.Errorf("status.lastFailure is empty: %s", describeRun(restarted))
	} else {
		if lf.Cause != v1alpha1.CauseNodeShutdown || lf.Class != v1alpha1.ClassInfrastructure {
			t.Errorf("lastFailure class/cause = %s/%s, want Infrastructure/NodeShutdown", lf.Class, lf.Cause)
		}
		if ptr.Deref(lf.Index, -1) != 1 {
			t.Errorf("lastFailure.index = %s, want 1", fmtPtr(lf.Index))
		}
	}

	// No double restart: the run stays in attempt 2 with one restart spent.
	requireRunStays(ctx, t, c, ns, run.Name, 3*time.Second, "stays in attempt 2", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt != 2 || r.Status.Restarts != (v1alpha1.RestartCounts{Infrastructure: 1})
	})
	rec.stop()
	t.Logf("phases observed: %v", rec.phases)
	if rec.maxAttempt != 2 {
		t.Errorf("highest attempt observed = %d, want exactly one new attempt (2)", rec.maxAttempt)
	}
	if !rec.sawPhase(v1alpha1.PhaseRestarting) {
		t.Errorf("phase Restarting never observed; phases: %v", rec.phases)
	}
	if rec.sawPhase(v1alpha1.PhaseFailed) {
		t.Errorf("phase Failed observed during an infrastructure restart; phases: %v", rec.phases)
	}
	overlaps.check(t)
}

// stopSlowly makes the kubelet of pod slow to stop it, once deleted, until stopped is called
// (cluster.HoldStopping).
func stopSlowly(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod) (stopped func()) {
	t.Helper()
	release, err := c.HoldStopping(ctx, pod.Namespace, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestE2ENextAttemptWaitsUntilTheOldPodsAreGone: while an old worker is still stopping, the
// old attempt's Job stays (held by faultline's finalizer, being deleted) and no pod of the
// next attempt exists; once the worker is gone the Job goes, and the next attempt runs. The
// monitor fails the test if any index ever had two pods that could run.
func TestE2ENextAttemptWaitsUntilTheOldPodsAreGone(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	run, pods := runningRun(ctx, t, c, ns, newRun("waits", 4))
	slow := pods[2]
	stopped := stopSlowly(ctx, t, c, slow)

	overlaps := monitorOverlaps(ctx, t, c, ns, run.Name)
	infraFault(ctx, t, c, pods[1], v1alpha1.CauseNodeShutdown)

	held, err := c.WaitJob(ctx, ns, run.Name, func(j *batchv1.Job) (bool, error) {
		if j.Labels[v1alpha1.LabelAttempt] != "1" {
			return false, fmt.Errorf("Job of attempt %s while old worker %s still stops", j.Labels[v1alpha1.LabelAttempt], slow.Name)
		}
		return j.DeletionTimestamp != nil, nil
	})
	if err != nil {
		t.Fatalf("attempt 1's Job, held while it is deleted: %v", err)
	}
	if !slices.Contains(held.Finalizers, v1alpha1.FinalizerAttemptJob) {
		t.Errorf("attempt 1's Job being deleted has finalizers %q, want faultline's", held.Finalizers)
	}
	requireRunStays(ctx, t, c, ns, run.Name, 2*time.Second, "no attempt-2 Job while an old worker stops", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Phase != v1alpha1.PhaseRestarting
	})
	if next := podsOfAttempt(ctx, t, c, ns, run.Name, 2); len(next) > 0 {
		t.Fatalf("%d pods of attempt 2 exist while old worker %s stops", len(next), slow.Name)
	}

	stopped()
	waitWorkers(ctx, t, c, ns, run.Name, 2, 4)
	restarted := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	requireRestarts(t, restarted, v1alpha1.RestartCounts{Infrastructure: 1})
	overlaps.check(t)
}

// TestE2EFaultWhileTheJobCreatesPods: a worker fails while the attempt's pods are still
// being created. A Job's creations go on after its deletion, and the Job controller keys what
// it expects to see by the Job's name, which the next attempt's Job shares: created at once,
// the next Job inherits the expectation of pods it will never see, and gets no pod for 5
// minutes or more. The next attempt must come up, without any index ever running twice.
//
// The creation is held mid-way by a quota of 10 pods, whatever the machine's speed (a race
// with the creation of 100 pods was this test's precondition, and a fast creation broke it);
// the quota goes once the restart is decided.
func TestE2EFaultWhileTheJobCreatesPods(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	const workers, held = 100, 10
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "creation-held", Namespace: ns},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse(strconv.Itoa(held))}},
	}
	if _, err := c.Client.CoreV1().ResourceQuotas(ns).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The quota controller counts the namespace's pods first; until then it admits none.
	if _, err := c.WaitResourceQuota(ctx, ns, quota.Name, nil); err != nil {
		t.Fatal(err)
	}
	run := createRun(ctx, t, c, ns, newRun("early", workers, withoutGPUs()))
	overlaps := monitorOverlaps(ctx, t, c, ns, run.Name)
	var first *corev1.Pod
	pods, err := c.WaitPods(ctx, ns, attemptSelector(run.Name, 1), func(pods []*corev1.Pod) (bool, error) {
		i := slices.IndexFunc(pods, cluster.PodRunning)
		if i >= 0 {
			first = pods[i]
		}
		return i >= 0, nil
	})
	if err != nil {
		t.Fatalf("a worker of attempt 1 Running: %v; pods: %s", err, describePods(pods))
	}
	infraFault(ctx, t, c, first, v1alpha1.CauseNodeShutdown)
	if n := len(podsOfAttempt(ctx, t, c, ns, run.Name, 1)); n > held {
		t.Fatalf("%d pods of attempt 1 under a quota of %d", n, held)
	}
	waitRun(ctx, t, c, ns, run.Name, "attempt 2 decided", func(r *v1alpha1.TrainingRun) bool { return r.Status.Attempt >= 2 })
	if err := c.Client.CoreV1().ResourceQuotas(ns).Delete(ctx, quota.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	waitWorkers(ctx, t, c, ns, run.Name, 2, workers)
	restarted := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	requireRestarts(t, restarted, v1alpha1.RestartCounts{Infrastructure: 1})
	overlaps.check(t)
}

// TestE2EBareSigtermUsesUnknownBudget: an exit 143 with no evidence is Unknown after the
// settle window: it spends the unknown budget, not the infrastructure one, and fails the run
// once that budget is gone.
func TestE2EBareSigtermUsesUnknownBudget(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	run, pods := runningRun(ctx, t, c, ns, newRun("bare-sigterm", 2,
		withSettleSeconds(1), withMaxRestarts(v1alpha1.RestartBudgets{Unknown: ptr.To[int32](1)})))

	failWorker(ctx, t, c, pods[0], cluster.Failure{ExitCode: 143, Reason: "Error"})
	restarted := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	requireRestarts(t, restarted, v1alpha1.RestartCounts{Unknown: 1})
	if lf := restarted.Status.LastFailure; lf == nil || lf.Class != v1alpha1.ClassUnknown || lf.Cause != v1alpha1.CauseUnknown {
		t.Errorf("lastFailure after a bare 143 is not Unknown/Unknown: %s", describeRun(restarted))
	}

	pods = waitWorkers(ctx, t, c, ns, run.Name, 2, 2)
	failWorker(ctx, t, c, pods[0], cluster.Failure{ExitCode: 143, Reason: "Error"})
	failed := waitRun(ctx, t, c, ns, run.Name, "phase Failed", phaseIs(v1alpha1.PhaseFailed))
	if failed.Status.Attempt != 2 {
		t.Errorf("status.attempt = %d, want 2", failed.Status.Attempt)
	}
	requireRestarts(t, failed, v1alpha1.RestartCounts{Unknown: 1})
	if lf := failed.Status.LastFailure; lf == nil || lf.Class != v1alpha1.ClassUnknown || lf.Cause != v1alpha1.CauseUnknown {
		t.Errorf("lastFailure of the second bare 143 is not Unknown/Unknown: %s", describeRun(failed))
	}
	cond := runCondition(failed, v1alpha1.ConditionFailed)
	if cond == nil || cond.Status != metav1.ConditionTrue {
		t.Fatalf("no condition Failed=True: %s", describeRun(failed))
	}
	if !strings.Contains(strings.ToLower(cond.Message), "budget") {
		t.Errorf("condition Failed message %q does not mention the exhausted budget", cond.Message)
	}
}

// TestE2EBudgetExhausted: with an infrastructure budget of one, the second infrastructure
// fault fails the run instead of restarting it.
func TestE2EBudgetExhausted(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	run, pods := runningRun(ctx, t, c, ns, newRun("budget", 2,
		withMaxRestarts(v1alpha1.RestartBudgets{Infrastructure: ptr.To[int32](1)})))

	infraFault(ctx, t, c, pods[0], v1alpha1.CauseNodeShutdown)
	restarted := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	requireRestarts(t, restarted, v1alpha1.RestartCounts{Infrastructure: 1})

	pods = waitWorkers(ctx, t, c, ns, run.Name, 2, 2)
	infraFault(ctx, t, c, pods[1], v1alpha1.CauseNodeMaintenance)
	failed := waitRun(ctx, t, c, ns, run.Name, "phase Failed", phaseIs(v1alpha1.PhaseFailed))
	if failed.Status.Attempt != 2 {
		t.Errorf("status.attempt = %d, want 2", failed.Status.Attempt)
	}
	requireRestarts(t, failed, v1alpha1.RestartCounts{Infrastructure: 1})
	if lf := failed.Status.LastFailure; lf == nil || lf.Cause != v1alpha1.CauseNodeMaintenance {
		t.Errorf("lastFailure is not the second fault (NodeMaintenance): %s", describeRun(failed))
	}
	cond := runCondition(failed, v1alpha1.ConditionFailed)
	if cond == nil || cond.Status != metav1.ConditionTrue {
		t.Fatalf("no condition Failed=True: %s", describeRun(failed))
	}
	if !strings.Contains(strings.ToLower(cond.Message), "budget") {
		t.Errorf("condition Failed message %q does not mention the exhausted budget", cond.Message)
	}
	requireRunStays(ctx, t, c, ns, run.Name, 2*time.Second, "stays Failed in attempt 2", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt != 2 || r.Status.Phase != v1alpha1.PhaseFailed
	})
}

// TestE2EExcludeFaultyNode: a GPU fault (XID 79 on the pod's GPU, then a CUDA error exit)
// restarts the run through a user rule with excludeNode, and the next attempt avoids the
// node — even though the template prefers it.
func TestE2EExcludeFaultyNode(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	run, pods := runningRun(ctx, t, c, ns, newRun("bad-gpu", 2,
		withPreferredNode(cluster.NodeName(3)),
		withRules(v1alpha1.FailurePolicyRule{
			Name: "bad-gpu", OnCauses: []v1alpha1.Cause{v1alpha1.CauseGPUFault},
			Action: v1alpha1.ActionRestartRun, ExcludeNode: true,
		})))
	victim := pods[0]
	node := victim.Spec.NodeName
	if node == "" {
		t.Fatalf("running pod %s has no node", victim.Name)
	}
	t.Logf("attempt 1: %s", describePods([]*corev1.Pod{pods[0], pods[1]}))

	gpuFault(ctx, t, c, victim)

	restarted := waitRun(ctx, t, c, ns, run.Name, "attempt 2", func(r *v1alpha1.TrainingRun) bool { return r.Status.Attempt >= 2 })
	if restarted.Status.Attempt != 2 {
		t.Errorf("status.attempt = %d, want 2", restarted.Status.Attempt)
	}
	if !slices.Contains(restarted.Status.ExcludedNodes, node) {
		t.Errorf("status.excludedNodes = %v, want it to contain %s", restarted.Status.ExcludedNodes, node)
	}
	if lf := restarted.Status.LastFailure; lf == nil {
		t.Errorf("status.lastFailure is empty: %s", describeRun(restarted))
	} else {
		if lf.Cause != v1alpha1.CauseGPUFault || lf.Class != v1alpha1.ClassInfrastructure {
			t.Errorf("lastFailure class/cause = %s/%s, want Infrastructure/GPUFault", lf.Class, lf.Cause)
		}
		if lf.Rule != "bad-gpu" {
			t.Errorf("lastFailure.rule = %q, want bad-gpu", lf.Rule)
		}
	}

	job, err := c.WaitJob(ctx, ns, run.Name, func(j *batchv1.Job) (bool, error) {
		return j.Labels[v1alpha1.LabelAttempt] == "2", nil
	})
	if err != nil {
		t.Fatalf("job of attempt 2: %v", err)
	}
	requireNodeExcluded(t, &job.Spec.Template, node)

	next := waitWorkers(ctx, t, c, ns, run.Name, 2, 2)
	for i, p := range next {
		if p.Spec.NodeName == node {
			t.Errorf("attempt 2 index %d pod %s runs on the excluded node %s", i, p.Name, node)
		}
	}
	t.Logf("attempt 2: %s", describePods([]*corev1.Pod{next[0], next[1]}))
	final := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	requireRestarts(t, final, v1alpha1.RestartCounts{Infrastructure: 1})
}

// TestE2EExcludeTwoFaultyNodes: a second GPU fault, on another node, in the next attempt
// excludes both nodes, and the API server accepts the Job that keeps its pods off both (a
// node selector's matchFields takes one node per requirement: a NotIn of two was refused,
// and the attempt never got its pods).
func TestE2EExcludeTwoFaultyNodes(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	run, pods := runningRun(ctx, t, c, ns, newRun("two-bad-gpus", 2,
		withRules(v1alpha1.FailurePolicyRule{
			Name: "bad-gpu", OnCauses: []v1alpha1.Cause{v1alpha1.CauseGPUFault},
			Action: v1alpha1.ActionRestartRun, ExcludeNode: true,
		})))
	var bad []string
	for n, victim := range []*corev1.Pod{pods[0], nil} {
		attemptN := int32(n + 1)
		if victim == nil {
			next := waitWorkers(ctx, t, c, ns, run.Name, attemptN, 2)
			victim = next[1]
		}
		bad = append(bad, victim.Spec.NodeName)
		gpuFault(ctx, t, c, victim)
		waitRun(ctx, t, c, ns, run.Name, fmt.Sprintf("attempt %d", attemptN+1), func(r *v1alpha1.TrainingRun) bool { return r.Status.Attempt > attemptN })
	}
	if bad[0] == bad[1] {
		t.Fatalf("attempt 2 ran on %s, which attempt 1 excluded", bad[0])
	}
	job, err := c.WaitJob(ctx, ns, run.Name, func(j *batchv1.Job) (bool, error) {
		return j.Labels[v1alpha1.LabelAttempt] == "3", nil
	})
	if err != nil {
		t.Fatalf("job of attempt 3: %v", err)
	}
	for _, node := range bad {
		requireNodeExcluded(t, &job.Spec.Template, node)
	}
	final := waitRun(ctx, t, c, ns, run.Name, "attempt 3 Running", func(r *v1alpha1.TrainingRun) bool {
		return runningAttempt(3)(r) || r.Status.Attempt > 3 || r.Status.Phase == v1alpha1.PhaseFailed
	})
	if !runningAttempt(3)(final) {
		t.Fatalf("want attempt 3 Running off %v: %s", bad, describeRun(final))
	}
	for i, p := range waitWorkers(ctx, t, c, ns, run.Name, 3, 2) {
		if slices.Contains(bad, p.Spec.NodeName) {
			t.Errorf("attempt 3 index %d pod %s runs on the excluded node %s", i, p.Name, p.Spec.NodeName)
		}
	}
}

// gpuFault has pod's node agent report XID 79 on pod's GPU, then fails its worker with a CUDA
// error, as a GPU that fell off the bus does.
func gpuFault(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod) {
	t.Helper()
	markAsAgent(ctx, t, c, pod, v1alpha1.FaultEvidence{
		Source: "nodeagent",
		Cause:  v1alpha1.CauseGPUFault,
		GPU:    &v1alpha1.GPUEvidence{UUID: "GPU-5f1c2a7e-0d8b-4c1e-9a51-3b2f6d7e8a90", Index: 0, XID: 79},
		Detail: "Xid 79: GPU has fallen off the bus",
	})
	failWorker(ctx, t, c, pod, cluster.Failure{ExitCode: 1, Reason: "Error", Message: "CUDA error: unspecified launch failure"})
}

// TestE2ESuspendResumeNotCounted: suspending a run removes its workers without spending any
// budget; resuming starts a new attempt.
func TestE2ESuspendResumeNotCounted(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	run, _ := runningRun(ctx, t, c, ns, newRun("suspend", 2))
	rec := recordRun(ctx, t, c, ns, run.Name)

	patchRunSpec(ctx, t, c, ns, run.Name, map[string]any{"suspend": true})
	suspended := waitRun(ctx, t, c, ns, run.Name, "phase Suspended", phaseIs(v1alpha1.PhaseSuspended))
	requireRestarts(t, suspended, v1alpha1.RestartCounts{})
	if left, err := c.WaitPods(ctx, ns, runSelector(run.Name), func(pods []*corev1.Pod) (bool, error) {
		return len(pods) == 0, nil
	}); err != nil {
		t.Fatalf("pods of the suspended run not removed: %v: %s", err, describePods(left))
	}
	suspended = getRun(ctx, t, c, ns, run.Name)
	if suspended.Status.Phase != v1alpha1.PhaseSuspended {
		t.Errorf("phase after the pods were removed = %q, want Suspended", suspended.Status.Phase)
	}
	requireRestarts(t, suspended, v1alpha1.RestartCounts{})

	patchRunSpec(ctx, t, c, ns, run.Name, map[string]any{"suspend": false})
	resumed := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	waitWorkers(ctx, t, c, ns, run.Name, 2, 2)
	requireRestarts(t, resumed, v1alpha1.RestartCounts{})
	rec.stop()
	t.Logf("phases observed: %v", rec.phases)
	if rec.sawPhase(v1alpha1.PhaseFailed) {
		t.Errorf("phase Failed observed during suspend/resume; phases: %v", rec.phases)
	}
}

// TestE2EDeletedJobIsMadeAgainWithoutOverlap: someone deletes the attempt's Job and leaves
// its workers running (propagation Orphan; Background only takes longer to stop them). The
// controller must stop those workers before it makes the Job again: a Job made at once would
// start a second pod of every index beside the first. The attempt and the budget stay as
// they were.
func TestE2EDeletedJobIsMadeAgainWithoutOverlap(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	run, old := runningRun(ctx, t, c, ns, newRun("lostjob", 4))
	job, err := c.Client.BatchV1().Jobs(ns).Get(ctx, run.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get job: %v", err)
	}

	overlaps := monitorOverlaps(ctx, t, c, ns, run.Name)
	jobs := monitorJobs(ctx, t, c, ns, run.Name)
	if err := c.Client.BatchV1().Jobs(ns).Delete(ctx, job.Name, metav1.DeleteOptions{
		PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan), Preconditions: metav1.NewUIDPreconditions(string(job.UID)),
	}); err != nil {
		t.Fatalf("delete job: %v", err)
	}

	// Every index Running again, each pod new and controlled by a new Job.
	oldUIDs := map[types.UID]bool{}
	for _, p := range old {
		oldUIDs[p.UID] = true
	}
	pods, err := c.WaitPods(ctx, ns, attemptSelector(run.Name, 1), func(pods []*corev1.Pod) (bool, error) {
		running := 0
		for _, p := range pods {
			if oldUIDs[p.UID] {
				return false, nil
			}
			if ref := metav1.GetControllerOf(p); cluster.PodRunning(p) && ref != nil && ref.UID != job.UID {
				running++
			}
		}
		return running == 4, nil
	})
	if err != nil {
		t.Fatalf("attempt 1's workers made again by a new Job: %v; pods: %s", err, describePods(pods))
	}
	waitWorkers(ctx, t, c, ns, run.Name, 1, 4)
	if got := jobs.counts(t); got["1"] != 1 || len(got) != 1 {
		t.Errorf("Jobs created while the run recovered, by attempt: %v; want one Job of attempt 1", got)
	}
	again := waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	requireRestarts(t, again, v1alpha1.RestartCounts{})
	overlaps.check(t)
}

// TestE2ESucceeds: when every worker exits 0 the run succeeds.
func TestE2ESucceeds(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	run, pods := runningRun(ctx, t, c, ns, newRun("succeeds", 3))
	for i := range 3 {
		completeWorker(ctx, t, c, pods[i])
	}
	done := waitRun(ctx, t, c, ns, run.Name, "phase Succeeded", phaseIs(v1alpha1.PhaseSucceeded))
	cond := runCondition(done, v1alpha1.ConditionSucceeded)
	if cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("no condition Succeeded=True: %s", describeRun(done))
	}
	if done.Status.Attempt != 1 {
		t.Errorf("status.attempt = %d, want 1", done.Status.Attempt)
	}
	requireRestarts(t, done, v1alpha1.RestartCounts{})
	if c := runCondition(done, v1alpha1.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
		t.Errorf("a succeeded run has Failed=True: %s", describeRun(done))
	}
}

// TestE2EIndexScopeReplacesOnePod: with restartScope Index an infrastructure fault replaces
// only the affected index (the Job controller's Ignore rule); the other workers keep running
// and the run stays in attempt 1.
func TestE2EIndexScopeReplacesOnePod(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	run, pods := runningRun(ctx, t, c, ns, newRun("index-scope", 3, withRestartScope(v1alpha1.RestartScopeIndex)))

	overlaps := monitorOverlaps(ctx, t, c, ns, run.Name)
	rec := recordRun(ctx, t, c, ns, run.Name)
	victim := pods[1]
	infraFault(ctx, t, c, victim, v1alpha1.CauseNodeShutdown)

	// The Job controller holds the replacement back by its pod-failure backoff (~10 s).
	var replacement *corev1.Pod
	got, err := c.WaitPods(ctx, ns, runSelector(run.Name), func(ps []*corev1.Pod) (bool, error) {
		replacement = nil
		keep := map[types.UID]bool{}
		for _, p := range ps {
			switch {
			case attempt.IndexOrNone(p) == 1 && p.UID != victim.UID && cluster.PodRunning(p):
				replacement = p
			case (p.UID == pods[0].UID || p.UID == pods[2].UID) && cluster.PodRunning(p):
				keep[p.UID] = true
			}
		}
		return replacement != nil && len(keep) == 2, nil
	})
	if err != nil {
		t.Fatalf("index 1 replaced while indexes 0 and 2 keep running: %v; pods: %s", err, describePods(got))
	}
	if replacement.Labels[v1alpha1.LabelAttempt] != "1" {
		t.Errorf("replacement pod %s has attempt label %q, want 1", replacement.Name, replacement.Labels[v1alpha1.LabelAttempt])
	}
	final := waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running with 3 ready", runningAttempt(1))
	for _, i := range []int{0, 2} {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pods[i].Name, metav1.GetOptions{})
		if err != nil || p.UID != pods[i].UID || !cluster.PodRunning(p) {
			t.Errorf("index %d pod %s (%s) did not keep running: %v", i, pods[i].Name, pods[i].UID, err)
		}
	}
	if final.Status.Attempt != 1 {
		t.Errorf("status.attempt = %d, want 1", final.Status.Attempt)
	}
	rec.stop()
	t.Logf("phases observed: %v", rec.phases)
	if rec.maxAttempt != 1 {
		t.Errorf("highest attempt observed = %d, want 1 (no gang restart)", rec.maxAttempt)
	}
	if rec.sawPhase(v1alpha1.PhaseFailed) {
		t.Errorf("phase Failed observed; phases: %v", rec.phases)
	}
	overlaps.check(t)
}

// TestE2EControllerCrashMidRestart: a controller killed between the steps of a restart
// resumes it after a restart of its own, with no attempt skipped and none doubled.
func TestE2EControllerCrashMidRestart(t *testing.T) {
	t.Parallel()
	for _, point := range []string{controller.CrashRestartPersisted, controller.CrashOldJobDeleted} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			ctx, c, ns, crashing := scenario(t, "--test-crash-at", point)
			run, pods := runningRun(ctx, t, c, ns, newRun("crash", 2))

			jobs := monitorJobs(ctx, t, c, ns, run.Name)
			overlaps := monitorOverlaps(ctx, t, c, ns, run.Name)
			infraFault(ctx, t, c, pods[0], v1alpha1.CauseNodeShutdown)

			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			state, err := crashing.Wait(wctx)
			cancel()
			if err != nil {
				t.Fatalf("controller with --test-crash-at %s did not exit: %v; run: %s", point, err, describeRun(getRun(ctx, t, c, ns, run.Name)))
			}
			if !cluster.KilledBy(state, syscall.SIGKILL) {
				t.Fatalf("controller exited with %v, want death by SIGKILL at %s", state, point)
			}

			// The decision was persisted before the crash.
			persisted := getRun(ctx, t, c, ns, run.Name)
			if persisted.Status.Attempt != 2 || persisted.Status.Phase != v1alpha1.PhaseRestarting {
				t.Errorf("after the crash at %s: attempt=%d phase=%q, want attempt 2 phase Restarting (%s)",
					point, persisted.Status.Attempt, persisted.Status.Phase, describeRun(persisted))
			}
			requireRestarts(t, persisted, v1alpha1.RestartCounts{Infrastructure: 1})
			job, err := c.Client.BatchV1().Jobs(ns).Get(ctx, run.Name, metav1.GetOptions{})
			switch point {
			case controller.CrashRestartPersisted:
				// Crashed before the old Job was deleted.
				if err != nil {
					t.Errorf("attempt-1 Job gone after a crash at %s (before its deletion): %v", point, err)
				} else if job.Labels[v1alpha1.LabelAttempt] != "1" || job.DeletionTimestamp != nil {
					t.Errorf("after a crash at %s the Job is attempt %q (deleting: %v), want attempt 1 not deleted",
						point, job.Labels[v1alpha1.LabelAttempt], job.DeletionTimestamp != nil)
				}
			case controller.CrashOldJobDeleted:
				// Crashed after the old Job was deleted, before the next was created.
				switch {
				case apierrors.IsNotFound(err):
				case err != nil:
					t.Errorf("get job: %v", err)
				case job.Labels[v1alpha1.LabelAttempt] != "1" || job.DeletionTimestamp == nil:
					t.Errorf("after a crash at %s the Job is attempt %q (deleting: %v), want attempt 1 being deleted, or none",
						point, job.Labels[v1alpha1.LabelAttempt], job.DeletionTimestamp != nil)
				}
			}
			if left := podsOfAttempt(ctx, t, c, ns, run.Name, 2); len(left) != 0 {
				t.Errorf("%d pods of attempt 2 exist right after a crash at %s", len(left), point)
			}

			// A fresh controller resumes the same restart.
			startController(t, ns)
			waitWorkers(ctx, t, c, ns, run.Name, 2, 2)
			resumed := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
			requireRestarts(t, resumed, v1alpha1.RestartCounts{Infrastructure: 1})
			requireRunStays(ctx, t, c, ns, run.Name, 3*time.Second, "stays in attempt 2 with one restart", func(r *v1alpha1.TrainingRun) bool {
				return r.Status.Attempt != 2 || r.Status.Restarts != (v1alpha1.RestartCounts{Infrastructure: 1})
			})

			created := jobs.counts(t)
			t.Logf("Jobs created after the fault, by attempt: %v", created)
			if created["2"] != 1 {
				t.Errorf("Jobs created for attempt 2: %d, want exactly 1", created["2"])
			}
			for _, a := range sortedKeys(created) {
				if a != "2" {
					t.Errorf("%d Job(s) created for attempt %q after the fault; only attempt 2 should be", created[a], a)
				}
			}
			overlaps.check(t)
		})
	}
}
