package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

// The DRA side of fakegpu: a minimal DRA driver, built on the kubelet plugin library
// (k8s.io/dynamic-resource-allocation/kubeletplugin) as real drivers are. It publishes the
// node's fake GPUs in a ResourceSlice, as NVIDIA's DRA driver publishes real ones (devices
// gpu-N with the attribute uuid, GPU-…), registers with the node's kubelet, and prepares the
// claims the scheduler allocated: each device is a CDI device whose container edit names the
// GPU in NVIDIA_VISIBLE_DEVICES, as NVIDIA's container toolkit would give the container that
// GPU. It reports the devices' health to the kubelet from the same health file as the device
// plugin.

// draDriver is the DRA driver of one node's fake GPUs.
type draDriver struct {
	name       string // the driver's name, also the CDI vendor
	node       string
	devices    []string // GPU UUIDs; device i is gpu-i
	cdiDir     string
	healthFile string
	log        *slog.Logger
}

// cdiClass is the CDI class of the driver's devices (<vendor>/<class>=<device>).
const cdiClass = "gpu"

// deviceName is the ResourceSlice's name of device i, as NVIDIA's driver names its GPUs.
func deviceName(i int) string { return "gpu-" + strconv.Itoa(i) }

// runDRA serves as a DRA driver until ctx is done.
func runDRA(ctx context.Context, d *draDriver, kubeconfig, kubeletDir string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := d.writeCDISpec(); err != nil {
		return err
	}
	registry := filepath.Join(kubeletDir, "plugins_registry")
	data := filepath.Join(kubeletDir, "plugins", d.name)
	for _, dir := range []string{registry, data} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
	}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(d.name),
		kubeletplugin.NodeName(d.node),
		kubeletplugin.KubeClient(client),
		kubeletplugin.RegistrarDirectoryPath(registry),
		kubeletplugin.PluginDataDirectoryPath(data),
	)
	if err != nil {
		return fmt.Errorf("start the DRA driver %s: %w", d.name, err)
	}
	defer helper.Stop()
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.node: {Slices: []resourceslice.Slice{{Devices: d.sliceDevices()}}},
	}}); err != nil {
		return fmt.Errorf("publish the ResourceSlice of %s: %w", d.node, err)
	}
	d.log.Info("DRA driver started", "driver", d.name, "node", d.node, "devices", d.devices, "registry", registry)
	<-ctx.Done()
	return ctx.Err()
}

// sliceDevices are the devices as the ResourceSlice lists them.
func (d *draDriver) sliceDevices() []resourcev1.Device {
	out := make([]resourcev1.Device, len(d.devices))
	for i, uuid := range d.devices {
		out[i] = resourcev1.Device{Name: deviceName(i), Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"uuid":        {StringValue: ptr.To(uuid)},
			"index":       {IntValue: ptr.To(int64(i))},
			"productName": {StringValue: ptr.To("faultline fake GPU")},
		}}
	}
	return out
}

// writeCDISpec writes the CDI spec of the node's devices, where the node's containerd reads
// CDI specs: one device per GPU, which names it in the container's NVIDIA_VISIBLE_DEVICES.
// A container with two of them gets the last one's: the tests give a worker one GPU.
func (d *draDriver) writeCDISpec() error {
	type edits struct {
		Env []string `json:"env"`
	}
	type device struct {
		Name           string `json:"name"`
		ContainerEdits edits  `json:"containerEdits"`
	}
	spec := struct {
		CDIVersion string   `json:"cdiVersion"`
		Kind       string   `json:"kind"`
		Devices    []device `json:"devices"`
	}{CDIVersion: "0.6.0", Kind: d.name + "/" + cdiClass}
	for i, uuid := range d.devices {
		spec.Devices = append(spec.Devices, device{Name: deviceName(i), ContainerEdits: edits{Env: []string{envVisibleDevices + "=" + uuid}}})
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(d.cdiDir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(d.cdiDir, d.name+".json"), b, 0o644)
}

// PrepareResourceClaims hands each claim's devices to the kubelet as their CDI devices.
func (d *draDriver) PrepareResourceClaims(_ context.Context, claims []*resourcev1.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		var res kubeletplugin.PrepareResult
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != d.name {
				continue
			}
			i, ok := d.index(r.Device)
			if !ok || r.Pool != d.node {
				res.Err = fmt.Errorf("claim %s/%s: device %s/%s is not one of this node's", claim.Namespace, claim.Name, r.Pool, r.Device)
				break
			}
			res.Devices = append(res.Devices, kubeletplugin.Device{
				Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
				CDIDeviceIDs: []string{d.name + "/" + cdiClass + "=" + deviceName(i)},
			})
		}
		d.log.Info("prepare", "claim", claim.Namespace+"/"+claim.Name, "devices", res.Devices, "error", res.Err)
		out[claim.UID] = res
	}
	return out, nil
}

// UnprepareResourceClaims has nothing to undo: the CDI spec is the node's, not a claim's.
func (d *draDriver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

// HandleError logs the library's background errors; a slice the API server refuses is fatal,
// since nothing would allocate the devices.
func (d *draDriver) HandleError(_ context.Context, err error, msg string) {
	d.log.Error(msg, "error", err, "recoverable", errors.Is(err, kubeletplugin.ErrRecoverable))
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		os.Exit(1)
	}
}

// WatchHealthStatus reports every device's health, Unhealthy for those the health file
// lists, at once, whenever the file changes, and every 10 s (the kubelet forgets a device's
// health after 30 s without a report).
func (d *draDriver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var sent string
	var at time.Time
	for {
		unhealthy := unhealthyIn(d.healthFile, d.devices)
		if key := "=" + strings.Join(unhealthy, ","); key != sent || time.Since(at) > 10*time.Second {
			report := kubeletplugin.DeviceHealthReport{}
			for i, uuid := range d.devices {
				h := kubeletplugin.HealthStatusHealthy
				if slices.Contains(unhealthy, uuid) {
					h = kubeletplugin.HealthStatusUnhealthy
				}
				report.Devices = append(report.Devices, kubeletplugin.DeviceHealth{PoolName: d.node, DeviceName: deviceName(i), Health: h, LastUpdated: time.Now()})
			}
			select {
			case <-ctx.Done():
				return nil
			case reports <- report:
			}
			if key != sent {
				d.log.Info("device health sent", "unhealthy", unhealthy)
			}
			sent, at = key, time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// index is the index of device name gpu-N.
func (d *draDriver) index(name string) (int, bool) {
	i, err := strconv.Atoi(strings.TrimPrefix(name, "gpu-"))
	if err != nil || i < 0 || i >= len(d.devices) || deviceName(i) != name {
		return 0, false
	}
	return i, true
}
