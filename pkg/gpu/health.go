package gpu

import (
	"context"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// problem is one unhealthy state the poll found on a GPU.
type problem struct {
	reason string
	fatal  bool
	detail string
}

// pollHealth checks every GPU at once and then every HealthInterval. A state is reported
// when it appears, not on every poll, and reported Cleared when it is gone; one that clears
// and comes back is reported again.
func (m *nvmlMonitor) pollHealth(ctx context.Context, sink func(Fault)) {
	active := map[string]map[string]bool{} // uuid → reasons reported and still present
	m.checkHealth(active, sink)
	t := m.opts.Clock.NewTicker(m.opts.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			m.checkHealth(active, sink)
		}
	}
}

func (m *nvmlMonitor) checkHealth(active map[string]map[string]bool, sink func(Fault)) {
	for _, g := range m.gpus {
		seen := map[string]bool{}
		for _, p := range m.probe(g) {
			seen[p.reason] = true
			if active[g.UUID][p.reason] {
				continue
			}
			sink(Fault{
				UUID: g.UUID, Index: g.Index, Cause: v1alpha1.CauseGPUFault, Fatal: p.fatal,
				Source: v1alpha1.EvidenceSourceNVMLHealth, Reason: p.reason, Detail: p.detail, DetectedAt: m.now(),
			})
		}
		for reason := range active[g.UUID] {
			if !seen[reason] {
				sink(Fault{
					UUID: g.UUID, Index: g.Index, Cause: v1alpha1.CauseGPUFault, Source: v1alpha1.EvidenceSourceNVMLHealth,
					Reason: reason, Detail: "no longer found by the health poll", DetectedAt: m.now(), Cleared: true,
				})
			}
		}
		active[g.UUID] = seen
	}
}

// probe queries one GPU. A query failing with GPU_IS_LOST or RESET_REQUIRED says all there
// is to say; NOT_SUPPORTED (older or consumer GPUs) is no problem.
func (m *nvmlMonitor) probe(g *gpu) []problem {
	if p, bad := lost(g.dev.GetMemoryInfo()); bad {
		return []problem{p}
	}
	var out []problem

	pending, ret := g.dev.GetRetiredPagesPendingStatus()
	if p, bad := lostRet(ret); bad {
		return []problem{p}
	}
	if ret == nvml.SUCCESS && pending == nvml.FEATURE_ENABLED {
		// Pages with uncorrectable errors wait for a reset to be retired; the GPU runs on
		// meanwhile, as after XID 63, so it is not fatal by itself.
		out = append(out, problem{reason: v1alpha1.GPUReasonRetiredPagesPending, detail: "memory pages pending retirement until the GPU is reset"})
	}

	_, _, _, failed, ret := g.dev.GetRemappedRows()
	if p, bad := lostRet(ret); bad {
		return []problem{p}
	}
	if ret == nvml.SUCCESS && failed {
		// Like XID 64: the GPU could not remap a row with uncorrectable errors.
		out = append(out, problem{reason: v1alpha1.GPUReasonRowRemapFailure, fatal: true, detail: "row remapping failed; the GPU needs a reset"})
	}
	return out
}

func lost(_ nvml.Memory, ret nvml.Return) (problem, bool) { return lostRet(ret) }

func lostRet(ret nvml.Return) (problem, bool) {
	switch ret {
	case nvml.ERROR_GPU_IS_LOST:
		return problem{reason: v1alpha1.GPUReasonGPULost, fatal: true, detail: "GPU is lost (fell off the bus or stopped responding)"}, true
	case nvml.ERROR_RESET_REQUIRED:
		return problem{reason: v1alpha1.GPUReasonResetRequired, fatal: true, detail: "GPU requires a reset"}, true
	}
	return problem{}, false
}
