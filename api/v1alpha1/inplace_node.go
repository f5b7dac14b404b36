package v1alpha1

// Reasons of NodeConditionInPlaceReady, which the node agent writes on its Node when it
// starts: whether it reached the node's container runtime, through which it stops the old
// workers and opens the barriers of an in-place restart (docs/in-place-restart.md).
const (
	// InPlaceReasonRuntimeReady: True, the agent answers for the node's pods in place.
	InPlaceReasonRuntimeReady = "RuntimeReady"
	// InPlaceReasonNoRuntime: False, no CRI endpoint configured, or none answers there; the
	// message says which.
	InPlaceReasonNoRuntime = "NoRuntime"
	// InPlaceReasonNoExitEvents: False, the runtime answers but sends no container events
	// (CRI GetContainerEvents), so the exit of a worker that restarts in place by itself
	// could not be reported, and its run would wait at its barriers.
	InPlaceReasonNoExitEvents = "NoExitEvents"
)
