// Package gpu watches the node's NVIDIA GPUs through NVML and reports faults.
//
// Two sources feed it: an NVML event set (XID critical errors, double-bit ECC errors and
// the other fault events a GPU supports; single-bit ECC errors are corrected and no fault),
// and a periodic health poll that finds states no event announces, or whose event was
// missed: a GPU that fell off the bus, pages pending retirement, a failed row remapping.
// Each XID is classified through exitclass.LookupXID, the one XID table, into GPUFault
// (infrastructure) or AppGPUError (the program).
//
// A node without libnvidia-ml gets a Null monitor that logs once and reports nothing, unless
// Options.RequireGPU asks for an error instead.
package gpu

// Environment of the opt-in tests on a real GPU (this package's TestRealNVML and
// test/e2e/gpu); CI has none, and skips them.
const (
	// EnvTestReal=1 runs them.
	EnvTestReal = "FAULTLINE_NVML_REAL"
	// EnvTestProvoke is a shell command that crashes a kernel on GPU 0 (an illegal address,
	// hack/gpu-crash.py): the driver raises a program-caused XID (13, 31 or 43).
	EnvTestProvoke = "FAULTLINE_NVML_PROVOKE"
)
