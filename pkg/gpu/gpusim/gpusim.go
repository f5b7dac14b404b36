// Package gpusim is an 8-GPU DGX A100 built on go-nvml's own mock, with the NVML event set
// and health queries that faultline's GPU monitor uses, and XID injection. Tests use it for
// hardware we do not have, and the node agent's test-only simulation modes run on it: the
// whole machine for kwok nodes (--simulate-hardware, the demo), or fewer GPUs with the UUIDs
// that a real node's fake device plugin hands out (--simulate-gpus, NewWithUUIDs). It never
// touches a real driver.
package gpusim

import (
	"fmt"

	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// noInstance is what NVML puts in GpuInstanceId/ComputeInstanceId outside MIG.
const noInstance = 0xFFFFFFFF

// GPU is what one simulated GPU answers to the health queries; tests may change it while a
// monitor polls, hence atomics. The zero value is a healthy GPU.
type GPU struct {
	// LostRet is the nvml.Return of every query (SUCCESS when healthy).
	LostRet      atomic.Int32
	Pending      atomic.Bool // retired pages pending
	RemapFailed  atomic.Bool
	Supported    atomic.Uint64 // supported event types
	SupportedErr atomic.Int32
	Registered   atomic.Uint64 // event types the monitor registered
	Polls        atomic.Int32  // completed health probes (GetRemappedRows is the last query)
}

// Server is the simulated machine; it satisfies gpu.Library.
type Server struct {
	*dgxa100.Server
	// GPUs are the machine's GPUs by index (Count of them; Devices may hold more).
	GPUs []*GPU
	// Set is the one event set the machine hands out; tests may replace its funcs.
	Set    *mock.EventSet
	events chan nvml.EventData

	mu        sync.Mutex
	shutdowns int
}

// New returns a healthy machine whose GPUs support XID, ECC and PState events.
func New() *Server {
	s := &Server{Server: dgxa100.New(), events: make(chan nvml.EventData, 64)}
	for _, d := range s.Devices {
		s.GPUs = append(s.GPUs, wire(d.(*dgxa100.Device)))
	}
	s.Set = &mock.EventSet{
		WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
			select {
			case e := <-s.events:
				return e, nvml.SUCCESS
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
		},
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return s.Set, nvml.SUCCESS }
	s.ShutdownFunc = func() nvml.Return {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.shutdowns++
		return nvml.SUCCESS
	}
	return s
}

func wire(dev *dgxa100.Device) *GPU {
	st := &GPU{}
	st.Supported.Store(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError | nvml.EventTypePState)
	ret := func() nvml.Return { return nvml.Return(st.LostRet.Load()) }
	dev.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		return st.Supported.Load(), nvml.Return(st.SupportedErr.Load())
	}
	dev.RegisterEventsFunc = func(mask uint64, _ nvml.EventSet) nvml.Return {
		st.Registered.Store(mask)
		return nvml.SUCCESS
	}
	memInfo := dev.GetMemoryInfoFunc
	dev.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		if r := ret(); r != nvml.SUCCESS {
			return nvml.Memory{}, r
		}
		return memInfo()
	}
	dev.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) {
		if st.Pending.Load() {
			return nvml.FEATURE_ENABLED, ret()
		}
		return nvml.FEATURE_DISABLED, ret()
	}
	dev.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) {
		defer st.Polls.Add(1)
		return 0, 0, false, st.RemapFailed.Load(), ret()
	}
	return st
}

// MaxGPUs is how many GPUs a simulated machine can have (a DGX A100's).
const MaxGPUs = len(dgxa100.Server{}.Devices)

// NewWithUUIDs is a healthy machine with len(uuids) GPUs whose UUIDs are uuids, in index
// order: the GPUs a real node's device plugin announced, so that the kubelet's PodResources
// answers and NVML's events name the same devices.
func NewWithUUIDs(uuids []string) (*Server, error) {
	if len(uuids) == 0 || len(uuids) > MaxGPUs {
		return nil, fmt.Errorf("%d GPU UUIDs: a simulated machine has 1 to %d", len(uuids), MaxGPUs)
	}
	s := New()
	seen := map[string]bool{}
	for i, u := range uuids {
		if u == "" || seen[u] {
			return nil, fmt.Errorf("GPU UUID %q (index %d): UUIDs must be non-empty and distinct", u, i)
		}
		seen[u] = true
		s.Device(i).UUID = u
	}
	n := len(uuids)
	s.GPUs = s.GPUs[:n]
	s.DeviceGetCountFunc = func() (int, nvml.Return) { return n, nvml.SUCCESS }
	all := s.DeviceGetHandleByIndexFunc
	s.DeviceGetHandleByIndexFunc = func(index int) (nvml.Device, nvml.Return) {
		if index >= n {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return all(index)
	}
	byUUID := s.DeviceGetHandleByUUIDFunc
	s.DeviceGetHandleByUUIDFunc = func(uuid string) (nvml.Device, nvml.Return) {
		if !seen[uuid] {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return byUUID(uuid)
	}
	return s, nil
}

// Count is how many GPUs the machine has.
func (s *Server) Count() int { return len(s.GPUs) }

// IndexOf is the index of the GPU with that UUID, or -1.
func (s *Server) IndexOf(uuid string) int {
	for i := range s.GPUs {
		if s.Device(i).UUID == uuid {
			return i
		}
	}
	return -1
}

// Device is the i-th GPU.
func (s *Server) Device(i int) *dgxa100.Device { return s.Devices[i].(*dgxa100.Device) }

// Inject delivers an NVML event from GPU i (i < 0: an event NVML does not attribute).
func (s *Server) Inject(i int, eventType, data uint64) {
	e := nvml.EventData{EventType: eventType, EventData: data, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}
	if i >= 0 {
		e.Device = s.Devices[i]
	}
	s.events <- e
}

// InjectXID delivers an XID critical error from GPU i.
func (s *Server) InjectXID(i int, xid uint64) { s.Inject(i, nvml.EventTypeXidCriticalError, xid) }

// ShutdownCount is how often NVML was shut down.
func (s *Server) ShutdownCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shutdowns
}
