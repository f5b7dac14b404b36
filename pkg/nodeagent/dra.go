package nodeagent

import (
	"context"
	"fmt"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// DRADevice is a device a DRA driver allocated to a container, as the kubelet's PodResources
// names it: the driver, its pool and the device's name in the pool ("gpu-0"), not the GPU's
// UUID, which NVML's events carry.
type DRADevice struct {
	Driver, Pool, Device string
}

// DRAGPUs resolves DRA devices to the UUIDs of the GPUs they are.
type DRAGPUs interface {
	UUIDs(ctx context.Context) (map[DRADevice]string, error)
}

// The device attributes that name a GPU's UUID in a ResourceSlice, as NVIDIA's DRA driver
// (gpu.nvidia.com) publishes them, unqualified (its driver's domain is implied; a driver may
// qualify them with its own): a whole GPU's "uuid" ("GPU-…"); a MIG device's "uuid" is its
// own ("MIG-…") and "parentUUID" its GPU's, the one NVML's events name.
const (
	uuidAttribute       = "uuid"
	parentUUIDAttribute = "parentUUID"
)

// SliceGPUs reads the UUIDs of the GPUs of this node's DRA devices from the ResourceSlices
// their drivers publish for the node. It lists them when asked, at a fault of a GPU that DRA
// allocated: no watch for a node whose GPUs come from a device plugin.
type SliceGPUs struct {
	Client SliceLister
	Node   string
}

// SliceLister lists ResourceSlices (resource.k8s.io/v1).
type SliceLister interface {
	ListResourceSlices(ctx context.Context, opts metav1.ListOptions) (*resourcev1.ResourceSliceList, error)
}

var _ DRAGPUs = SliceGPUs{}

// UUIDs lists the node's ResourceSlices and maps their GPU devices to UUIDs.
func (s SliceGPUs) UUIDs(ctx context.Context) (map[DRADevice]string, error) {
	list, err := s.Client.ListResourceSlices(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector(resourcev1.ResourceSliceSelectorNodeName, s.Node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list the ResourceSlices of node %s (resource.k8s.io/v1): %w", s.Node, err)
	}
	return sliceGPUs(list.Items), nil
}

// sliceGPUs maps every device of the slices to the GPU it is or is part of, where its
// attributes name one ("GPU-…"); other devices (a NIC) are no GPU.
func sliceGPUs(slices []resourcev1.ResourceSlice) map[DRADevice]string {
	out := map[DRADevice]string{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if uuid := gpuUUID(d.Attributes); uuid != "" {
				out[DRADevice{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name, Device: d.Name}] = uuid
			}
		}
	}
	return out
}

// gpuUUID is the GPU UUID a device's attributes name: its own, else its parent's.
func gpuUUID(attrs map[resourcev1.QualifiedName]resourcev1.DeviceAttribute) string {
	for _, want := range []string{uuidAttribute, parentUUIDAttribute} {
		for name, attr := range attrs {
			n := string(name)
			if n != want && !strings.HasSuffix(n, "/"+want) {
				continue
			}
			if v := attr.StringValue; v != nil && strings.HasPrefix(*v, "GPU-") {
				return *v
			}
		}
	}
	return ""
}
