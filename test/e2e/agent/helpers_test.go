package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/shutdown/login1sim"
	"github.com/faultline-dev/faultline/test/cluster"
)

// agentHandle is one running node agent and the simulated node around it.
type agentHandle struct {
	*cluster.Agent
	// logind and lock are the node's logind and the inhibitor lock the agent took at start.
	logind *login1sim.Login1
	lock   *login1sim.Lock
}

// startAgent runs a node agent for node (cluster.StartAgent: a bus and logind of its own, a
// token bound to the node's DaemonSet pod) and stops it when the test ends. It returns once
// the agent holds its inhibitor lock. args are added to the agent's.
func startAgent(t testing.TB, c *cluster.Cluster, node string, args ...string) *agentHandle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := c.StartAgent(ctx, cluster.AgentOptions{
		Bin: agentBin, Node: node, DaemonSetPod: dsPods[node], Dir: t.TempDir(),
		Args: append([]string{"--release-timeout", "5s"}, args...),
	})
	if errors.Is(err, cluster.ErrNoBus) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("started nodeagent for %s pid %d, log %s", node, a.Pid(), a.LogPath)
	t.Cleanup(func() {
		a.Stop()
		if t.Failed() {
			t.Logf("nodeagent %s log (last 50 lines of %s):\n%s", node, a.LogPath, a.Tail(50))
		}
	})
	return &agentHandle{Agent: a, logind: a.Logind, lock: a.Lock}
}

// injectXID makes GPU gpu of the agent's simulated node report an XID.
func (h *agentHandle) injectXID(t testing.TB, gpu int, xid uint64) time.Time {
	t.Helper()
	at := time.Now()
	if err := h.InjectXID(gpu, xid); err != nil {
		t.Fatal(err)
	}
	return at
}

// createPods creates n Running pods on node directly (as the scheduler would bind them),
// labelled as workers of run (no run label when run is ""), each asking for gpus GPUs.
func createPods(ctx context.Context, t testing.TB, c *cluster.Cluster, ns, node, run string, n, gpus int) []*corev1.Pod {
	t.Helper()
	podLabels := map[string]string{"test-group": orName(run, "other") + "-" + node}
	if run != "" {
		podLabels[v1alpha1.LabelRun] = run
		podLabels[v1alpha1.LabelAttempt] = "1"
	}
	for i := range n {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", orName(run, "other"), node, i), Namespace: ns, Labels: podLabels},
			Spec: corev1.PodSpec{
				NodeName:      node,
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "worker", Image: "trainer:latest"}},
			},
		}
		if gpus > 0 {
			q := *resource.NewQuantity(int64(gpus), resource.DecimalSI)
			pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{v1alpha1.ResourceGPU: q}
			pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{v1alpha1.ResourceGPU: q}
		}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", pod.Name, err)
		}
	}
	sel := labels.SelectorFromSet(podLabels)
	pods, err := c.WaitPods(ctx, ns, sel, func(pods []*corev1.Pod) (bool, error) {
		running := 0
		for _, p := range pods {
			if p.Spec.NodeName == node && cluster.PodRunning(p) {
				running++
			}
		}
		return running == n, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []*corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName == node {
			out = append(out, p)
		}
	}
	return out
}

func orName(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func infraCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; c.Type == v1alpha1.PodConditionInfrastructureFault && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

func evidence(t *testing.T, p *corev1.Pod) *v1alpha1.FaultEvidence {
	t.Helper()
	raw, ok := p.Annotations[v1alpha1.AnnotationFaultEvidence]
	if !ok {
		return nil
	}
	var ev v1alpha1.FaultEvidence
	if err := json.Unmarshal([]byte(raw), &ev); err != nil {
		t.Fatalf("pod %s: unreadable evidence %q: %v", p.Name, raw, err)
	}
	return &ev
}

func gpuHealthy(n *corev1.Node) *corev1.NodeCondition {
	return cluster.NodeCondition(n, v1alpha1.NodeConditionGPUHealthy)
}

// markPatch is the agent's mark as it writes it (pkg/nodeagent podMarkPatch): the
// InfrastructureFault condition and the evidence annotation in one strategic merge patch of
// pods/status.
func markPatch(cause v1alpha1.Cause, evidence string) []byte {
	b, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{v1alpha1.AnnotationFaultEvidence: evidence}},
		"status": map[string]any{"conditions": []corev1.PodCondition{{
			Type: v1alpha1.PodConditionInfrastructureFault, Status: corev1.ConditionTrue,
			Reason: string(cause), LastTransitionTime: metav1.Now(),
		}}},
	})
	return b
}
