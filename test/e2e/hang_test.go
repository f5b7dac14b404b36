package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/test/cluster"
)

// Faults that hang instead of exiting (issue 42), the controller's side: the node agent's
// evidence on a worker that runs on, and its word that a worker shows no progress, played
// here as the agent writes them (test/e2e/realnode runs the real thing).

// xidOn is the agent's evidence of an XID on GPU 0 of pod's node, now.
func xidOn(pod *corev1.Pod, xid uint64, cause v1alpha1.Cause) v1alpha1.FaultEvidence {
	return v1alpha1.FaultEvidence{
		Source: v1alpha1.EvidenceSourceNVMLEvent, Node: pod.Spec.NodeName, Cause: cause,
		DetectedAt: time.Now().UTC().Format(time.RFC3339Nano),
		GPU:        &v1alpha1.GPUEvidence{UUID: "GPU-0", Index: 0, XID: xid},
	}
}

// TestE2EFatalEvidenceOnARunningWorkerRestartsTheGang: XID 79 on a worker that runs on (its
// worker hung in a CUDA call): no worker ever fails, and the gang restarts after the settle
// window, as the evidence says (infrastructure, the node excluded), the verdict naming the
// worker as still running; XID 31 (the program's) on a running worker of another gang ends
// nothing.
func TestE2EFatalEvidenceOnARunningWorkerRestartsTheGang(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	run, pods := runningRun(ctx, t, c, ns, newRun("hung-xid", 4, withSettleSeconds(1)))
	other, otherPods := runningRun(ctx, t, c, ns, newRun("hung-app-xid", 2, withSettleSeconds(1)))
	victim := pods[2]

	start := time.Now()
	markAsAgent(ctx, t, c, victim, xidOn(victim, 79, v1alpha1.CauseGPUFault))
	markAsAgent(ctx, t, c, otherPods[1], xidOn(otherPods[1], 31, v1alpha1.CauseAppGPUError))
	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	t.Logf("XID 79 on a running worker -> attempt 2 Running in %s", time.Since(start).Round(time.Millisecond))
	f := got.Status.LastFailure
	if f == nil || f.Cause != v1alpha1.CauseGPUFault || f.Pod != victim.Name || f.Node != victim.Spec.NodeName || !f.StillRunning || f.ExitCode != nil ||
		!strings.Contains(f.Explanation, "was still running") {
		t.Fatalf("verdict: %s; want GPUFault on %s, still running", describeRun(got), victim.Name)
	}
	if f.DecidedAt == nil || f.DecidedAt.Time.Before(start.Truncate(time.Second)) {
		t.Errorf("decided at %v, the evidence at %s", f.DecidedAt, start.Format(time.RFC3339Nano))
	}
	requireRestarts(t, got, v1alpha1.RestartCounts{Infrastructure: 1})
	if !slices.Contains(got.Status.ExcludedNodes, victim.Spec.NodeName) {
		t.Errorf("excluded nodes %v, want %s", got.Status.ExcludedNodes, victim.Spec.NodeName)
	}
	requireRunStays(ctx, t, c, ns, other.Name, 3*time.Second, "XID 31 ends nothing",
		func(r *v1alpha1.TrainingRun) bool { return r.Status.Attempt != 1 || r.Status.LastFailure != nil })
}

// TestE2ESilentGangRestartsOnItsOwnBudget: the agent's NoProgress on one worker of two ends
// nothing (the other progresses); on both, the gang restarts on the NoProgress budget,
// whatever the Unknown budget says; a second stall fails the run, its budget spent.
func TestE2ESilentGangRestartsOnItsOwnBudget(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	deadline := int32(60)
	run, pods := runningRun(ctx, t, c, ns, newRun("silent", 2, withSettleSeconds(1), withMaxRestarts(v1alpha1.RestartBudgets{Unknown: new(int32)}),
		func(r *v1alpha1.TrainingRun) { r.Spec.FailurePolicy.ProgressDeadlineSeconds = &deadline }))
	for _, p := range pods {
		if p.Annotations[v1alpha1.AnnotationProgressDeadline] != "60" {
			t.Fatalf("pod %s: %s=%q, want the run's deadline for its node agent", p.Name, v1alpha1.AnnotationProgressDeadline, p.Annotations[v1alpha1.AnnotationProgressDeadline])
		}
	}
	// The agent's time is the worker's last progress; the controller trusts the agent's
	// deadline and checks only that it is about the running worker (not before its start).
	since := time.Now()
	noProgress(ctx, t, c, pods[0], since)
	requireRunStays(ctx, t, c, ns, run.Name, 3*time.Second, "one worker progresses",
		func(r *v1alpha1.TrainingRun) bool { return r.Status.Attempt != 1 })
	noProgress(ctx, t, c, pods[1], since.Add(10*time.Second))
	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	f := got.Status.LastFailure
	if f == nil || f.Cause != v1alpha1.CauseNoProgress || f.Class != v1alpha1.ClassUnknown || f.Pod != pods[0].Name || !f.StillRunning {
		t.Fatalf("verdict: %s; want Unknown/NoProgress rooted at %s", describeRun(got), pods[0].Name)
	}
	requireRestarts(t, got, v1alpha1.RestartCounts{NoProgress: 1})

	second := waitWorkers(ctx, t, c, ns, run.Name, 2, 2)
	for _, p := range second {
		noProgress(ctx, t, c, p, time.Now())
	}
	failed := waitRun(ctx, t, c, ns, run.Name, "phase Failed", phaseIs(v1alpha1.PhaseFailed))
	if f := failed.Status.LastFailure; f == nil || f.Cause != v1alpha1.CauseNoProgress || f.Action != v1alpha1.ActionFailRun {
		t.Errorf("the second stall: %s; want the run failed on NoProgress, its budget spent", describeRun(failed))
	}
	requireRestarts(t, failed, v1alpha1.RestartCounts{NoProgress: 1})
}

// noProgress writes, as the node agent of its node does, that pod's worker has shown no
// progress since since.
func noProgress(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod, since time.Time) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: v1alpha1.PodConditionNoProgress, Status: corev1.ConditionTrue, Reason: v1alpha1.ProgressSignalLog,
		Message: "test: no output in the log of container worker", LastTransitionTime: metav1.NewTime(since),
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("mark pod %s without progress as its node agent: %v", pod.Name, err)
	}
}

// TestE2EProgressDeadlineAccepted: the positive control of the progress deadline's
// validation (TestE2EInvalidSpecsRejected has the refusals): a gang with a deadline of ten
// minutes and a rule that fails the run on NoProgress is stored as written, its noProgress
// budget defaulted to 1.
func TestE2EProgressDeadlineAccepted(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := newRun("deadline", 2, func(r *v1alpha1.TrainingRun) {
		r.Spec.FailurePolicy.ProgressDeadlineSeconds = ptrTo[int32](600)
		r.Spec.FailurePolicy.Rules = []v1alpha1.FailurePolicyRule{{Name: "hangs-are-bugs", OnCauses: []v1alpha1.Cause{v1alpha1.CauseNoProgress}, Action: v1alpha1.ActionFailRun}}
	})
	created := createRun(ctx, t, c, ns, run)
	got := getRun(ctx, t, c, ns, created.Name)
	fp := got.Spec.FailurePolicy
	if fp.ProgressDeadlineSeconds == nil || *fp.ProgressDeadlineSeconds != 600 || fp.MaxRestarts.NoProgress == nil || *fp.MaxRestarts.NoProgress != 1 {
		t.Errorf("stored progressDeadlineSeconds %v, maxRestarts.noProgress %v; want 600 and the default 1", fp.ProgressDeadlineSeconds, fp.MaxRestarts.NoProgress)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestE2EStaleNoProgressOnKeptPodsIsNotAStall (issue 56): a gang restarted in place for its
// stall keeps its pods and, where nobody takes them off (kwok's simulated agents run no
// progress watch; a real agent takes them off at its next look, 5 s later), attempt 1's
// NoProgress marks. With the supervising barrier, the default, the container's start stays
// attempt 1's: read against it, the marks made attempt 2 a gang silent since before its start
// the moment its barrier opened, and the run failed on its noProgress budget. Read against
// each worker's recorded open (its incarnation), they are attempt 1's: attempt 2 runs on.
func TestE2EStaleNoProgressOnKeptPodsIsNotAStall(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t, "--barrier-image", kwokBarrierImage, "--barrier-in-worker=true")
	nodes, onPool := nodePool(ctx, t, c, ns, 2)
	for _, n := range nodes {
		if err := c.MakeInPlaceCapable(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.SimulateInPlaceWith(ctx, ns, cluster.InPlaceSim{}); err != nil {
		t.Fatal(err)
	}
	deadline := int32(60)
	run, pods := runningRun(ctx, t, c, ns, newRun("stale-marks", 2, withoutGPUs(), onPool, withSettleSeconds(1), func(r *v1alpha1.TrainingRun) {
		r.Spec.FailurePolicy.RestartMode = v1alpha1.RestartModeInPlace
		r.Spec.FailurePolicy.ProgressDeadlineSeconds = &deadline
		r.Spec.Template.Spec.Containers[0].Command = []string{"/train"}
	}))
	since := time.Now()
	for _, p := range pods {
		noProgress(ctx, t, c, p, since)
	}
	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	if f := got.Status.LastFailure; f == nil || f.Cause != v1alpha1.CauseNoProgress {
		t.Fatalf("verdict: %s; want NoProgress", describeRun(got))
	}
	// The premise: the same pods, their supervising barriers opened for attempt 2, still
	// carrying attempt 1's marks.
	for i, p := range pods {
		now, err := c.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("index %d's pod %s: %v (want it kept in place)", i, p.Name, err)
		}
		recorded, err := c.WithNodeRecords(ctx, []*corev1.Pod{now})
		if err != nil {
			t.Fatal(err)
		}
		if b := attempt.BarrierOf(recorded[0]); b.Place != attempt.BarrierInWorker || !b.OpenedFor(2) {
			t.Fatalf("index %d: barrier at %v, opened for 2 %v: the premise (a kept pod whose supervising barrier opened for attempt 2) does not hold", i, b.Place, b.OpenedFor(2))
		}
		marked := slices.ContainsFunc(now.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == v1alpha1.PodConditionNoProgress && c.Status == corev1.ConditionTrue
		})
		if !marked {
			t.Fatalf("pod %s has no NoProgress=True: the premise (attempt 1's mark still on the kept pod) does not hold", p.Name)
		}
	}
	requireRunStays(ctx, t, c, ns, run.Name, 5*time.Second, "attempt 2 runs on: the marks on its kept pods are attempt 1's",
		func(r *v1alpha1.TrainingRun) bool {
			return r.Status.Attempt != 2 || r.Status.Phase != v1alpha1.PhaseRunning
		})
	final := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	requireRestarts(t, final, v1alpha1.RestartCounts{NoProgress: 1})
}
