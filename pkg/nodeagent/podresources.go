package nodeagent

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/types"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// DefaultPodResourcesSocket is where the kubelet serves the PodResources API.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// podResourcesMaxMsgSize matches the kubelet's own client: a node with many pods answers
// List with more than gRPC's 4 MiB default.
const podResourcesMaxMsgSize = 16 << 20

// ContainerRef names one container of one pod.
type ContainerRef struct {
	Namespace, Pod, Container string
}

// GPUOwners maps a GPU device ID, as the device plugin reports it (normally the GPU UUID),
// to the containers it is allocated to. A GPU shared by time-slicing has several.
type GPUOwners map[string][]ContainerRef

// Pods returns the pods holding the GPU, sorted. It looks the GPU up by UUID and then by
// index (for device plugins run with DEVICE_ID_STRATEGY=index); an empty UUID with index -1
// (a fault NVML could not attribute) means every GPU.
func (o GPUOwners) Pods(uuid string, index int) []types.NamespacedName {
	var refs []ContainerRef
	switch {
	case uuid == "" && index < 0:
		for _, rs := range o {
			refs = append(refs, rs...)
		}
	default:
		refs = o[uuid]
		if len(refs) == 0 && index >= 0 {
			refs = o[strconv.Itoa(index)]
		}
	}
	seen := map[types.NamespacedName]bool{}
	var out []types.NamespacedName
	for _, r := range refs {
		n := types.NamespacedName{Namespace: r.Namespace, Name: r.Pod}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// GPUOwnerSource tells which containers hold which GPUs now.
type GPUOwnerSource interface {
	GPUOwners(ctx context.Context) (GPUOwners, error)
}

// PodResourcesLister is the part of the kubelet PodResources v1 API the agent uses;
// podresourcesapi.PodResourcesListerClient satisfies it.
type PodResourcesLister interface {
	List(ctx context.Context, in *podresourcesapi.ListPodResourcesRequest, opts ...grpc.CallOption) (*podresourcesapi.ListPodResourcesResponse, error)
}

var _ PodResourcesLister = podresourcesapi.PodResourcesListerClient(nil)

// DialPodResources returns a client of the kubelet's PodResources socket. The connection is
// made lazily, so a kubelet that is restarting is no error here; close it with conn.Close.
func DialPodResources(socket string) (podresourcesapi.PodResourcesListerClient, *grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(podResourcesMaxMsgSize)),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("pod resources client for %s: %w", socket, err)
	}
	return podresourcesapi.NewPodResourcesListerClient(conn), conn, nil
}

// GPUMapper builds GPUOwners from the kubelet's PodResources List: the GPUs a device plugin
// allocated (the extended resource, by device ID) and those a DRA driver allocated (by
// driver, pool and device, resolved to UUIDs through DRA).
type GPUMapper struct {
	Lister PodResourcesLister
	// Resource is the extended resource of the GPUs; "" means v1alpha1.ResourceGPU.
	Resource string
	// DRA resolves DRA-allocated devices to GPU UUIDs, asked only when a container holds
	// one; nil leaves them unmapped. A device it names no UUID of is not a GPU (a NIC).
	DRA DRAGPUs
	// Timeout bounds one List; zero means 5s.
	Timeout time.Duration
}

var _ GPUOwnerSource = &GPUMapper{}

// GPUOwners lists the pods on the node and maps their GPU devices to containers.
func (m *GPUMapper) GPUOwners(ctx context.Context) (GPUOwners, error) {
	resource, timeout := m.Resource, m.Timeout
	if resource == "" {
		resource = v1alpha1.ResourceGPU
	}
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := m.Lister.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("kubelet pod resources List: %w", err)
	}
	owners := GPUOwners{}
	dra := map[DRADevice][]ContainerRef{}
	for _, pod := range resp.GetPodResources() {
		for _, c := range pod.GetContainers() {
			ref := ContainerRef{Namespace: pod.GetNamespace(), Pod: pod.GetName(), Container: c.GetName()}
			for _, d := range c.GetDevices() {
				if d.GetResourceName() != resource {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					id = deviceUUID(id)
					owners[id] = append(owners[id], ref)
				}
			}
			for _, claim := range c.GetDynamicResources() {
				for _, r := range claim.GetClaimResources() {
					dev := DRADevice{Driver: r.GetDriverName(), Pool: r.GetPoolName(), Device: r.GetDeviceName()}
					dra[dev] = append(dra[dev], ref)
				}
			}
		}
	}
	if len(dra) == 0 || m.DRA == nil {
		return owners, nil
	}
	// The device plugin's GPUs are mapped whatever DRA answers: a failure here leaves only
	// the DRA-allocated GPUs unmapped, and says so.
	uuids, err := m.DRA.UUIDs(ctx)
	for dev, refs := range dra {
		if uuid, ok := uuids[dev]; ok {
			owners[uuid] = append(owners[uuid], refs...)
		}
	}
	if err != nil {
		return owners, fmt.Errorf("GPUs allocated through DRA: %w", err)
	}
	return owners, nil
}

// deviceUUID strips the replica suffix that the NVIDIA device plugin adds to a time-sliced
// or MPS-shared GPU's ID ("GPU-…::3"), leaving the GPU's UUID.
func deviceUUID(id string) string {
	if i := strings.Index(id, "::"); i >= 0 {
		return id[:i]
	}
	return id
}
