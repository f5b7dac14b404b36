package v1alpha1

// BarrierRecord is what the node agent writes, as JSON, into AnnotationBarrierRecord on a
// pod whose barrier is its worker container's entrypoint (docs/in-place-restart-proof.md,
// "The barrier in the worker's container"), before it gives that barrier its go signal: the
// container it opens and the attempt it opens it for. Such a barrier supervises the worker
// and leaves no termination message, and its container runs from the barrier's start
// across attempts; the record is then how the controller and the agent know which attempt
// a pod's worker runs.
// The agent writes it at most once per container, against the pod's resourceVersion, and
// opens a container only for the attempt recorded for it: a container the record does not
// name is waiting at its barrier.
//
// +kubebuilder:object:generate=false
type BarrierRecord struct {
	// ContainerID is the worker container's runtime ID (the part of the status's
	// containerID after "<runtime>://").
	ContainerID string `json:"containerID"`
	// Restart is the container's restart number: the CRI metadata's attempt, which the
	// kubelet sets to the container's restartCount. A status whose restartCount is higher
	// shows a later container: the recorded one was removed.
	Restart int32 `json:"restart"`
	// Attempt is the attempt the barrier was opened for.
	Attempt int32 `json:"attempt"`
	// StoppedFor, when set, is the later attempt for which the agent stopped the recorded
	// container, written once the runtime said the container had ended: no worker of
	// Attempt runs in the pod any more, whatever its status shows yet (the kubelet's
	// restart of the pod and its status write come after). The controller may open the
	// gang's barrier for StoppedFor on it, and reads the container's end, while the status
	// still shows it, as the end of Attempt, not a failure of StoppedFor.
	StoppedFor int32 `json:"stoppedFor,omitempty"`
	// OpenedAt is when the agent recorded the open of Attempt (RFC 3339 with nanoseconds),
	// right before it gave it: the start of the worker's incarnation for that attempt,
	// which every rule that asks "during this worker's life" reads (attempt.WorkerStart).
	// A supervising barrier keeps one container across attempts, so the container's start
	// is attempt 1's for the life of the pod.
	OpenedAt string `json:"openedAt,omitempty"`
	// Checkpoint is the worker's answer to the run's latest checkpoint request of Attempt
	// (TrainingRunStatus.Checkpoint), as its barrier heard it.
	Checkpoint *BarrierCheckpoint `json:"checkpoint,omitempty"`
	// LastSave is, with StoppedFor, the worker's last save its barrier heard of when it
	// stopped it (any save, a periodic one too, in this attempt or before): the point the
	// next attempt resumes from, which the controller takes for the work the restart redoes.
	LastSave *BarrierSave `json:"lastSave,omitempty"`
}

// BarrierSave is a worker's save as its barrier heard it: its word (the done file, or
// faultline-barrier checkpoint-done), or the done file it left.
//
// +kubebuilder:object:generate=false
type BarrierSave struct {
	// Step is the step it said it saved, if it said one.
	Step *int64 `json:"step,omitempty"`
	// At is when (RFC 3339 with nanoseconds): the barrier's hearing of it, or the done
	// file's modification time.
	At string `json:"at"`
}

// BarrierCheckpoint is a worker's answer to a checkpoint request, as its barrier heard it.
//
// +kubebuilder:object:generate=false
type BarrierCheckpoint struct {
	// RequestedAt is the request's (CheckpointStatus.RequestedAt, RFC 3339 with nanoseconds).
	RequestedAt string `json:"requestedAt"`
	// At is when the barrier answered the agent (RFC 3339 with nanoseconds).
	At string `json:"at"`
	// Saved: the worker said it saved (or exited, where the signal ends it). False: it had
	// not said so when the request's deadline came, or its barrier could not be asked
	// (Reason).
	Saved bool `json:"saved"`
	// Step is the step the worker said it saved, if it said one.
	Step *int64 `json:"step,omitempty"`
	// ExitCode is the worker's exit where it answered by exiting.
	ExitCode *int32 `json:"exitCode,omitempty"`
	// Reason says why a worker that did not save did not.
	Reason string `json:"reason,omitempty"`
}
