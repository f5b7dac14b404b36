package nodeagent

import (
	"fmt"
	"time"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/gpu"
)

// GPUEvidence is the evidence of a GPU fault on node.
func GPUEvidence(node string, f gpu.Fault) v1alpha1.FaultEvidence {
	return v1alpha1.FaultEvidence{
		Source:     f.Source,
		Node:       node,
		Cause:      f.Cause,
		DetectedAt: formatTime(f.DetectedAt),
		GPU:        &v1alpha1.GPUEvidence{UUID: f.UUID, Index: f.Index, XID: f.XID},
		Detail:     f.Detail,
	}
}

// ShutdownEvidence is the evidence of a shutdown that logind announced at detectedAt.
func ShutdownEvidence(node string, detectedAt time.Time) v1alpha1.FaultEvidence {
	return v1alpha1.FaultEvidence{
		Source:     v1alpha1.EvidenceSourceLogind,
		Node:       node,
		Cause:      v1alpha1.CauseNodeShutdown,
		DetectedAt: formatTime(detectedAt),
		Detail:     "systemd-logind announced a shutdown (PrepareForShutdown)",
	}
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// supersedes says whether evidence next should replace prev on a pod. The first evidence
// wins, so that what follows a fault (the driver's echoes, a GPU lost while the node powers
// off) does not rewrite its cause, with exceptions that only add precision or severity:
//   - prev carries a Secondary XID (45), which names no cause: anything else replaces it;
//   - prev is GPU evidence without an XID (the health poll saw the state) and next is a
//     fatal XID with the same cause on the same GPU: it says what happened (a non-fatal one
//     would hide that the GPU is lost);
//   - prev is a non-fatal XID of the GPU and next a fatal fault of the same cause on the same
//     GPU (XID 63, then 79): the worker's GPU is gone now, and a worker that hangs on it
//     ends its attempt only by fatal evidence (pkg/exitclass, "A fault need not end the
//     program").
func supersedes(next, prev v1alpha1.FaultEvidence) bool {
	if prev.GPU == nil || next.GPU == nil {
		return false
	}
	if prev.GPU.XID != 0 && exitclass.LookupXID(prev.GPU.XID).Secondary {
		return next.GPU.XID == 0 || !exitclass.LookupXID(next.GPU.XID).Secondary
	}
	if next.Cause != prev.Cause || next.GPU.UUID != prev.GPU.UUID || !fatalGPU(next) {
		return false
	}
	switch {
	case prev.GPU.XID == 0:
		return next.GPU.XID != 0
	default:
		return !fatalGPU(prev)
	}
}

// fatalGPU: GPU evidence of a fault that needs a reset or a drain: a fatal XID, or no XID
// at all (the agent writes GPU evidence without one only for a fatal state).
func fatalGPU(ev v1alpha1.FaultEvidence) bool {
	if ev.GPU == nil {
		return false
	}
	if ev.GPU.XID == 0 {
		return true
	}
	info := exitclass.LookupXID(ev.GPU.XID)
	return info.Fatal && !info.Secondary
}

// sameEvidence: equal but for when and where it was seen.
func sameEvidence(a, b v1alpha1.FaultEvidence) bool {
	a.DetectedAt, b.DetectedAt, a.Node, b.Node = "", "", "", ""
	if (a.GPU == nil) != (b.GPU == nil) {
		return false
	}
	if a.GPU != nil && *a.GPU != *b.GPU {
		return false
	}
	a.GPU, b.GPU = nil, nil
	return a == b
}

// isInfrastructure: the cause goes into the InfrastructureFault condition. A program-caused
// XID (AppGPUError) does not: the condition means infrastructure, and the Job's
// podFailurePolicy matches it.
func isInfrastructure(c v1alpha1.Cause) bool { return c.Class() == v1alpha1.ClassInfrastructure }

// conditionMessage is the condition's message, for humans reading `kubectl describe pod`.
func conditionMessage(ev v1alpha1.FaultEvidence) string {
	msg := fmt.Sprintf("%s on node %s", ev.Cause, ev.Node)
	if ev.GPU != nil {
		if ev.GPU.UUID != "" {
			msg += fmt.Sprintf(", GPU %d (%s)", ev.GPU.Index, ev.GPU.UUID)
		} else {
			msg += ", an unidentified GPU"
		}
	}
	if ev.Detail != "" {
		msg += ": " + ev.Detail
	}
	return msg + fmt.Sprintf(" [%s, detected %s]", ev.Source, ev.DetectedAt)
}
