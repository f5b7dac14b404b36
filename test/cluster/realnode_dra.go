package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// GPUs allocated through DRA on the real nodes (RealNodeSpec.DRAGPUs): each node runs
// test/fakegpu as a DRA driver of its own fake GPUs, beside (not instead of) its device plugin.

// DRADriverName is the real nodes' DRA driver, and DRADeviceClass the DeviceClass of its
// devices (every device of the driver), which a run names in spec.gpus.deviceClassName.
const (
	DRADriverName  = "gpu.test.faultline.dev"
	DRADeviceClass = DRADriverName
)

// createDRADeviceClass creates the DeviceClass of the real nodes' DRA GPUs, as a DRA driver's
// chart does (NVIDIA's: gpu.nvidia.com, selecting its driver's devices).
func createDRADeviceClass(ctx context.Context, c *Cluster) error {
	class := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: DRADeviceClass},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", DRADriverName)},
		}}},
	}
	if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("DeviceClass %s: %w", DRADeviceClass, err)
	}
	return nil
}

// startDRADriver runs test/fakegpu as the node's DRA driver, in the node's namespace (where
// its kubelet's plugin directories and its containerd's CDI directory are), and waits until
// the node's ResourceSlice lists its GPUs.
func (rn *RealNodes) startDRADriver(ctx context.Context, c *Cluster, n *RealNode) error {
	for g := range rn.spec.DRAGPUs {
		n.DRAGPUs = append(n.DRAGPUs, FakeGPUUUID(rn.id, n.Index, rn.spec.GPUs+g))
	}
	p, err := n.startInNamespace("fakegpu-dra.log", nil, filepath.Join(rn.Dir, "bin", "fakegpu"),
		"--dra-driver", DRADriverName, "--uuids", strings.Join(n.DRAGPUs, ","), "--health-file", n.gpuHealthFile(),
		"--kubeconfig", c.Kubeconfig, "--node-name", n.Name, "--kubelet-dir", n.RootDir)
	if err != nil {
		return err
	}
	n.draDriver = p
	// The driver publishes its slice at start, and again if the kubelet, which wipes the
	// slices of drivers it has not registered, deletes it before the registration.
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	lw := cache.NewListWatchFromClient(c.Client.ResourceV1().RESTClient(), "resourceslices", "",
		fields.OneTermEqualSelector("spec.nodeName", n.Name))
	_, err = watchtools.UntilWithSync(wctx, lw, &resourcev1.ResourceSlice{}, nil, func(e watch.Event) (bool, error) {
		s, ok := e.Object.(*resourcev1.ResourceSlice)
		return ok && e.Type != watch.Deleted && s.Spec.Driver == DRADriverName && len(s.Spec.Devices) == len(n.DRAGPUs), nil
	})
	if err != nil {
		return fmt.Errorf("%s: the ResourceSlice of its DRA driver's %d GPUs: %w\n%s", n.Name, len(n.DRAGPUs), err, p.Tail(20))
	}
	return nil
}

// AllGPUs are the UUIDs of every fake GPU of the node, the device plugin's and the DRA
// driver's: what its agent's simulated NVML watches.
func (n *RealNode) AllGPUs() []string { return append(append([]string{}, n.GPUs...), n.DRAGPUs...) }
