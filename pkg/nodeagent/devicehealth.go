package nodeagent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/gpu"
)

// The kubelet reports the health of the devices it allocated to each container itself
// (KEP-4680, beta and on by default in 1.36: a container status's allocatedResourcesStatus,
// fed by the device plugin's ListAndWatch health and by DRA drivers' health service; the
// NVIDIA device plugin marks a GPU unhealthy on fatal XIDs). The agent attests what its own
// node's kubelet wrote there: an Unhealthy device of a run's worker becomes the same GPUFault
// evidence an NVML event does (condition and annotation, source kubelet-device-health), so
// every rule that reads the agent's evidence reads it too (its time, the worker's
// incarnation, a hung worker's end). Admission keeps anyone but the node's kubelet from
// writing the field (deploy/admission/evidence.yaml).

// unhealthyDevice is one device the kubelet reports Unhealthy for a container of a pod.
type unhealthyDevice struct {
	container string
	resource  corev1.ResourceName
	id        corev1.ResourceID
	message   string
}

// unhealthyDevices are the devices the kubelet reports Unhealthy in pod's container
// statuses, in their order. Pure.
func unhealthyDevices(pod *corev1.Pod) []unhealthyDevice {
	var out []unhealthyDevice
	for _, cs := range pod.Status.ContainerStatuses {
		for _, rs := range cs.AllocatedResourcesStatus {
			for _, h := range rs.Resources {
				if h.Health != corev1.ResourceHealthStatusUnhealthy {
					continue
				}
				d := unhealthyDevice{container: cs.Name, resource: rs.Name, id: h.ResourceID}
				if h.Message != nil {
					d.message = *h.Message
				}
				out = append(out, d)
			}
		}
	}
	return out
}

// fault is the fault of one unhealthy device seen at now, as the agent writes a GPU fault's:
// no XID (the kubelet gives none), which the classifier reads as a fatal state of the device.
func (d unhealthyDevice) fault(now time.Time) gpu.Fault {
	detail := fmt.Sprintf("the kubelet reports device %s of %s Unhealthy for container %s", d.id, d.resource, d.container)
	if d.message != "" {
		detail += ": " + d.message
	}
	return gpu.Fault{UUID: string(d.id), Index: -1, Cause: v1alpha1.CauseGPUFault, Source: v1alpha1.EvidenceSourceKubelet,
		Reason: "DeviceUnhealthy", Detail: detail, DetectedAt: now}
}

// podDeviceFault is an unhealthy device's fault and the pod it concerns.
type podDeviceFault struct {
	pod   types.NamespacedName
	fault gpu.Fault
}

// podEvents is where the agent registers its handlers of the node's pods: the pod informer.
type podEvents interface {
	AddEventHandler(cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error)
}

// WatchDeviceHealth has the agent attest each Unhealthy device its node's kubelet reports
// for a run's worker on the node, as the informer sees the pods change.
func (a *Agent) WatchDeviceHealth(informer podEvents) error {
	seen := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Spec.NodeName != a.cfg.Node || pod.DeletionTimestamp != nil {
			return
		}
		if _, run := pod.Labels[v1alpha1.LabelRun]; !run {
			return
		}
		for _, d := range unhealthyDevices(pod) {
			a.onDeviceUnhealthy(podDeviceFault{pod: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, fault: d.fault(a.cfg.Clock.Now())})
		}
	}
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
	})
	return err
}

// onDeviceUnhealthy queues an unhealthy device's fault for Run, never blocking the informer.
func (a *Agent) onDeviceUnhealthy(f podDeviceFault) {
	select {
	case a.devices <- f:
	default:
		a.cfg.Metrics.faultDropped()
		a.log.Warn("device fault queue full; fault dropped (the next status update brings it again)", "pod", f.pod.String(), "device", f.fault.UUID)
	}
}

// runDeviceFaults writes the unhealthy devices' evidence as they come, until ctx is done.
func (a *Agent) runDeviceFaults(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-a.devices:
			if err := a.HandleDeviceFault(ctx, f); err != nil {
				a.log.Error("device fault evidence incomplete", "pod", f.pod.String(), "device", f.fault.UUID, "error", err)
			}
		}
	}
}

// HandleDeviceFault writes the evidence of an unhealthy device onto the pod the kubelet named
// (the first evidence on a pod wins, as for every fault). A device the kubelet keeps
// reporting Unhealthy is written once a repeat window, as an XID storm is.
func (a *Agent) HandleDeviceFault(ctx context.Context, f podDeviceFault) error {
	key := faultKey{uuid: f.fault.UUID, reason: f.fault.Reason, source: f.fault.Source, pod: f.pod}
	now := a.cfg.Clock.Now()
	if a.handledRecently(key, now) {
		return nil
	}
	a.cfg.Metrics.eventSeen(f.fault.Source)
	a.log.Info("device unhealthy", "pod", f.pod.String(), "device", f.fault.UUID, "detail", f.fault.Detail)
	ev := GPUEvidence(a.cfg.Node, f.fault)
	eps := newEpisodes(a.cfg.Tracing)
	err := a.markPods(withEpisodes(ctx, eps), []types.NamespacedName{f.pod}, ev)
	eps.record(ctx, ev, f.fault.DetectedAt)
	if err == nil {
		a.handledNow(key, now)
	}
	return err
}
