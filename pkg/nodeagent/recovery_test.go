package nodeagent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/gpu"
)

func healthFault(uuid, reason string, fatal, cleared bool) gpu.Fault {
	return gpu.Fault{UUID: uuid, Cause: v1alpha1.CauseGPUFault, Fatal: fatal, Source: v1alpha1.EvidenceSourceNVMLHealth,
		Reason: reason, DetectedAt: t0, Cleared: cleared}
}

// TestAGPUBackMakesTheNodeHealthy: a node marked for a state the health poll found (a GPU
// lost) is healthy again once the poll finds it on no GPU; a node marked for an XID, which
// no poll can take back, is not.
func TestAGPUBackMakesTheNodeHealthy(t *testing.T) {
	ctx := context.Background()
	w := &FakeEvidenceWriter{}
	a := newTestAgent(t, &FakeGPUOwners{Owners: testOwners}, w, nil)
	for _, f := range []gpu.Fault{healthFault("GPU-a", v1alpha1.GPUReasonGPULost, true, false), healthFault("GPU-b", v1alpha1.GPUReasonGPULost, true, false)} {
		if err := a.HandleGPUFault(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if w.GPUReason != v1alpha1.GPUReasonGPULost {
		t.Fatalf("node GPUHealthy=False reason %q, want GPULost", w.GPUReason)
	}
	if err := a.HandleGPUFault(ctx, healthFault("GPU-a", v1alpha1.GPUReasonGPULost, false, true)); err != nil {
		t.Fatal(err)
	}
	if w.GPUReason == "" {
		t.Fatal("the node healthy again while GPU-b is still lost")
	}
	if err := a.HandleGPUFault(ctx, healthFault("GPU-b", v1alpha1.GPUReasonGPULost, false, true)); err != nil {
		t.Fatal(err)
	}
	if w.GPUReason != "" || len(w.Healthy) != 1 {
		t.Fatalf("every lost GPU back: GPUHealthy=False reason %q, healthy marks %v; want healthy once", w.GPUReason, w.Healthy)
	}

	xid := &FakeEvidenceWriter{}
	b := newTestAgent(t, &FakeGPUOwners{Owners: testOwners}, xid, nil)
	for _, f := range []gpu.Fault{fault("GPU-a", 79, v1alpha1.CauseGPUFault, true), healthFault("GPU-a", v1alpha1.GPUReasonGPULost, true, false), healthFault("GPU-a", v1alpha1.GPUReasonGPULost, false, true)} {
		if err := b.HandleGPUFault(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if xid.GPUReason != "Xid79" || len(xid.Healthy) != 0 {
		t.Errorf("a node marked for XID 79: reason %q, healthy marks %v; want it unhealthy until a reset", xid.GPUReason, xid.Healthy)
	}
}

// TestAnOperatorsResetMakesTheNodeHealthy: whatever the node was marked for, an operator's
// reset makes it healthy again, unless a GPU is still lost.
func TestAnOperatorsResetMakesTheNodeHealthy(t *testing.T) {
	ctx := context.Background()
	w := &FakeEvidenceWriter{}
	a := newTestAgent(t, &FakeGPUOwners{Owners: testOwners}, w, nil)
	for _, f := range []gpu.Fault{fault("GPU-a", 79, v1alpha1.CauseGPUFault, true), healthFault("GPU-b", v1alpha1.GPUReasonResetRequired, true, false)} {
		if err := a.HandleGPUFault(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	a.gpusReset(ctx, t0.Add(time.Second))
	if w.GPUReason == "" {
		t.Fatal("a reset made the node healthy while the poll finds GPU-b needing one")
	}
	if err := a.HandleGPUFault(ctx, healthFault("GPU-b", v1alpha1.GPUReasonResetRequired, false, true)); err != nil {
		t.Fatal(err)
	}
	if w.GPUReason != "Xid79" {
		t.Fatalf("GPU-b back: reason %q, want the XID's to stay", w.GPUReason)
	}
	a.gpusReset(ctx, t0.Add(-time.Second))
	if w.GPUReason == "" {
		t.Fatal("a reset from before the fault made the node healthy")
	}
	a.gpusReset(ctx, t0.Add(time.Second))
	if w.GPUReason != "" || len(w.Healthy) != 1 {
		t.Errorf("after the reset: reason %q, healthy marks %v; want healthy", w.GPUReason, w.Healthy)
	}
	// Marked again by the next fault, though the agent marked it before.
	if err := a.HandleGPUFault(ctx, fault("GPU-a", 48, v1alpha1.CauseGPUFault, true)); err != nil {
		t.Fatal(err)
	}
	if w.GPUReason != "Xid48" {
		t.Errorf("after a reset, XID 48: reason %q, want Xid48", w.GPUReason)
	}
	// The very fault handled before a reset, again within the repeat window: a new fault of
	// the GPUs the operator reset (the pods that hold it now are marked), not a repeat.
	a.gpusReset(ctx, t0.Add(2*time.Second))
	if err := a.HandleGPUFault(ctx, fault("GPU-a", 79, v1alpha1.CauseGPUFault, true)); err != nil {
		t.Fatal(err)
	}
	if w.GPUReason != "Xid79" {
		t.Errorf("after a reset, XID 79 again: reason %q, want Xid79: the fault before the reset was taken for a repeat", w.GPUReason)
	}
}

// TestARebootMakesTheNodeHealthy: a node marked before it last booted has had its GPUs reset;
// once the first poll finds none lost, it is healthy again. A mark made after the boot stays.
func TestARebootMakesTheNodeHealthy(t *testing.T) {
	for name, tc := range map[string]struct {
		boot        time.Time
		wantHealthy bool
	}{
		"marked before the boot": {boot: t0.Add(time.Hour), wantHealthy: true},
		"marked after the boot":  {boot: t0.Add(-time.Hour), wantHealthy: false},
	} {
		t.Run(name, func(t *testing.T) {
			w := &FakeEvidenceWriter{GPUReason: "Xid79", GPUSince: t0}
			a, err := NewAgent(AgentConfig{
				Node: node, Owners: &FakeGPUOwners{}, Writer: w, RebootCheckAfter: time.Millisecond,
				BootTime: func() (time.Time, error) { return tc.boot, nil },
				Clock:    clocktesting.NewFakeClock(t0), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_ = a.Run(ctx)
			if healthy := w.GPUReason == ""; healthy != tc.wantHealthy {
				t.Errorf("healthy %v, want %v", healthy, tc.wantHealthy)
			}
		})
	}
}

// TestAShutdownIsTakenBackUntilItIsDone: a withdrawal that fails (the API server down) is
// retried until it is done; a shutdown that starts meanwhile wins, and nothing is withdrawn.
func TestAShutdownIsTakenBackUntilItIsDone(t *testing.T) {
	w := &FakeEvidenceWriter{Pods: []types.NamespacedName{ref("r-0")}, ClearErr: errors.New("apiserver down")}
	a, err := NewAgent(AgentConfig{
		Node: node, Owners: &FakeGPUOwners{}, Writer: w, Retry: 10 * time.Millisecond,
		Clock: clocktesting.NewFakeClock(t0), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.ShutdownCancelled(context.Background(), t0); err == nil {
		t.Fatal("a withdrawal that failed is no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		w.mu.Lock()
		calls := w.ClearCalls
		if calls >= 3 {
			w.ClearErr = nil
		}
		withdrawn := len(w.Withdrawn)
		w.mu.Unlock()
		if withdrawn > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not withdrawn after %d tries", calls)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done

	// A shutdown that starts while a withdrawal waits for its retry wins.
	w2 := &FakeEvidenceWriter{Pods: []types.NamespacedName{ref("r-0")}, ClearErr: errors.New("apiserver down")}
	b := newTestAgent(t, &FakeGPUOwners{}, w2, nil)
	_ = b.ShutdownCancelled(context.Background(), t0)
	before, clears := len(w2.Withdrawn), w2.ClearCalls
	if err := b.ShutdownStarted(context.Background(), t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	w2.ClearErr = nil
	b.takeBack(context.Background())
	if len(w2.Withdrawn) != before || w2.ClearCalls != clears {
		t.Errorf("after the new shutdown began: %d withdrawals and %d clears, want none (%d, %d before)", len(w2.Withdrawn), w2.ClearCalls, before, clears)
	}
}
