package v1alpha1

// WorkerExit is what the node agent writes, as JSON, into AnnotationWorkerExit on a pod
// that restarts in place (docs/in-place-restart.md) when one of its workers exits non-zero
// on its own: the kubelet then removes every container of the pod at once and shows only a
// synthesized exit (137, RestartingAllContainers) in the pod's status, so the real exit is
// the agent's to tell. The agent reads it from the container runtime (CRI), not from the
// pod's status. The controller judges the pod failed in Attempt with this exit, and only
// then: a report of an earlier attempt says nothing of the current one.
//
// +kubebuilder:object:generate=false
type WorkerExit struct {
	// Attempt is the attempt the worker ran (its pod's barrier had opened for it).
	Attempt int32 `json:"attempt"`
	// Container is the worker container's name; ContainerID its runtime's ID.
	Container   string `json:"container"`
	ContainerID string `json:"containerID"`
	// ExitCode and Reason are the runtime's ("Error", "OOMKilled", …); Message is the
	// runtime's message, which is not the container's termination message (the agent
	// does not read the pod's files).
	ExitCode int32  `json:"exitCode"`
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
	// StartedAt and FinishedAt are RFC 3339 with nanoseconds.
	StartedAt  string `json:"startedAt,omitempty"`
	FinishedAt string `json:"finishedAt"`
	// Node is the node the agent runs on.
	Node string `json:"node"`
}
