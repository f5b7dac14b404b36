package gpu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

func TestEventsBecomeFaults(t *testing.T) {
	s := newServer(t)
	m, err := New(testOptions(s, &syncBuffer{}))
	if err != nil {
		t.Fatal(err)
	}
	uuid3 := s.Device(3).UUID
	for name, tc := range map[string]struct {
		gpu       int
		eventType uint64
		data      uint64
		mig       [2]uint32
		want      *Fault
	}{
		"XID 79, fallen off the bus: fatal GPUFault": {
			gpu: 3, eventType: nvml.EventTypeXidCriticalError, data: 79,
			want: &Fault{UUID: uuid3, Index: 3, XID: 79, Cause: v1alpha1.CauseGPUFault, Fatal: true, Reason: "Xid79", Detail: "XID 79: GPU has fallen off the bus"},
		},
		"XID 13, the program's: AppGPUError": {
			gpu: 3, eventType: nvml.EventTypeXidCriticalError, data: 13,
			want: &Fault{UUID: uuid3, Index: 3, XID: 13, Cause: v1alpha1.CauseAppGPUError, Reason: "Xid13", Detail: "XID 13: Graphics Engine Exception"},
		},
		"XID 48 via its XID": {
			gpu: 3, eventType: nvml.EventTypeXidCriticalError, data: 48,
			want: &Fault{UUID: uuid3, Index: 3, XID: 48, Cause: v1alpha1.CauseGPUFault, Fatal: true, Reason: "Xid48", Detail: "XID 48: Double Bit ECC Error (DBE)"},
		},
		"an XID nobody knows: GPUFault, not fatal": {
			gpu: 3, eventType: nvml.EventTypeXidCriticalError, data: 999,
			want: &Fault{UUID: uuid3, Index: 3, XID: 999, Cause: v1alpha1.CauseGPUFault, Reason: "Xid999", Detail: "XID 999: unknown XID"},
		},
		"double-bit ECC event: fatal GPUFault": {
			gpu: 3, eventType: nvml.EventTypeDoubleBitEccError,
			want: &Fault{UUID: uuid3, Index: 3, Cause: v1alpha1.CauseGPUFault, Fatal: true, Reason: v1alpha1.GPUReasonDoubleBitECC, Detail: "uncorrectable (double-bit) ECC error"},
		},
		"GPU unavailable": {
			gpu: 3, eventType: nvml.EventTypeGpuUnavailableError,
			want: &Fault{UUID: uuid3, Index: 3, Cause: v1alpha1.CauseGPUFault, Fatal: true, Reason: v1alpha1.GPUReasonGPULost, Detail: "GPU became unavailable"},
		},
		"recovery action: reboot": {
			gpu: 3, eventType: nvml.EventTypeGpuRecoveryAction, data: uint64(nvml.GPU_RECOVERY_ACTION_NODE_REBOOT),
			want: &Fault{UUID: uuid3, Index: 3, Cause: v1alpha1.CauseGPUFault, Fatal: true, Reason: v1alpha1.GPUReasonRecoveryAction, Detail: "driver requires recovery: node reboot"},
		},
		"XID on a MIG instance": {
			gpu: 3, eventType: nvml.EventTypeXidCriticalError, data: 31, mig: [2]uint32{2, 0},
			want: &Fault{UUID: uuid3, Index: 3, XID: 31, Cause: v1alpha1.CauseAppGPUError, Reason: "Xid31", Detail: "XID 31: GPU memory page fault (MIG GPU instance 2, compute instance 0)"},
		},
		"XID without a device: every GPU": {
			gpu: -1, eventType: nvml.EventTypeXidCriticalError, data: 79,
			want: &Fault{UUID: "", Index: -1, XID: 79, Cause: v1alpha1.CauseGPUFault, Fatal: true, Reason: "Xid79", Detail: "XID 79: GPU has fallen off the bus; NVML did not say which GPU"},
		},
		"single-bit ECC is corrected, no fault": {gpu: 3, eventType: nvml.EventTypeSingleBitEccError},
		"recovery action none":                  {gpu: 3, eventType: nvml.EventTypeGpuRecoveryAction, data: uint64(nvml.GPU_RECOVERY_ACTION_NONE)},
		"XID 0":                                 {gpu: 3, eventType: nvml.EventTypeXidCriticalError},
		"pstate change":                         {gpu: 3, eventType: nvml.EventTypePState},
	} {
		t.Run(name, func(t *testing.T) {
			e := nvml.EventData{EventType: tc.eventType, EventData: tc.data, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}
			if tc.gpu >= 0 {
				e.Device = s.Devices[tc.gpu]
			}
			if tc.mig != [2]uint32{} {
				e.GpuInstanceId, e.ComputeInstanceId = tc.mig[0], tc.mig[1]
			}
			got, ok := m.(*nvmlMonitor).eventFault(e)
			if tc.want == nil {
				if ok {
					t.Fatalf("got fault %+v, want none", got)
				}
				return
			}
			if !ok {
				t.Fatal("no fault")
			}
			want := *tc.want
			want.Source, want.DetectedAt = v1alpha1.EvidenceSourceNVMLEvent, t0
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("fault (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunDeliversInjectedEvents(t *testing.T) {
	s := newServer(t)
	m, err := New(testOptions(s, &syncBuffer{}))
	if err != nil {
		t.Fatal(err)
	}
	f := newFaults()
	stop := running(t, m, f.sink)

	s.Inject(5, nvml.EventTypeSingleBitEccError, 0) // no fault
	s.Inject(5, nvml.EventTypeXidCriticalError, 79)
	s.Inject(2, nvml.EventTypeDoubleBitEccError, 0)
	ignoreDetail := cmpopts.IgnoreFields(Fault{}, "Detail")
	for _, want := range []Fault{
		{UUID: s.Device(5).UUID, Index: 5, XID: 79, Cause: v1alpha1.CauseGPUFault, Fatal: true, Source: v1alpha1.EvidenceSourceNVMLEvent, Reason: "Xid79", DetectedAt: t0},
		{UUID: s.Device(2).UUID, Index: 2, Cause: v1alpha1.CauseGPUFault, Fatal: true, Source: v1alpha1.EvidenceSourceNVMLEvent, Reason: v1alpha1.GPUReasonDoubleBitECC, DetectedAt: t0},
	} {
		if diff := cmp.Diff(want, f.next(t), ignoreDetail); diff != "" {
			t.Errorf("fault (-want +got):\n%s", diff)
		}
	}
	f.none(t, 50*time.Millisecond)
	stop()
}

func TestDiscoveryRegistersOnlyFaultEvents(t *testing.T) {
	s := newServer(t)
	s.GPUs[1].SupportedErr.Store(int32(nvml.ERROR_NOT_SUPPORTED))
	s.GPUs[2].Supported.Store(nvml.EventTypeSingleBitEccError) // nothing we want
	s.GPUs[3].Supported.Store(faultEvents | nvml.EventTypeClock)
	logs := &syncBuffer{}
	m, err := New(testOptions(s, logs))
	if err != nil {
		t.Fatal(err)
	}

	var devs []Device
	for i := range 8 {
		devs = append(devs, Device{UUID: s.Device(i).UUID, Index: i, Minor: i})
	}
	if diff := cmp.Diff(devs, m.Devices()); diff != "" {
		t.Errorf("Devices (-want +got):\n%s", diff)
	}
	want := []uint64{
		nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError, 0, 0, uint64(faultEvents),
	}
	for i, w := range want {
		if got := s.GPUs[i].Registered.Load(); got != w {
			t.Errorf("GPU %d registered mask %#x, want %#x", i, got, w)
		}
	}
	if !strings.Contains(logs.String(), "only polled") {
		t.Errorf("no log about GPUs left to the health poll:\n%s", logs)
	}
}

func TestStopIsClean(t *testing.T) {
	before := runtime.NumGoroutine()
	s := newServer(t)
	freed := 0
	s.Set.FreeFunc = func() nvml.Return { freed++; return nvml.SUCCESS }
	m, err := New(testOptions(s, &syncBuffer{}))
	if err != nil {
		t.Fatal(err)
	}
	stop := running(t, m, newFaults().sink)
	time.Sleep(30 * time.Millisecond) // let both loops start
	stop()
	if freed != 1 {
		t.Errorf("event set freed %d times, want 1", freed)
	}
	if n := s.ShutdownCount(); n != 1 {
		t.Errorf("NVML shut down %d times, want 1", n)
	}
	if err := m.Run(context.Background(), nil); !errors.Is(err, errRunTwice) {
		t.Errorf("second Run: %v, want errRunTwice", err)
	}
	// No goroutine of the monitor outlives Run (the mock's time.After timers are not
	// goroutines). Others may still be winding down, hence the wait.
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d before, %d after Run returned\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestEventErrorsDoNotSpin(t *testing.T) {
	s := newServer(t)
	waits := 0
	s.Set.WaitFunc = func(uint32) (nvml.EventData, nvml.Return) {
		waits++
		return nvml.EventData{}, nvml.ERROR_UNKNOWN
	}
	logs := &syncBuffer{}
	opts := testOptions(s, logs)
	fc := opts.Clock.(*clocktesting.FakeClock)
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	stop := running(t, m, newFaults().sink)
	time.Sleep(30 * time.Millisecond)
	fc.Step(eventErrorPause) // one pause over: one more wait
	time.Sleep(30 * time.Millisecond)
	stop()
	if waits < 1 || waits > 3 {
		t.Errorf("%d waits with a failing event set, want a pause between them", waits)
	}
	if n := strings.Count(logs.String(), "waiting for NVML events"); n != 1 {
		t.Errorf("logged the same wait error %d times, want once:\n%s", n, logs)
	}
}

func TestWithoutNVML(t *testing.T) {
	notFound := func(string) Library {
		return &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	}
	panics := func(string) Library {
		return &mock.Interface{InitFunc: func() nvml.Return { panic("dlopen: undefined symbol") }}
	}
	noPermission := func(string) Library {
		return &mock.Interface{
			InitFunc:     func() nvml.Return { return nvml.ERROR_NO_PERMISSION },
			ShutdownFunc: func() nvml.Return { return nvml.SUCCESS },
		}
	}
	emptyRoot := t.TempDir()
	for name, tc := range map[string]struct {
		newLib     func(string) Library
		driverRoot string
		libPath    string
	}{
		"library not found":            {newLib: notFound},
		"loading panics":               {newLib: panics},
		"init fails otherwise":         {newLib: noPermission},
		"no library under driver root": {newLib: func(string) Library { t.Error("library constructed"); return nil }, driverRoot: emptyRoot},
		"real go-nvml, missing file":   {newLib: NewNVML, libPath: "/nonexistent/libnvidia-ml.so.1"},
	} {
		t.Run(name, func(t *testing.T) {
			logs := &syncBuffer{}
			opts := testOptions(nil, logs)
			opts.NewLibrary, opts.DriverRoot, opts.LibraryPath = tc.newLib, tc.driverRoot, tc.libPath
			m, err := New(opts)
			if err != nil {
				t.Fatalf("New: %v, want a Null monitor", err)
			}
			null, ok := m.(Null)
			if !ok {
				t.Fatalf("New returned %T, want Null", m)
			}
			// A node without GPU monitoring says why, for the agent's heartbeat.
			if null.Reason != v1alpha1.CapabilityNVMLNotFound && null.Reason != v1alpha1.CapabilityNVMLFailed || null.Why == "" {
				t.Errorf("Null says %q: %q; want why it is off", null.Reason, null.Why)
			}
			if tc.driverRoot != "" && !strings.Contains(null.Why, tc.driverRoot) {
				t.Errorf("Null says %q, want the driver root %s it looked in", null.Why, tc.driverRoot)
			}
			if m.Devices() != nil {
				t.Error("Null has devices")
			}
			f := newFaults()
			stop := running(t, m, f.sink)
			f.none(t, 20*time.Millisecond)
			stop()
			if n := strings.Count(logs.String(), "GPU monitoring disabled"); n != 1 {
				t.Errorf("logged %d times, want once:\n%s", n, logs)
			}

			opts.RequireGPU = true
			if m, err := New(opts); err == nil {
				t.Errorf("RequireGPU: New returned %T and no error", m)
			}
		})
	}
}

func TestDriverRootFindsTheLibrary(t *testing.T) {
	root := t.TempDir()
	lib := filepath.Join(root, "usr/lib/x86_64-linux-gnu", nvmlLibName)
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		explicit, root, want string
	}{
		"explicit path wins":  {explicit: "/opt/nvml.so", root: root, want: "/opt/nvml.so"},
		"found under root":    {root: root, want: lib},
		"root / uses dlopen":  {root: "/", want: ""},
		"no root uses dlopen": {want: ""},
	} {
		t.Run(name, func(t *testing.T) {
			var got string
			s := newServer(t)
			opts := testOptions(s, &syncBuffer{})
			opts.LibraryPath, opts.DriverRoot = tc.explicit, tc.root
			opts.NewLibrary = func(path string) Library { got = path; return s }
			if _, err := New(opts); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("library path %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDiscoveryFailures(t *testing.T) {
	t.Run("device count fails: Null, or an error with RequireGPU", func(t *testing.T) {
		s := newServer(t)
		s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		opts := testOptions(s, &syncBuffer{})
		m, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := m.(Null); !ok {
			t.Fatalf("got %T, want Null", m)
		}
		if s.ShutdownCount() != 1 {
			t.Error("NVML not shut down after failed discovery")
		}
		opts.RequireGPU = true
		if _, err := New(opts); err == nil {
			t.Error("RequireGPU: no error")
		}
	})
	t.Run("an unidentifiable GPU is skipped, no event set still polls", func(t *testing.T) {
		s := newServer(t)
		s.Device(0).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
		s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
		s.GPUs[4].RemapFailed.Store(true)
		m, err := New(testOptions(s, &syncBuffer{}))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(m.Devices()); n != 7 {
			t.Errorf("%d devices, want 7", n)
		}
		f := newFaults()
		running(t, m, f.sink)
		if got := f.next(t); got.Reason != v1alpha1.GPUReasonRowRemapFailure || got.Index != 4 {
			t.Errorf("got %+v, want the row-remap failure of GPU 4", got)
		}
	})
}

// TestDriverRootIsFound: without --driver-root, the agent finds libnvidia-ml where each
// platform puts it, under the node's root as it sees it (a temporary root here): the GPU
// Operator's driver root, the host's own library directories, GKE's installer, in that order;
// a driver root given is the only place looked in; found nowhere, the dynamic loader is left
// to try, and the places looked in are said.
func TestDriverRootIsFound(t *testing.T) {
	lib := func(root string, parts ...string) string {
		p := filepath.Join(append([]string{root}, append(parts, nvmlLibName)...)...)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	operator := t.TempDir()
	opLib := lib(operator, "run/nvidia/driver/usr/lib64")
	host := t.TempDir()
	hostLib := lib(host, "usr/lib/x86_64-linux-gnu")
	gke := t.TempDir()
	gkeLib := lib(gke, "home/kubernetes/bin/nvidia/lib64")
	both := t.TempDir()
	bothOp := lib(both, "run/nvidia/driver/usr/lib/x86_64-linux-gnu")
	lib(both, "usr/lib64")
	empty := t.TempDir()
	for name, tc := range map[string]struct {
		hostRoot, driverRoot string
		want                 string
		tried                []string
	}{
		"the GPU Operator's root":               {hostRoot: operator, want: opLib},
		"the host's library directories":        {hostRoot: host, want: hostLib},
		"GKE's installer":                       {hostRoot: gke, want: gkeLib},
		"the GPU Operator's before the host":    {hostRoot: both, want: bothOp},
		"a driver root given is the only place": {hostRoot: host, driverRoot: filepath.Join(operator, "run/nvidia/driver"), want: opLib},
		"nowhere: the dynamic loader, and where it looked": {hostRoot: empty, want: "", tried: []string{
			filepath.Join(empty, "run/nvidia/driver") + " (the GPU Operator)", empty + " (the host)",
			filepath.Join(empty, "home/kubernetes/bin/nvidia") + " (GKE)", "the dynamic loader's path"}},
	} {
		t.Run(name, func(t *testing.T) {
			got, tried, err := libraryPath("", tc.driverRoot, tc.hostRoot)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("library %q, want %q (looked in %v)", got, tc.want, tried)
			}
			if tc.tried != nil {
				if diff := cmp.Diff(tc.tried, tried); diff != "" {
					t.Errorf("looked in (-want +got):\n%s", diff)
				}
			}
		})
	}
	if _, _, err := libraryPath("", empty, host); !errors.Is(err, errNoLibrary) {
		t.Errorf("a driver root without the library: %v, want errNoLibrary", err)
	}
}
