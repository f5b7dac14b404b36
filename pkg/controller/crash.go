package controller

// Crash points for the crash-safety tests (launcher controller --test-crash-at).
const (
	CrashRestartPersisted = "restart-persisted"
	CrashOldJobDeleted    = "old-job-deleted"
)
