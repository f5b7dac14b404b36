package nodeagent

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/ptr"
)

// listed is a PodResources List that answers resp.
type listed struct {
	resp *podresourcesapi.ListPodResourcesResponse
}

func (l listed) List(context.Context, *podresourcesapi.ListPodResourcesRequest, ...grpc.CallOption) (*podresourcesapi.ListPodResourcesResponse, error) {
	return l.resp, nil
}

// slice is a ResourceSlice of driver's pool on node, with devices name → uuid attribute
// ("" for none).
func slice(name, driver, node string, devices map[string]string) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourcev1.ResourceSliceSpec{Driver: driver, Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1}, NodeName: ptr.To(node)},
	}
	for dev, uuid := range devices {
		d := resourcev1.Device{Name: dev, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"index": {IntValue: ptr.To[int64](0)},
		}}
		if uuid != "" {
			d.Attributes[uuidAttribute] = resourcev1.DeviceAttribute{StringValue: ptr.To(uuid)}
		}
		s.Spec.Devices = append(s.Spec.Devices, d)
	}
	return s
}

func claimed(driver, pool string, devices ...string) *podresourcesapi.DynamicResource {
	dr := &podresourcesapi.DynamicResource{ClaimName: "gpus", ClaimNamespace: "ml"}
	for _, d := range devices {
		dr.ClaimResources = append(dr.ClaimResources, &podresourcesapi.ClaimResource{DriverName: driver, PoolName: pool, DeviceName: d})
	}
	return dr
}

// TestGPUMapperDRA: a GPU that a DRA driver allocated is mapped to its containers by the
// UUID its ResourceSlice names (the attribute "uuid", plain or qualified by the driver's
// domain; a MIG device's "parentUUID"), beside the device plugin's GPUs; a DRA device no slice names a GPU UUID of (a
// NIC) maps to nothing; only this node's slices are read, and only when a container holds a
// DRA device. A failed read leaves the device plugin's GPUs mapped and says so.
func TestGPUMapperDRA(t *testing.T) {
	resp := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
		{Namespace: "ml", Name: "dra-0", Containers: []*podresourcesapi.ContainerResources{
			{Name: "trainer", DynamicResources: []*podresourcesapi.DynamicResource{
				claimed("gpu.nvidia.com", "node-a", "gpu-0", "gpu-1"),
				claimed("rdma.example.com", "node-a", "nic-0"),
			}},
		}},
		{Namespace: "ml", Name: "dra-1", Containers: []*podresourcesapi.ContainerResources{
			{Name: "trainer", DynamicResources: []*podresourcesapi.DynamicResource{claimed("gpu.example.com", "node-a", "g7")}},
		}},
		{Namespace: "ml", Name: "mig-0", Containers: []*podresourcesapi.ContainerResources{
			{Name: "trainer", DynamicResources: []*podresourcesapi.DynamicResource{claimed("gpu.example.com", "node-a", "gpu-2-mig-9-0-1")}},
		}},
		{Namespace: "ml", Name: "plugin-0", Containers: []*podresourcesapi.ContainerResources{
			{Name: "trainer", Devices: []*podresourcesapi.ContainerDevices{gpus("GPU-ppp")}},
		}},
	}}
	client := fake.NewClientset(
		slice("a-gpus", "gpu.nvidia.com", "node-a", map[string]string{"gpu-0": "GPU-aaa", "gpu-1": "GPU-bbb"}),
		slice("a-nics", "rdma.example.com", "node-a", map[string]string{"nic-0": ""}),
		slice("a-other", "gpu.example.com", "node-a", nil),
		// Another node's slice, with the same device names: never read.
		slice("b-gpus", "gpu.nvidia.com", "node-b", map[string]string{"gpu-0": "GPU-zzz"}),
	)
	other := slice("a-other", "gpu.example.com", "node-a", nil)
	other.Spec.Devices = []resourcev1.Device{
		{Name: "g7", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"gpu.example.com/uuid": {StringValue: ptr.To("GPU-ggg")},
		}},
		// A MIG device: its own UUID is no GPU's; its parent's is.
		{Name: "gpu-2-mig-9-0-1", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"uuid":       {StringValue: ptr.To("MIG-0a1b")},
			"parentUUID": {StringValue: ptr.To("GPU-mmm")},
		}},
	}
	if _, err := client.ResourceV1().ResourceSlices().Update(context.Background(), other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The fake clientset ignores field selectors: serve only what the API server would.
	client.PrependReactor("list", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sel := a.(k8stesting.ListAction).GetListRestrictions().Fields.String()
		if sel != "spec.nodeName=node-a" {
			return true, nil, errors.New("listed with field selector " + sel + ", want spec.nodeName=node-a")
		}
		list := &resourcev1.ResourceSliceList{}
		for _, name := range []string{"a-gpus", "a-nics", "a-other"} {
			s, err := client.Tracker().Get(resourcev1.SchemeGroupVersion.WithResource("resourceslices"), "", name)
			if err != nil {
				return true, nil, err
			}
			list.Items = append(list.Items, *s.(*resourcev1.ResourceSlice))
		}
		return true, list, nil
	})
	m := &GPUMapper{Lister: listed{resp}, DRA: SliceGPUs{Client: clientsetKube{client}, Node: "node-a"}}
	owners, err := m.GPUOwners(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := GPUOwners{
		"GPU-aaa": {{Namespace: "ml", Pod: "dra-0", Container: "trainer"}},
		"GPU-bbb": {{Namespace: "ml", Pod: "dra-0", Container: "trainer"}},
		"GPU-ggg": {{Namespace: "ml", Pod: "dra-1", Container: "trainer"}},
		"GPU-mmm": {{Namespace: "ml", Pod: "mig-0", Container: "trainer"}},
		"GPU-ppp": {{Namespace: "ml", Pod: "plugin-0", Container: "trainer"}},
	}
	if diff := cmp.Diff(want, owners); diff != "" {
		t.Errorf("owners (-want +got):\n%s", diff)
	}

	// The API server refuses (no right to list ResourceSlices, or resource.k8s.io/v1 not
	// served): the device plugin's GPUs are still mapped, and the error names the read.
	denied := fake.NewClientset()
	denied.PrependReactor("list", "resourceslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("forbidden")
	})
	m.DRA = SliceGPUs{Client: clientsetKube{denied}, Node: "node-a"}
	owners, err = m.GPUOwners(context.Background())
	if err == nil || !strings.Contains(err.Error(), "ResourceSlices of node node-a") {
		t.Errorf("error %v, want one naming the ResourceSlices read", err)
	}
	if diff := cmp.Diff(GPUOwners{"GPU-ppp": want["GPU-ppp"]}, owners); diff != "" {
		t.Errorf("owners after a failed read (-want +got):\n%s", diff)
	}

	// No container holds a DRA device: no ResourceSlice is read.
	m.Lister = listed{&podresourcesapi.ListPodResourcesResponse{PodResources: resp.PodResources[3:]}}
	if _, err := m.GPUOwners(context.Background()); err != nil {
		t.Errorf("without DRA devices: %v, want no read of ResourceSlices", err)
	}
}
