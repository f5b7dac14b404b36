package v1alpha1

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WorkerExit is what the node agent writes, as JSON, into AnnotationWorkerExit on a pod
// that restarts in place (docs/in-place-restart.md) when one of its workers exits non-zero
// on its own: the kubelet then removes every container of the pod at once and shows only a
// synthesized exit (137, RestartingAllContainers) in the pod's status, so the real exit is
// the agent's to tell. The agent reads it from the container runtime (CRI), not from the
// pod's status. The controller judges the pod failed in Attempt with this exit, and only
// then: a report of an earlier attempt says nothing of the current one. The agent reports
// a failed worker of a run's other pods too, whose status keeps the exit: there exitclass
// reads the report beside the status, for its time to the nanosecond and its message.
//
// +kubebuilder:object:generate=false
type WorkerExit struct {
	// Attempt is the attempt the worker ran (its pod's barrier had opened for it).
	Attempt int32 `json:"attempt"`
	// Container is the worker container's name; ContainerID its runtime's ID.
	Container   string `json:"container"`
	ContainerID string `json:"containerID"`
	// ExitCode and Reason are the runtime's ("Error", "OOMKilled", …). Message is what the
	// kubelet would have shown in the container's terminated state: the runtime's message,
	// then the container's termination message (its file, or its log's tail with
	// FallbackToLogsOnError, and above the tail the lines that matter from further up the
	// log), which the agent reads from the node (pkg/nodeagent/termmsg).
	ExitCode int32  `json:"exitCode"`
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
	// StartedAt and FinishedAt are RFC 3339 with nanoseconds.
	StartedAt  string `json:"startedAt,omitempty"`
	FinishedAt string `json:"finishedAt"`
	// Node is the node the agent runs on.
	Node string `json:"node"`
}

// Terminated is the exit as the container's terminated state would have shown it: the
// kubelet's "Error" for a non-zero exit the runtime gave no reason for; a time that is unset
// or garbled is zero (exitclass orders such an exit last, as it does an unknown time).
func (e WorkerExit) Terminated() corev1.ContainerStateTerminated {
	reason := e.Reason
	if reason == "" {
		reason = "Error"
	}
	return corev1.ContainerStateTerminated{ExitCode: e.ExitCode, Reason: reason, Message: e.Message,
		StartedAt: reportTime(e.StartedAt), FinishedAt: reportTime(e.FinishedAt)}
}

func reportTime(s string) metav1.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return metav1.Time{}
	}
	return metav1.NewTime(t)
}
