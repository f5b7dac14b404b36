// Package heartbeat is the node agent's heartbeat (package agentlease): its node's Lease,
// renewed while the agent runs, and what the agent keeps on it, the barrier records of its
// node's pods (Records). One writer of the one object, so that neither write conflicts with
// the other. No NVML here: the kwok nodes' simulated agents (test/cluster) keep their
// records with the same code.
package heartbeat

import (
	"context"
	"log/slog"
	"sync"
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

// Config configures a Heartbeat.
type Config struct {
	Client Leases
	Node   string
	// Interval is how often the Lease is renewed (zero: agentlease.RenewInterval), Duration
	// how long a renewal holds (zero: as many intervals as agentlease.Duration holds).
	Interval, Duration time.Duration
	Clock              clock.WithTicker
	Logger             *slog.Logger
}

// Heartbeat writes its node's heartbeat Lease: its renewals (Run), and what else the agent
// keeps there (Update: its barrier records), one writer of the one object, so that neither
// conflicts with the other.
type Heartbeat struct {
	cfg Config
	log *slog.Logger
	mu  sync.Mutex
	// lease is the last one written or read, whose resourceVersion the next update names;
	// nil: read it first.
	lease *coordinationv1.Lease
	// failing: the last renewal failed (its recovery is logged).
	failing bool
}

// New is the heartbeat cfg configures, its defaults filled in.
func New(cfg Config) *Heartbeat {
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
	return &Heartbeat{cfg: cfg, log: log}
}

// Run renews the node's heartbeat Lease at once and then every interval, until ctx is
// done: the controller's sign that an agent is on this node now. A renewal that fails is
// logged and tried again at the next tick; nothing here stops the agent. The Lease is left
// to expire when the agent stops, as the kubelet leaves its own: an agent restarted by a
// rolling update renews it again within the Lease's duration.
func (h *Heartbeat) Run(ctx context.Context) {
	t := h.cfg.Clock.NewTicker(h.cfg.Interval)
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

func (h *Heartbeat) renew(ctx context.Context) {
	// Bounded: a renewal that takes longer than the Lease holds is no heartbeat.
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Duration/2)
	defer cancel()
	_, err := h.Update(ctx, nil)
	lease := agentlease.Namespace + "/" + agentlease.Name(h.cfg.Node)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.log.Warn("the node agent's heartbeat is not renewed; the controller takes a silent agent for a gone one", "lease", lease, "error", err)
		h.failing = true
		return
	}
	if h.failing {
		h.log.Info("the node agent's heartbeat is renewed again", "lease", lease)
		h.failing = false
	}
}

// Update renews the Lease and changes it with change (nil: the renewal alone), which is
// given the Lease as the API server has it, and writes it: once more, on the Lease read
// again, after a conflict (written by another: an agent restarted meanwhile). It returns the
// Lease written. Every write of the Lease renews it.
func (h *Heartbeat) Update(ctx context.Context, change func(*coordinationv1.Lease) error) (*coordinationv1.Lease, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l, err := h.write(ctx, h.cfg.Clock.Now(), change)
	if err != nil && apierrors.IsConflict(err) {
		h.lease = nil
		l, err = h.write(ctx, h.cfg.Clock.Now(), change)
	}
	if err != nil {
		h.lease = nil
	}
	return l, err
}

func (h *Heartbeat) write(ctx context.Context, now time.Time, change func(*coordinationv1.Lease) error) (*coordinationv1.Lease, error) {
	create := false
	if h.lease == nil {
		l, err := h.cfg.Client.GetLease(ctx, agentlease.Namespace, agentlease.Name(h.cfg.Node))
		switch {
		case apierrors.IsNotFound(err):
			l, create = agentlease.New(h.cfg.Node, now, h.cfg.Duration), true
		case err != nil:
			return nil, err
		}
		h.lease = l
	}
	next := h.lease.DeepCopy()
	agentlease.Renew(next, h.cfg.Node, now, h.cfg.Duration)
	if change != nil {
		if err := change(next); err != nil {
			return nil, err
		}
	}
	write := h.cfg.Client.UpdateLease
	if create {
		write = h.cfg.Client.CreateLease
	}
	written, err := write(ctx, next)
	if err != nil {
		return nil, err
	}
	h.lease = written
	return written, nil
}

// Read is the Lease as last written or read, read from the API server when there is none
// (nil, no error: there is none there either).
func (h *Heartbeat) Read(ctx context.Context) (*coordinationv1.Lease, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lease != nil {
		return h.lease.DeepCopy(), nil
	}
	l, err := h.cfg.Client.GetLease(ctx, agentlease.Namespace, agentlease.Name(h.cfg.Node))
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	h.lease = l
	return l.DeepCopy(), nil
}
