package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestE2ENodeConditionIsEvidence (issue 58): a cluster's own GPU health checker writes a node
// condition, not faultline's evidence: NVSentinel sets GpuMemWatch=True on a node when DCGM's
// memory watch fails (one of the controller's default --node-condition-evidence). A worker on
// that node that exits 1 after the condition was set is judged an infrastructure GPU fault
// under the checker's own source, and the gang restarts; the same exit on a node without the
// condition fails the run as the program's.
func TestE2ENodeConditionIsEvidence(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	nodes, onPool := nodePool(ctx, t, c, ns, 3)
	run, pods := runningRun(ctx, t, c, ns, newRun("checked", 2, onPool, withSettleSeconds(1)))
	var victim *corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName == nodes[0] {
			victim = p
		}
	}
	if victim == nil {
		t.Fatalf("no worker on %s: %v", nodes[0], onNodes(pods))
	}
	// Set while the worker runs (a condition from before it started explains nothing of its
	// exit; the second's granularity of the condition's time is allowed for).
	setNodeCondition(ctx, t, c, nodes[0], corev1.NodeCondition{Type: "GpuMemWatch", Status: corev1.ConditionTrue,
		Reason: "GpuMemWatchIsNotHealthy", Message: "DCGM_FR_UNCONTAINED_ERROR on GPU 0"})
	failWorker(ctx, t, c, victim, cluster.Failure{ExitCode: 1, Reason: "Error", Message: "CUDA error: an illegal memory access was encountered"})
	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	lf := got.Status.LastFailure
	if lf == nil || lf.Class != v1alpha1.ClassInfrastructure || lf.Cause != v1alpha1.CauseGPUFault || lf.Pod != victim.Name {
		t.Fatalf("verdict: %s; want Infrastructure/GPUFault on %s", describeRun(got), victim.Name)
	}
	if !strings.Contains(lf.Explanation, "NVSentinel: GpuMemWatch=True") ||
		!slices.ContainsFunc(lf.Evidence, func(s string) bool {
			return strings.Contains(s, "NVSentinel's GpuMemWatch=True, reason GpuMemWatchIsNotHealthy")
		}) {
		t.Errorf("explanation %q, evidence %q: want the health checker's condition as the source", lf.Explanation, lf.Evidence)
	}
	requireRestarts(t, got, v1alpha1.RestartCounts{Infrastructure: 1})

	// The control: the same exit on a node whose checker says nothing.
	bug, bugPods := runningRun(ctx, t, c, ns, newRun("buggy", 1, onPool, withSettleSeconds(1), func(r *v1alpha1.TrainingRun) {
		r.Spec.Template.Spec.NodeSelector[corev1.LabelHostname] = nodes[2]
	}))
	failWorker(ctx, t, c, bugPods[0], cluster.Failure{ExitCode: 1, Reason: "Error", Message: "CUDA error: an illegal memory access was encountered"})
	failed := waitRun(ctx, t, c, ns, bug.Name, "Failed", func(r *v1alpha1.TrainingRun) bool { return r.Status.Phase == v1alpha1.PhaseFailed })
	if lf := failed.Status.LastFailure; lf == nil || lf.Cause != v1alpha1.CauseAppExit {
		t.Errorf("the control: %s; want AppExit", describeRun(failed))
	}
}

// setNodeCondition writes cond onto node's status as a health checker does, now.
func setNodeCondition(ctx context.Context, t *testing.T, c *cluster.Cluster, node string, cond corev1.NodeCondition) {
	t.Helper()
	cond.LastTransitionTime, cond.LastHeartbeatTime = metav1.Now(), metav1.Now()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("set %s on node %s: %v", cond.Type, node, err)
	}
}
