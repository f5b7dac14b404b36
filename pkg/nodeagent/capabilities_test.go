package nodeagent

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/gpu"
)

// leaseWrites is a heartbeat that keeps its Lease in memory and counts its writes.
type leaseWrites struct {
	mu     sync.Mutex
	lease  *coordinationv1.Lease
	writes int
}

func (w *leaseWrites) Update(_ context.Context, change func(*coordinationv1.Lease) error) (*coordinationv1.Lease, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	next := w.lease.DeepCopy()
	if err := change(next); err != nil {
		return nil, err
	}
	w.lease, w.writes = next, w.writes+1
	return next, nil
}

func (w *leaseWrites) read() (*v1alpha1.AgentCapabilities, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return agentlease.Capabilities(w.lease, "gpu-0"), w.writes
}

// TestCapabilitiesSayWhyTheAgentIsBlind: an agent without NVML, without its shutdown lock
// and without the kubelet's PodResources says so on its heartbeat, each with why, and the
// controller reads the missing GPU monitoring from the heartbeat; the capabilities are
// written again only when they change.
func TestCapabilitiesSayWhyTheAgentIsBlind(t *testing.T) {
	// up is the lock held and PodResources reachable, flipped together: the publisher must
	// never see one without the other, or it writes the change twice.
	var up, slicesReadable atomic.Bool
	c := &capabilities{
		draSlices: func(context.Context) error {
			if !slicesReadable.Load() {
				return errors.New(`resourceslices.resource.k8s.io is forbidden: User "system:serviceaccount:faultline-system:faultline-nodeagent" cannot list resource "resourceslices"`)
			}
			return nil
		},
		monitor: gpu.Null{Reason: v1alpha1.CapabilityNVMLNotFound, Why: "libnvidia-ml not found (looked in /host/run/nvidia/driver (GPU Operator))"},
		holding: up.Load,
		podResources: func(context.Context) error {
			if !up.Load() {
				return errors.New("dial unix /var/lib/kubelet/pod-resources/kubelet.sock: connect: no such file or directory")
			}
			return nil
		},
	}
	c.setInPlace(false, v1alpha1.InPlaceReasonNoRuntime, "no CRI socket found")
	w := &leaseWrites{lease: agentlease.New("gpu-0", time.Now(), agentlease.Duration)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		publishCapabilities(ctx, w, c, 10*time.Millisecond, slog.New(slog.DiscardHandler))
	}()
	waitFor := func(what string, ok func(*v1alpha1.AgentCapabilities, int) bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if caps, n := w.read(); caps != nil && ok(caps, n) {
				return
			}
		}
		caps, n := w.read()
		t.Fatalf("%s: capabilities %+v after %d writes", what, caps, n)
	}
	waitFor("blind", func(caps *v1alpha1.AgentCapabilities, _ int) bool {
		return !caps.GPUMonitoring.Enabled && caps.GPUMonitoring.Reason == v1alpha1.CapabilityNVMLNotFound &&
			!caps.ShutdownLock.Enabled && !caps.PodResources.Enabled && caps.PodResources.Reason == v1alpha1.CapabilityUnreachable &&
			!caps.InPlace.Enabled && caps.InPlace.Reason == v1alpha1.InPlaceReasonNoRuntime &&
			!caps.DRA.Enabled && caps.DRA.Reason == v1alpha1.CapabilityUnreachable && strings.Contains(caps.DRA.Message, "PodResources")
	})
	w.mu.Lock()
	blind := agentlease.NoGPUMonitoring(w.lease, "gpu-0")
	w.mu.Unlock()
	if blind != "NVMLNotFound: libnvidia-ml not found (looked in /host/run/nvidia/driver (GPU Operator))" {
		t.Errorf("the controller reads the heartbeat as saying %q, want why its GPUs are not watched", blind)
	}
	time.Sleep(50 * time.Millisecond)
	if _, n := w.read(); n != 1 {
		t.Errorf("%d writes of unchanged capabilities, want 1", n)
	}
	up.Store(true)
	waitFor("lock held, PodResources answers", func(caps *v1alpha1.AgentCapabilities, n int) bool {
		return caps.ShutdownLock.Enabled && caps.PodResources.Enabled && n == 2 &&
			!caps.DRA.Enabled && strings.Contains(caps.DRA.Message, "cannot list resource \"resourceslices\"")
	})
	slicesReadable.Store(true)
	waitFor("the node's ResourceSlices read: DRA-allocated GPUs are tied to their pods", func(caps *v1alpha1.AgentCapabilities, n int) bool {
		return caps.DRA.Enabled && caps.DRA.Reason == v1alpha1.CapabilityOK && n == 3
	})
	cancel()
	<-done

	// A heartbeat of another node, or from an agent before capabilities, says nothing.
	other := agentlease.New("gpu-1", time.Now(), agentlease.Duration)
	other.Annotations = w.lease.Annotations // the publisher has stopped
	if agentlease.Capabilities(other, "gpu-0") != nil || agentlease.Capabilities(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("gpu-0")}}, "gpu-0") != nil {
		t.Error("capabilities read from a heartbeat that has none for the node")
	}
}
