package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/gpu"
)

// Never silently blind: the agent publishes on its heartbeat what it can see and do on its
// node (v1alpha1.AgentCapabilities), where `launcher nodes` shows it and the controller tells
// the runs whose workers sit on a node whose GPUs nobody watches. Blindness is information,
// not a crash: the agent runs on, readiness stays the shutdown lock's.

// capabilities gathers the agent's capabilities as they are now.
type capabilities struct {
	monitor   gpu.Monitor
	simulated bool
	// holding says whether logind's delay inhibitor lock is held.
	holding func() bool
	// inPlace is the node's in-place readiness as the agent last wrote it.
	inPlace atomic.Pointer[v1alpha1.Capability]
	// podResources asks the kubelet's PodResources API (nil: simulated hardware, none asked).
	podResources func(ctx context.Context) error
	// draSlices reads the node's ResourceSlices, through which a GPU that a DRA driver
	// allocated is tied to its pod (nil: simulated hardware, none read).
	draSlices func(ctx context.Context) error
}

// setInPlace records the node's in-place readiness, as written to its condition.
func (c *capabilities) setInPlace(ready bool, reason, message string) {
	c.inPlace.Store(&v1alpha1.Capability{Enabled: ready, Reason: reason, Message: message})
}

// now is the capabilities as they are now.
func (c *capabilities) now(ctx context.Context) v1alpha1.AgentCapabilities {
	var caps v1alpha1.AgentCapabilities
	switch null, ok := c.monitor.(gpu.Null); {
	case ok:
		caps.GPUMonitoring = v1alpha1.Capability{Reason: null.Reason, Message: null.Why}
	case c.simulated:
		caps.GPUMonitoring = v1alpha1.Capability{Enabled: true, Reason: v1alpha1.CapabilitySimulated, Message: fmt.Sprintf("%d simulated GPUs", len(c.monitor.Devices()))}
	default:
		caps.GPUMonitoring = v1alpha1.Capability{Enabled: true, Reason: v1alpha1.CapabilityOK, Message: fmt.Sprintf("NVML watches %d GPUs", len(c.monitor.Devices()))}
	}
	caps.ShutdownLock = v1alpha1.Capability{Reason: v1alpha1.CapabilityNotHeld, Message: "logind's delay inhibitor lock is not held: a shutdown would go unseen"}
	if c.holding() {
		caps.ShutdownLock = v1alpha1.Capability{Enabled: true, Reason: v1alpha1.CapabilityOK}
	}
	if ip := c.inPlace.Load(); ip != nil {
		caps.InPlace = *ip
	}
	switch {
	case c.podResources == nil:
		caps.PodResources = v1alpha1.Capability{Enabled: true, Reason: v1alpha1.CapabilitySimulated, Message: "GPU allocations are guessed from the pods' specs"}
	default:
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.podResources(ctx)
		cancel()
		caps.PodResources = v1alpha1.Capability{Enabled: true, Reason: v1alpha1.CapabilityOK}
		if err != nil {
			caps.PodResources = v1alpha1.Capability{Reason: v1alpha1.CapabilityUnreachable, Message: err.Error()}
		}
	}
	caps.DRA = c.dra(ctx, caps.PodResources)
	return caps
}

// dra is whether GPUs a DRA driver allocated are tied to their pods: the kubelet's
// PodResources API names each container's devices, and the node's ResourceSlices their UUIDs.
func (c *capabilities) dra(ctx context.Context, podResources v1alpha1.Capability) v1alpha1.Capability {
	switch {
	case c.draSlices == nil:
		return v1alpha1.Capability{Reason: v1alpha1.CapabilityNotSupported, Message: "simulated hardware: GPU allocations are guessed from the pods' specs"}
	case !podResources.Enabled:
		return v1alpha1.Capability{Reason: v1alpha1.CapabilityUnreachable, Message: "the kubelet's PodResources API does not answer"}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.draSlices(ctx); err != nil {
		return v1alpha1.Capability{Reason: v1alpha1.CapabilityUnreachable, Message: err.Error()}
	}
	return v1alpha1.Capability{Enabled: true, Reason: v1alpha1.CapabilityOK}
}

// heartbeatUpdater writes the agent's heartbeat (heartbeat.Heartbeat).
type heartbeatUpdater interface {
	Update(ctx context.Context, change func(*coordinationv1.Lease) error) (*coordinationv1.Lease, error)
}

// publishCapabilities writes the agent's capabilities on its heartbeat at once, then every
// interval when they changed, until ctx is done. A failed write is tried again at the next
// interval: the heartbeat's own renewals go on meanwhile.
func publishCapabilities(ctx context.Context, hb heartbeatUpdater, c *capabilities, interval time.Duration, log *slog.Logger) {
	var written []byte
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		caps := c.now(ctx)
		if raw, _ := json.Marshal(caps); string(raw) != string(written) {
			if _, err := hb.Update(ctx, func(l *coordinationv1.Lease) error {
				_, err := agentlease.SetCapabilities(l, caps)
				return err
			}); err != nil {
				if ctx.Err() == nil {
					log.Warn("the agent's capabilities are not written on its heartbeat", "error", err)
				}
			} else {
				written = raw
				if !caps.GPUMonitoring.Enabled {
					log.Warn("no GPU monitoring on this node: its GPUs' faults are no evidence", "reason", caps.GPUMonitoring.Reason, "why", caps.GPUMonitoring.Message)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
