package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/utils/clock"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// Monitor reports GPU faults.
type Monitor interface {
	// Devices lists the GPUs found at start (none for a Null monitor).
	Devices() []Device
	// Run watches until ctx is done, then releases NVML. It calls sink for every fault,
	// from more than one goroutine; sink should hand the fault on rather than block.
	Run(ctx context.Context, sink func(Fault)) error
}

// Defaults for Options.
const (
	DefaultHealthInterval = 10 * time.Second
	DefaultEventWait      = time.Second
)

// Options configures New.
type Options struct {
	// LibraryPath is the libnvidia-ml to load; "" finds it.
	LibraryPath string
	// DriverRoot is where the driver is installed, as the agent sees it: the library is
	// looked for there only ("/" then falls back to the dynamic loader). "" looks under
	// each of DriverRoots below HostRoot, in order, then leaves it to the dynamic loader.
	DriverRoot string
	// HostRoot is the node's root as the agent sees it ("" is "/": the agent on the node
	// itself; the DaemonSet mounts the node's root read-only at /host).
	HostRoot string
	// RequireGPU makes a missing or failing NVML an error instead of a Null monitor.
	RequireGPU bool
	// HealthInterval is the period of the health poll.
	HealthInterval time.Duration
	// EventWait bounds one wait on the event set, and so how long Run takes to stop.
	EventWait time.Duration
	// NewLibrary constructs NVML for a library path; nil means NewNVML.
	NewLibrary func(path string) Library
	Clock      clock.WithTicker
	Logger     *slog.Logger
}

// New initialises NVML, finds the GPUs and registers them for fault events. Without NVML
// it returns a Null monitor, or an error when opts.RequireGPU is set.
func New(opts Options) (Monitor, error) {
	if opts.HealthInterval <= 0 {
		opts.HealthInterval = DefaultHealthInterval
	}
	if opts.EventWait <= 0 {
		opts.EventWait = DefaultEventWait
	}
	if opts.NewLibrary == nil {
		opts.NewLibrary = NewNVML
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	log := opts.Logger.With("component", "gpu-monitor")

	path, tried, err := libraryPath(opts.LibraryPath, opts.DriverRoot, opts.HostRoot)
	var lib Library
	if err == nil {
		lib = opts.NewLibrary(path)
		err = initLibrary(lib)
	}
	if err != nil {
		if opts.RequireGPU {
			return nil, fmt.Errorf("gpu monitoring required: %w", err)
		}
		level := slog.LevelWarn
		if errors.Is(err, errNoLibrary) {
			level = slog.LevelInfo // a node without GPUs is normal
		}
		log.Log(context.Background(), level, "NVML unavailable; GPU monitoring disabled", "error", err, "libraryPath", path, "looked in", strings.Join(tried, ", "))
		reason := v1alpha1.CapabilityNVMLFailed
		if errors.Is(err, errNoLibrary) {
			reason = v1alpha1.CapabilityNVMLNotFound
		}
		return Null{Reason: reason, Why: fmt.Sprintf("%v (looked in %s)", err, strings.Join(tried, ", "))}, nil
	}

	m := &nvmlMonitor{lib: lib, opts: opts, log: log, byUUID: map[string]*gpu{}}
	if err := m.discover(); err != nil {
		m.shutdown()
		if opts.RequireGPU {
			return nil, err
		}
		log.Warn("GPU discovery failed; GPU monitoring disabled", "error", err)
		return Null{Reason: v1alpha1.CapabilityNVMLFailed, Why: fmt.Sprintf("NVML (%s) found no GPUs: %v", path, err)}, nil
	}
	return m, nil
}

// Null is the monitor of a node without NVML: no devices, no faults. Reason
// (v1alpha1.CapabilityNVMLNotFound or CapabilityNVMLFailed) and Why say why.
type Null struct{ Reason, Why string }

var _ Monitor = Null{}

// Devices returns none.
func (Null) Devices() []Device { return nil }

// Run waits for ctx.
func (Null) Run(ctx context.Context, _ func(Fault)) error {
	<-ctx.Done()
	return nil
}

// gpu is one device with the handle NVML gave for it.
type gpu struct {
	Device
	dev device
}

type nvmlMonitor struct {
	lib  Library
	opts Options
	log  *slog.Logger

	gpus   []*gpu
	byUUID map[string]*gpu
	set    nvml.EventSet // nil when no event set could be created

	ran atomic.Bool
}

var _ Monitor = &nvmlMonitor{}

func (m *nvmlMonitor) Devices() []Device {
	out := make([]Device, len(m.gpus))
	for i, g := range m.gpus {
		out[i] = g.Device
	}
	return out
}

// errRunTwice: a monitor's Run owns NVML's shutdown, so it runs once.
var errRunTwice = errors.New("gpu: Monitor.Run called twice")

func (m *nvmlMonitor) Run(ctx context.Context, sink func(Fault)) error {
	if !m.ran.CompareAndSwap(false, true) {
		return errRunTwice
	}
	defer m.shutdown()
	var wg sync.WaitGroup
	if m.set != nil {
		wg.Go(func() { m.watchEvents(ctx, sink) })
	}
	wg.Go(func() { m.pollHealth(ctx, sink) })
	wg.Wait()
	return nil
}

func (m *nvmlMonitor) shutdown() {
	if m.set != nil {
		if ret := m.set.Free(); ret != nvml.SUCCESS {
			m.log.Warn("free NVML event set", "error", ret)
		}
		m.set = nil
	}
	if ret := m.lib.Shutdown(); ret != nvml.SUCCESS {
		m.log.Warn("NVML shutdown", "error", ret)
	}
}

func (m *nvmlMonitor) now() time.Time { return m.opts.Clock.Now() }
