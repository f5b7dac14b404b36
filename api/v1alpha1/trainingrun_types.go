package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RestartScope says what a restart replaces.
// +kubebuilder:validation:Enum=Gang;Index
type RestartScope string

const (
	// RestartScopeGang ends the whole attempt at the first failure and, when the policy says
	// so, starts the whole gang again: what TensorFlow's MultiWorkerMirroredStrategy and JAX
	// need, since neither survives the loss of one process.
	RestartScopeGang RestartScope = "Gang"
	// RestartScopeIndex replaces only the failed index, for workloads whose indexes are
	// independent (e.g. parameter-server workers, sharded batch inference).
	RestartScopeIndex RestartScope = "Index"
)

// RestartMode says how a gang restart treats the workers on healthy nodes.
// +kubebuilder:validation:Enum=Auto;InPlace;Recreate
type RestartMode string

const (
	// RestartModeAuto restarts in place where the cluster can (every node the gang may run
	// on declares RestartAllContainersOnContainerExits and its node agent reports
	// faultline.dev/InPlaceReady), and recreates otherwise.
	RestartModeAuto RestartMode = "Auto"
	// RestartModeInPlace restarts the workers on healthy nodes in place (same pod, node,
	// IP, GPUs) and gives only the faulty nodes' indexes new pods; a run on a cluster that
	// cannot is Stalled with reason InPlaceUnsupported.
	RestartModeInPlace RestartMode = "InPlace"
	// RestartModeRecreate deletes every pod of the attempt and creates the next attempt's.
	RestartModeRecreate RestartMode = "Recreate"
)

// SuccessPolicy says when a run has succeeded.
// +kubebuilder:validation:Enum=AllWorkers;Leader
type SuccessPolicy string

const (
	// SuccessPolicyAllWorkers: every index exited 0.
	SuccessPolicyAllWorkers SuccessPolicy = "AllWorkers"
	// SuccessPolicyLeader: index 0 exited 0; the other workers are then stopped.
	SuccessPolicyLeader SuccessPolicy = "Leader"
)

// Action is what a failure-policy rule does.
// +kubebuilder:validation:Enum=RestartRun;RestartRunIgnoreBudget;FailRun
type Action string

const (
	// ActionRestartRun starts the next attempt and spends one restart of the failure's class.
	ActionRestartRun Action = "RestartRun"
	// ActionRestartRunIgnoreBudget starts the next attempt without spending budget.
	ActionRestartRunIgnoreBudget Action = "RestartRunIgnoreBudget"
	// ActionFailRun stops every pod and fails the run.
	ActionFailRun Action = "FailRun"
)

// Phase is where a run is in its life.
// +kubebuilder:validation:Enum=Pending;Running;Restarting;Succeeded;Failed;Suspended
type Phase string

const (
	PhasePending    Phase = "Pending"
	PhaseRunning    Phase = "Running"
	PhaseRestarting Phase = "Restarting"
	PhaseSucceeded  Phase = "Succeeded"
	PhaseFailed     Phase = "Failed"
	PhaseSuspended  Phase = "Suspended"
)

// FrameworkNone runs the template as it is, with only the common FAULTLINE_* environment.
const FrameworkNone = "none"

// TrainingRunSpec is what an ML engineer asks for.
// +kubebuilder:validation:XValidation:rule="(has(self.restartScope) && self.restartScope == 'Index') || !has(self.backoffLimitPerIndex)",message="spec.backoffLimitPerIndex applies only to restartScope Index: remove it or set restartScope: Index",fieldPath=".backoffLimitPerIndex"
// +kubebuilder:validation:XValidation:rule="(has(self.restartScope) && self.restartScope == 'Index') || !has(self.maxFailedIndexes)",message="spec.maxFailedIndexes applies only to restartScope Index: remove it or set restartScope: Index",fieldPath=".maxFailedIndexes"
// +kubebuilder:validation:XValidation:rule="!has(self.maxFailedIndexes) || self.maxFailedIndexes <= self.workers",message="spec.maxFailedIndexes must not exceed spec.workers: lower it to at most the number of workers",fieldPath=".maxFailedIndexes"
// In Index scope the Job controller retries each index (backoffLimitPerIndex, with infrastructure
// failures not counted) and the run fails when it gives up: rules and budgets there would be
// silently ignored, so they are refused (backoff and settleSeconds are documented as Gang's:
// Go clients send their zero values, which cannot be told from a choice).
// +kubebuilder:validation:XValidation:rule="!has(self.restartScope) || self.restartScope != 'Index' || !has(self.failurePolicy) || !has(self.failurePolicy.rules) || size(self.failurePolicy.rules) == 0",message="spec.failurePolicy.rules have no effect with restartScope Index (the Job controller retries each index, see backoffLimitPerIndex, and the run fails when it gives up): remove them or use restartScope Gang",fieldPath=".failurePolicy.rules"
// +kubebuilder:validation:XValidation:rule="!has(self.restartScope) || self.restartScope != 'Index' || !has(self.failurePolicy) || !has(self.failurePolicy.maxRestarts) || ((!has(self.failurePolicy.maxRestarts.infrastructure) || self.failurePolicy.maxRestarts.infrastructure == 10) && (!has(self.failurePolicy.maxRestarts.application) || self.failurePolicy.maxRestarts.application == 0) && (!has(self.failurePolicy.maxRestarts.unknown) || self.failurePolicy.maxRestarts.unknown == 1) && (!has(self.failurePolicy.maxRestarts.noProgress) || self.failurePolicy.maxRestarts.noProgress == 1))",message="spec.failurePolicy.maxRestarts has no effect with restartScope Index (retries are per index there: set backoffLimitPerIndex): remove it or use restartScope Gang",fieldPath=".failurePolicy.maxRestarts"
// +kubebuilder:validation:XValidation:rule="!has(self.restartScope) || self.restartScope != 'Index' || !has(self.failurePolicy) || !has(self.failurePolicy.restartMode) || self.failurePolicy.restartMode != 'InPlace'",message="spec.failurePolicy.restartMode InPlace applies to restartScope Gang (with Index the Job controller replaces each failed index): remove it or use restartScope Gang",fieldPath=".failurePolicy.restartMode"
// +kubebuilder:validation:XValidation:rule="!has(self.restartScope) || self.restartScope != 'Index' || !has(self.failurePolicy) || !has(self.failurePolicy.progressDeadlineSeconds)",message="spec.failurePolicy.progressDeadlineSeconds applies to restartScope Gang (with Index the Job controller replaces each failed index, and a silent index is no gang that stopped): remove it or use restartScope Gang",fieldPath=".failurePolicy.progressDeadlineSeconds"
// +kubebuilder:validation:XValidation:rule="!has(self.restartScope) || self.restartScope != 'Index' || !has(self.roles) || size(self.roles) == 0",message="spec.roles apply to restartScope Gang (with Index the Job controller creates every pod from spec.template): remove spec.roles or use restartScope Gang",fieldPath=".roles"
// A run's GPUs come one way: its claim's devices are the worker container's, and a template or
// role that also asked the device plugin for nvidia.com/gpu would get twice the GPUs, of two
// allocators; the claim's name in the pod is faultline's.
// +kubebuilder:validation:XValidation:rule="!has(self.gpus) || !has(self.template.spec) || !self.template.spec.containers.exists(c, has(c.resources) && ((has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits) || (has(c.resources.requests) && 'nvidia.com/gpu' in c.resources.requests)))",message="spec.gpus and nvidia.com/gpu in spec.template's containers' resources both ask for the workers' GPUs: keep one (spec.gpus for DRA, nvidia.com/gpu for the device plugin)",fieldPath=".gpus"
// +kubebuilder:validation:XValidation:rule="!has(self.gpus) || !has(self.roles) || size(self.roles) == 0",message="spec.gpus gives every worker the same GPUs and spec.roles lay the workers out in roles: with roles, ask for each role's GPUs in spec.roles[].containers[].resources (nvidia.com/gpu), or remove spec.roles",fieldPath=".gpus"
// +kubebuilder:validation:XValidation:rule="!has(self.template.spec) || !has(self.template.spec.resourceClaims) || !self.template.spec.resourceClaims.exists(c, c.name == 'faultline-gpus')",message="spec.template.spec.resourceClaims must not name a claim faultline-gpus: faultline adds spec.gpus's claim under that name; rename yours",fieldPath=".template.spec.resourceClaims"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.restartScope) || has(self.restartScope)",message="spec.restartScope cannot be removed once set (the run started under it): create a new TrainingRun to change it",fieldPath=".restartScope"
// A checkpoint request reaches a worker through the barrier that supervises it, which only a
// run that restarts in place has.
// +kubebuilder:validation:XValidation:rule="!has(self.checkpoint) || ((!has(self.restartScope) || self.restartScope != 'Index') && (!has(self.failurePolicy) || !has(self.failurePolicy.restartMode) || self.failurePolicy.restartMode != 'Recreate'))",message="spec.checkpoint asks each worker through the barrier of a run that restarts in place: it needs restartScope Gang and restartMode Auto or InPlace; remove spec.checkpoint or change them",fieldPath=".checkpoint"
// Spares wait at the barrier that supervises each worker, which only a run that restarts in
// place has, and take the indexes of a lost node at the next attempt's start.
// +kubebuilder:validation:XValidation:rule="!has(self.spares) || self.spares == 0 || ((!has(self.restartScope) || self.restartScope != 'Index') && (!has(self.failurePolicy) || !has(self.failurePolicy.restartMode) || self.failurePolicy.restartMode != 'Recreate'))",message="spec.spares wait at the barrier of a run that restarts in place: they need restartScope Gang and restartMode Auto or InPlace; remove spec.spares or change them",fieldPath=".spares"
// +kubebuilder:validation:XValidation:rule="!has(self.spares) || self.spares <= self.workers",message="spec.spares must not exceed spec.workers: a spare stands in for a worker of a lost node; lower spec.spares",fieldPath=".spares"
// +kubebuilder:validation:XValidation:rule="!has(self.spares) || self.spares == 0 || !has(self.roles) || size(self.roles) == 0",message="spec.spares stand in for any index, and spec.roles give indexes different pods: remove one of them",fieldPath=".spares"
type TrainingRunSpec struct {
	// Framework names the plugin that adds the framework's rendezvous environment
	// (tensorflow, jax, pytorch, or another installed plugin), or "none".
	// +kubebuilder:default=none
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.framework is immutable: create a new TrainingRun to change it"
	// +optional
	Framework string `json:"framework,omitempty"`

	// FrameworkOptions are passed to the framework plugin as they are (e.g. the
	// TensorFlow strategy); each plugin documents its own.
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	FrameworkOptions map[string]string `json:"frameworkOptions,omitempty"`

	// Workers is the number of processes (pods), one per index 0..workers-1.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.workers is immutable: create a new TrainingRun to change the gang size"
	Workers int32 `json:"workers"`

	// Spares is how many warm spare pods the run keeps beside its workers: pods of
	// spec.template, scheduled and started up to their barrier, that hold no index and run
	// nothing of the workers' program. When a node is lost or shut down, the next attempt
	// gives its indexes to spares (each takes the index's address and identity) instead of
	// waiting for new pods, and new spares are made once that attempt runs. Kueue counts
	// them as workers. 0 (the default) keeps none (docs/in-place-restart.md).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.spares is immutable: create a new TrainingRun to change it"
	// +optional
	Spares int32 `json:"spares,omitempty"`

	// RestartScope is Gang (a failure ends the attempt, a restart replaces every worker) or
	// Index (only the failed index is replaced). Left unset, the framework's plugin chooses
	// (Gang for framework none and the shipped plugins), and the controller writes its
	// choice here before the first attempt starts, so that the run shows the scope it runs
	// under. No CRD default: it would hide from the plugin that the user chose nothing.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.restartScope is immutable: create a new TrainingRun to change it"
	// +optional
	RestartScope RestartScope `json:"restartScope,omitempty"`

	// Template is the worker pod. Its restartPolicy must be Never (or unset): a worker that
	// restarts in place would rejoin its gang as a duplicate task.
	// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.restartPolicy) || self.spec.restartPolicy == 'Never'",message="spec.template.spec.restartPolicy must be Never (or unset): faultline restarts workers itself, an in-place restart would register a duplicate task",fieldPath=".spec.restartPolicy"
	// +kubebuilder:validation:XValidation:rule="has(self.spec) && size(self.spec.containers) >= 1",message="spec.template.spec.containers must name at least one container: add the worker container",fieldPath=".spec.containers"
	// Keys under faultline.dev/ on the workers are faultline's own: the node agent's fault
	// evidence, the trace context, the run and attempt labels. A template that carried them
	// would put them on every worker, and evidence on a pod must come from the node agent.
	// +kubebuilder:validation:XValidation:rule="!has(self.metadata) || !has(self.metadata.annotations) || !self.metadata.annotations.exists(k, k.startsWith('faultline.dev/'))",message="spec.template.metadata.annotations must not use keys under faultline.dev/: faultline writes those itself (fault evidence comes only from its node agent); remove them",fieldPath=".metadata.annotations"
	// +kubebuilder:validation:XValidation:rule="!has(self.metadata) || !has(self.metadata.labels) || !self.metadata.labels.exists(k, k.startsWith('faultline.dev/'))",message="spec.template.metadata.labels must not use keys under faultline.dev/: faultline sets the run and attempt labels itself; remove them",fieldPath=".metadata.labels"
	// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.readinessGates) || !self.spec.readinessGates.exists(g, g.conditionType.startsWith('faultline.dev/'))",message="spec.template.spec.readinessGates must not name faultline.dev/ conditions: only faultline's node agent writes them; remove the gate",fieldPath=".spec.readinessGates"
	// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.schedulingGates) || !self.spec.schedulingGates.exists(g, g.name.startsWith('faultline.dev/'))",message="spec.template.spec.schedulingGates must not name faultline.dev/ gates: faultline adds and removes its own; remove the gate",fieldPath=".spec.schedulingGates"
	// The barrier init container and the run volume are faultline's (BarrierContainer,
	// RunVolume): a template's own of the same name would be taken for them, or clash with
	// them on every worker of a restart in place.
	// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.initContainers) || !self.spec.initContainers.exists(c, c.name == 'faultline-barrier')",message="spec.template.spec.initContainers must not name a container faultline-barrier: faultline adds its barrier under that name; rename yours",fieldPath=".spec.initContainers"
	// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.volumes) || !self.spec.volumes.exists(v, v.name == 'faultline-run')",message="spec.template.spec.volumes must not name a volume faultline-run: faultline mounts its run volume under that name; rename yours",fieldPath=".spec.volumes"
	Template corev1.PodTemplateSpec `json:"template"`

	// Roles change spec.template for the pods of one role, in a run whose framework lays
	// its workers out in roles (tensorflow with strategy ParameterServer: chief, ps, worker,
	// evaluator), so that, e.g., parameter servers ask for no GPU and run on CPU nodes.
	// Each entry names a role of the framework's layout; a role without one gets
	// spec.template as it is. Every pod stays one index of the one gang: a role's pods are
	// restarted, excluded and counted like the others. Restart scope Gang only.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Roles []RoleTemplate `json:"roles,omitempty"`

	// FailurePolicy decides what each kind of failure does.
	// +kubebuilder:default={}
	// +optional
	FailurePolicy FailurePolicy `json:"failurePolicy,omitempty"`

	// BackoffLimitPerIndex is how many application failures one index may have before it is
	// failed (restartScope Index only; default 0).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	BackoffLimitPerIndex *int32 `json:"backoffLimitPerIndex,omitempty"`

	// MaxFailedIndexes is how many indexes may fail before the run fails (restartScope Index
	// only; default: none may).
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxFailedIndexes *int32 `json:"maxFailedIndexes,omitempty"`

	// SuccessPolicy is AllWorkers (every index exits 0) or Leader (index 0 exiting 0 ends
	// the run). Left unset, the framework's plugin chooses (AllWorkers unless the plugin's
	// layout has processes that never exit, e.g. TensorFlow's parameter servers), and the
	// controller writes its choice here before the first attempt starts.
	// +optional
	SuccessPolicy SuccessPolicy `json:"successPolicy,omitempty"`

	// Suspend stops every worker without counting a failure (e.g. Kueue preempting the run);
	// setting it back to false starts a fresh attempt.
	// +optional
	Suspend *bool `json:"suspend,omitempty"`

	// TTLSecondsAfterFinished deletes the run this long after it Succeeded or Failed.
	// +kubebuilder:validation:Minimum=0
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// GPUs asks for each worker's GPUs through Dynamic Resource Allocation (DRA), by
	// DeviceClass, instead of the device plugin's nvidia.com/gpu in the containers' resources.
	// The controller gives the run a ResourceClaimTemplate (named as the run), and every worker
	// a claim of its own from it, held by the worker container (the template's first): the
	// scheduler allocates each worker its devices on its node, the class's DRA driver prepares
	// them, and the node agent ties their faults to the worker as it does a device plugin's.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.gpus is immutable: create a new TrainingRun to change the workers' GPUs"
	// +optional
	GPUs *GPUClaim `json:"gpus,omitempty"`

	// Checkpoint asks every worker to save a checkpoint when a planned move is announced
	// (a node's shutdown, a drain's cordon, a platform's disruption taint, a
	// NodeMaintenance), and holds the move until each worker said it saved, or until the
	// deadline: a planned move then loses no steps (docs/checkpoint.md). Unplanned faults
	// ask for nothing. The request reaches a worker through the barrier that supervises
	// it, so it needs a run that restarts in place (restartScope Gang, restartMode not
	// Recreate). Evictions of the run's pods are refused (a PodDisruptionBudget faultline
	// owns) while the run lives: faultline moves the workers of a drained node itself.
	// +optional
	Checkpoint *CheckpointPolicy `json:"checkpoint,omitempty"`
}

// CheckpointPolicy is how a run's workers are asked to save, and how long a move waits.
type CheckpointPolicy struct {
	// Signal is sent to each worker's process group to ask it to save: SIGUSR1 (the
	// default) or SIGUSR2, which a program catches, saves on, says so and trains on; or
	// SIGTERM (or SIGINT) for a program whose framework saves on it and exits (JAX's
	// preemption sync with Orbax, TensorFlow's BackupAndRestore): its exit says it saved.
	// A worker says it saved by writing the file done, holding the step, in the directory
	// $FAULTLINE_CHECKPOINT_DIR, or by running `faultline-barrier checkpoint-done --step N`.
	// +kubebuilder:validation:Enum=SIGUSR1;SIGUSR2;SIGTERM;SIGINT
	// +kubebuilder:default=SIGUSR1
	// +optional
	Signal string `json:"signal,omitempty"`
	// TimeoutSeconds bounds how long a move waits for the workers to say they saved; the
	// move goes on at the smaller of it and what the notice allows (a node's shutdown
	// delay), and the attempt's record names the workers that did not say so.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +kubebuilder:default=300
	// +optional
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
}

// CheckpointStatus is a request to the workers of an attempt to save, and their answers.
type CheckpointStatus struct {
	// Attempt is the attempt whose workers are asked.
	Attempt int32 `json:"attempt"`
	// RequestedAt is when the controller asked: each worker's answer names it.
	RequestedAt metav1.MicroTime `json:"requestedAt"`
	// Deadline is when the move goes on whatever the workers said (microseconds: a
	// deadline of seconds must not be cut short by a truncated second).
	Deadline metav1.MicroTime `json:"deadline"`
	// Notice is the planned move that asked, for people (the nodes and why).
	// +optional
	Notice string `json:"notice,omitempty"`
	// Nodes are the nodes the notice is about.
	// +listType=set
	// +optional
	Nodes []string `json:"nodes,omitempty"`
	// Acks are the workers that said they saved, by index.
	// +listType=map
	// +listMapKey=index
	// +optional
	Acks []CheckpointAck `json:"acks,omitempty"`
	// Missing are the indexes that had not said so when the move went on (set once it did).
	// +listType=set
	// +optional
	Missing []int32 `json:"missing,omitempty"`
	// EndedAt is when the move went on: every worker had answered, or the deadline passed.
	// +optional
	EndedAt *metav1.MicroTime `json:"endedAt,omitempty"`
}

// CheckpointAck is one worker's answer to a checkpoint request.
type CheckpointAck struct {
	Index int32 `json:"index"`
	// +optional
	Pod string `json:"pod,omitempty"`
	// At is when its node agent heard the answer.
	At metav1.MicroTime `json:"at"`
	// Step is the step the worker said it saved, if it said one.
	// +optional
	Step *int64 `json:"step,omitempty"`
	// ExitCode is set where the worker answered by exiting (signal SIGTERM or SIGINT).
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
}

// GPUClaim is what each worker asks of a DeviceClass.
type GPUClaim struct {
	// DeviceClassName names the DeviceClass of the GPUs (gpu.nvidia.com for NVIDIA's DRA
	// driver). A run whose class the cluster does not have is Stalled, reason
	// DeviceClassNotFound, until it does.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	DeviceClassName string `json:"deviceClassName"`

	// Count is how many devices of the class each worker gets (DRA allocates at most 32 to
	// one request).
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32
	// +optional
	Count int32 `json:"count,omitempty"`
}

// RoleTemplate is what the pods of one role differ in from spec.template. Only what a role
// needs of its own is here (its resources and its nodes); the rest of the pod (image, command,
// volumes, env) is the template's, so that the roles of one program stay one program.
type RoleTemplate struct {
	// Name is the role, as the run's framework names it (tensorflow: chief, ps, worker,
	// evaluator). The controller refuses a name that is not in the framework's layout.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// NodeSelector is added to the template's; on a key both set, the role's value wins.
	// +kubebuilder:validation:MaxProperties=16
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations are added to the template's.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// Containers replace the resources of the template's containers, by name.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Containers []RoleContainer `json:"containers,omitempty"`
}

// RoleContainer is one container's resources in the pods of a role.
type RoleContainer struct {
	// Name is a container of spec.template.spec.containers.
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// Resources replace that container's resources (requests, limits and claims) in the
	// role's pods.
	Resources corev1.ResourceRequirements `json:"resources"`
}

// FailurePolicy is the run-level failure policy (shared/DESIGN.md).
type FailurePolicy struct {
	// MaxRestarts are separate restart budgets per failure class.
	// +kubebuilder:default={}
	// +optional
	MaxRestarts RestartBudgets `json:"maxRestarts,omitempty"`

	// RestartMode is how a gang restart treats the workers on healthy nodes: InPlace,
	// Recreate, or Auto (in place where the cluster can, docs/in-place-restart.md). Each
	// attempt's status.attempts[].restartMode says which was used.
	// +kubebuilder:default=Auto
	// +optional
	RestartMode RestartMode `json:"restartMode,omitempty"`

	// Backoff paces restarts that come in a row.
	// +kubebuilder:default={}
	// +optional
	Backoff Backoff `json:"backoff,omitempty"`

	// SettleSeconds is how long to wait, after the first failure, for node evidence before a
	// failure without any is judged Application or Unknown.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=300
	// +optional
	SettleSeconds *int32 `json:"settleSeconds,omitempty"`

	// ProgressDeadlineSeconds ends an attempt that has stopped making progress without
	// ending: when no worker of a Running attempt has shown progress for this long, the
	// attempt ends with cause NoProgress (class Unknown, on its own budget,
	// maxRestarts.noProgress) and the gang restarts. A worker's progress is its own output:
	// the node agent notes when each worker's log (its containers' logs under
	// /var/log/pods) last grew, at the cost of a stat per worker every few seconds and no
	// API write until a worker has been silent for the deadline. A gang whose every worker
	// is blocked (a collective that never completes, a stuck filesystem, a deadlock in the
	// input pipeline) is caught; a gang in which one worker still logs is not. Choose it
	// above the longest silence of a healthy run (startup and compilation, a checkpoint, an
	// evaluation): docs/cookbook.md, "Hangs". Unset: off. An attempt keeps the deadline it started with.
	// +kubebuilder:validation:Minimum=30
	// +kubebuilder:validation:Maximum=604800
	// +optional
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`

	// Rules are tried in order; the first that matches decides. The defaults apply after
	// them: Infrastructure and Unknown → RestartRun, Application → FailRun.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Rules []FailurePolicyRule `json:"rules,omitempty"`
}

// RestartBudgets are per-class restart limits.
type RestartBudgets struct {
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +optional
	Infrastructure *int32 `json:"infrastructure,omitempty"`
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +optional
	Application *int32 `json:"application,omitempty"`
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +optional
	Unknown *int32 `json:"unknown,omitempty"`
	// NoProgress is the budget of attempts that stopped making progress
	// (failurePolicy.progressDeadlineSeconds, cause NoProgress): class Unknown, counted apart
	// from the other Unknown failures, since a gang that hangs again and again is a program
	// that deadlocks, not a run of bad luck.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +optional
	NoProgress *int32 `json:"noProgress,omitempty"`
}

// Backoff: a restart starts the next attempt at once unless the failed attempt had itself
// followed a restart and lived less than ResetAfterSeconds; then it waits InitialSeconds,
// doubling with each such restart in a row, up to MaxSeconds.
// The rule tolerates absent fields because the API server also checks it against the
// `default={}` of FailurePolicy.Backoff, before the fields' own defaults are filled in; in a
// stored object both are always set.
// +kubebuilder:validation:XValidation:rule="!has(self.initialSeconds) || !has(self.maxSeconds) || self.initialSeconds <= self.maxSeconds",message="spec.failurePolicy.backoff.initialSeconds must not exceed spec.failurePolicy.backoff.maxSeconds: lower initialSeconds or raise maxSeconds",fieldPath=".initialSeconds"
type Backoff struct {
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +optional
	InitialSeconds int32 `json:"initialSeconds"`
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +optional
	MaxSeconds int32 `json:"maxSeconds"`
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=604800
	// +optional
	ResetAfterSeconds int32 `json:"resetAfterSeconds"`
}

// FailurePolicyRule matches a failure's verdict and says what to do. A rule with neither
// onCauses nor onClasses matches every failure.
// +kubebuilder:validation:XValidation:rule="!has(self.onCauses) || !self.onCauses.exists(c, c == 'PeerFailure')",message="spec.failurePolicy.rules[].onCauses must not contain PeerFailure: a peer failure is never a root cause, match the cause of the worker that failed first",fieldPath=".onCauses"
type FailurePolicyRule struct {
	// Name identifies the rule in events and status; unique within the policy.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// OnCauses matches verdicts with one of these causes.
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +optional
	OnCauses []Cause `json:"onCauses,omitempty"`
	// OnClasses matches verdicts of one of these classes.
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	// +optional
	OnClasses []Class `json:"onClasses,omitempty"`
	// Action is RestartRun, RestartRunIgnoreBudget or FailRun.
	Action Action `json:"action"`
	// ExcludeNode keeps later attempts off the node the fault came from.
	// +optional
	ExcludeNode bool `json:"excludeNode,omitempty"`
}

// TrainingRunStatus is what the controller observed and decided.
type TrainingRunStatus struct {
	// ObservedGeneration is the generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase summarises the run.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Attempt is the current attempt number, starting at 1. A restart decision increments it
	// before anything is acted on, so a controller restarted mid-restart resumes it.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// Restarts counts the restarts spent per class.
	// +optional
	Restarts RestartCounts `json:"restarts,omitempty"`
	// ReadyWorkers counts the Running and Ready workers of the current attempt.
	// +optional
	ReadyWorkers int32 `json:"readyWorkers,omitempty"`
	// NextAttemptAt is when the next attempt may start (backoff), while Restarting.
	// +optional
	NextAttemptAt *metav1.Time `json:"nextAttemptAt,omitempty"`
	// LastFailure is the verdict on the most recent failure.
	// +optional
	LastFailure *FailureVerdict `json:"lastFailure,omitempty"`
	// Attempts is the history of attempts, most recent last, bounded to MaxAttemptHistory.
	// +kubebuilder:validation:MaxItems=50
	// +optional
	Attempts []AttemptRecord `json:"attempts,omitempty"`
	// ExcludedNodes are nodes that later attempts avoid, at most MaxExcludedNodes, the oldest
	// forgotten first.
	// +listType=set
	// +kubebuilder:validation:MaxItems=1000
	// +optional
	ExcludedNodes []string `json:"excludedNodes,omitempty"`
	// MaintenanceExcludedNodes are nodes that a planned maintenance moved the run off: later
	// attempts avoid them only until the maintenance is over (the node uncordoned, the
	// platform's signal gone), unlike excludedNodes, which last the run's lifetime.
	// +listType=set
	// +kubebuilder:validation:MaxItems=1000
	// +optional
	MaintenanceExcludedNodes []string `json:"maintenanceExcludedNodes,omitempty"`
	// StartTime is when the first attempt was created.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime is when the run Succeeded or Failed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Trace follows the latest fault episode for tracing: see TraceStatus.
	// +optional
	Trace *TraceStatus `json:"trace,omitempty"`
	// Goodput is where the run's wall-clock time has gone: training, or lost, by cause. The
	// controller advances it at every status write (pkg/goodput).
	// +optional
	Goodput *GoodputLedger `json:"goodput,omitempty"`
	// Checkpoint is the current attempt's request to save before a planned move
	// (spec.checkpoint), while the move waits for it; the attempt's record keeps it after.
	// +optional
	Checkpoint *CheckpointStatus `json:"checkpoint,omitempty"`
	// Queue is the run's place in Kueue, for a run that names a queue (the
	// kueue.x-k8s.io/queue-name label): its Workload, the admission, the evictions.
	// +optional
	Queue *QueueStatus `json:"queue,omitempty"`
	// Conditions: Ready, Restarting, Succeeded, Failed, Suspended, PluginReady, Admitted.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TraceStatus is the trace of the fault episode that started the current attempt (from the
// signal on a node, through the decision, the teardown and the creation, until every worker
// of the attempt Runs) or that failed the run. The controller emits the episode's spans from
// it as each phase ends, so that a controller restart loses none of their timing. Its times
// have microseconds: the other timestamps of the status have whole seconds, and most phases
// last milliseconds. Each phase starts when the one before it ended, with one exception: when
// the backoff ends before the teardown, the next attempt's Job is created during the
// teardown, its pods held until no old pod is left (CreatingAt before TornDownAt). Then
// backoff runs from the decision, beside teardown, and create and schedule follow it:
// the Job controller creates the new pods while the old ones go.
type TraceStatus struct {
	// Traceparent is the W3C traceparent of the episode's root span (faultline.restart or
	// faultline.fail); empty when no failure started the current attempt (the first one, or
	// one after a resume).
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Traceparent string `json:"traceparent,omitempty"`
	// DetectedAt is when the node agent saw the signal (the root pod's evidence): the
	// episode's start.
	// +optional
	DetectedAt *metav1.MicroTime `json:"detectedAt,omitempty"`
	// SeenAt is when the controller first saw the failure (the agent's evidence on a
	// worker, or a failed worker): settle starts.
	// +optional
	SeenAt *metav1.MicroTime `json:"seenAt,omitempty"`
	// JudgedAt is when the verdict was final: classify starts.
	// +optional
	JudgedAt *metav1.MicroTime `json:"judgedAt,omitempty"`
	// DecidedAt is when the decision was taken: teardown starts.
	// +optional
	DecidedAt *metav1.MicroTime `json:"decidedAt,omitempty"`
	// TornDownAt is when no pod of an earlier attempt was left: backoff starts, unless the
	// Job was created during the teardown; its held pods are released then.
	// +optional
	TornDownAt *metav1.MicroTime `json:"tornDownAt,omitempty"`
	// CreatingAt is when the backoff was over: create starts.
	// +optional
	CreatingAt *metav1.MicroTime `json:"creatingAt,omitempty"`
	// CreatedAt is when the attempt's Job was created: schedule starts.
	// +optional
	CreatedAt *metav1.MicroTime `json:"createdAt,omitempty"`
	// ScheduledAt is when every worker was bound to a node: running starts.
	// +optional
	ScheduledAt *metav1.MicroTime `json:"scheduledAt,omitempty"`
	// RunningAt is when every worker was Running: the episode's end.
	// +optional
	RunningAt *metav1.MicroTime `json:"runningAt,omitempty"`
}

// GoodputLedger splits a run's wall-clock time, from its creation to Through, by what the run
// was doing: its gang training, or the time lost, by cause. At every status write the
// controller adds the time since Through to what the status it replaces said the run was
// doing, splitting it where the write's decision says a failure began; so the parts add up
// to the wall time, and a controller that restarts goes on from the ledger it wrote.
type GoodputLedger struct {
	// Through is how far the ledger goes: the last status write, or the run's end.
	Through metav1.MicroTime `json:"through"`
	// Training is the time every worker of an attempt was Running, until a failure.
	// +optional
	Training metav1.Duration `json:"training,omitempty"`
	// Queued is the time waiting for Kueue's admission, or suspended.
	// +optional
	Queued metav1.Duration `json:"queued,omitempty"`
	// Scheduling is from the run's creation, and each restart's new attempt, until every
	// worker Running: the attempt's creation, scheduling, image pulls, the containers' start
	// (and, restarting in place, the barrier).
	// +optional
	Scheduling metav1.Duration `json:"scheduling,omitempty"`
	// Starting is, where progress is watched (failurePolicy.progressDeadlineSeconds), from
	// every worker Running until the gang's first progress (AttemptRecord.ProgressingTime):
	// the program's own start (imports, compilation, rendezvous, loading its checkpoint).
	// +optional
	Starting metav1.Duration `json:"starting,omitempty"`
	// Detection is from each failure (the node agent's evidence, or the worker's end) to
	// the controller's decision on it: the settle window and the judgement.
	// +optional
	Detection metav1.Duration `json:"detection,omitempty"`
	// Hung is the same for a gang that stopped making progress (cause NoProgress): from its
	// last progress to the decision.
	// +optional
	Hung metav1.Duration `json:"hung,omitempty"`
	// Teardown is from each restart's decision to the next attempt's start: the old pods'
	// end and the backoff.
	// +optional
	Teardown metav1.Duration `json:"teardown,omitempty"`
	// Redone is the training that restarts did again: for each attempt restarted in place
	// whose workers say their saves (spec.checkpoint), its training from the gang's last save
	// to the failure (AttemptRecord.Redone), taken out of training.
	// +optional
	Redone metav1.Duration `json:"redone,omitempty"`
}

// MaxAttemptHistory bounds status.attempts so that a crash-looping run's status stays small.
const MaxAttemptHistory = 50

// MaxExcludedNodes bounds status.excludedNodes (the CRD's maxItems): a run that excluded more
// nodes forgets the oldest exclusion first; beyond it every status write would be refused.
const MaxExcludedNodes = 1000

// RestartCounts are restarts spent per class.
type RestartCounts struct {
	// +optional
	Infrastructure int32 `json:"infrastructure,omitempty"`
	// +optional
	Application int32 `json:"application,omitempty"`
	// +optional
	Unknown int32 `json:"unknown,omitempty"`
	// NoProgress counts the restarts of attempts that stopped making progress (cause
	// NoProgress), which spend maxRestarts.noProgress and not maxRestarts.unknown.
	// +optional
	NoProgress int32 `json:"noProgress,omitempty"`
}

// FailureVerdict is exitclass's verdict on a failure, as stored in status.
type FailureVerdict struct {
	Class Class `json:"class"`
	Cause Cause `json:"cause"`
	// Rule is the name of the failure-policy rule that matched (or default-<class>).
	// +optional
	Rule string `json:"rule,omitempty"`
	// Action is what the rule decided.
	// +optional
	Action Action `json:"action,omitempty"`
	// +optional
	Pod string `json:"pod,omitempty"`
	// +optional
	Index *int32 `json:"index,omitempty"`
	// +optional
	Node string `json:"node,omitempty"`
	// +optional
	Container string `json:"container,omitempty"`
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// +optional
	Signal int32 `json:"signal,omitempty"`
	// +optional
	XID int64 `json:"xid,omitempty"`
	// PeerFailures is how many other workers failed because of this one.
	// +optional
	PeerFailures int32 `json:"peerFailures,omitempty"`
	// StillRunning: the root worker had not exited when the attempt was judged: it hung on
	// fatal infrastructure evidence (a fatal XID on its GPU, its GPU lost, its node's
	// shutdown that did not end it), or the gang stopped making progress (cause
	// NoProgress). FailedAt is then when the evidence came (or the gang's last progress),
	// and the explanation says how long the worker ran on; faultline stopped it.
	// +optional
	StillRunning bool `json:"stillRunning,omitempty"`
	// FailedAt is when the root pod failed.
	// +optional
	FailedAt *metav1.Time `json:"failedAt,omitempty"`
	// DecidedAt is when the controller decided.
	// +optional
	DecidedAt *metav1.Time `json:"decidedAt,omitempty"`
	// Evidence lines, as exitclass wrote them.
	// +kubebuilder:validation:MaxItems=20
	// +optional
	Evidence []string `json:"evidence,omitempty"`
	// Explanation is a paragraph a person can act on.
	// +optional
	Explanation string `json:"explanation,omitempty"`
}

// AttemptRecord is one attempt in the history.
type AttemptRecord struct {
	Attempt int32 `json:"attempt"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// RunningTime is when every worker of the attempt was first Running.
	// +optional
	RunningTime *metav1.Time `json:"runningTime,omitempty"`
	// ProgressingTime is, where progress is watched (failurePolicy.progressDeadlineSeconds),
	// the gang's first progress: when the last of its workers first wrote output in this
	// attempt (the node agent's Progressing condition, to the second). A worker on a node
	// without a node agent counts from its start. The goodput ledger counts the time before
	// it as starting.
	// +optional
	ProgressingTime *metav1.Time `json:"progressingTime,omitempty"`
	// +optional
	EndTime *metav1.Time `json:"endTime,omitempty"`
	// Verdict is why the attempt ended (none for a success or a suspend).
	// +optional
	Verdict *FailureVerdict `json:"verdict,omitempty"`
	// Outcome is Succeeded, Failed, Restarted or Suspended.
	// +optional
	Outcome string `json:"outcome,omitempty"`
	// ExcludedNodes are the nodes this attempt kept off.
	// +optional
	ExcludedNodes []string `json:"excludedNodes,omitempty"`
	// RestartMode is how this attempt started: InPlace (the workers on healthy nodes
	// restarted where they stood) or Recreate (every pod new). Unset for the first attempt.
	// +optional
	RestartMode RestartMode `json:"restartMode,omitempty"`
	// JobAttempt is the attempt whose Job this attempt's pods belong to: an attempt that
	// restarts in place keeps the Job (and the pods) of the one before. Unset: its own.
	// +optional
	JobAttempt int32 `json:"jobAttempt,omitempty"`
	// MovedIndexes are the indexes that got new pods in an in-place restart (their pods
	// were on a faulty node, or had ended); the others restarted in place.
	// +listType=set
	// +optional
	MovedIndexes []int32 `json:"movedIndexes,omitempty"`
	// BarrierOpenedAt is when every old worker of the gang had stopped and the workers of
	// this attempt were let start (an in-place restart's barrier).
	// +optional
	BarrierOpenedAt *metav1.Time `json:"barrierOpenedAt,omitempty"`
	// Suspension says who suspended a Suspended attempt: spec.suspend, or Kueue's eviction of
	// the run's Workload with its reason and message (e.g. the preemptor).
	// +optional
	Suspension string `json:"suspension,omitempty"`
	// Checkpoint is the request to save that this attempt's workers got before a planned
	// move ended it, with their answers and who did not answer.
	// +optional
	Checkpoint *CheckpointStatus `json:"checkpoint,omitempty"`
	// Saved is, for an attempt that restarted in place, the gang's last save when it ended,
	// as the stopped workers' barriers heard it (every save a worker says, periodic ones
	// too): the oldest of their last saves, which the next attempt resumes from. Unset where
	// no worker said any.
	// +optional
	Saved *SavedStatus `json:"saved,omitempty"`
	// Redone is the training of this attempt the next one does again: from Saved (or the
	// gang's first progress, if later) to the failure that ended it. Set with Saved.
	// +optional
	Redone *metav1.Duration `json:"redone,omitempty"`
}

// SavedStatus is a gang's last save, as its workers' barriers heard it.
type SavedStatus struct {
	// Step is the step the worker with the oldest last save said it saved, if it said one.
	// +optional
	Step *int64 `json:"step,omitempty"`
	// At is when it saved.
	At metav1.MicroTime `json:"at"`
	// Workers is how many stopped workers said a save (the oldest of theirs counts).
	Workers int32 `json:"workers"`
}

// QueueStatus is what faultline knows of the run's Kueue Workload.
type QueueStatus struct {
	// Name is the LocalQueue that the run names.
	Name string `json:"name"`
	// Workload is the name of the run's Workload (kueue.x-k8s.io), in the run's namespace.
	// +optional
	Workload string `json:"workload,omitempty"`
	// ClusterQueue is the ClusterQueue of the current admission; empty while not admitted.
	// +optional
	ClusterQueue string `json:"clusterQueue,omitempty"`
	// Flavors are the current admission's resource flavors, by resource name.
	// +optional
	Flavors map[string]string `json:"flavors,omitempty"`
	// AdmittedAt is when Kueue gave the current admission.
	// +optional
	AdmittedAt *metav1.Time `json:"admittedAt,omitempty"`
	// Evictions counts Kueue's evictions of the Workload (preemptions and others); none
	// spends a restart.
	// +optional
	Evictions int32 `json:"evictions,omitempty"`
	// LastEviction is the latest of them.
	// +optional
	LastEviction *QueueEviction `json:"lastEviction,omitempty"`
}

// QueueEviction is one eviction of the run's Workload by Kueue.
type QueueEviction struct {
	// Reason is Kueue's (Preempted, PodsReadyTimeout, AdmissionCheck, Deactivated ...).
	Reason string `json:"reason"`
	// Message is Kueue's; for a preemption it gives the preempting workload's UID.
	// +optional
	Message string `json:"message,omitempty"`
	// Preemptor, for a preemption, is the preempting Workload (namespace/name) and the job
	// that owns it (e.g. TrainingRun team-b/llm), found by the UID Kueue's message gives.
	// +optional
	Preemptor string `json:"preemptor,omitempty"`
	// Time is when Kueue evicted the Workload.
	Time metav1.Time `json:"time"`
}

// TrainingRun is a distributed training job: a gang of workers that faultline restarts on
// infrastructure faults and fails fast on application errors.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tr,categories=all;faultline
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Attempt",type=integer,JSONPath=`.status.attempt`
// +kubebuilder:printcolumn:name="Infra",type=integer,JSONPath=`.status.restarts.infrastructure`,description="restarts spent on infrastructure faults"
// +kubebuilder:printcolumn:name="App",type=integer,JSONPath=`.status.restarts.application`,description="restarts spent on application failures"
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyWorkers`
// +kubebuilder:printcolumn:name="Workers",type=integer,JSONPath=`.spec.workers`
// +kubebuilder:printcolumn:name="Last-Cause",type=string,JSONPath=`.status.lastFailure.cause`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// While Kueue admits the run, its frameworkOptions stay as they were: they decide the
// framework's roles (TensorFlow's chief, workers, parameter servers), whose pod sets the
// admission counted, and an edit would only surface as a stall of the next attempt.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.queue) || !has(oldSelf.status.queue.clusterQueue) || size(oldSelf.status.queue.clusterQueue) == 0 || (has(self.spec.frameworkOptions) == has(oldSelf.spec.frameworkOptions) && (!has(self.spec.frameworkOptions) || self.spec.frameworkOptions == oldSelf.spec.frameworkOptions))",message="spec.frameworkOptions are fixed while Kueue admits the run (they decide its roles, which the admission counted): suspend the run (spec.suspend) or wait until it is queued again to change them",fieldPath=".spec.frameworkOptions"
type TrainingRun struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TrainingRunSpec   `json:"spec,omitempty"`
	Status TrainingRunStatus `json:"status,omitempty"`
}

// TrainingRunList is a list of TrainingRuns.
// +kubebuilder:object:root=true
type TrainingRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TrainingRun `json:"items"`
}
