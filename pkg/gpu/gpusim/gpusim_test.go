package gpusim_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/faultline-dev/faultline/pkg/gpu"
	"github.com/faultline-dev/faultline/pkg/gpu/gpusim"
)

// The monitor sees exactly the GPUs a real node's device plugin announced, by their UUIDs,
// and an injected XID names the GPU of that UUID.
func TestNewWithUUIDsIsTheMachineTheMonitorSees(t *testing.T) {
	uuids := []string{"GPU-fake-a", "GPU-fake-b", "GPU-fake-c"}
	sim, err := gpusim.NewWithUUIDs(uuids)
	if err != nil {
		t.Fatal(err)
	}
	m, err := gpu.New(gpu.Options{
		RequireGPU: true, LibraryPath: "/sim", NewLibrary: func(string) gpu.Library { return sim },
		HealthInterval: time.Hour, EventWait: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, d := range m.Devices() {
		if d.Index != i {
			t.Errorf("device %s has index %d, want %d", d.UUID, d.Index, i)
		}
		got = append(got, d.UUID)
	}
	if diff := cmp.Diff(uuids, got); diff != "" {
		t.Fatalf("monitored GPUs (-want +got):\n%s", diff)
	}
	if i := sim.IndexOf("GPU-fake-c"); i != 2 {
		t.Errorf("IndexOf(GPU-fake-c) = %d, want 2", i)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	faults := make(chan gpu.Fault, 1)
	go func() { _ = m.Run(ctx, func(f gpu.Fault) { faults <- f }) }()
	sim.InjectXID(sim.IndexOf("GPU-fake-b"), 79)
	select {
	case f := <-faults:
		if f.UUID != "GPU-fake-b" || f.XID != 79 {
			t.Errorf("fault %+v, want XID 79 on GPU-fake-b", f)
		}
	case <-ctx.Done():
		t.Fatal("no fault from the injected XID")
	}
}

func TestNewWithUUIDsRefusesBadLists(t *testing.T) {
	for name, uuids := range map[string][]string{
		"none":      nil,
		"too many":  make([]string, gpusim.MaxGPUs+1),
		"empty":     {"GPU-a", ""},
		"duplicate": {"GPU-a", "GPU-a"},
	} {
		if _, err := gpusim.NewWithUUIDs(uuids); err == nil {
			t.Errorf("%s: NewWithUUIDs(%q) accepted", name, uuids)
		}
	}
}
