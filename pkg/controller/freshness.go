package controller

import (
	"context"
	"errors"
	"slices"
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
// here: at that version it is exactly what we last wrote or read. A cached version that one
// of our own writes replaced (status writes are optimistically locked, so each replaced
// exactly the version it was made from) means the cache has not caught up yet: the watch
// event of that write is still to come and will reconcile the run again, so the reconcile
// waits for it instead of asking the API server. At any other version (someone else changed
// the run, or the cache is further behind) the run is read from the API server, and that
// version is recorded. A new process knows no versions, so its first read of every run is
// live: a crash mid-restart resumes from the API server's status.
//
// This takes a live GET off the path of every reconcile, a decision's included: under load
// that GET was the largest part of the controller's decision latency.
type knownVersions struct {
	mu   sync.Mutex
	runs map[types.NamespacedName]*runVersions
}

type runVersions struct {
	// known is the version last written or read live.
	known string
	// replaced are the versions our writes replaced since the cache last showed known.
	replaced []string
}

// maxReplaced bounds runVersions.replaced: a reconcile writes a run's status a few times
// at most before the cache catches up.
const maxReplaced = 8

// Where getRun found a run: the source label of MetricRunReads.
const (
	ReadFromCache     = "cache"
	ReadFromAPIServer = "apiserver"
	// ReadDeferred: the cache is behind our own write; the write's event reconciles again.
	ReadDeferred = "deferred"
)

// source says where to read key's run, given the version its cache holds. A cache at the
// known version has caught up with every write of ours, so the versions they replaced are
// dropped: from then on the cache going back to one of them would be no lag, but an error.
func (k *knownVersions) source(key types.NamespacedName, cached string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	v := k.runs[key]
	switch {
	case v == nil || cached == "":
		return ReadFromAPIServer
	case cached == v.known:
		v.replaced = v.replaced[:0]
		return ReadFromCache
	case slices.Contains(v.replaced, cached):
		return ReadDeferred
	}
	return ReadFromAPIServer
}

// read records a version read from the API server.
func (k *knownVersions) read(run *v1alpha1.TrainingRun) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.entry(runKey(run)).known = run.ResourceVersion
}

// wrote records our write of run, made from version replaced.
func (k *knownVersions) wrote(run *v1alpha1.TrainingRun, replaced string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	v := k.entry(runKey(run))
	if replaced != "" {
		v.replaced = append(v.replaced, replaced)
		if len(v.replaced) > maxReplaced {
			v.replaced = v.replaced[1:]
		}
	}
	v.known = run.ResourceVersion
}

// entry returns key's versions, created if need be; k.mu must be held.
func (k *knownVersions) entry(key types.NamespacedName) *runVersions {
	if k.runs == nil {
		k.runs = map[types.NamespacedName]*runVersions{}
	}
	v := k.runs[key]
	if v == nil {
		v = &runVersions{}
		k.runs[key] = v
	}
	return v
}

func (k *knownVersions) forget(key types.NamespacedName) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.runs, key)
}

// errCacheBehindOwnWrite: the cached run is older than our own last write; its watch event
// will reconcile the run again.
var errCacheBehindOwnWrite = errors.New("the cache has not caught up with this controller's write")

// getRun reads a run: from the cache when it holds the version last written or read here,
// errCacheBehindOwnWrite when it holds one our own write replaced, from the API server
// otherwise.
func (r *Reconciler) getRun(ctx context.Context, key types.NamespacedName, run *v1alpha1.TrainingRun) error {
	if err := r.Get(ctx, key, run); err == nil {
		source := r.versions.source(key, run.ResourceVersion)
		runReads.WithLabelValues(source).Inc()
		switch source {
		case ReadFromCache:
			return nil
		case ReadDeferred:
			return errCacheBehindOwnWrite
		}
	} else {
		runReads.WithLabelValues(ReadFromAPIServer).Inc()
	}
	*run = v1alpha1.TrainingRun{}
	if err := r.APIReader.Get(ctx, key, run); err != nil {
		return err
	}
	r.versions.read(run)
	return nil
}
