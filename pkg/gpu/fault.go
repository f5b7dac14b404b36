package gpu

import (
	"strconv"
	"time"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// Fault is one GPU problem the monitor saw.
type Fault struct {
	// UUID and Index identify the GPU; UUID is "" (and Index -1) when NVML could not say
	// which GPU the event came from, and the fault then concerns every GPU of the node.
	UUID  string
	Index int
	// XID is set for XID events only.
	XID uint64
	// Cause is GPUFault or, for a program-caused XID, AppGPUError.
	Cause v1alpha1.Cause
	// Fatal: the GPU needs a reset or the node a drain before it can be trusted again.
	Fatal bool
	// Source is v1alpha1.EvidenceSourceNVMLEvent or v1alpha1.EvidenceSourceNVMLHealth.
	Source string
	// Reason is short and CamelCase: Xid79, DoubleBitECC, GPULost, ...
	Reason string
	// Detail is for humans.
	Detail string
	// DetectedAt is when the monitor saw it.
	DetectedAt time.Time
	// Cleared: the health poll no longer finds this state (Reason) on this GPU, which it had
	// reported: a GPU lost or needing a reset that is back after one. Only states the poll
	// finds clear; an event (an XID) is never taken back.
	Cleared bool
}

// Device is one GPU found at start.
type Device struct {
	UUID  string
	Index int
	// Minor is the N of /dev/nvidiaN, or -1 when NVML did not say.
	Minor int
}

// XIDReason is the reason of an XID fault: "Xid79".
func XIDReason(xid uint64) string { return "Xid" + strconv.FormatUint(xid, 10) }
