package gpu

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/procstat"
)

// Environment of TestRealNVML beyond EnvTestReal and EnvTestProvoke.
const (
	envNVMLLibrary = "FAULTLINE_NVML_LIBRARY"
	envDriverRoot  = "FAULTLINE_DRIVER_ROOT"
)

// idleWindow is how long the test watches a healthy GPU and measures what that costs.
const idleWindow = 5 * time.Second

// provokedXIDWait bounds how long the test waits for the XID the provoking command caused.
const provokedXIDWait = 15 * time.Second

// TestRealNVML runs against the node's driver: FAULTLINE_NVML_REAL=1, and optionally
// FAULTLINE_NVML_LIBRARY / FAULTLINE_DRIVER_ROOT. With FAULTLINE_NVML_PROVOKE it also checks
// the whole event path on the hardware: a program's crash on the GPU must arrive as an XID
// fault of that GPU, classified as the program's (not the infrastructure's) and not fatal.
func TestRealNVML(t *testing.T) {
	if os.Getenv(EnvTestReal) != "1" {
		t.Skip("set " + EnvTestReal + "=1 on a machine with an NVIDIA driver")
	}
	before := selfMemory(t)
	m, err := New(Options{
		LibraryPath:    os.Getenv(envNVMLLibrary),
		DriverRoot:     os.Getenv(envDriverRoot),
		RequireGPU:     true,
		HealthInterval: time.Hour, // one poll, at start
		EventWait:      100 * time.Millisecond,
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatalf("New with the real NVML: %v", err)
	}
	devs := m.Devices()
	if len(devs) == 0 {
		t.Fatal("no GPUs found")
	}
	for _, d := range devs {
		t.Logf("GPU %d: %s (minor %d)", d.Index, d.UUID, d.Minor)
		if d.UUID == "" {
			t.Errorf("GPU %d without a UUID", d.Index)
		}
	}
	nm := m.(*nvmlMonitor)
	if nm.set == nil {
		t.Error("no GPU registered for fault events")
	}
	for _, g := range nm.gpus {
		supported, ret := g.dev.GetSupportedEventTypes()
		t.Logf("GPU %d events: supported %#x, %v; registered %#x", g.Index, supported, ret, supported&uint64(faultEvents))
		t.Logf("GPU %d health: %+v", g.Index, nm.probe(g))
	}

	faults := make(chan Fault, 64)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	// The sink is called from two goroutines and must not block: a healthy GPU and one
	// provoked XID come nowhere near 64 faults.
	go func() {
		ran <- m.Run(ctx, func(f Fault) {
			select {
			case faults <- f:
			default:
			}
		})
	}()
	stop := func() {
		cancel()
		if err := <-ran; err != nil {
			t.Fatal(err)
		}
	}
	defer stop()

	provoke := os.Getenv(EnvTestProvoke)
	if provoke == "" {
		// A healthy machine reports nothing; a sick one is worth seeing, not failing on.
		// Meanwhile: what NVML costs an idle agent, in memory and in the event loop's CPU.
		cpu0 := selfCPU(t)
		idle := time.After(idleWindow)
		for done := false; !done; {
			select {
			case f := <-faults:
				t.Logf("fault: %+v", f)
			case <-idle:
				done = true
			}
		}
		t.Logf("idle for %v with NVML watching: %v of CPU; memory %s before New, %s now",
			idleWindow, selfCPU(t)-cpu0, before, selfMemory(t))
		return
	}

	started := time.Now()
	out, err := exec.Command("sh", "-c", provoke).CombinedOutput()
	exited := time.Now()
	if err == nil {
		t.Fatalf("%s succeeded; it must crash a kernel on the GPU. Output:\n%s", EnvTestProvoke, out)
	}
	t.Logf("provoking command failed after %v, as it should: %v\n%s", exited.Sub(started), err, tail(out, 600))

	f, err := awaitXID(faults, provokedXIDWait)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("XID fault %+v: %v after the command started, %v after it exited", f, f.DetectedAt.Sub(started), f.DetectedAt.Sub(exited))
	if !slices.ContainsFunc(devs, func(d Device) bool { return d.UUID == f.UUID }) {
		t.Errorf("the XID names GPU %q, which is none of %v", f.UUID, devs)
	}
	if f.Cause != v1alpha1.CauseAppGPUError || f.Fatal {
		t.Errorf("a program's crash on the GPU (XID %d) was classified %s (fatal %v), want %s and not fatal",
			f.XID, f.Cause, f.Fatal, v1alpha1.CauseAppGPUError)
	}
	if f.Source != v1alpha1.EvidenceSourceNVMLEvent {
		t.Errorf("source %q, want %q", f.Source, v1alpha1.EvidenceSourceNVMLEvent)
	}
}

// awaitXID returns the first XID fault; other faults (the health poll's) are skipped.
func awaitXID(faults <-chan Fault, wait time.Duration) (Fault, error) {
	deadline := time.After(wait)
	var others []Fault
	for {
		select {
		case f := <-faults:
			if f.XID != 0 {
				return f, nil
			}
			others = append(others, f)
		case <-deadline:
			return Fault{}, fmt.Errorf("no XID event within %v of the provoking command (other faults: %+v)", wait, others)
		}
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func selfMemory(t *testing.T) procstat.Memory {
	t.Helper()
	m, err := procstat.ReadMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func selfCPU(t *testing.T) time.Duration {
	t.Helper()
	d, err := procstat.SelfCPUTime()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
