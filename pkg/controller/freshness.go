package controller

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// knownVersions remembers, per run, the resourceVersion this controller last wrote or read
// from the API server. It lets a reconcile read the run from the cache without ever acting
// on a status older than its own last write (the status is the state machine: an old one
// would repeat a step, e.g. create an attempt's Job twice).
//
// The cache lags behind our writes, so a cached run is trusted only at the version recorded
// here: at that version it is exactly what we last wrote or read. At any other version
// (older: the cache has not caught up; newer: someone else changed the run) the run is read
// from the API server, and that version is recorded. A new process knows no versions, so its
// first read of every run is live: a crash mid-restart resumes from the API server's status.
//
// This takes a live GET off the path of every reconcile, a decision's included: under load
// that GET was the largest part of the controller's decision latency.
type knownVersions struct {
	mu sync.Mutex
	rv map[types.NamespacedName]string
}

func (k *knownVersions) is(key types.NamespacedName, rv string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return rv != "" && k.rv[key] == rv
}

func (k *knownVersions) record(run *v1alpha1.TrainingRun) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.rv == nil {
		k.rv = map[types.NamespacedName]string{}
	}
	k.rv[runKey(run)] = run.ResourceVersion
}

func (k *knownVersions) forget(key types.NamespacedName) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.rv, key)
}

// getRun reads a run: from the cache when it holds the version last written or read here,
// from the API server otherwise.
func (r *Reconciler) getRun(ctx context.Context, key types.NamespacedName, run *v1alpha1.TrainingRun) error {
	if err := r.Get(ctx, key, run); err == nil && r.versions.is(key, run.ResourceVersion) {
		return nil
	}
	*run = v1alpha1.TrainingRun{}
	if err := r.APIReader.Get(ctx, key, run); err != nil {
		return err
	}
	r.versions.record(run)
	return nil
}
