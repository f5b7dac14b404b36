// Package controller reconciles TrainingRuns. It is thin on purpose: it observes (the run,
// its Job, its pods, their nodes), asks pkg/exitclass for a verdict and pkg/policy for a
// decision, persists that decision in the run's status, and only then acts on it.
//
// The status is the state machine. A restart decision writes attempt+1 and phase Restarting
// before anything is deleted; every later step (delete the old Job, wait until every pod of
// the old attempt is gone, back off, create the next Job) is an idempotent function of that
// status, so a controller that crashes anywhere in between resumes the same restart: no
// attempt is skipped and none is doubled. A run is read from the cache only at the version
// this controller last wrote or read from the API server (knownVersions), so a decision is
// never taken on a status older than the last write.
package controller
