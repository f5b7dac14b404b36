// Package runwatch watches, for one node agent, the TrainingRuns that have pods on its node,
// each run alone: a watch of one object (a field selector on its namespace and name) that
// starts with the run's first pod on the node and ends with its last. The agent reads there
// what the controller decided for an in-place restart; it never lists or watches the runs
// of other nodes (issue 38: every agent cached every run of the cluster to read the
// attempts of the few whose pods it holds, and each run's change reached every node).
//
// A run with pods on many nodes is watched once per node, as a Node is: the API server
// serves each watch from its watch cache, and a watch that selects one object by name
// costs it that object's events alone.
package runwatch

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// Runs lists and watches TrainingRuns (of every namespace, narrowed by the options' field
// selector). coreclient.Client is one.
type Runs interface {
	ListTrainingRuns(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.TrainingRunList, error)
	WatchTrainingRuns(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Selector is the field selector of the one run namespace/name.
func Selector(namespace, name string) string {
	return fields.AndSelectors(fields.OneTermEqualSelector("metadata.namespace", namespace),
		fields.OneTermEqualSelector("metadata.name", name)).String()
}

// Probe asks the API server whether runs may be listed (faultline's CRD installed, the
// agent's RBAC): a list that selects no run, so that it reads nothing of any.
func Probe(ctx context.Context, runs Runs) error {
	_, err := runs.ListTrainingRuns(ctx, metav1.ListOptions{FieldSelector: Selector("", ""), Limit: 1})
	return err
}

// Set is the watches of the runs with pods in an informer's store (the node's pods). It is
// a store of the runs it watches, keyed namespace/name (inplace.StoreDecisions reads it).
type Set struct {
	runs      Runs
	pods      cache.Store
	transform cache.TransformFunc
	changed   func(namespace, name string)
	log       *slog.Logger

	mu      sync.Mutex
	ctx     context.Context // nil until Start
	watches map[string]*runWatch
}

type runWatch struct {
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
}

// New is a Set over pods, the node's pod informer's store. transform (may be nil) slims each
// run as it is cached; changed is called with each change of a watched run (its first sight
// included).
func New(runs Runs, pods cache.Store, transform cache.TransformFunc, changed func(namespace, name string), log *slog.Logger) *Set {
	return &Set{runs: runs, pods: pods, transform: transform, changed: changed, log: log, watches: map[string]*runWatch{}}
}

// Handler is what the node's pod informer tells the Set: a pod's run is watched from its
// first pod on, and not after its last pod is gone.
func (s *Set) Handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.podSeen(obj) },
		UpdateFunc: func(_, obj any) { s.podSeen(obj) },
		DeleteFunc: s.podGone,
	}
}

// Start starts the watches of the runs of the pods in the store, and waits until each has
// listed its run, within timeout; the watches go on until ctx is done. A Set that is not
// started watches nothing.
func (s *Set) Start(ctx context.Context, timeout time.Duration) error {
	s.mu.Lock()
	s.ctx = ctx
	for _, obj := range s.pods.List() {
		if ns, name, ok := runOf(obj); ok {
			s.watchLocked(ns, name)
		}
	}
	var synced []cache.InformerSynced
	for _, w := range s.watches {
		synced = append(synced, w.informer.HasSynced)
	}
	s.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), synced...) {
		return fmt.Errorf("the runs of the node's pods could not be read within %s: %w", timeout, context.Cause(wctx))
	}
	return nil
}

// GetByKey returns the watched run namespace/name, if its watch has listed it.
func (s *Set) GetByKey(key string) (any, bool, error) {
	s.mu.Lock()
	w := s.watches[key]
	s.mu.Unlock()
	if w == nil {
		return nil, false, nil
	}
	return w.informer.GetStore().GetByKey(key)
}

// watched are the keys (namespace/name) of the runs watched now, sorted (for the tests).
func (s *Set) watched() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.watches))
	for k := range s.watches {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (s *Set) podSeen(obj any) {
	ns, name, ok := runOf(obj)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx != nil {
		s.watchLocked(ns, name)
	}
}

func (s *Set) podGone(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	ns, name, ok := runOf(obj)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := ns + "/" + name
	w := s.watches[key]
	if w == nil {
		return
	}
	// The informer's store no longer holds the deleted pod when its handlers run.
	if slices.ContainsFunc(s.pods.List(), func(o any) bool {
		pns, pname, ok := runOf(o)
		return ok && pns == ns && pname == name
	}) {
		return
	}
	w.stop()
	delete(s.watches, key)
	s.log.Debug("run no longer watched: its last pod left the node", "run", key)
}

// watchLocked starts the watch of run ns/name unless it runs; s.mu is held.
func (s *Set) watchLocked(ns, name string) {
	key := ns + "/" + name
	if _, ok := s.watches[key]; ok || s.ctx.Err() != nil {
		return
	}
	selector := Selector(ns, name)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return s.runs.ListTrainingRuns(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return s.runs.WatchTrainingRuns(ctx, o)
		},
	}
	// The informer streams its initial list (WatchList) unless runs says it cannot, as a
	// test's fake does.
	informer := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, s.runs), &v1alpha1.TrainingRun{}, 0, cache.Indexers{})
	if s.transform != nil {
		_ = informer.SetTransform(s.transform) // fails only once the informer runs
	}
	changed := func(any) { s.changed(ns, name) }
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    changed,
		UpdateFunc: func(_, obj any) { changed(obj) },
		DeleteFunc: changed,
	}); err != nil {
		s.log.Warn("run not watched", "run", key, "error", err) // only once an informer has stopped
		return
	}
	ctx, stop := context.WithCancel(s.ctx)
	s.watches[key] = &runWatch{informer: informer, stop: stop}
	go informer.RunWithContext(ctx)
	s.log.Debug("run watched: it has a pod on the node", "run", key)
}

// runOf is the run of a pod: its namespace and the run label.
func runOf(obj any) (ns, name string, ok bool) {
	p, isPod := obj.(*corev1.Pod)
	if !isPod || p.Labels[v1alpha1.LabelRun] == "" {
		return "", "", false
	}
	return p.Namespace, p.Labels[v1alpha1.LabelRun], true
}
