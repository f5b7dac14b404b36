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
)

// Reasons of conditions and events that are not a Cause.
const (
	ReasonAllWorkersRunning = "AllWorkersRunning"
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

	// Reasons of Stalled.
	ReasonNodeUnreachable = "NodeUnreachable" // an old worker's node is unreachable
	ReasonPodsStuck       = "PodsStuck"       // old workers stopping long past their grace period
	ReasonJobNotReleased  = "JobNotReleased"  // the Job controller has not seen a Job deleted
	ReasonNameTaken       = "NameTaken"       // a Job or Service of the run's name is not the run's
	ReasonJobRejected     = "JobRejected"     // the API server refused the attempt's Job
	ReasonPodsNotCreated  = "PodsNotCreated"  // the Job creates no pods (a quota, an admission policy)
	ReasonProgressing     = "Progressing"     // Stalled=False
	// ReasonRolesPolicyMissing: the run's framework lays its pods out in roles, and the
	// admission policy that labels them (RolesPolicyName) is not installed.
	ReasonRolesPolicyMissing = "RolesPolicyMissing"
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
)
