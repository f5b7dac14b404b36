package nodeagent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// TestDRADeviceTaintIsEvidence (issue 58): a DRA device taint that says a GPU must not be used
// (NoSchedule, NoExecute), from the GPU's driver in the node's ResourceSlice or from a
// DeviceTaintRule that selects it, becomes the agent's GPUFault evidence on the worker that
// holds the GPU, naming who tainted it; a taint of effect None, a rule that selects another
// device, and a tainted device that is no GPU (a NIC) are nothing.
func TestDRADeviceTaintIsEvidence(t *testing.T) {
	const driver = "gpu.example.com"
	gpuDev := func(name, uuid string, taints ...resourcev1.DeviceTaint) resourcev1.Device {
		d := resourcev1.Device{Name: name, Taints: taints}
		if uuid != "" {
			d.Attributes = map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"uuid": {StringValue: ptr.To(uuid)}}
		}
		return d
	}
	slice := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"},
		Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices: []resourcev1.Device{
				gpuDev("gpu-0", "GPU-a", resourcev1.DeviceTaint{Key: "gpu.example.com/xid", Value: "79", Effect: resourcev1.DeviceTaintEffectNoExecute}),
				gpuDev("gpu-1", "GPU-b"),
				gpuDev("gpu-2", "GPU-c", resourcev1.DeviceTaint{Key: "gpu.example.com/temperature", Effect: resourcev1.DeviceTaintEffectNone}),
				gpuDev("gpu-3", "GPU-d"),
				gpuDev("nic-0", "", resourcev1.DeviceTaint{Key: "link", Effect: resourcev1.DeviceTaintEffectNoExecute}),
			}},
	}
	rule := func(name string, sel resourcev1.DeviceTaintSelector) *resourcev1.DeviceTaintRule {
		return &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourcev1.DeviceTaintRuleSpec{
			DeviceSelector: &sel, Taint: resourcev1.DeviceTaint{Key: "health.example.com/bad", Effect: resourcev1.DeviceTaintEffectNoSchedule}}}
	}
	client := fake.NewClientset(slice,
		rule("gpu-1-is-bad", resourcev1.DeviceTaintSelector{Driver: ptr.To(driver), Device: ptr.To("gpu-1")}),
		rule("another-node", resourcev1.DeviceTaintSelector{Pool: ptr.To("gpu-8")}))
	owners := GPUOwners{}
	for uuid, pod := range map[string]string{"GPU-a": "r-0", "GPU-b": "r-1", "GPU-c": "r-2", "GPU-d": "r-3"} {
		owners[uuid] = []ContainerRef{{Namespace: "ns", Pod: pod, Container: "trainer"}}
	}
	w := &FakeEvidenceWriter{}
	a := newTestAgent(t, &FakeGPUOwners{Owners: owners}, w, nil)
	a.devices = make(chan podDeviceFault, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := NewSliceWatch(clientsetKube{client}, node)
	go watch.Run(ctx)
	go a.WatchDeviceTaints(ctx, watch, clientsetKube{client})

	got := map[types.NamespacedName]string{}
	for deadline := time.After(10 * time.Second); len(got) < 2; {
		select {
		case f := <-a.devices:
			if err := a.HandleDeviceFault(ctx, f); err != nil {
				t.Fatal(err)
			}
			marks, _, _ := w.Snapshot()
			for _, m := range marks {
				if m.Evidence.Source != v1alpha1.EvidenceSourceDeviceTaint || m.Evidence.Cause != v1alpha1.CauseGPUFault || m.Evidence.GPU == nil {
					t.Errorf("evidence on %s: %+v, want GPUFault of source %s", m.Pod, m.Evidence, v1alpha1.EvidenceSourceDeviceTaint)
				}
				got[m.Pod] = m.Evidence.Detail
			}
		case <-deadline:
			t.Fatalf("evidence after 10 s: %v, want r-0's and r-1's", got)
		}
	}
	for pod, says := range map[string]string{
		"r-0": "its driver taints DRA device gpu.example.com/gpu-7/gpu-0 (GPU GPU-a) gpu.example.com/xid=79:NoExecute",
		"r-1": "DeviceTaintRule gpu-1-is-bad taints DRA device gpu.example.com/gpu-7/gpu-1 (GPU GPU-b) health.example.com/bad:NoSchedule",
	} {
		if d := got[types.NamespacedName{Namespace: "ns", Name: pod}]; d != says {
			t.Errorf("evidence on %s says %q, want %q", pod, d, says)
		}
	}
	// The same watch maps the node's GPUs, with no request of its own; a NIC is no GPU.
	uuids, err := watch.UUIDs(ctx)
	if err != nil || len(uuids) != 4 || uuids[DRADevice{Driver: driver, Pool: node, Device: "gpu-1"}] != "GPU-b" {
		t.Errorf("the watch's GPUs: %v, %v; want gpu-0..3 by UUID", uuids, err)
	}
	// Nothing more comes: the untainted, the informational and the other node's.
	select {
	case f := <-a.devices:
		if !strings.HasPrefix(f.pod.Name, "r-0") && !strings.HasPrefix(f.pod.Name, "r-1") {
			t.Errorf("evidence queued for %s: %s", f.pod, f.fault.Detail)
		}
	case <-time.After(200 * time.Millisecond):
	}
}

// TestSliceWatchSaysWhyItCannotRead: an agent whose ResourceSlices list is refused says why
// (its dra capability), and maps no DRA GPU rather than an empty map taken for the truth.
func TestSliceWatchSaysWhyItCannotRead(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("list", "resourceslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(resourcev1.Resource("resourceslices"), "", errors.New("RBAC: no list"))
	})
	watch := NewSliceWatch(clientsetKube{client}, node)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go watch.Run(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for err := watch.Err(); err == nil || !strings.Contains(err.Error(), "forbidden"); err = watch.Err() {
		if time.Now().After(deadline) {
			t.Fatalf("after a refused list the watch says %v, want the refusal", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if m, err := watch.UUIDs(ctx); err == nil {
		t.Errorf("UUIDs with the slices unread: %v, no error", m)
	}
}
