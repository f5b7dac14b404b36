package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/coreclient"
	"github.com/faultline-dev/faultline/pkg/nodeagent"
	"github.com/faultline-dev/faultline/test/cluster"
)

// gpusInLog is the NVIDIA_VISIBLE_DEVICES the worker logged at start (what the device plugin
// gave its container).
var gpusInLog = regexp.MustCompile(`gpus="([^"]*)"`)

// TestRealGPUToPodMapping: two workers with one GPU each on the same node; the real kubelet
// allocates the fake device plugin's GPUs to them. An XID on the GPU that the kubelet gave
// one worker (as its PodResources API says, and as the container's NVIDIA_VISIBLE_DEVICES
// confirms) lands on that worker's pod, with that UUID in its evidence, and on no other.
//
// It runs alone: a fatal XID turns the node's GPUHealthy condition False, which explains the
// failures of any container that runs on the node meanwhile. It turns it back when it ends.
func TestRealGPUToPodMapping(t *testing.T) {
	ctx, c, ns := scenario(t, 3*time.Minute)
	startController(t, c, ns)

	node := c.Real.Nodes[0]
	run := realRun("gpus", 2, nil, withGPUs(1), func(r *v1alpha1.TrainingRun) {
		r.Spec.Template.Spec.NodeSelector[corev1.LabelHostname] = node.Name
		r.Spec.Template.Spec.TopologySpreadConstraints = nil
	})
	run = createRun(ctx, t, c, ns, run)
	workers := waitWorkers(ctx, t, c, ns, run.Name, 1, 2)

	gpuOf := gpusOf(ctx, t, node, ns) // the kubelet's own answer
	target, other := workers[1], workers[0]
	uuid := gpuOf[target.Name]
	if uuid == "" || gpuOf[other.Name] == "" || uuid == gpuOf[other.Name] {
		t.Fatalf("PodResources allocations %v: want one distinct GPU for each of %s and %s", gpuOf, target.Name, other.Name)
	}
	if !containsString(node.GPUs, uuid) {
		t.Fatalf("PodResources gave %s GPU %s, which is not one of the node's device plugin GPUs %v", target.Name, uuid, node.GPUs)
	}
	// The container sees the same GPU.
	logs := workerLog(ctx, t, c, ns, run.Name, 1, 1)
	if m := gpusInLog.FindStringSubmatch(logs); m == nil || m[1] != uuid {
		t.Fatalf("worker 1 logged NVIDIA_VISIBLE_DEVICES %v, want %s (PodResources):\n%s", m, uuid, logs)
	}

	injected := time.Now()
	injectFatalXID(t, c, node.Name, uuid)
	marked, err := c.WaitPods(ctx, ns, attemptSelector(run.Name, 1), func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			if p.Name == target.Name && p.Annotations[v1alpha1.AnnotationFaultEvidence] != "" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("evidence on %s after an XID on its GPU %s: %v", target.Name, uuid, err)
	}
	t.Logf("XID 79 on %s -> evidence on %s in %s", uuid, target.Name, time.Since(injected).Round(time.Millisecond))
	for _, p := range marked {
		var ev v1alpha1.FaultEvidence
		raw, has := p.Annotations[v1alpha1.AnnotationFaultEvidence]
		switch p.Name {
		case target.Name:
			if err := json.Unmarshal([]byte(raw), &ev); err != nil {
				t.Fatalf("evidence %q: %v", raw, err)
			}
			if ev.GPU == nil || ev.GPU.UUID != uuid || ev.GPU.XID != 79 || ev.Node != node.Name || ev.Cause != v1alpha1.CauseGPUFault {
				t.Errorf("evidence on %s: %+v (gpu %+v); want GPUFault XID 79 on %s, node %s", p.Name, ev, ev.GPU, uuid, node.Name)
			}
			if cond := podCondition(p, v1alpha1.PodConditionInfrastructureFault); cond == nil || cond.Status != corev1.ConditionTrue {
				t.Errorf("pod %s has no InfrastructureFault condition after a fatal XID on its GPU", p.Name)
			}
		default:
			if has || podCondition(p, v1alpha1.PodConditionInfrastructureFault) != nil {
				t.Errorf("pod %s (GPU %s) was marked for an XID on %s: %s", p.Name, gpuOf[p.Name], uuid, raw)
			}
		}
	}
	// The node says which GPU is unhealthy.
	if err := waitGPUUnhealthy(ctx, c, node.Name, uuid); err != nil {
		t.Error(err)
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// injectFatalXID injects XID 79 (fallen off the bus: fatal) on the node's GPU uuid, and hands
// the node back healthy when the test ends. The agent marks the GPU's pods before it writes
// GPUHealthy=False on its node, so a test that ends on the pods' evidence can end before that
// write: the reset first waits for it, or the agent's late write would undo the reset and fail
// every later test on a node left unhealthy (CI of stop 44).
func injectFatalXID(t *testing.T, c *cluster.Cluster, node, uuid string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), agentNodeWriteTimeout)
		defer cancel()
		if err := waitGPUUnhealthy(ctx, c, node, uuid); err != nil {
			t.Errorf("before the GPU reset: %v", err)
		}
		resetGPUHealth(t, c, node)
	})
	if err := agents[node].InjectXIDByUUID(uuid, 79); err != nil {
		t.Fatal(err)
	}
}

// agentNodeWriteTimeout bounds the wait for the agent's write of its node's condition: one
// fault's handling and the node write with its retries (nodeagent.DefaultBackoff: about 6 s),
// on a loaded machine.
const agentNodeWriteTimeout = 30 * time.Second

// waitGPUUnhealthy waits until the node's GPUHealthy condition is False and names the GPU.
func waitGPUUnhealthy(ctx context.Context, c *cluster.Cluster, node, uuid string) error {
	names := func(n *corev1.Node) bool {
		for _, cond := range n.Status.Conditions {
			if cond.Type == v1alpha1.NodeConditionGPUHealthy {
				return cond.Status == corev1.ConditionFalse && strings.Contains(cond.Message, uuid)
			}
		}
		return false
	}
	last, err := c.WaitNode(ctx, node, func(n *corev1.Node) (bool, error) { return names(n), nil })
	if err != nil {
		seen := "never seen"
		if last != nil {
			seen = fmt.Sprintf("%+v", last.Status.Conditions)
		}
		return fmt.Errorf("node %s never had %s=False naming GPU %s (conditions %s): %w", node, v1alpha1.NodeConditionGPUHealthy, uuid, seen, err)
	}
	return nil
}

// resetGPUHealth resets the node's GPUs as an operator would once the GPU was replaced: it
// asks the agent (faultline.dev/gpu-reset-requested-at), which then takes a fault of them for
// a new one, not a repeat of the one the test injected (a later test's XID on the same GPU
// within the agent's RepeatWindow went unhandled: CI of 2026-12-07); and it turns the node's
// GPUHealthy condition back to True itself, so that the next test finds the node healthy
// without waiting for the agent.
func resetGPUHealth(t *testing.T, c *cluster.Cluster, node string) {
	requested, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		v1alpha1.AnnotationGPUResetRequestedAt: time.Now().UTC().Format(time.RFC3339Nano)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, requested, metav1.PatchOptions{}); err != nil {
		t.Errorf("ask the agent of %s to reset its GPUs: %v", node, err)
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: v1alpha1.NodeConditionGPUHealthy, Status: corev1.ConditionTrue, Reason: "TestReset",
		Message: "the test reset the fake GPU", LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now(),
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("reset %s's GPUHealthy condition: %v", node, err)
	}
}

// gpusOf is, for the pods of namespace ns on node, the GPU each was allocated by the node's
// kubelet (its PodResources API, the device plugin's or a DRA driver's): pod name → GPU UUID.
func gpusOf(ctx context.Context, t *testing.T, node *cluster.RealNode, ns string) map[string]string {
	t.Helper()
	client, conn, err := nodeagent.DialPodResources(node.PodResourcesSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	slices, err := coreclient.New(cluster.Shared(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	// The node agent's own mapping: the device plugin's GPUs, and a DRA driver's through the
	// node's ResourceSlices.
	owners, err := (&nodeagent.GPUMapper{Lister: client, DRA: nodeagent.SliceGPUs{Client: slices, Node: node.Name}}).GPUOwners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gpuOf := map[string]string{}
	for uuid, refs := range owners {
		for _, r := range refs {
			if r.Namespace == ns {
				gpuOf[r.Pod] = uuid
			}
		}
	}
	return gpuOf
}

// TestRealKubeletDeviceHealthIsEvidence (issue 58): the kubelet's own word on a worker's GPU.
// The node's device plugin reports one worker's GPU Unhealthy (ListAndWatch, as NVIDIA's
// plugin does after a fatal XID; no NVML event here); the real kubelet writes it into the
// worker's allocatedResourcesStatus (KEP-4680, on by default in 1.36); the node's agent attests
// it as GPU fault evidence on that pod, and the gang, whose worker runs on with its GPU gone
// bad, restarts as a GPU fault on that node, the node excluded. A run beside it on the same
// node, whose GPU is healthy, is untouched.
//
// It runs alone: an Unhealthy GPU leaves its node one GPU short until the test ends.
func TestRealKubeletDeviceHealthIsEvidence(t *testing.T) {
	ctx, c, ns := scenario(t, 4*time.Minute)
	startController(t, c, ns)

	run := createRun(ctx, t, c, ns, realRun("sick", 2, []string{"--heartbeats-only"}, withGPUs(1)))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, t, c, ns, run.Name, 1, 2)
	target := first[1]
	node := c.Real.Node(target.Spec.NodeName)
	if node == nil {
		t.Fatalf("index 1 runs on %s, no real node", target.Spec.NodeName)
	}
	beside := createRun(ctx, t, c, ns, realRun("beside", 1, []string{"--heartbeats-only"}, withGPUs(1), func(r *v1alpha1.TrainingRun) {
		r.Spec.Template.Spec.NodeSelector[corev1.LabelHostname] = node.Name
	}))
	waitRun(ctx, t, c, ns, beside.Name, "attempt 1 Running", runningAttempt(1))

	uuid := gpuOfPod(ctx, t, node, target)
	t.Cleanup(func() {
		if err := node.SetGPUHealthy(uuid, true); err != nil {
			t.Errorf("the device plugin of %s reporting GPU %s healthy again: %v", node.Name, uuid, err)
		}
	})
	reported := time.Now()
	if err := node.SetGPUHealthy(uuid, false); err != nil {
		t.Fatal(err)
	}
	// The premise: the kubelet itself wrote it into the worker's status.
	if _, err := c.WaitPods(ctx, ns, attemptSelector(run.Name, 1), func(pods []*corev1.Pod) (bool, error) {
		return slices.ContainsFunc(pods, func(p *corev1.Pod) bool { return p.UID == target.UID && deviceUnhealthy(p, uuid) }), nil
	}); err != nil {
		t.Fatalf("the kubelet of %s never reported GPU %s Unhealthy in %s's status: %v", node.Name, uuid, target.Name, err)
	}

	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, got, 2)
	t.Logf("GPU %s of %s reported Unhealthy by its device plugin -> attempt 2 Running in %s", uuid, target.Name, time.Since(reported).Round(time.Millisecond))
	f := got.Status.LastFailure
	if f == nil || f.Class != v1alpha1.ClassInfrastructure || f.Cause != v1alpha1.CauseGPUFault || f.Pod != target.Name || f.Node != node.Name {
		t.Fatalf("verdict: %s; want Infrastructure/GPUFault on %s (node %s)", describeRun(got), target.Name, node.Name)
	}
	if ev := strings.Join(f.Evidence, "\n"); !strings.Contains(ev, v1alpha1.EvidenceSourceKubelet) || !strings.Contains(ev, uuid) {
		t.Errorf("evidence %q: want the kubelet's word (%s) on GPU %s", ev, v1alpha1.EvidenceSourceKubelet, uuid)
	}
	if !slices.Contains(got.Status.ExcludedNodes, node.Name) {
		t.Errorf("excluded nodes %v, want %s (the GPU fault's)", got.Status.ExcludedNodes, node.Name)
	}
	for i, p := range waitWorkers(ctx, t, c, ns, run.Name, 2, 2) {
		if p.Spec.NodeName == node.Name {
			t.Errorf("attempt 2 index %d on %s, the excluded node", i, node.Name)
		}
	}
	requireStays(ctx, t, c, ns, beside.Name, 5*time.Second, "the run beside, on healthy GPUs, is untouched", restartedAtAll)
}

// deviceUnhealthy: the kubelet reports device id Unhealthy in one of pod's container statuses.
func deviceUnhealthy(p *corev1.Pod, id string) bool {
	for _, cs := range p.Status.ContainerStatuses {
		for _, rs := range cs.AllocatedResourcesStatus {
			for _, h := range rs.Resources {
				if string(h.ResourceID) == id && h.Health == corev1.ResourceHealthStatusUnhealthy {
					return true
				}
			}
		}
	}
	return false
}
