package heartbeat

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/faultline-dev/faultline/pkg/agentlease"
)

// fakeLeases is an API server's Leases with optimistic concurrency and injected errors.
type fakeLeases struct {
	mu     sync.Mutex
	leases map[string]*coordinationv1.Lease
	rv     int
	// fail, when set, answers the next n writes with err.
	failWrites int
	err        error
	writes     chan struct{}
	// gate, when set, holds every write until it is closed.
	gate chan struct{}
}

var _ Leases = &fakeLeases{}

func (f *fakeLeases) GetLease(_ context.Context, ns, name string) (*coordinationv1.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.leases[ns+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, name)
	}
	return l.DeepCopy(), nil
}

func (f *fakeLeases) CreateLease(_ context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return f.write(l, true)
}

func (f *fakeLeases) UpdateLease(_ context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return f.write(l, false)
}

func (f *fakeLeases) write(l *coordinationv1.Lease, create bool) (*coordinationv1.Lease, error) {
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	defer func() {
		f.mu.Unlock()
		f.writes <- struct{}{}
	}()
	if f.failWrites > 0 {
		f.failWrites--
		return nil, f.err
	}
	key := l.Namespace + "/" + l.Name
	old, exists := f.leases[key]
	switch {
	case create && exists:
		return nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "leases"}, l.Name)
	case !create && (!exists || old.ResourceVersion != l.ResourceVersion):
		return nil, apierrors.NewConflict(schema.GroupResource{Resource: "leases"}, l.Name, errors.New("stale"))
	}
	f.rv++
	out := l.DeepCopy()
	out.ResourceVersion = strconv.Itoa(f.rv)
	f.leases[key] = out
	return out.DeepCopy(), nil
}

func (f *fakeLeases) renewedAt(node string) time.Time {
	l, err := f.GetLease(context.Background(), agentlease.Namespace, agentlease.Name(node))
	if err != nil || l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

// TestHeartbeatRenewsAndRecovers: the agent creates its node's heartbeat at once and renews it
// every interval; a renewal the API server refuses (an outage) or that lost a race (another
// writer, e.g. the agent's previous pod) does not stop the heartbeat: the next one gets through.
func TestHeartbeatRenewsAndRecovers(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	api := &fakeLeases{leases: map[string]*coordinationv1.Lease{}, writes: make(chan struct{}, 100)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		New(Config{Client: api, Node: "gpu-1", Interval: 10 * time.Second, Clock: clk,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).Run(ctx)
	}()
	wait := func(what string) {
		t.Helper()
		select {
		case <-api.writes:
		case <-time.After(10 * time.Second):
			t.Fatalf("no write: %s", what)
		}
	}
	tick := func() {
		t.Helper()
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond) // the loop is back at its ticker
		}
		clk.Step(10 * time.Second)
	}
	wait("the first heartbeat")
	if got := api.renewedAt("gpu-1"); !got.Equal(t0) {
		t.Fatalf("first heartbeat renewed at %v, want %v", got, t0)
	}
	l, _ := api.GetLease(ctx, agentlease.Namespace, "gpu-1")
	if hb := agentlease.Heartbeat(l, "gpu-1"); hb == nil || hb.Duration != 40*time.Second {
		t.Fatalf("the Lease is no heartbeat of gpu-1 for 40 s: %+v", l)
	}

	api.mu.Lock()
	api.failWrites, api.err = 1, apierrors.NewServiceUnavailable("etcd is down")
	api.mu.Unlock()
	tick()
	wait("a renewal the API server refuses")
	tick()
	wait("the renewal after the outage")
	if got, want := api.renewedAt("gpu-1"), t0.Add(20*time.Second); !got.Equal(want) {
		t.Fatalf("after an outage: renewed at %v, want %v", got, want)
	}

	// Someone else wrote it meanwhile: the update conflicts, the agent reads it and renews.
	api.mu.Lock()
	api.leases[agentlease.Namespace+"/gpu-1"].ResourceVersion = "999"
	api.mu.Unlock()
	tick()
	wait("a renewal that conflicts")
	wait("the renewal after reading it again")
	if got, want := api.renewedAt("gpu-1"), t0.Add(30*time.Second); !got.Equal(want) {
		t.Fatalf("after a conflict: renewed at %v, want %v", got, want)
	}
	cancel()
	<-done
}
