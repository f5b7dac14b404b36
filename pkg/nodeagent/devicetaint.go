package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/gpu"
)

// DRA device taints (KEP-5055, GA in Kubernetes 1.37) are where a DRA driver says one of its
// devices is bad (a taint on the device in its ResourceSlice) and where an administrator or a
// cluster's health checker says so of devices of any driver (a DeviceTaintRule). NoSchedule
// keeps new claims off the device; NoExecute also evicts the pods that hold it. Either, on a
// GPU allocated to a run's worker on this node, is the agent's GPUFault evidence for that
// worker (source dra-device-taint), as the kubelet's device health is: only a node's drivers
// write its ResourceSlices and only cluster administrators DeviceTaintRules (both are
// cluster-scoped), so no tenant can taint a device to buy a restart. A taint of effect None
// is information, no evidence.

// DeviceTaints reads what the taint watch needs: the node's ResourceSlices and the cluster's
// DeviceTaintRules (pkg/coreclient).
type DeviceTaints interface {
	SliceLister
	WatchResourceSlices(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	ListDeviceTaintRules(ctx context.Context, opts metav1.ListOptions) (*resourcev1.DeviceTaintRuleList, error)
	WatchDeviceTaintRules(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// taintedGPU is a taint on a GPU of the node, and who put it there.
type taintedGPU struct {
	device DRADevice
	uuid   string
	taint  resourcev1.DeviceTaint
	by     string // "its driver" or "DeviceTaintRule <name>"
}

// taintedGPUs are the taints of effect NoSchedule or NoExecute on the GPUs of the node's
// slices (devices whose attributes name a GPU UUID): their drivers' own, and those of the
// rules whose selector matches them. Pure.
func taintedGPUs(slices []*resourcev1.ResourceSlice, rules []*resourcev1.DeviceTaintRule) []taintedGPU {
	var out []taintedGPU
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			uuid := gpuUUID(d.Attributes)
			if uuid == "" {
				continue // no GPU (a NIC)
			}
			dev := DRADevice{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name, Device: d.Name}
			for _, t := range d.Taints {
				if evidence(t) {
					out = append(out, taintedGPU{device: dev, uuid: uuid, taint: t, by: "its driver"})
				}
			}
			for _, r := range rules {
				if evidence(r.Spec.Taint) && selects(r.Spec.DeviceSelector, dev) {
					out = append(out, taintedGPU{device: dev, uuid: uuid, taint: r.Spec.Taint, by: "DeviceTaintRule " + r.Name})
				}
			}
		}
	}
	return out
}

// evidence: a taint that says the device must not be used (NoSchedule, NoExecute).
func evidence(t resourcev1.DeviceTaint) bool {
	return t.Effect == resourcev1.DeviceTaintEffectNoSchedule || t.Effect == resourcev1.DeviceTaintEffectNoExecute
}

// selects: a rule's selector matches the device (each field it sets must be the device's;
// none set matches every device, as Kubernetes reads it).
func selects(sel *resourcev1.DeviceTaintSelector, d DRADevice) bool {
	if sel == nil {
		return true
	}
	for _, f := range []struct {
		want *string
		got  string
	}{{sel.Driver, d.Driver}, {sel.Pool, d.Pool}, {sel.Device, d.Device}} {
		if f.want != nil && *f.want != f.got {
			return false
		}
	}
	return true
}

// fault is the taint's fault, as the agent writes a GPU fault's: no XID (a taint gives none).
func (t taintedGPU) fault(a *Agent) gpu.Fault {
	taint := t.taint.Key
	if t.taint.Value != "" {
		taint += "=" + t.taint.Value
	}
	return gpu.Fault{UUID: t.uuid, Index: -1, Cause: v1alpha1.CauseGPUFault, Source: v1alpha1.EvidenceSourceDeviceTaint,
		Reason: "DeviceTainted", DetectedAt: a.cfg.Clock.Now(),
		Detail: fmt.Sprintf("%s taints DRA device %s/%s/%s (GPU %s) %s:%s", t.by, t.device.Driver, t.device.Pool, t.device.Device, t.uuid, taint, t.taint.Effect)}
}

// SliceWatch holds the ResourceSlices of one node, watched: the UUIDs of the GPUs DRA drivers
// allocate there (DRAGPUs, read at a fault with no API request), their drivers' taints
// (WatchDeviceTaints) and whether the agent can read them at all (its dra capability). One
// watch per node, where a list at every heartbeat would cost the API server a request per node
// every 10 s.
type SliceWatch struct {
	informer cache.SharedIndexInformer
	mu       sync.Mutex
	err      error // the last list or watch error, and when
	errAt    time.Time
}

var _ DRAGPUs = &SliceWatch{}

// NewSliceWatch watches node's ResourceSlices through src once Run runs. The informer streams
// its initial list (WatchList) unless src says it cannot.
func NewSliceWatch(src DeviceTaints, node string) *SliceWatch {
	w := &SliceWatch{informer: cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(selectedListWatch(
		fields.OneTermEqualSelector(resourcev1.ResourceSliceSelectorNodeName, node).String(),
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return src.ListResourceSlices(ctx, o)
		},
		src.WatchResourceSlices), src), &resourcev1.ResourceSlice{}, 0, cache.Indexers{})}
	_ = w.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		w.mu.Lock()
		w.err, w.errAt = err, time.Now()
		w.mu.Unlock()
	})
	return w
}

// Run watches until ctx is done.
func (w *SliceWatch) Run(ctx context.Context) { w.informer.RunWithContext(ctx) }

// sliceErrorFresh is how long a list or watch error of the slices says the agent cannot read
// them: the reflector retries within a second, so an error older than this one was mended.
const sliceErrorFresh = 30 * time.Second

// Err says why the node's slices are not read: not yet listed, or a list or watch refused
// lately (no right, the API not served).
func (w *SliceWatch) Err() error {
	w.mu.Lock()
	err, at := w.err, w.errAt
	w.mu.Unlock()
	if err != nil && (time.Since(at) < sliceErrorFresh || !w.informer.HasSynced()) {
		return fmt.Errorf("the ResourceSlices of this node (resource.k8s.io/v1) are not read: %w", err)
	}
	if !w.informer.HasSynced() {
		return errors.New("the ResourceSlices of this node (resource.k8s.io/v1) are not listed yet")
	}
	return nil
}

// UUIDs maps the node's GPU devices to their UUIDs, from the watch's store.
func (w *SliceWatch) UUIDs(context.Context) (map[DRADevice]string, error) {
	if err := w.Err(); err != nil {
		return nil, err
	}
	var slices []resourcev1.ResourceSlice
	for _, s := range informerItems[*resourcev1.ResourceSlice](w.informer) {
		slices = append(slices, *s)
	}
	return sliceGPUs(slices), nil
}

// WatchDeviceTaints has the agent attest the DRA device taints on the GPUs its node's workers
// hold: the drivers' in the node's slices (w) and the cluster's DeviceTaintRules (watched from
// src where the API server serves them: Kubernetes 1.37, or 1.36 with its beta API on); at
// every change it maps the tainted GPUs to the pods that hold them (the kubelet's
// PodResources) and queues their evidence. It runs until ctx is done.
func (a *Agent) WatchDeviceTaints(ctx context.Context, w *SliceWatch, src DeviceTaints) {
	kick := make(chan struct{}, 1)
	changed := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kickOnce(kick) },
		UpdateFunc: func(any, any) { kickOnce(kick) },
	}
	_, _ = w.informer.AddEventHandler(changed)
	var rules cache.SharedIndexInformer
	switch _, err := src.ListDeviceTaintRules(ctx, metav1.ListOptions{Limit: 1}); {
	case err == nil:
		rules = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(selectedListWatch("",
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return src.ListDeviceTaintRules(ctx, o)
			},
			src.WatchDeviceTaintRules), src), &resourcev1.DeviceTaintRule{}, 0, cache.Indexers{})
		_, _ = rules.AddEventHandler(changed)
		go rules.RunWithContext(ctx)
	case apierrors.IsNotFound(err):
		a.log.Info("the API server serves no DeviceTaintRules (resource.k8s.io/v1): only DRA drivers' own device taints are evidence")
	default:
		a.log.Warn("DeviceTaintRules are not read: only DRA drivers' own device taints are evidence", "error", err)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		}
		if err := a.checkDeviceTaints(ctx, informerItems[*resourcev1.ResourceSlice](w.informer), informerItems[*resourcev1.DeviceTaintRule](rules)); err != nil {
			a.log.Warn("DRA device taints not tied to their pods", "error", err)
		}
	}
}

// checkDeviceTaints queues the evidence of every tainted GPU of the node for the pods that
// hold it.
func (a *Agent) checkDeviceTaints(ctx context.Context, slices []*resourcev1.ResourceSlice, rules []*resourcev1.DeviceTaintRule) error {
	tainted := taintedGPUs(slices, rules)
	if len(tainted) == 0 {
		return nil
	}
	owners, err := a.cfg.Owners.GPUOwners(ctx)
	for _, t := range tainted {
		for _, pod := range owners.Pods(t.uuid, -1) {
			a.onDeviceUnhealthy(podDeviceFault{pod: pod, fault: t.fault(a)})
		}
	}
	if err != nil {
		var names []string
		for _, t := range tainted {
			names = append(names, t.uuid)
		}
		return fmt.Errorf("map the tainted GPUs %s to pods: %w", strings.Join(names, ", "), err)
	}
	return nil
}

// informerItems is what an informer holds (nothing for none).
func informerItems[T any](informer cache.SharedIndexInformer) []T {
	if informer == nil {
		return nil
	}
	var out []T
	for _, obj := range informer.GetStore().List() {
		if t, ok := obj.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// kickOnce signals ch without blocking (a signal pending is enough).
func kickOnce(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
