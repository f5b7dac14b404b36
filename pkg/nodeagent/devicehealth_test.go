package nodeagent

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// withDevice gives the pod's container "trainer" a device the kubelet reports with health h.
func withDevice(p *corev1.Pod, resource corev1.ResourceName, id string, h corev1.ResourceHealthStatus) *corev1.Pod {
	msg := "XID 79: GPU has fallen off the bus"
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "trainer",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		AllocatedResourcesStatus: []corev1.ResourceStatus{{Name: resource, Resources: []corev1.ResourceHealth{
			{ResourceID: "GPU-ok", Health: corev1.ResourceHealthStatusHealthy},
			{ResourceID: corev1.ResourceID(id), Health: h, Message: &msg},
		}}}}}
	return p
}

// The kubelet's word on a worker's device, attested: an Unhealthy GPU of a run's worker on
// the agent's node (a device plugin's, or a DRA claim's) becomes the agent's GPUFault evidence
// on that pod, once however often the kubelet repeats it; a healthy device, a pod of no run
// and a pod of another node get nothing.
func TestKubeletDeviceHealthIsAttested(t *testing.T) {
	w := &FakeEvidenceWriter{}
	a := newTestAgent(t, &FakeGPUOwners{}, w, nil)
	a.devices = make(chan podDeviceFault, 16)
	events := &fakePodEvents{}
	if err := a.WatchDeviceHealth(events); err != nil {
		t.Fatal(err)
	}
	sick := withDevice(makePod("r-0").run("r").obj(), v1alpha1.ResourceGPU, "GPU-sick", corev1.ResourceHealthStatusUnhealthy)
	claim := withDevice(makePod("r-1").run("r").obj(), "claim:gpus/gpu", "gpu.example.com/pool/gpu-3", corev1.ResourceHealthStatusUnhealthy)
	healthy := withDevice(makePod("r-2").run("r").obj(), v1alpha1.ResourceGPU, "GPU-fine", corev1.ResourceHealthStatusHealthy)
	noRun := withDevice(makePod("other").obj(), v1alpha1.ResourceGPU, "GPU-x", corev1.ResourceHealthStatusUnhealthy)
	elsewhere := withDevice(makePod("r-3").run("r").onNode("gpu-8").obj(), v1alpha1.ResourceGPU, "GPU-y", corev1.ResourceHealthStatusUnhealthy)
	// The handlers as the informer calls them: adds, then the kubelet's status updates again.
	for _, p := range []*corev1.Pod{sick, claim, healthy, noRun, elsewhere} {
		events.handler.OnAdd(p, true)
	}
	for _, p := range []*corev1.Pod{sick, claim} {
		events.handler.OnUpdate(p, p)
	}
	ctx := context.Background()
	for len(a.devices) > 0 {
		if err := a.HandleDeviceFault(ctx, <-a.devices); err != nil {
			t.Fatal(err)
		}
	}
	marks, nodeMarks, _ := w.Snapshot()
	got := map[types.NamespacedName]v1alpha1.FaultEvidence{}
	for _, m := range marks {
		if _, twice := got[m.Pod]; twice {
			t.Errorf("pod %s marked twice", m.Pod)
		}
		got[m.Pod] = m.Evidence
	}
	at := t0.UTC().Format(time.RFC3339Nano)
	want := map[types.NamespacedName]v1alpha1.FaultEvidence{
		ref("r-0"): {Source: v1alpha1.EvidenceSourceKubelet, Node: node, Cause: v1alpha1.CauseGPUFault, DetectedAt: at,
			GPU:    &v1alpha1.GPUEvidence{UUID: "GPU-sick", Index: -1},
			Detail: "the kubelet reports device GPU-sick of nvidia.com/gpu Unhealthy for container trainer: XID 79: GPU has fallen off the bus"},
		ref("r-1"): {Source: v1alpha1.EvidenceSourceKubelet, Node: node, Cause: v1alpha1.CauseGPUFault, DetectedAt: at,
			GPU:    &v1alpha1.GPUEvidence{UUID: "gpu.example.com/pool/gpu-3", Index: -1},
			Detail: "the kubelet reports device gpu.example.com/pool/gpu-3 of claim:gpus/gpu Unhealthy for container trainer: XID 79: GPU has fallen off the bus"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("evidence written (-want +got):\n%s", diff)
	}
	if len(nodeMarks) != 0 {
		t.Errorf("the node marked %+v: the kubelet's word is the worker's device's, not the node's", nodeMarks)
	}
}

// fakePodEvents keeps the handler the agent registers, for the test to call as an informer.
type fakePodEvents struct{ handler cache.ResourceEventHandler }

func (f *fakePodEvents) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	f.handler = h
	return nil, nil
}
