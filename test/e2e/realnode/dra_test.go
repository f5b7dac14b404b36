package realnode

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/test/cluster"
)

// withDRAGPUs has each worker ask for n GPUs through DRA, of the real nodes' DRA driver's
// DeviceClass (spec.gpus), and no device plugin GPU.
func withDRAGPUs(n int32) runOption {
	return func(r *v1alpha1.TrainingRun) {
		r.Spec.GPUs = &v1alpha1.GPUClaim{DeviceClassName: cluster.DRADeviceClass, Count: n}
	}
}

// TestRealDRAGPUFaultRestartsTheGang (issue 58): GPUs allocated through DRA, on real
// kubelets. A run asks for one GPU per worker by DeviceClass (spec.gpus); the controller
// makes the run's ResourceClaimTemplate and each worker gets a claim of its own from it; the
// scheduler allocates each claim a GPU that the nodes' DRA driver (test/fakegpu --dra-driver,
// built on k8s.io/dynamic-resource-allocation's kubelet plugin library) published in its
// node's ResourceSlice with its UUID, and the kubelet has the driver prepare it (the
// container gets it through CDI, in NVIDIA_VISIBLE_DEVICES). An XID on the GPU that one
// worker's claim holds becomes evidence on that pod (the kubelet's PodResources names the
// claim's device, the ResourceSlice its UUID): the gang restarts as a GPU fault, the node
// excluded, and the next attempt's workers get claims of their own again.
//
// It runs alone: a fatal XID turns the node's GPUHealthy condition False until the test ends.
func TestRealDRAGPUFaultRestartsTheGang(t *testing.T) {
	ctx, c, ns := scenario(t, 4*time.Minute)
	startController(t, c, ns)

	run := createRun(ctx, t, c, ns, realRun("dra", 2, []string{"--heartbeats-only"}, withDRAGPUs(1)))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, t, c, ns, run.Name, 1, 2)
	target := first[1]
	node := c.Real.Node(target.Spec.NodeName)
	if node == nil {
		t.Fatalf("index 1 runs on %s, no real node", target.Spec.NodeName)
	}
	// Each worker's GPU is its own claim's, allocated by the scheduler from the DRA driver's
	// devices on the worker's node.
	claimOf := map[string]types.UID{} // claim → the pod it was made for
	for i, p := range first {
		claim := workerClaim(t, c, p)
		if _, taken := claimOf[claim.Name]; taken {
			t.Errorf("index %d's claim %s is another worker's too", i, claim.Name)
		}
		claimOf[claim.Name] = p.UID
	}
	uuid := gpuOfPod(ctx, t, node, target) // the kubelet's PodResources, resolved as the agent does
	if !slices.Contains(node.DRAGPUs, uuid) {
		t.Fatalf("the kubelet of %s gave %s GPU %s, not one of its DRA driver's %v", node.Name, target.Name, uuid, node.DRAGPUs)
	}
	if m := gpusInLog.FindStringSubmatch(workerLog(ctx, t, c, ns, run.Name, 1, 1)); m == nil || m[1] != uuid {
		t.Fatalf("worker 1 logged NVIDIA_VISIBLE_DEVICES %v, want %s (its claim's device, through CDI)", m, uuid)
	}
	// The agent says it ties DRA-allocated GPUs to their pods.
	if _, err := c.WaitAgentLease(ctx, node.Name, func(l *coordinationv1.Lease) bool {
		caps := agentlease.Capabilities(l, node.Name)
		return caps != nil && caps.DRA.Enabled
	}); err != nil {
		t.Fatalf("the agent of %s never said it maps DRA-allocated GPUs: %v", node.Name, err)
	}

	injected := time.Now()
	injectFatalXID(t, c, node.Name, uuid)
	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, got, 2)
	t.Logf("XID 79 on %s's DRA-allocated GPU %s -> attempt 2 Running in %s", target.Name, uuid, time.Since(injected).Round(time.Millisecond))
	f := got.Status.LastFailure
	if f == nil || f.Class != v1alpha1.ClassInfrastructure || f.Cause != v1alpha1.CauseGPUFault || f.Pod != target.Name || f.Node != node.Name || f.XID != 79 {
		t.Fatalf("verdict: %s; want Infrastructure/GPUFault XID 79 on %s (node %s)", describeRun(got), target.Name, node.Name)
	}
	if ev := strings.Join(f.Evidence, "\n"); !strings.Contains(ev, uuid) {
		t.Errorf("evidence %q: want GPU %s named", ev, uuid)
	}
	if !slices.Contains(got.Status.ExcludedNodes, node.Name) {
		t.Errorf("excluded nodes %v, want %s (the GPU fault's)", got.Status.ExcludedNodes, node.Name)
	}
	for i, p := range waitWorkers(ctx, t, c, ns, run.Name, 2, 2) {
		if p.Spec.NodeName == node.Name {
			t.Errorf("attempt 2 index %d on %s, the excluded node", i, node.Name)
		}
		// A worker restarted in place keeps its pod, and so its claim and GPU; a new pod
		// gets a claim of its own.
		if claim := workerClaim(t, c, p); claimOf[claim.Name] != "" && claimOf[claim.Name] != p.UID {
			t.Errorf("attempt 2 index %d (pod %s) holds claim %s of another pod of attempt 1", i, p.Name, claim.Name)
		}
	}
}

// workerClaim is the ResourceClaim the resource claim controller made for pod's GPUs from its
// run's template, checked to be allocated from the DRA driver's devices on the pod's node.
func workerClaim(t *testing.T, c *cluster.Cluster, p *corev1.Pod) *resourcev1.ResourceClaim {
	t.Helper()
	var name string
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.Name == v1alpha1.ClaimGPUs && s.ResourceClaimName != nil {
			name = *s.ResourceClaimName
		}
	}
	if name == "" {
		t.Fatalf("pod %s has no claim %s in its status: %+v", p.Name, v1alpha1.ClaimGPUs, p.Status.ResourceClaimStatuses)
	}
	claim, err := c.Client.ResourceV1().ResourceClaims(p.Namespace).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("claim %s of pod %s: %v", name, p.Name, err)
	}
	var got []string
	if a := claim.Status.Allocation; a != nil {
		for _, r := range a.Devices.Results {
			got = append(got, fmt.Sprintf("%s/%s/%s", r.Driver, r.Pool, r.Device))
		}
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], cluster.DRADriverName+"/"+p.Spec.NodeName+"/") {
		t.Fatalf("claim %s of pod %s (node %s) allocated %v, want one device of %s on that node", name, p.Name, p.Spec.NodeName, got, cluster.DRADriverName)
	}
	if !slices.ContainsFunc(claim.Status.ReservedFor, func(r resourcev1.ResourceClaimConsumerReference) bool { return r.UID == p.UID }) {
		t.Errorf("claim %s is not reserved for pod %s: %+v", name, p.Name, claim.Status.ReservedFor)
	}
	return claim
}

// TestRealDRADeviceTaintRestartsTheGang (issue 58): a DRA device taint is where a driver or an
// administrator says a device is bad (KEP-5055, GA in 1.37). A DeviceTaintRule that taints the
// GPU one worker's claim holds, NoSchedule (it evicts nobody: the agent's word is the only
// evidence), becomes that worker's GPUFault evidence of source dra-device-taint, and the gang
// restarts on the other node, the tainted GPU's node excluded.
func TestRealDRADeviceTaintRestartsTheGang(t *testing.T) {
	ctx, c, ns := scenario(t, 4*time.Minute)
	startController(t, c, ns)

	run := createRun(ctx, t, c, ns, realRun("dra-taint", 2, []string{"--heartbeats-only"}, withDRAGPUs(1)))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	target := waitWorkers(ctx, t, c, ns, run.Name, 1, 2)[1]
	node := c.Real.Node(target.Spec.NodeName)
	if node == nil {
		t.Fatalf("index 1 runs on %s, no real node", target.Spec.NodeName)
	}
	claim := workerClaim(t, c, target)
	device := claim.Status.Allocation.Devices.Results[0]
	uuid := gpuOfPod(ctx, t, node, target)

	rule := &resourcev1.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + device.Device},
		Spec: resourcev1.DeviceTaintRuleSpec{
			DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: &device.Driver, Pool: &device.Pool, Device: &device.Device},
			Taint:          resourcev1.DeviceTaint{Key: "test.faultline.dev/unhealthy", Value: "xid-79", Effect: resourcev1.DeviceTaintEffectNoSchedule},
		},
	}
	if _, err := c.Client.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{}); err != nil {
		t.Fatalf("taint %s/%s/%s: %v", device.Driver, device.Pool, device.Device, err)
	}
	t.Cleanup(func() {
		if err := c.Client.ResourceV1().DeviceTaintRules().Delete(context.Background(), rule.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete the DeviceTaintRule %s: %v", rule.Name, err)
		}
	})
	tainted := time.Now()
	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, got, 2)
	t.Logf("DeviceTaintRule on %s's GPU %s (%s) -> attempt 2 Running in %s", target.Name, uuid, device.Device, time.Since(tainted).Round(time.Millisecond))
	f := got.Status.LastFailure
	if f == nil || f.Class != v1alpha1.ClassInfrastructure || f.Cause != v1alpha1.CauseGPUFault || f.Pod != target.Name || f.Node != node.Name {
		t.Fatalf("verdict: %s; want Infrastructure/GPUFault on %s (node %s)", describeRun(got), target.Name, node.Name)
	}
	if ev := strings.Join(f.Evidence, "\n"); !strings.Contains(ev, v1alpha1.EvidenceSourceDeviceTaint) || !strings.Contains(ev, "DeviceTaintRule "+rule.Name) || !strings.Contains(ev, uuid) {
		t.Errorf("evidence %q: want the taint (%s) of DeviceTaintRule %s on GPU %s", ev, v1alpha1.EvidenceSourceDeviceTaint, rule.Name, uuid)
	}
	if !slices.Contains(got.Status.ExcludedNodes, node.Name) {
		t.Errorf("excluded nodes %v, want %s (the tainted GPU's)", got.Status.ExcludedNodes, node.Name)
	}
	for i, p := range waitWorkers(ctx, t, c, ns, run.Name, 2, 2) {
		if p.Spec.NodeName == node.Name {
			t.Errorf("attempt 2 index %d on %s, the excluded node", i, node.Name)
		}
	}
}
