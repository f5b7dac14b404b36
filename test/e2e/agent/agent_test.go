package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestE2ENodeShutdownMarksPodsBeforeFailure: logind announces a shutdown; before the
// kubelet stops anything, every run pod of the node carries the InfrastructureFault
// condition and the evidence, the node is annotated, and the agent lets logind go on. The
// pods then fail with SIGTERM and the verdict on them is a conclusive NodeShutdown.
func TestE2ENodeShutdownMarksPodsBeforeFailure(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node, other := cluster.NodeName(0), cluster.NodeName(3)
	a := startAgent(t, c, node)

	runPods := createPods(ctx, t, c, ns, node, "llm", 3, 1)
	bystander := createPods(ctx, t, c, ns, node, "", 1, 0)[0]
	elsewhere := createPods(ctx, t, c, ns, other, "elsewhere", 1, 0)[0]

	start := time.Now()
	if err := a.logind.PrepareForShutdown(true); err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: "llm"})
	marked, err := c.WaitPods(ctx, ns, sel, func(pods []*corev1.Pod) (bool, error) {
		n := 0
		for _, p := range pods {
			if infraCondition(p) != nil && p.Annotations[v1alpha1.AnnotationFaultEvidence] != "" {
				n++
			}
		}
		return n == len(runPods), nil
	})
	if err != nil {
		t.Fatalf("run pods marked after PrepareForShutdown: %v", err)
	}
	t.Logf("PrepareForShutdown -> %d pods marked in %s", len(marked), time.Since(start).Round(time.Millisecond))
	for _, p := range marked {
		if !cluster.PodRunning(p) {
			t.Errorf("pod %s is %s: it must be marked while still running", p.Name, p.Status.Phase)
		}
		if cond := infraCondition(p); cond.Reason != string(v1alpha1.CauseNodeShutdown) {
			t.Errorf("pod %s condition reason %q, want NodeShutdown", p.Name, cond.Reason)
		}
		ev := evidence(t, p)
		if ev.Source != v1alpha1.EvidenceSourceLogind || ev.Node != node || ev.Cause != v1alpha1.CauseNodeShutdown {
			t.Errorf("pod %s evidence %+v, want logind/%s/NodeShutdown", p.Name, ev, node)
		}
		if at, err := time.Parse(time.RFC3339Nano, ev.DetectedAt); err != nil || at.Before(start.Add(-time.Second)) {
			t.Errorf("pod %s detectedAt %q is not the time of the announcement (%v)", p.Name, ev.DetectedAt, start)
		}
	}
	if !a.lock.Released(10 * time.Second) {
		t.Error("the agent kept its inhibitor lock after marking: the shutdown would wait for logind's timeout")
	}
	// The agent annotates the node beside marking the pods, and before it lets the shutdown go.
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := time.Parse(time.RFC3339Nano, n.Annotations[v1alpha1.AnnotationShutdownDetectedAt]); err != nil {
		t.Errorf("node %s annotation %s = %q: %v", node, v1alpha1.AnnotationShutdownDetectedAt, n.Annotations[v1alpha1.AnnotationShutdownDetectedAt], err)
	}
	for _, p := range []*corev1.Pod{bystander, elsewhere} {
		got, err := c.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if infraCondition(got) != nil || got.Annotations[v1alpha1.AnnotationFaultEvidence] != "" {
			t.Errorf("pod %s (node %s, labels %v) was marked: only run pods of the shutting-down node may be", got.Name, got.Spec.NodeName, got.Labels)
		}
	}

	// The kubelet's graceful shutdown: every container gets SIGTERM.
	for _, p := range marked {
		if err := c.FailPod(ctx, ns, p.Name, cluster.Failure{ExitCode: 143, Message: "terminated by SIGTERM"}); err != nil {
			t.Fatal(err)
		}
	}
	failed, err := c.WaitPods(ctx, ns, sel, func(pods []*corev1.Pod) (bool, error) {
		n := 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodFailed {
				n++
			}
		}
		return n == len(runPods), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	n, err = c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	v := exitclass.Classify(exitclass.Observation{
		Pods:  failed,
		Nodes: map[string]exitclass.NodeFacts{node: exitclass.FactsOfNode(n, exitclass.DefaultNodeConditionRules)},
		Now:   now, SettleDeadline: now.Add(time.Hour),
	})
	if v.Class != v1alpha1.ClassInfrastructure || v.Cause != v1alpha1.CauseNodeShutdown || !v.Final {
		t.Errorf("verdict on the failed pods: %s/%s final=%v, want a final Infrastructure/NodeShutdown\n%s", v.Class, v.Cause, v.Final, v.Explain())
	}
}

// TestE2EGPUXidFatalMarksPodAndNode: XID 79 (GPU fallen off the bus) on a GPU held by a run
// pod marks that pod with GPUFault and the node GPUHealthy=False.
func TestE2EGPUXidFatalMarksPodAndNode(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := cluster.NodeName(1)
	a := startAgent(t, c, node)
	pod := createPods(ctx, t, c, ns, node, "vision", 1, 8)[0]

	start := a.injectXID(t, 3, 79)
	sel := labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: "vision"})
	pods, err := c.WaitPods(ctx, ns, sel, func(pods []*corev1.Pod) (bool, error) {
		return len(pods) == 1 && infraCondition(pods[0]) != nil && pods[0].Annotations[v1alpha1.AnnotationFaultEvidence] != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s marked after XID 79: %v", pod.Name, err)
	}
	t.Logf("XID 79 -> pod marked in %s", time.Since(start).Round(time.Millisecond))
	if cond := infraCondition(pods[0]); cond.Reason != string(v1alpha1.CauseGPUFault) {
		t.Errorf("condition reason %q, want GPUFault", cond.Reason)
	}
	ev := evidence(t, pods[0])
	if ev.Cause != v1alpha1.CauseGPUFault || ev.Source != v1alpha1.EvidenceSourceNVMLEvent || ev.GPU == nil || ev.GPU.XID != 79 || ev.GPU.Index != 3 || ev.GPU.UUID == "" {
		t.Errorf("evidence %+v (gpu %+v), want GPUFault from nvml-event on GPU 3 with XID 79", ev, ev.GPU)
	}
	n, err := c.WaitNode(ctx, node, func(n *corev1.Node) (bool, error) {
		cond := gpuHealthy(n)
		return cond != nil && cond.Status == corev1.ConditionFalse, nil
	})
	if err != nil {
		t.Fatalf("node %s GPUHealthy=False after XID 79: %v", node, err)
	}
	if cond := gpuHealthy(n); cond.Reason != "Xid79" {
		t.Errorf("node condition reason %q, want Xid79", cond.Reason)
	}
}

// TestE2EGPUXidProgramCausedIsNotInfrastructure: XID 13 (graphics engine exception, the
// program's fault) leaves evidence for exitclass but neither the InfrastructureFault
// condition (the Job's podFailurePolicy would take it for infrastructure) nor an unhealthy
// node. A fatal XID on an idle GPU afterwards is the barrier: the agent handles faults in
// order, so by the time the node turns unhealthy for it, anything XID 13 did is visible.
func TestE2EGPUXidProgramCausedIsNotInfrastructure(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := cluster.NodeName(2)
	a := startAgent(t, c, node)
	createPods(ctx, t, c, ns, node, "buggy", 1, 4) // GPUs 0-3

	var nodeReasons []string
	nodeSeen := make(chan error, 1)
	go func() {
		_, err := c.WaitNode(ctx, node, func(n *corev1.Node) (bool, error) {
			cond := gpuHealthy(n)
			if cond == nil || cond.Status != corev1.ConditionFalse {
				return false, nil
			}
			nodeReasons = append(nodeReasons, cond.Reason)
			return cond.Reason == "Xid79", nil
		})
		nodeSeen <- err
	}()

	a.injectXID(t, 1, 13)
	sel := labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: "buggy"})
	pods, err := c.WaitPods(ctx, ns, sel, func(pods []*corev1.Pod) (bool, error) {
		return len(pods) == 1 && pods[0].Annotations[v1alpha1.AnnotationFaultEvidence] != "", nil
	})
	if err != nil {
		t.Fatalf("evidence after XID 13: %v", err)
	}
	// The condition and the evidence go in one write: had the agent written one, it would show.
	if cond := infraCondition(pods[0]); cond != nil {
		t.Errorf("XID 13 put the InfrastructureFault condition on the pod (reason %s): a program error must not look like infrastructure", cond.Reason)
	}
	ev := evidence(t, pods[0])
	if ev.Cause != v1alpha1.CauseAppGPUError || ev.GPU == nil || ev.GPU.XID != 13 || ev.GPU.Index != 1 {
		t.Errorf("evidence %+v (gpu %+v), want AppGPUError with XID 13 on GPU 1", ev, ev.GPU)
	}

	a.injectXID(t, 6, 79) // an idle GPU: marks only the node
	if err := <-nodeSeen; err != nil {
		t.Fatalf("barrier XID 79: %v", err)
	}
	if len(nodeReasons) != 1 || nodeReasons[0] != "Xid79" {
		t.Errorf("node GPUHealthy=False reasons seen: %v; XID 13 must not make the node unhealthy", nodeReasons)
	}
}

// TestE2EAgentCannotTouchOtherNodes: with the token of the agent on node A, marking a pod on
// node B, or node B itself, is refused by the API server (403, from the
// ValidatingAdmissionPolicy), while the same writes on node A go through.
func TestE2EAgentCannotTouchOtherNodes(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodeA, nodeB := cluster.NodeName(3), cluster.NodeName(1)
	_, token, err := c.PodBoundKubeconfig(ctx, dsPods[nodeA], t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	asAgent, err := kubernetes.NewForConfig(token)
	if err != nil {
		t.Fatal(err)
	}
	podA := createPods(ctx, t, c, ns, nodeA, "own", 1, 0)[0]
	podB := createPods(ctx, t, c, ns, nodeB, "foreign", 1, 0)[0]

	annPatch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationFaultEvidence + `":"{}"}}}`)
	nodePatch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationShutdownDetectedAt + `":"2026-11-21T00:00:00Z"}}}`)

	// Own node: allowed, and both halves of the mark land.
	if _, err := asAgent.CoreV1().Pods(ns).Patch(ctx, podA.Name, types.StrategicMergePatchType, markPatch(v1alpha1.CauseNodeShutdown, "{}"), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("agent of %s marking pod %s on its own node: %v", nodeA, podA.Name, err)
	}
	if got, err := c.Client.CoreV1().Pods(ns).Get(ctx, podA.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if infraCondition(got) == nil || got.Annotations[v1alpha1.AnnotationFaultEvidence] != "{}" {
		t.Errorf("pod %s after the mark: conditions %+v, annotations %v; want both the condition and the evidence", podA.Name, got.Status.Conditions, got.Annotations)
	}
	if _, err := asAgent.CoreV1().Nodes().Patch(ctx, nodeA, types.MergePatchType, nodePatch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("agent of %s annotating its own node: %v", nodeA, err)
	}
	// The agent never writes a pod itself (only its status): RBAC refuses it, on any node.
	for _, p := range []*corev1.Pod{podA, podB} {
		_, err := asAgent.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, annPatch, metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `cannot patch resource "pods"`) {
			t.Errorf("agent patching pod %s on %s directly: got %v, want RBAC's 403 (no patch on pods)", p.Name, p.Spec.NodeName, err)
		}
	}

	// Another node: refused, with a message that says why.
	refusals := map[string]error{}
	_, refusals["pod status on "+nodeB] = asAgent.CoreV1().Pods(ns).Patch(ctx, podB.Name, types.StrategicMergePatchType, markPatch(v1alpha1.CauseNodeShutdown, "{}"), metav1.PatchOptions{}, "status")
	_, refusals["node "+nodeB] = asAgent.CoreV1().Nodes().Patch(ctx, nodeB, types.MergePatchType, nodePatch, metav1.PatchOptions{})
	for what, err := range refusals {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: got %v, want 403 Forbidden", what, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "faultline-nodeagent on node "+nodeA) || !strings.Contains(msg, nodeB) {
			t.Errorf("%s: message %q should name the agent's node %s and the target's node %s", what, msg, nodeA, nodeB)
		}
	}
	got, err := c.Client.CoreV1().Pods(ns).Get(ctx, podB.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if infraCondition(got) != nil || got.Annotations[v1alpha1.AnnotationFaultEvidence] != "" {
		t.Error("pod on the other node was changed despite the refusal")
	}
}

// TestE2EGPUHealthyRecovers: a node marked GPU-unhealthy is healthy again (GPUHealthy=True,
// faultline's taint gone) once the fault is over, and only then: a GPU that the health poll
// found lost is over when the poll finds it back; an XID, which nothing on the node takes
// back, is over when an operator says the GPUs were reset (the Node's
// faultline.dev/gpu-reset-requested-at).
func TestE2EGPUHealthyRecovers(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := cluster.NodeName(4)
	a := startAgent(t, c, node, "--taint-unhealthy-gpu", "--gpu-health-interval", "200ms")
	waitGPUs := func(what string, status corev1.ConditionStatus, reason string) *corev1.Node {
		t.Helper()
		n, err := c.WaitNode(ctx, node, func(n *corev1.Node) (bool, error) {
			cond := gpuHealthy(n)
			return cond != nil && cond.Status == status && cond.Reason == reason && tainted(n) == (status == corev1.ConditionFalse), nil
		})
		if err != nil {
			var cond *corev1.NodeCondition
			if n != nil {
				cond = gpuHealthy(n)
			}
			t.Fatalf("%s: node %s not GPUHealthy=%s %s with the taint %s only while unhealthy: %v; GPUHealthy %+v, tainted %t",
				what, node, status, reason, v1alpha1.TaintGPUUnhealthy, err, cond, n != nil && tainted(n))
		}
		return n
	}

	if err := a.SetGPULost(5, true); err != nil {
		t.Fatal(err)
	}
	waitGPUs("GPU 5 lost", corev1.ConditionFalse, v1alpha1.GPUReasonGPULost)
	if err := a.SetGPULost(5, false); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	waitGPUs("GPU 5 back", corev1.ConditionTrue, v1alpha1.GPUReasonHealthy)
	t.Logf("GPU back -> node healthy and untainted in %s", time.Since(back).Round(time.Millisecond))

	a.injectXID(t, 2, 79)
	waitGPUs("XID 79 on GPU 2", corev1.ConditionFalse, "Xid79")
	reset := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.AnnotationGPUResetRequestedAt, time.Now().UTC().Format(time.RFC3339Nano))
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(reset), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	n := waitGPUs("the operator's reset", corev1.ConditionTrue, v1alpha1.GPUReasonHealthy)
	if msg := gpuHealthy(n).Message; !strings.Contains(msg, v1alpha1.AnnotationGPUResetRequestedAt) {
		t.Errorf("GPUHealthy=True message %q does not name the operator's reset", msg)
	}
}

func tainted(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintGPUUnhealthy })
}
