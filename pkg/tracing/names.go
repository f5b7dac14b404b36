package tracing

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// TracerName is the instrumentation scope of faultline's spans.
const TracerName = "github.com/faultline-dev/faultline"

// The service.name of faultline's processes: a trace backend (and the tests' collector)
// tells the controller's spans from the agents' by it.
const (
	ServiceController = "faultline-controller"
	ServiceAgent      = "faultline-nodeagent"
)

// Span names. The roots are named for what the episode did; their children for the phase.
const (
	// SpanRestart is the root of an episode that restarted the run: from the signal (or the
	// failure) to every worker of the next attempt Running.
	SpanRestart = "faultline.restart"
	// SpanFail is the root of an episode that failed the run: from the signal (or the
	// failure) to the decision.
	SpanFail = "faultline.fail"
	// SpanAttempt covers one attempt, from its Job's creation to its end.
	SpanAttempt = "faultline.attempt"

	// SpanDetect (node agent): from the signal to the first evidence written on the run's
	// pods, when the controller can act (the agent marks the others alongside).
	SpanDetect = "detect"
	// SpanSettle: from the agent's evidence first seen (without it, the failure first seen) to
	// the verdict final: the workers stopping, and waiting for evidence.
	SpanSettle = "settle"
	// SpanClassify: from the final verdict to the decision.
	SpanClassify = "classify"
	// SpanTeardown: from the decision (old Job deleted) to the last old pod gone.
	SpanTeardown = "teardown"
	// SpanBackoff: from the teardown's end to the end of the restart backoff.
	SpanBackoff = "backoff"
	// SpanCreate: from the backoff's end to the next attempt's Job created.
	SpanCreate = "create"
	// SpanSchedule: from the Job created to every worker bound to a node.
	SpanSchedule = "schedule"
	// SpanRunning: from every worker bound to every worker Running.
	SpanRunning = "running"

	// SpanInPlaceStop (node agent): its stop of one pod's old workers through the container
	// runtime, for a gang that restarts in place (the kubelet then restarts the pod's
	// containers: its own spans, by k8s.pod.uid).
	SpanInPlaceStop = "inplace.stop"
	// SpanInPlaceOpen (node agent): its opening of one pod's barrier for the new attempt (the
	// API server's confirmation, then an exec of faultline-barrier open).
	SpanInPlaceOpen = "inplace.open"
	// SpanCheckpoint: a planned move's request to the workers to save (spec.checkpoint),
	// from the request to the move, in the episode that ended the attempt.
	SpanCheckpoint = "checkpoint"
)

// Attribute keys: OpenTelemetry semantic conventions where one exists, faultline.* otherwise.
const (
	KeyNamespace = semconv.K8SNamespaceNameKey
	KeyPod       = semconv.K8SPodNameKey
	// KeyPodUID is on the kubelet's spans of a pod too (syncPod): a trace backend joins
	// faultline's steps on a pod with the kubelet's on it.
	KeyPodUID = semconv.K8SPodUIDKey
	KeyNode   = semconv.K8SNodeNameKey
	// KeyErrorType is the cause of a failed run (on faultline.fail).
	KeyErrorType = semconv.ErrorTypeKey

	KeyRun         = attribute.Key("faultline.run")
	KeyAttempt     = attribute.Key("faultline.attempt.number")
	KeyAttemptFrom = attribute.Key("faultline.attempt.from")
	KeyAttemptTo   = attribute.Key("faultline.attempt.to")
	KeyOutcome     = attribute.Key("faultline.attempt.outcome")
	KeyClass       = attribute.Key("faultline.class")
	KeyCause       = attribute.Key("faultline.cause")
	KeyRule        = attribute.Key("faultline.rule")
	KeyAction      = attribute.Key("faultline.action")
	KeyIndex       = attribute.Key("faultline.index")
	KeyExitCode    = attribute.Key("faultline.exit_code")
	KeyXID         = attribute.Key("faultline.xid")
	KeyGPUUUID     = attribute.Key("faultline.gpu.uuid")
	KeyGPUIndex    = attribute.Key("faultline.gpu.index")
	// KeySource is the node agent's detector (logind, nvml-event, nvml-health).
	KeySource = attribute.Key("faultline.source")
	// KeyPods counts the pods a phase touched (detect: the pods marked).
	KeyPods = attribute.Key("faultline.pods")
	// KeyWorkers is the gang size.
	KeyWorkers = attribute.Key("faultline.workers")
	// KeyPeerFailures counts the workers that failed because of the root one.
	KeyPeerFailures = attribute.Key("faultline.peer_failures")
	// KeyStillRunning: the root worker had not exited when its attempt was judged (it hung
	// on fatal evidence, or its gang stopped making progress), and KeyRunningSeconds how
	// long it had run on since its evidence (or the gang's last progress) when it was decided.
	KeyStillRunning   = attribute.Key("faultline.worker.still_running")
	KeyRunningSeconds = attribute.Key("faultline.worker.running_seconds")
	// KeyLink says what a link of a faultline.attempt span points at (LinkStartedBy, …).
	KeyLink = attribute.Key("faultline.link")
	// KeyBarrierSignal is how the node agent gave a barrier its go signal (inplace.open):
	// "socket" (through the barrier's socket) or "exec" (an exec of its open).
	KeyBarrierSignal = attribute.Key("faultline.barrier.signal")
	// KeyBarrierSignalReason says why the go signal went by exec: the barrier's socket was
	// out of reach, and why.
	KeyBarrierSignalReason = attribute.Key("faultline.barrier.signal_reason")
	// KeyCheckpointSaved, KeyCheckpointMissing and KeyCheckpointStep (checkpoint): how many
	// workers said they saved, the indexes that did not, and the lowest step they saved.
	KeyCheckpointSaved   = attribute.Key("faultline.checkpoint.saved")
	KeyCheckpointMissing = attribute.Key("faultline.checkpoint.missing")
	KeyCheckpointStep    = attribute.Key("faultline.checkpoint.step")
)

// Values of KeyLink.
const (
	// LinkStartedBy: the episode that started the attempt.
	LinkStartedBy = "started-by"
	// LinkEndedBy: the episode that ended the attempt.
	LinkEndedBy = "ended-by"
	// LinkRun: the run's own trace (its faultline.dev/traceparent annotation).
	LinkRun = "run"
)
