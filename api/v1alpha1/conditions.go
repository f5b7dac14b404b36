package v1alpha1

// The TrainingRun's conditions, the reasons of its conditions and events that are not a
// Cause, and the actions of the controller's events: the controller writes them, the
// launcher reads them back (status, timeline), so they live with the API.

// Condition types of a TrainingRun (status.conditions).
const (
	ConditionReady       = "Ready"
	ConditionRestarting  = "Restarting"
	ConditionSucceeded   = "Succeeded"
	ConditionFailed      = "Failed"
	ConditionSuspended   = "Suspended"
	ConditionPluginReady = "PluginReady"
	// ConditionStalled is True while something outside faultline keeps the run from its next
	// step; its message names what and how to free it (kstatus's Stalled).
	ConditionStalled = "Stalled"
	// ConditionMaintenanceBlocked is True while a NodeMaintenance drains a node of the run's
	// but the gang has no placement left off it: the run stays, rather than wait Pending.
	ConditionMaintenanceBlocked = "MaintenanceBlocked"
	// ConditionInPlaceWaiting is True while an attempt that restarts in place waits on named
	// pods before its workers run (reason StoppingOldWorkers, then OpeningBarriers), with
	// the deadline of each wait; reason InPlaceFallback names the pods whose wait ran out and
	// whose indexes moved to new pods. False (reason BarrierOpen) once the attempt runs.
	ConditionInPlaceWaiting = "InPlaceWaiting"
	// ConditionInPlaceRestarts is False (reason BarrierImageUnpullable) once a run with
	// restartMode Auto found its barrier image impossible to pull: its attempts recreate
	// from then on, and the message names the image, the pod, the node and the kubelet's
	// words. Absent while the run may restart in place.
	ConditionInPlaceRestarts = "InPlaceRestarts"
	// ConditionAdmitted, on a run that names a Kueue queue, is True while Kueue admits its
	// Workload; False (reason Queued) while it waits, or after an eviction (its reason).
	ConditionAdmitted = "Admitted"
	// ConditionGPUMonitoring is False (reason NodesNotMonitored) while a worker that asks for
	// GPUs runs on a node whose agent does not watch its GPUs (no NVML: the message names
	// each node and why, from the agent's heartbeat): a GPU fault there is no evidence, and
	// the worker's failure is judged from its exit alone. True (reason AllNodesMonitored)
	// once every such worker's node is watched again; absent while it never was False.
	ConditionGPUMonitoring = "GPUMonitoring"
)

// Reasons of conditions and events that are not a Cause.
const (
	ReasonAllWorkersRunning = "AllWorkersRunning"
	ReasonNodesNotMonitored = "NodesNotMonitored"
	ReasonAllNodesMonitored = "AllNodesMonitored"
	ReasonWaitingForWorkers = "WaitingForWorkers"
	ReasonJobCompleted      = "JobCompleted"
	ReasonSuspended         = "Suspended"
	ReasonResumed           = "Resumed"
	ReasonAttemptCreated    = "AttemptCreated"
	ReasonPluginError       = "PluginError"
	ReasonPluginOK          = "PluginReady"
	ReasonRestarting        = "Restarting"
	ReasonJobDeleted        = "JobDeleted"
	// ReasonExclusionsForgotten: status.excludedNodes is full, its oldest entries go.
	ReasonExclusionsForgotten = "ExclusionsForgotten"
	// ReasonMaintenanceBlocked: a drain cannot move the run (MaintenanceBlocked's event).
	ReasonMaintenanceBlocked = "MaintenanceBlocked"
	// ReasonNoPlacement: MaintenanceBlocked's reason, the gang fits nowhere else.
	ReasonNoPlacement = "NoPlacement"
	// ReasonMaintenanceOver: a node's maintenance is over and its exclusion lifted.
	ReasonMaintenanceOver = "MaintenanceOver"
	// ReasonCheckpointRequested: a planned move asks the workers to save (spec.checkpoint);
	// ReasonCheckpointDone: every worker answered, or the deadline passed, and the move goes on.
	ReasonCheckpointRequested = "CheckpointRequested"
	ReasonCheckpointDone      = "CheckpointDone"

	// Reasons of Stalled.
	ReasonNodeUnreachable = "NodeUnreachable" // an old worker's node is unreachable
	ReasonPodsStuck       = "PodsStuck"       // old workers stopping long past their grace period
	ReasonJobNotReleased  = "JobNotReleased"  // the Job controller has not seen a Job deleted
	ReasonNameTaken       = "NameTaken"       // a Job or Service of the run's name is not the run's
	ReasonJobRejected     = "JobRejected"     // the API server refused the attempt's Job
	ReasonPodsNotCreated  = "PodsNotCreated"  // the Job creates no pods (a quota, an admission policy)
	// ReasonDeviceClassNotFound: the cluster has no DeviceClass of spec.gpus.deviceClassName.
	ReasonDeviceClassNotFound = "DeviceClassNotFound"
	// ReasonInPlaceUnsupported: restartMode InPlace on nodes that cannot restart a pod in
	// place (the kubelet does not declare the feature, or the node agent is not ready for it).
	ReasonInPlaceUnsupported = "InPlaceUnsupported"
	ReasonProgressing        = "Progressing" // Stalled=False

	// Reasons of InPlaceWaiting.
	// ReasonStoppingOldWorkers: the gang's barrier waits for every old worker to stop.
	ReasonStoppingOldWorkers = "StoppingOldWorkers"
	// ReasonOpeningBarriers: the gang's go signal is given; the node agents open the pods'
	// barriers.
	ReasonOpeningBarriers = "OpeningBarriers"
	// ReasonInPlaceFallback: a wait ran out (a worker that did not stop, a barrier nobody
	// opened, a silent node agent): the pods it names moved to new pods elsewhere.
	ReasonInPlaceFallback = "InPlaceFallback"
	// ReasonSpareTookIndex (an event): warm spares took the indexes of an attempt that had
	// no pod (spec.spares), each named with its index and node.
	ReasonSpareTookIndex = "SpareTookIndex"
	// ReasonSparesUnavailable (an event): the run's template cannot have warm spares (its
	// barrier cannot supervise its worker), so the attempt makes none.
	ReasonSparesUnavailable = "SparesUnavailable"
	// ReasonBarrierOpen: every worker of the attempt runs it (InPlaceWaiting=False).
	ReasonBarrierOpen = "BarrierOpen"
	// ReasonBarrierImageUnpullable: a worker's barrier image cannot be pulled on its node:
	// InPlaceRestarts=False for restartMode Auto (the attempt starts again without it), and
	// Stalled for restartMode InPlace, which needs it.
	ReasonBarrierImageUnpullable = "BarrierImageUnpullable"
	// ReasonRolesPolicyMissing: the run's framework lays its pods out in roles, and the
	// admission policy that labels them (RolesPolicyName) is not installed.
	ReasonRolesPolicyMissing = "RolesPolicyMissing"
	// ReasonRolesInvalid: spec.roles names a role the framework's layout does not have, or
	// a container the template does not; the message names the field.
	ReasonRolesInvalid = "RolesInvalid"

	// The Kueue integration's reasons (Admitted, Suspended, Stalled and events).
	// ReasonQueued: the run's Workload waits for Kueue to admit it; no worker runs.
	ReasonQueued = "Queued"
	// ReasonAdmitted: Kueue admitted the run's Workload; the next attempt starts.
	ReasonAdmitted = "Admitted"
	// ReasonPreempted: Kueue preempted the run's Workload for another (the message names
	// it): the run is suspended, spends no restart, and resumes when admitted again.
	ReasonPreempted = "Preempted"
	// ReasonEvictedByKueue: Kueue evicted the Workload for another reason than a preemption
	// (an admission check lost, PodsReady timeout, a stopped ClusterQueue, a deactivation):
	// the message has Kueue's reason; handled as a preemption.
	ReasonEvictedByKueue = "EvictedByKueue"
	// ReasonKueueOff: Stalled, the run names a queue and this controller runs without the
	// Kueue integration (launcher controller --kueue): it starts nothing rather than bypass
	// the queue.
	ReasonKueueOff = "KueueIntegrationOff"
	// ReasonWorkloadTaken: Stalled, a Workload of the run's Workload name is not the run's.
	ReasonWorkloadTaken = "WorkloadNameTaken"
	// ReasonWorkloadRefused: Stalled, the run's Workload cannot be made: its priority class
	// is missing, or the API server (Kueue's webhook) refuses it; the message says which.
	ReasonWorkloadRefused = "WorkloadRefused"
	// ReasonWorkloadOutdated: Stalled, spec.template or spec.roles changed after the run's
	// Workload was queued: no attempt starts with pods other than those Kueue admits.
	ReasonWorkloadOutdated = "WorkloadOutdated"
	// ReasonGangRestarting is the Workload's PodsReady=False reason while faultline restarts
	// the gang inside one admission. Kueue's WaitForPodsReady times only its own reasons
	// (WaitForStart, WaitForRecovery): a restart, bounded by the run's own budgets and
	// backoff, is never taken for a workload stuck without its pods.
	ReasonGangRestarting = "GangRestarting"
)

// Actions of the controller's events (events.k8s.io "action"); tools such as
// `launcher timeline` read them back.
const (
	ActionCreateAttempt = "CreateAttempt"
	ActionRestart       = "Restart"
	ActionFail          = "Fail"
	ActionSucceed       = "Succeed"
	ActionSuspend       = "Suspend"
	ActionResume        = "Resume"
	ActionLoadPlugin    = "LoadPlugin"
	ActionStopWorkers   = "StopWorkers"
	ActionWait          = "Wait"
	ActionLiftExclusion = "LiftExclusion"
	// ActionQueue: the run's Workload was created, or Kueue admitted it.
	ActionQueue = "Queue"
)
