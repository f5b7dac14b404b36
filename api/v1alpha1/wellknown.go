package v1alpha1

// The names below are the contract between the controller, the node agent and the framework
// plugins (shared/DESIGN.md, "Contract between the parts"). They meet only through the API
// server, so every label, annotation, condition type, reason and env var that crosses a
// process boundary is declared here and nowhere else.

const (
	// GroupName is the API group of every faultline type.
	GroupName = "faultline.dev"

	// LabelRun carries the TrainingRun name on its Job, Service and pods.
	LabelRun = GroupName + "/run"
	// LabelAttempt carries the attempt number (starting at 1) on the Job and its pods.
	LabelAttempt = GroupName + "/attempt"
	// LabelRunUID carries the run's UID on everything the run owns (Job, pods, Service): a run
	// deleted and created again under the same name is another run, and its pods, still
	// stopping, are leftovers of the earlier one, never the new run's workers.
	LabelRunUID = GroupName + "/run-uid"
	// LabelSpare marks a pod the controller made as a warm spare (spec.spares), with the
	// spare's slot (0..spares-1) as value. A spare holds no index until the controller hands
	// it one (the completion-index label and annotation, and the attempt it joins); it keeps
	// this label after, which tells its node agent to name the index in the barrier's open,
	// since the pod's own environment, made before it had one, has none.
	LabelSpare = GroupName + "/spare"

	// FinalizerAttemptJob holds every attempt's Job until faultline has seen the Job
	// controller done with it after its deletion: its pods gone and its status written by a
	// sync that saw the deletion. The next attempt's Job has the same name (stable rendezvous
	// addresses), and the Job controller keys what it expects to create by name: a creation
	// of the old Job still in flight when it leaves would be inherited by the new one, which
	// then creates no pod for minutes (kubernetes/kubernetes#131917).
	FinalizerAttemptJob = GroupName + "/attempt-job"

	// JobManagedBy is the spec.managedBy of a Gang-scope attempt's Job: the Job controller
	// leaves such a Job alone, and faultline creates its pods (attempt.Pod), at its own
	// rate, with the node exclusions of the moment, and without the Job controller's
	// replacement backoff (docs/in-place-restart.md, "The Job across an in-place restart").
	JobManagedBy = GroupName + "/trainingrun-controller"
	// EndpointSliceManagedBy is the endpointslice.kubernetes.io/managed-by label of the
	// EndpointSlice that names the indexes a run's warm spares hold: the endpoint slice
	// controller leaves a slice managed by another alone. A label value: no slash.
	EndpointSliceManagedBy = "trainingrun-controller." + GroupName

	// AnnotationFaultEvidence holds the node agent's FaultEvidence as JSON on a pod.
	AnnotationFaultEvidence = GroupName + "/fault-evidence"
	// AnnotationWorkerExit holds the node agent's WorkerExit as JSON on a pod that restarts
	// in place: the real exit of a worker that ended on its own, which the pod's status
	// does not keep.
	AnnotationWorkerExit = GroupName + "/worker-exit"
	// AnnotationBarrierRecord holds the node agent's BarrierRecord as JSON on a pod whose
	// barrier is its worker's entrypoint: which container it opened for which attempt,
	// written before the open (the barrier that supervises the worker leaves no termination
	// message to tell it).
	AnnotationBarrierRecord = GroupName + "/barrier-record"
	// AnnotationBarrierRecords holds, on a node agent's heartbeat Lease (package
	// agentlease), the BarrierRecords of its node's pods as one JSON object keyed by pod
	// UID: the same records as AnnotationBarrierRecord, one write for every pod of the node
	// an agent records at once instead of one a pod. Only the agent of the node the Lease
	// is named for writes it (the heartbeat's admission policy), and a record counts only
	// for a pod of that node. Where a pod has both, the later record counts
	// (attempt.LaterRecord).
	AnnotationBarrierRecords = GroupName + "/barrier-records"
	// AnnotationShutdownDetectedAt is set on a Node (RFC 3339 nano) when logind announces a shutdown.
	AnnotationShutdownDetectedAt = GroupName + "/shutdown-detected-at"
	// AnnotationGPUResetRequestedAt is set on a Node (RFC 3339) by an operator who reset or
	// replaced its GPUs: its node agent marks them healthy again (GPUHealthy=True, its taint
	// removed) unless a GPU is still lost.
	AnnotationGPUResetRequestedAt = GroupName + "/gpu-reset-requested-at"
	// AnnotationTraceparent carries a W3C traceparent on the TrainingRun, copied onto its pods.
	AnnotationTraceparent = GroupName + "/traceparent"

	// PodConditionInfrastructureFault is the pod condition the node agent writes before the pod
	// fails; the generated podFailurePolicy and exitclass both match it. Its reason is a Cause.
	PodConditionInfrastructureFault = GroupName + "/InfrastructureFault"
	// NodeConditionGPUHealthy is False on a node with a fatal GPU fault; its reason is e.g. Xid79.
	NodeConditionGPUHealthy = GroupName + "/GPUHealthy"

	// ResourceGPU is the extended resource through which pods get NVIDIA GPUs.
	ResourceGPU = "nvidia.com/gpu"
	// ClaimGPUs is the name, in a worker pod's spec.resourceClaims and its worker container's
	// resources.claims, of the claim that holds the GPUs a run asks for through DRA
	// (spec.gpus). Its ResourceClaimTemplate is named as the run.
	ClaimGPUs = "faultline-gpus"
	// DeviceClassResourcePrefix names a DeviceClass's devices as a resource, as Kubernetes's
	// extended resources backed by DRA do (deviceclass.resource.kubernetes.io/<class>): what a
	// framework plugin reads of the GPUs a worker gets through spec.gpus.
	DeviceClassResourcePrefix = "deviceclass.resource.kubernetes.io/"

	// NodeAgentNamespace is where deploy/daemonset runs the node agent, and NodeAgentName the
	// value of LabelAppName on its pods: `launcher nodes` finds each node's agent by them.
	NodeAgentNamespace = "faultline-system"
	NodeAgentName      = "faultline-nodeagent"
	// LabelAppName is Kubernetes' recommended label for an application's name.
	LabelAppName = "app.kubernetes.io/name"
	// The other recommended labels, on every object an installation applies (launcher install,
	// the Helm chart): the application (PartOfFaultline), the component, the version (the
	// images' tag) and the tool that manages it (ManagedByLauncher, or Helm's release service).
	LabelAppPartOf    = "app.kubernetes.io/part-of"
	LabelAppComponent = "app.kubernetes.io/component"
	LabelAppVersion   = "app.kubernetes.io/version"
	LabelAppManagedBy = "app.kubernetes.io/managed-by"
	PartOfFaultline   = "faultline"
	ManagedByLauncher = "launcher"
	// NodeAgentHeartbeat is the value of LabelAppName on the node agents' heartbeats: a
	// coordination.k8s.io Lease per node in NodeAgentNamespace, named as the node and held
	// by it, which its agent renews while it runs (package agentlease). The controller reads
	// an agent's liveness there: a node whose kubelet is unreachable while its agent renews
	// is not lost, and a node whose agent is silent opens no barrier.
	NodeAgentHeartbeat = "faultline-nodeagent-heartbeat"
)

// Environment variables set in every container of a run.
const (
	EnvRun       = "FAULTLINE_RUN"
	EnvAttempt   = "FAULTLINE_ATTEMPT"
	EnvIndex     = "FAULTLINE_INDEX"
	EnvWorldSize = "FAULTLINE_WORLD_SIZE"
	EnvService   = "FAULTLINE_SERVICE"
	// EnvRole and EnvRoleIndex are set only in runs whose plugin lays its indexes out in
	// roles (framework.Rendezvous.Roles): the pod's role and its index within the role, read
	// from LabelRole and LabelRoleIndex.
	EnvRole      = "FAULTLINE_ROLE"
	EnvRoleIndex = "FAULTLINE_ROLE_INDEX"
	// EnvAttemptFile is set in the containers of a pod that restarts in place: the file
	// that holds the attempt its current process belongs to. FAULTLINE_ATTEMPT is the
	// attempt the pod was created in and cannot change in a running pod; a program reads
	// the file when this variable is set (docs/in-place-restart.md).
	EnvAttemptFile = "FAULTLINE_ATTEMPT_FILE"
	// EnvCheckpointDir is set in a worker that its barrier supervises: the directory where
	// it answers a checkpoint request (spec.checkpoint) by writing CheckpointDoneFile, which
	// holds the step it saved (docs/checkpoint.md).
	EnvCheckpointDir = "FAULTLINE_CHECKPOINT_DIR"
	// EnvCheckpointSignal and EnvCheckpointTimeout are, in the worker container of a run with
	// spec.checkpoint that its barrier supervises, the policy's signal and timeout (a Go
	// duration): the container's SIGTERM (a node's shutdown) asks the worker to save first.
	EnvCheckpointSignal  = "FAULTLINE_CHECKPOINT_SIGNAL"
	EnvCheckpointTimeout = "FAULTLINE_CHECKPOINT_TIMEOUT"
	// EnvIndexTemplates is set in the worker container of a warm spare (LabelSpare): the
	// container's variables that depend on the index, as JSON ([{"name","value"}], each value
	// with its $(VAR) references unexpanded), which its barrier expands with the index the
	// open hands it before it starts the worker (barrier.IndexEnv).
	EnvIndexTemplates = "FAULTLINE_INDEX_TEMPLATES"
	// EnvCompletionIndex is the Job controller's variable of a pod's completion index, which
	// faultline sets in the pods it makes as the Job controller would.
	EnvCompletionIndex = "JOB_COMPLETION_INDEX"
)

// spec.checkpoint's defaults (the CRD's).
const (
	DefaultCheckpointSignal         = "SIGUSR1"
	DefaultCheckpointTimeoutSeconds = 300
)

// The shape of a pod that restarts in place (docs/in-place-restart.md): the contract between
// the controller that builds the pod, the barrier init container and the node agent that
// stops the old workers and opens the barrier.
const (
	// BarrierContainer is the init container that holds the worker back until the node
	// agent gives it the go signal of the current attempt.
	BarrierContainer = "faultline-barrier"
	// RunVolume is the in-memory emptyDir shared by the barrier and the worker containers,
	// mounted at RunDir; AttemptFile is the file in it that the barrier writes before it
	// exits, with the attempt number in decimal.
	RunVolume   = "faultline-run"
	RunDir      = "/var/run/faultline"
	AttemptFile = RunDir + "/attempt"
	// CheckpointDir is EnvCheckpointDir's value, in the run volume; CheckpointDoneFile the
	// file a worker writes there once it saved (the barrier removes it before each request).
	CheckpointDir      = RunDir + "/checkpoint"
	CheckpointDoneFile = "done"
	// NodeConditionInPlaceReady is True on a Node whose node agent can stop its workers and
	// open their barriers (it holds a working connection to the node's container runtime).
	NodeConditionInPlaceReady = GroupName + "/InPlaceReady"
	// FeatureRestartAllContainers is the feature a kubelet that restarts every container of
	// a pod on a container's exit (KEP-5532) declares in Node.status.declaredFeatures
	// (Kubernetes' name, repeated here as the one place faultline names it).
	FeatureRestartAllContainers = "RestartAllContainersOnContainerExits"
	// BarrierVolume is the image volume of the barrier's image in a pod whose barrier is its
	// worker's entrypoint (`faultline-barrier supervise -- COMMAND`), mounted read-only at
	// BarrierMount in the worker container; BarrierBinary is the program there.
	BarrierVolume = "faultline-barrier"
	BarrierMount  = "/faultline"
	BarrierBinary = BarrierMount + "/faultline-barrier"
	// BarrierOpenedMessagePrefix starts the termination message of a barrier that was
	// opened, followed by the attempt in decimal ("attempt=3"): the kubelet copies it into
	// the pod's status, so the controller and the agent read which attempt a pod's running
	// worker belongs to with no write of their own.
	BarrierOpenedMessagePrefix = "attempt="
)

// Class says who is to blame for a failure.
// +kubebuilder:validation:Enum=Infrastructure;Application;Unknown
type Class string

const (
	ClassInfrastructure Class = "Infrastructure"
	ClassApplication    Class = "Application"
	ClassUnknown        Class = "Unknown"
)

// Cause is the root cause of a failure: the reason of the InfrastructureFault pod condition,
// the cause of a verdict, and what failure-policy rules match on.
// +kubebuilder:validation:Enum=NodeShutdown;NodeMaintenance;PlannedMaintenance;GPUFault;Preemption;Eviction;NodeLost;AppExit;OOMKilled;AppGPUError;LimitExceeded;PeerFailure;Unknown;NoProgress
type Cause string

const (
	// Infrastructure causes.
	CauseNodeShutdown    Cause = "NodeShutdown"
	CauseNodeMaintenance Cause = "NodeMaintenance"
	CauseGPUFault        Cause = "GPUFault"
	CausePreemption      Cause = "Preemption"
	CauseEviction        Cause = "Eviction"
	CauseNodeLost        Cause = "NodeLost"
	// CausePlannedMaintenance is a planned move, not a failure: an SRE's NodeMaintenance or a
	// platform's announced maintenance of a node with workers on it. Its default rule
	// restarts the run without spending budget, keeping it off the node until uncordoned.
	CausePlannedMaintenance Cause = "PlannedMaintenance"

	// Application causes.
	CauseAppExit     Cause = "AppExit"
	CauseOOMKilled   Cause = "OOMKilled"
	CauseAppGPUError Cause = "AppGPUError"
	// CauseLimitExceeded: the kubelet evicted the pod for exceeding a limit of its own (its
	// containers' ephemeral-storage limits, an emptyDir's sizeLimit): a deterministic bug of
	// the program or its spec, unlike node pressure, which evicts pods within their limits.
	CauseLimitExceeded Cause = "LimitExceeded"

	// CausePeerFailure marks a worker that died because another one did; never a root cause.
	CausePeerFailure Cause = "PeerFailure"
	// CauseUnknown: no evidence either way.
	CauseUnknown Cause = "Unknown"
	// CauseNoProgress: no worker of a Running attempt showed progress for the run's
	// failurePolicy.progressDeadlineSeconds, and none had ended: the gang hangs (a collective
	// that never completes, a deadlock, a stuck filesystem). Class Unknown, which nothing
	// proves either way, with a restart budget of its own (maxRestarts.noProgress).
	CauseNoProgress Cause = "NoProgress"
)

// Class returns the class a cause belongs to. PeerFailure, Unknown and NoProgress are
// Unknown: a gang in which only peer failures are seen has not shown who started it, and a
// gang that hangs has not shown why.
func (c Cause) Class() Class {
	switch c {
	case CauseNodeShutdown, CauseNodeMaintenance, CausePlannedMaintenance, CauseGPUFault, CausePreemption, CauseEviction, CauseNodeLost:
		return ClassInfrastructure
	case CauseAppExit, CauseOOMKilled, CauseAppGPUError, CauseLimitExceeded:
		return ClassApplication
	default:
		return ClassUnknown
	}
}

// AllCauses lists every cause in a stable order (for validation, docs and tests).
var AllCauses = []Cause{
	CauseNodeShutdown, CauseNodeMaintenance, CausePlannedMaintenance, CauseGPUFault, CausePreemption, CauseEviction, CauseNodeLost,
	CauseAppExit, CauseOOMKilled, CauseAppGPUError, CauseLimitExceeded, CausePeerFailure, CauseUnknown, CauseNoProgress,
}

// FaultEvidence is what the node agent writes, as JSON, into AnnotationFaultEvidence.
type FaultEvidence struct {
	// Source names the detector: "logind", "nvml-event", "nvml-health".
	Source string `json:"source"`
	// Node is the node the fault happened on.
	Node string `json:"node"`
	// Cause is an infrastructure Cause (or AppGPUError for a program-caused XID).
	Cause Cause `json:"cause"`
	// DetectedAt is when the agent saw the signal, RFC 3339 with nanoseconds.
	DetectedAt string `json:"detectedAt"`
	// GPU is set for GPU faults.
	GPU *GPUEvidence `json:"gpu,omitempty"`
	// Detail is for humans.
	Detail string `json:"detail,omitempty"`
	// PodStoppedAt is set on NodeShutdown evidence once the container runtime stopped the
	// pod's sandbox, with no container of the pod running, after the announcement (the
	// kubelet's shutdown kill), RFC 3339 with nanoseconds: no process of the pod runs on
	// the node from then on, whatever the pod's status shows yet. The controller removes
	// such a pod of an index that moves at once, without waiting for that kubelet's status
	// write (docs/in-place-restart-proof.md, invariant 3).
	PodStoppedAt string `json:"podStoppedAt,omitempty"`
}

// GPUEvidence identifies the GPU and the XID of a GPU fault.
type GPUEvidence struct {
	UUID  string `json:"uuid"`
	Index int    `json:"index"`
	XID   uint64 `json:"xid,omitempty"`
}

// Sources of FaultEvidence: which detector of the node agent saw the fault.
const (
	EvidenceSourceLogind     = "logind"
	EvidenceSourceNVMLEvent  = "nvml-event"
	EvidenceSourceNVMLHealth = "nvml-health"
	// EvidenceSourceKubelet: the kubelet's own word on a worker's device (KEP-4680: an
	// Unhealthy device in a container's allocatedResourcesStatus, from the device plugin's
	// health or a DRA driver's), attested by the node agent of the pod's node.
	EvidenceSourceKubelet = "kubelet-device-health"
	// EvidenceSourceDeviceTaint: a DRA device taint (KEP-5055) of effect NoSchedule or
	// NoExecute on a GPU a worker holds, from the device's driver (its ResourceSlice) or a
	// cluster administrator (a DeviceTaintRule), attested by the node agent of the pod's node.
	EvidenceSourceDeviceTaint = "dra-device-taint"
)

// Progress (spec.failurePolicy.progressDeadlineSeconds): the node agent watches each worker's
// progress on its own node and says on the pod when it has stopped for the run's deadline;
// the controller ends an attempt none of whose workers progresses (CauseNoProgress). Until
// then the watch costs no API write.
const (
	// AnnotationProgressDeadline is, on the pods of a run with a progress deadline, the
	// deadline in seconds, for the node agent: the attempt's Job template carries it from
	// the run's spec, so an attempt keeps the deadline it started with, and an agent needs
	// no more than its node's pods to know it.
	AnnotationProgressDeadline = GroupName + "/progress-deadline-seconds"
	// PodConditionNoProgress is True on a running worker that has shown no progress for its
	// deadline: lastTransitionTime is when it last did (the stall's start), the reason is
	// the signal that stopped (ProgressSignalLog), the message says what was seen. Only the
	// node agent of the pod's node writes it (deploy/admission/nodeagent.yaml), and takes it
	// off when the worker progresses again.
	PodConditionNoProgress = GroupName + "/NoProgress"
	// ProgressSignalLog: the worker's output, its containers' logs under /var/log/pods, has
	// not grown (the zero-configuration signal: every program writes something).
	ProgressSignalLog = "LogSilent"
	// ProgressUnknownLog: the agent cannot read a running worker's log (its directory
	// missing or unreadable: the agent's --pod-log-dir is not the kubelet's podLogsDir, or
	// not mounted), so its progress is unknown: NoProgress is then Unknown, with this
	// reason and a message naming the node and the path, never True.
	ProgressUnknownLog = "LogUnreadable"
	// PodConditionProgressing is True on a worker whose current incarnation has shown
	// progress: lastTransitionTime is its first output after the incarnation began (to the
	// second), the reason ProgressSignalOutput. The agent writes it once per incarnation,
	// on the pods of runs with a progress deadline only; the controller takes the gang's
	// first progress (AttemptRecord.ProgressingTime, where the goodput ledger's starting
	// ends) from it. Only the node agent of the pod's node writes it.
	PodConditionProgressing = GroupName + "/Progressing"
	// ProgressSignalOutput: the worker's first line in its container's log after its
	// incarnation began (a supervising barrier's own lines not counted).
	ProgressSignalOutput = "FirstOutput"
)

// TaintGPUUnhealthy is the NoSchedule taint the node agent may put on a node with a fatal
// GPU fault (behind its --taint-unhealthy-gpu flag).
const TaintGPUUnhealthy = GroupName + "/gpu-unhealthy"

// GPUReasonHealthy is the reason of NodeConditionGPUHealthy=True: the node agent saw the GPUs
// healthy again after a fault (the fault's state gone, a reboot, an operator's reset).
const GPUReasonHealthy = "GPUsHealthy"

// Reasons of NodeConditionGPUHealthy=False, besides "Xid<N>" for an XID.
const (
	GPUReasonDoubleBitECC        = "DoubleBitECC"
	GPUReasonRowRemapFailure     = "RowRemapFailure"
	GPUReasonRetirementFailure   = "PageRetirementFailure"
	GPUReasonRetiredPagesPending = "RetiredPagesPending"
	GPUReasonGPULost             = "GPULost"
	GPUReasonResetRequired       = "GPUResetRequired"
	GPUReasonFatalPoison         = "UncontainedPoison"
	GPUReasonRecoveryAction      = "RecoveryActionRequired"
)

// Platform signals of a maintenance announced ahead of time, which the controller turns into
// a planned restart (CausePlannedMaintenance) before the node goes. Each is another party's
// contract, cited where it is defined; the cordon itself is corev1.TaintNodeUnschedulable
// (node.kubernetes.io/unschedulable) and node.spec.unschedulable.
const (
	// LabelGKEScheduledMaintenanceTime is the label GKE puts on a GPU/TPU node (GKE
	// 1.31.1-gke.2008000 and later) when Compute Engine has scheduled a host maintenance of its
	// VM that is not active yet; its value is the maintenance's start as a Unix time in
	// seconds. GKE leaves the reaction to the workload. Source:
	// https://cloud.google.com/kubernetes-engine/docs/how-to/view-maintenance-events
	// ("GKE adds scheduled-maintenance-time to the node label").
	LabelGKEScheduledMaintenanceTime = "cloud.google.com/scheduled-maintenance-time"
	// NodeConditionCSPMaintenance is a node condition (status True) that a health monitor
	// such as NVIDIA NVSentinel's CSP health monitor may set for a cloud provider's planned
	// maintenance. Its name is configurable (launcher controller --maintenance-conditions):
	// NVSentinel's documentation describes the monitor and its quarantine (a cordon, which
	// faultline sees anyway) but does not fix the condition's type.
	NodeConditionCSPMaintenance = "CSPMaintenance"
	// TaintKarpenterDisrupted is the taint (effect NoSchedule) Karpenter v1 puts on a node it
	// has chosen to disrupt (drift, consolidation, expiry) before it drains the node through
	// the Eviction API and deletes it; it does not cordon. Source: Karpenter's disruption
	// controller docs ("Add the karpenter.sh/disrupted:NoSchedule taint to the node(s)").
	TaintKarpenterDisrupted = "karpenter.sh/disrupted"
	// TaintClusterAutoscalerToBeDeleted is the taint (effect NoSchedule) the cluster
	// autoscaler puts on a node it scales down, before it drains it through the Eviction API.
	// Source: kubernetes/autoscaler cluster-autoscaler/utils/taints (ToBeDeletedTaint).
	TaintClusterAutoscalerToBeDeleted = "ToBeDeletedByClusterAutoscaler"
)

// DisruptionTaints are the taints of a platform that drains a node without a cordon: a node
// that carries one is under a planned maintenance as a cordoned node is.
var DisruptionTaints = []string{TaintKarpenterDisrupted, TaintClusterAutoscalerToBeDeleted}

// Roles: a run whose plugin lays its indexes out in roles (TensorFlow's chief, ps, worker,
// evaluator) keeps one Indexed Job with one pod template. A pod's role is not a
// substitution of its completion index, so the controller writes the layout on the
// template (AnnotationRoles), and the MutatingAdmissionPolicy faultline-roles
// (deploy/admission/roles.yaml) labels each pod with its role and its index within the role
// when the Job controller creates it; the containers read the labels (EnvRole, EnvRoleIndex).
const (
	// AnnotationRoles is the layout, "name:first-last" per role in index order,
	// comma-separated (e.g. "chief:0-0,ps:1-2,worker:3-6").
	AnnotationRoles = GroupName + "/roles"
	// LabelRole is the pod's role.
	LabelRole = GroupName + "/role"
	// LabelRoleIndex is the pod's index within its role, from 0.
	LabelRoleIndex = GroupName + "/role-index"
	// RolesPolicyName names the MutatingAdmissionPolicy that labels the pods, and its
	// binding.
	RolesPolicyName = "faultline-roles"
	// AnnotationRoleTemplates is, on a gang's Job, its run's spec.roles as JSON when the
	// Job was made: the controller makes the Job's pods from the Job alone (pkg/attempt
	// Pod), so the attempt's pods keep the roles they started with, whatever the run's
	// spec says later (as they keep the Job's template).
	AnnotationRoleTemplates = GroupName + "/role-templates"
)

// Names of what a run owns when its plugin asks that the workers read their Job and pods
// (framework.Rendezvous.ReadJobAndPods): a ServiceAccount, a Role and a RoleBinding, all
// named WorkerAccessName(run), owned by the run.
const (
	// WorkerAccessSuffix ends the name of the workers' ServiceAccount, Role and RoleBinding.
	WorkerAccessSuffix = "-workers"
)

// WorkerAccessName is the name of a run's workers' ServiceAccount, Role and RoleBinding.
func WorkerAccessName(run string) string { return run + WorkerAccessSuffix }

// The Kueue integration (docs/kueue.md): a TrainingRun that names a LocalQueue is one Kueue
// Workload, which faultline creates, owns and keeps in step with the run.
const (
	// LabelQueueName, on a TrainingRun, names the Kueue LocalQueue that admits it (Kueue's
	// own label, as on every job Kueue queues).
	LabelQueueName = "kueue.x-k8s.io/queue-name"
	// LabelWorkloadPriorityClass, on a TrainingRun, names a Kueue WorkloadPriorityClass: the
	// Workload's priority (else the workers' priorityClassName's value, else none).
	LabelWorkloadPriorityClass = "kueue.x-k8s.io/priority-class"
	// KueueExternalFramework is what Kueue's Configuration must list in
	// integrations.externalFrameworks (Kind.version.group): Kueue then knows the attempts'
	// Jobs for children of a queued TrainingRun and never queues them on their own.
	KueueExternalFramework = KindTrainingRun + ".v1alpha1." + GroupName
	// PodSetWorkers names the one pod set of the Workload of a run without spec.roles: its
	// workers. A run with spec.roles has one pod set per role, named as the role.
	PodSetWorkers = "workers"
	// AnnotationPodSets is, on a run's Workload, the digest of the pod sets faultline made
	// it with (spec.template, spec.roles and the framework's layout): an attempt starts only
	// while the run would still make the same, so that what runs is what Kueue admitted.
	AnnotationPodSets = GroupName + "/pod-sets"
	// QueuePolicyName names the ValidatingAdmissionPolicy (and its binding) that fixes a
	// queued run's queue label, spec.template and spec.roles until it finishes
	// (deploy/admission/queue.yaml).
	QueuePolicyName = "faultline-queue"
)
