package gpu

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/faultline-dev/faultline/pkg/gpu/gpusim"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

func TestHealthPoll(t *testing.T) {
	for name, tc := range map[string]struct {
		set  func(*gpusim.GPU)
		want *Fault
	}{
		"healthy": {set: func(*gpusim.GPU) {}},
		"row remap failure: fatal": {
			set:  func(s *gpusim.GPU) { s.RemapFailed.Store(true) },
			want: &Fault{Fatal: true, Reason: v1alpha1.GPUReasonRowRemapFailure, Detail: "row remapping failed; the GPU needs a reset"},
		},
		"pending retired pages: not fatal": {
			set:  func(s *gpusim.GPU) { s.Pending.Store(true) },
			want: &Fault{Reason: v1alpha1.GPUReasonRetiredPagesPending, Detail: "memory pages pending retirement until the GPU is reset"},
		},
		"GPU lost outranks everything else": {
			set: func(s *gpusim.GPU) {
				s.LostRet.Store(int32(nvml.ERROR_GPU_IS_LOST))
				s.RemapFailed.Store(true)
			},
			want: &Fault{Fatal: true, Reason: v1alpha1.GPUReasonGPULost, Detail: "GPU is lost (fell off the bus or stopped responding)"},
		},
		"reset required": {
			set:  func(s *gpusim.GPU) { s.LostRet.Store(int32(nvml.ERROR_RESET_REQUIRED)) },
			want: &Fault{Fatal: true, Reason: v1alpha1.GPUReasonResetRequired, Detail: "GPU requires a reset"},
		},
		"queries not supported: no fault": {
			set: func(s *gpusim.GPU) { s.LostRet.Store(int32(nvml.ERROR_NOT_SUPPORTED)) },
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := newServer(t)
			tc.set(s.GPUs[6])
			m, err := New(testOptions(s, &syncBuffer{}))
			if err != nil {
				t.Fatal(err)
			}
			f := newFaults()
			running(t, m, f.sink)
			if tc.want == nil {
				f.none(t, 50*time.Millisecond)
				return
			}
			want := *tc.want
			want.UUID, want.Index, want.Cause, want.Source, want.DetectedAt = s.Device(6).UUID, 6, v1alpha1.CauseGPUFault, v1alpha1.EvidenceSourceNVMLHealth, t0
			if diff := cmp.Diff(want, f.next(t)); diff != "" {
				t.Errorf("fault (-want +got):\n%s", diff)
			}
			f.none(t, 20*time.Millisecond)
		})
	}
}

func TestHealthReportsChangesOnly(t *testing.T) {
	s := newServer(t)
	opts := testOptions(s, &syncBuffer{})
	fc := opts.Clock.(*clocktesting.FakeClock)
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f := newFaults()
	running(t, m, f.sink)
	// Each poll ends with GPU 7; waiting for its probe keeps state changes out of a poll.
	polls := int32(1)
	waitPoll := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for s.GPUs[7].Polls.Load() < polls || !fc.HasWaiters() {
			if time.Now().After(deadline) {
				t.Fatalf("poll %d did not happen", polls)
			}
			time.Sleep(time.Millisecond)
		}
	}
	poll := func() {
		t.Helper()
		fc.Step(opts.HealthInterval)
		polls++
		waitPoll()
	}

	waitPoll() // the one at start
	s.GPUs[1].Pending.Store(true)
	poll()
	if got := f.next(t); got.Reason != v1alpha1.GPUReasonRetiredPagesPending || got.Index != 1 || !got.DetectedAt.Equal(t0.Add(opts.HealthInterval)) {
		t.Errorf("got %+v, want pending pages on GPU 1 at the second poll", got)
	}
	poll() // still pending: nothing new
	s.GPUs[1].RemapFailed.Store(true)
	poll()
	if got := f.next(t); got.Reason != v1alpha1.GPUReasonRowRemapFailure {
		t.Errorf("got %+v, want the row-remap failure only", got)
	}
	s.GPUs[1].Pending.Store(false)
	poll() // cleared
	if got := f.next(t); got.Reason != v1alpha1.GPUReasonRetiredPagesPending || !got.Cleared || got.Index != 1 {
		t.Errorf("got %+v, want pending pages on GPU 1 reported cleared", got)
	}
	s.GPUs[1].Pending.Store(true)
	poll() // back: reported again
	if got := f.next(t); got.Reason != v1alpha1.GPUReasonRetiredPagesPending || got.Cleared {
		t.Errorf("got %+v, want pending pages reported again", got)
	}
	f.none(t, 20*time.Millisecond)
}

// TestHealthReportsALostGPUBack: a GPU lost, then back after a reset: the poll says so, so
// that the node's GPUHealthy can turn True again.
func TestHealthReportsALostGPUBack(t *testing.T) {
	s := newServer(t)
	opts := testOptions(s, &syncBuffer{})
	fc := opts.Clock.(*clocktesting.FakeClock)
	s.GPUs[3].LostRet.Store(int32(nvml.ERROR_GPU_IS_LOST))
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f := newFaults()
	running(t, m, f.sink)
	if got := f.next(t); got.Reason != v1alpha1.GPUReasonGPULost || !got.Fatal || got.Cleared {
		t.Fatalf("got %+v, want GPU 3 lost", got)
	}
	s.GPUs[3].LostRet.Store(int32(nvml.SUCCESS))
	for !fc.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	fc.Step(opts.HealthInterval)
	if got := f.next(t); got.Reason != v1alpha1.GPUReasonGPULost || !got.Cleared || got.Index != 3 {
		t.Errorf("got %+v, want GPU 3's loss cleared", got)
	}
}
