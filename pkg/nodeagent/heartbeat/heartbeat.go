package nodeagent

import (
	"context"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"

	"github.com/faultline-dev/faultline/pkg/agentlease"
)

// Leases is what the heartbeat asks of the API server: its node's Lease (package agentlease).
// coreclient.Client implements it.
type Leases interface {
	GetLease(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error)
	CreateLease(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error)
	UpdateLease(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error)
}

// HeartbeatConfig configures RunHeartbeat.
type HeartbeatConfig struct {
	Client Leases
	Node   string
	// Interval is how often the Lease is renewed (zero: agentlease.RenewInterval), Duration
	// how long a renewal holds (zero: as many intervals as agentlease.Duration holds).
	Interval, Duration time.Duration
	Clock              clock.WithTicker
	Logger             *slog.Logger
}

// RunHeartbeat renews the node's heartbeat Lease at once and then every interval, until ctx
// is done: the controller's sign that an agent is on this node now. A renewal that fails is
// logged and tried again at the next tick; nothing here stops the agent. The Lease is left
// to expire when the agent stops, as the kubelet leaves its own: an agent restarted by a
// rolling update renews it again within the Lease's duration.
func RunHeartbeat(ctx context.Context, cfg HeartbeatConfig) {
	if cfg.Interval <= 0 {
		cfg.Interval = agentlease.RenewInterval
	}
	if cfg.Duration <= 0 {
		cfg.Duration = cfg.Interval * (agentlease.Duration / agentlease.RenewInterval)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	h := &heartbeat{cfg: cfg, log: log}
	t := cfg.Clock.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		h.renew(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

type heartbeat struct {
	cfg HeartbeatConfig
	log *slog.Logger
	// lease is the last one written, whose resourceVersion the next update names; nil: read
	// it first.
	lease *coordinationv1.Lease
	// failing: the last renewal failed (its recovery is logged).
	failing bool
}

func (h *heartbeat) renew(ctx context.Context) {
	now := h.cfg.Clock.Now()
	// Bounded: a renewal that takes longer than the Lease holds is no heartbeat.
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Duration/2)
	defer cancel()
	err := h.write(ctx, now)
	if err != nil && apierrors.IsConflict(err) {
		h.lease = nil // written by another (an agent restarted meanwhile): read it again
		err = h.write(ctx, now)
	}
	lease := agentlease.Namespace + "/" + agentlease.Name(h.cfg.Node)
	if err != nil {
		h.lease = nil
		h.log.Warn("the node agent's heartbeat is not renewed; the controller takes a silent agent for a gone one", "lease", lease, "error", err)
		h.failing = true
		return
	}
	if h.failing {
		h.log.Info("the node agent's heartbeat is renewed again", "lease", lease)
		h.failing = false
	}
}

func (h *heartbeat) write(ctx context.Context, now time.Time) error {
	if h.lease == nil {
		l, err := h.cfg.Client.GetLease(ctx, agentlease.Namespace, agentlease.Name(h.cfg.Node))
		switch {
		case apierrors.IsNotFound(err):
			created, err := h.cfg.Client.CreateLease(ctx, agentlease.New(h.cfg.Node, now, h.cfg.Duration))
			if err != nil {
				return err
			}
			h.lease = created
			return nil
		case err != nil:
			return err
		}
		h.lease = l
	}
	next := h.lease.DeepCopy()
	agentlease.Renew(next, h.cfg.Node, now, h.cfg.Duration)
	written, err := h.cfg.Client.UpdateLease(ctx, next)
	if err != nil {
		return err
	}
	h.lease = written
	return nil
}
