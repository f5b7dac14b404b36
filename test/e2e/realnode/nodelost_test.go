package realnode

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestRealNodeLostRestartsTheGang: a real node dies hard (its kubelet, containerd, the
// pods' processes and its node agent killed at once, as a power loss would, with no word to
// the API server): its workers stay Running in the API. Once the node lifecycle controller
// marks the node unreachable, the run is judged NodeLost and restarts; the teardown cannot
// see the old workers stop, so it waits and says so (Stalled, NodeUnreachable, naming the
// node and the fix); once the operator taints the node out-of-service, the gang runs on the
// other node and rendezvous there (every index registered once).
//
// It runs alone: the node it kills is every scenario's. It brings the node back (a boot:
// containerd, kubelet, device plugin, agent) before it ends.
func TestRealNodeLostRestartsTheGang(t *testing.T) {
	ctx, c, ns := scenario(t, 4*time.Minute)
	startController(t, c, ns)
	up, down := c.Real.Nodes[0], c.Real.Nodes[1]

	// The whole gang on the node that dies: no worker elsewhere fails first.
	run := createRun(ctx, t, c, ns, realRun("lost", 2, nil, func(r *v1alpha1.TrainingRun) {
		r.Spec.Template.Spec.TopologySpreadConstraints = nil
		r.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: corev1.NodeSelectorTerm{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{down.Name}}},
			}}},
		}}
	}))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	for i, p := range waitWorkers(ctx, t, c, ns, run.Name, 1, 2) {
		if p.Spec.NodeName != down.Name {
			t.Fatalf("attempt 1 index %d on %s, want %s (the node that dies)", i, p.Spec.NodeName, down.Name)
		}
	}

	if a := agents[down.Name]; a != nil {
		a.Stop()
		delete(agents, down.Name)
	}
	if err := c.Real.KillNode(down); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { revive(t, c, down) })
	killed := time.Now()
	restarting := waitRun(ctx, t, c, ns, run.Name, "a restart for the lost node", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt == 2 && r.Status.LastFailure != nil
	})
	t.Logf("node killed -> judged in %s", time.Since(killed).Round(time.Second))
	if lf := restarting.Status.LastFailure; lf.Cause != v1alpha1.CauseNodeLost || lf.Class != v1alpha1.ClassInfrastructure || lf.Node != down.Name {
		t.Errorf("lastFailure = %s/%s on %q, want Infrastructure/NodeLost on %s", lf.Class, lf.Cause, lf.Node, down.Name)
	}
	stalled := waitRun(ctx, t, c, ns, run.Name, "Stalled on the unreachable node", func(r *v1alpha1.TrainingRun) bool {
		cond := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionStalled)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == v1alpha1.ReasonNodeUnreachable
	})
	msg := meta.FindStatusCondition(stalled.Status.Conditions, v1alpha1.ConditionStalled).Message
	for _, want := range []string{down.Name, corev1.TaintNodeOutOfService} {
		if !strings.Contains(msg, want) {
			t.Errorf("Stalled message %q does not say %q", msg, want)
		}
	}
	if pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: attemptSelector(run.Name, 2).String()}); err != nil || len(pods.Items) > 0 {
		t.Fatalf("pods of attempt 2 while the lost workers may still run: %v %v", err, pods)
	}

	// The operator: the node is down.
	outOfService(ctx, t, c, down.Name, true)
	restarted := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	for i, p := range waitWorkers(ctx, t, c, ns, run.Name, 2, 2) {
		if p.Spec.NodeName != up.Name {
			t.Errorf("attempt 2 index %d on %s, want %s", i, p.Spec.NodeName, up.Name)
		}
	}
	if restarted.Status.Restarts != (v1alpha1.RestartCounts{Infrastructure: 1}) {
		t.Errorf("restarts %+v, want one infrastructure restart", restarted.Status.Restarts)
	}
	// Attempt 2's coordinator registers every index once.
	if log, tasks := registeredTasks(ctx, t, c, ns, run.Name, 2, 2); strings.Join(tasks, ",") != eachOnce(2) {
		t.Errorf("attempt 2's coordinator registered %v, want each of the 2 indexes once:\n%s", tasks, log)
	}
}

// outOfService taints a node node.kubernetes.io/out-of-service=nodeshutdown:NoExecute (an
// operator's statement that it is down), or takes the taint off.
func outOfService(ctx context.Context, t *testing.T, c *cluster.Cluster, node string, on bool) {
	t.Helper()
	// Against the node as read, again on a conflict: the node lifecycle controller writes
	// the taints of a node it lost (unreachable) at about this time, and those must stay.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var taints []corev1.Taint
		for _, tn := range n.Spec.Taints {
			if tn.Key != corev1.TaintNodeOutOfService {
				taints = append(taints, tn)
			}
		}
		if on {
			taints = append(taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		}
		patch := map[string]any{"metadata": map[string]any{"resourceVersion": n.ResourceVersion}, "spec": map[string]any{"taints": taints}}
		data, err := json.Marshal(patch)
		if err != nil {
			return err
		}
		_, err = c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, data, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("taint %s out-of-service=%t: %v", node, on, err)
	}
}

// revive boots a killed node again: its containerd, kubelet and device plugin, its node
// agent with the DaemonSet pod's token, and the operator's out-of-service taint taken off.
func revive(t *testing.T, c *cluster.Cluster, n *cluster.RealNode) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Real.ReviveNode(ctx, c, n); err != nil {
		t.Errorf("revive %s: %v", n.Name, err)
		return
	}
	outOfService(ctx, t, c, n.Name, false)
	if err := startAgent(ctx, c, n); err != nil {
		t.Errorf("restart the node agent of %s: %v", n.Name, err)
	}
	if err := c.WaitNodeHealthy(ctx, n.Name); err != nil {
		t.Errorf("after its revival: %v", err)
	}
}
