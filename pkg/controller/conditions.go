package controller

// Condition types of a TrainingRun.
const (
	ConditionReady       = "Ready"
	ConditionRestarting  = "Restarting"
	ConditionSucceeded   = "Succeeded"
	ConditionFailed      = "Failed"
	ConditionSuspended   = "Suspended"
	ConditionPluginReady = "PluginReady"
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
)

// Crash points for the crash-safety tests (launcher controller --test-crash-at).
const (
	CrashRestartPersisted = "restart-persisted"
	CrashOldJobDeleted    = "old-job-deleted"
)
