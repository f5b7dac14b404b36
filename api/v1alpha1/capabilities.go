package v1alpha1

// AnnotationAgentCapabilities holds, on a node agent's heartbeat Lease (package agentlease),
// what the agent can see and do on its node, as AgentCapabilities JSON: an agent that cannot
// see a node's GPUs says so and why, where the node, `launcher nodes` and the runs on it read
// it. Written by the agent of the node the Lease is named for (the heartbeat's admission
// policy), at its start and whenever it changes.
const AnnotationAgentCapabilities = GroupName + "/capabilities"

// AgentCapabilities are what a node agent can see and do on its node.
// +kubebuilder:object:generate=false
type AgentCapabilities struct {
	// GPUMonitoring: NVML is loaded and watches the node's GPUs (their faults are evidence).
	// Off, the reason says why (CapabilityNVMLNotFound, CapabilityNVMLFailed) and the
	// message where the agent looked.
	GPUMonitoring Capability `json:"gpuMonitoring"`
	// ShutdownLock: logind's delay inhibitor lock is held, so the agent sees a shutdown
	// before its workers are stopped.
	ShutdownLock Capability `json:"shutdownLock"`
	// InPlace: the container runtime answers for restarts in place (the reason is the node's
	// InPlaceReady condition's, InPlaceReason*).
	InPlace Capability `json:"inPlace"`
	// PodResources: the kubelet's PodResources API answers: a GPU's fault is tied to the pod
	// it is allocated to.
	PodResources Capability `json:"podResources"`
	// DRA: devices allocated through DRA ResourceClaims are tied to their pods too.
	DRA Capability `json:"dra"`
}

// Capability is one thing a node agent can do, or cannot, and why.
// +kubebuilder:object:generate=false
type Capability struct {
	Enabled bool   `json:"enabled"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// The reasons of the agent's capabilities.
const (
	// CapabilityOK: enabled.
	CapabilityOK = "OK"
	// CapabilitySimulated: enabled on simulated hardware (a test substrate).
	CapabilitySimulated = "Simulated"
	// CapabilityNVMLNotFound: no libnvidia-ml.so.1 where the agent looked (the message lists
	// the places): a node without GPUs, or a driver root the agent does not know
	// (nodeagent --driver-root).
	CapabilityNVMLNotFound = "NVMLNotFound"
	// CapabilityNVMLFailed: the library is there and does not start, or finds no GPU.
	CapabilityNVMLFailed = "NVMLFailed"
	// CapabilityNotHeld: logind refused the delay inhibitor lock, or is not reached yet.
	CapabilityNotHeld = "NotHeld"
	// CapabilityUnreachable: the kubelet's PodResources socket does not answer.
	CapabilityUnreachable = "Unreachable"
	// CapabilityNotSupported: this agent does not do it.
	CapabilityNotSupported = "NotSupported"
)
