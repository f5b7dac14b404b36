package inplace

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// Decisions says what the controller decided for the gang a pod belongs to. The agent's
// implementation reads it from the pod's TrainingRun (its status, through a read-only
// watch); the loop needs nothing else of the run.
type Decisions interface {
	// For returns the attempt pod's gang is to run and whether the gang's barrier is open
	// for it; ok is false when the run decided nothing in place (the pod is left alone).
	For(pod *corev1.Pod) (attempt int, barrierOpen, ok bool)
}

// Confirm reads pod's decision again from the API server itself, not the agent's cache: the
// attempt the gang is to run and whether its barrier is open, as the run's status says now.
// The loop asks it before it opens a barrier: a cache that lags an attempt behind must
// refuse, never open.
type Confirm func(ctx context.Context, pod *corev1.Pod) (attempt int, barrierOpen, ok bool, err error)

// Syncer carries a decision out on one pod: Restarter.Sync; and Restarter.OpenBarrier, which
// the loop calls for every open it decided (once the API server confirmed it), the pod's
// status showing the barrier waiting or the runtime running it already.
type Syncer interface {
	Sync(ctx context.Context, pod *corev1.Pod, attempt int, barrierOpen bool) (Action, error)
	OpenBarrier(ctx context.Context, pod *corev1.Pod, attempt int) (bool, error)
}

var _ Syncer = &Restarter{}

// Loop runs Sync for the node's in-place pods whenever a pod or its run's decision changes:
// the agent's pod informer calls PodChanged, its run watch RunChanged. A queue keyed by pod
// keeps one Sync per pod at a time and retries failures with backoff; Sync being
// idempotent, a pod queued twice costs a list call, not a second stop.
type Loop struct {
	syncer    Syncer
	pods      corelisters.PodLister
	decisions Decisions
	// Confirm, when set, is asked before a barrier opens (see Confirm).
	Confirm Confirm
	// RuntimeBarrier, when set, says whether the runtime runs a pod's barrier already, for a
	// pod whose status lags (Decision.Restarting): with the gang's barrier open, the loop
	// opens it then (Restarter.BarrierRunning).
	RuntimeBarrier func(ctx context.Context, pod *corev1.Pod) bool
	// Traced, when set, is told of each stop and open the loop carried out on a pod.
	Traced func(ctx context.Context, s Step)
	queue  workqueue.TypedRateLimitingInterface[types.NamespacedName]
	log    *slog.Logger
	// stopping are the stops in flight: a stop waits for the old workers to exit, up to
	// their grace period, and holds no loop worker meanwhile (see processNext).
	stopping sync.WaitGroup
}

// Step is one stop or open the loop carried out on a pod, as Traced is told of it.
type Step struct {
	Pod     *corev1.Pod
	Action  Action
	Attempt int
	// Start and End: when it began (an open: before its confirmation) and ended (a stop:
	// when the runtime had stopped the old workers, before the agent's record of it).
	Start, End time.Time
	// Via is how an open reached the barrier (ViaSocket, ViaExec), or a stop a supervised
	// worker (ViaSocket, ViaRuntime); "" for another stop, or an open that opened nothing.
	// ViaReason says why it did not go through the barrier's socket.
	Via, ViaReason string
	Err            error
}

// notesKey keys, in a step's context, where the Restarter notes how it opened a barrier
// (noteVia) and when it stopped old workers (noteStopped): the loop puts them in the step's
// Step.
type notesKey struct{}

// stepNotes is how a step opened a barrier, and why so (Step.Via, Step.ViaReason); and when a
// stop's runtime calls returned (noteStopped), before the agent's record of it.
type stepNotes struct {
	via, reason string
	stoppedAt   time.Time
}

// withNotes is ctx with room for the step's notes.
func withNotes(ctx context.Context) (context.Context, *stepNotes) {
	v := &stepNotes{}
	return context.WithValue(ctx, notesKey{}, v), v
}

// noteStopped records that the step running in ctx has stopped its old workers now: the
// step's End, which its record of the stop then follows (Restarter.recordStopped).
func noteStopped(ctx context.Context) {
	if v, ok := ctx.Value(notesKey{}).(*stepNotes); ok {
		v.stoppedAt = time.Now()
	}
}

// noteVia records how the step running in ctx opened a barrier, and why so, if the loop
// asked.
func noteVia(ctx context.Context, via, reason string) {
	if v, ok := ctx.Value(notesKey{}).(*stepNotes); ok {
		v.via, v.reason = via, reason
	}
}

// NewLoop is a Loop over the node's pods (the agent's informer's lister).
func NewLoop(s Syncer, pods corelisters.PodLister, d Decisions, log *slog.Logger) *Loop {
	if log == nil {
		log = slog.Default()
	}
	return &Loop{
		syncer: s, pods: pods, decisions: d, log: log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "inplace"}),
	}
}

// PodChanged queues pod if it restarts in place (it has the barrier init container).
func (l *Loop) PodChanged(pod *corev1.Pod) {
	if hasBarrier(pod) {
		l.queue.Add(types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name})
	}
}

// RunChanged queues every in-place pod of the run on this node: its decision changed.
func (l *Loop) RunChanged(namespace, run string) {
	pods, err := l.pods.Pods(namespace).List(labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run}))
	if err != nil {
		l.log.Warn("list a run's pods", "run", namespace+"/"+run, "error", err)
		return
	}
	for _, p := range pods {
		l.PodChanged(p)
	}
}

// SyncWorkers is how many of its node's pods an agent syncs at once (Run's workers): a stop
// waits for the old worker to exit, and the node's other pods must not wait behind it (4).
// Where the barrier records are on the node's heartbeat (recordsOnHeartbeat: heartbeat.Records)
// each sync of a barrier in the worker container waits for its record, and the records asked
// for while one write is in flight go in the next, whatever their number, so the more syncs
// wait together the fewer writes: 32. At four, the 32 opens of the node left by a 32-worker
// restart went in eight writes one after another, each a list of the node's pods and a Lease
// update on a loaded API server: 3.6 s from the first open to the gang Running (2026-12-04).
func SyncWorkers(recordsOnHeartbeat bool) int {
	if recordsOnHeartbeat {
		return 32
	}
	return 4
}

// Run syncs queued pods with workers goroutines until ctx is done. A stop runs apart from
// them (it waits for the old workers to exit, up to their grace period): no pod of the node,
// of this run or another, waits behind another's stop for its barrier.
func (l *Loop) Run(ctx context.Context, workers int) {
	go func() {
		<-ctx.Done()
		l.queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for l.processNext(ctx) {
			}
		})
	}
	wg.Wait()
	l.stopping.Wait()
}

// processNext syncs one queued pod; false once the queue is shut down.
func (l *Loop) processNext(ctx context.Context) bool {
	key, quit := l.queue.Get()
	if quit {
		return false
	}
	pod, err := l.pods.Pods(key.Namespace).Get(key.Name)
	if err != nil {
		l.queue.Forget(key) // gone: nothing to restart
		l.queue.Done(key)
		return true
	}
	attempt, open, ok := l.decisions.For(pod)
	if !ok {
		l.queue.Forget(key)
		l.queue.Done(key)
		return true
	}
	d := Decide(pod, attempt, open)
	action := d.Action
	if action == ActionWait && d.Restarting && open && l.RuntimeBarrier != nil && l.RuntimeBarrier(ctx, pod) {
		action = ActionOpenBarrier
	}
	switch action {
	case ActionStopWorkers:
		// The pod stays in flight (a change queues it again once this is done).
		l.stopping.Go(func() {
			defer l.queue.Done(key)
			l.sync(ctx, key, pod, attempt, open)
		})
		return true
	case ActionOpenBarrier:
		start := time.Now()
		if !l.confirmed(ctx, key, pod, attempt) {
			l.queue.Done(key)
			return true
		}
		defer l.queue.Done(key)
		// The status shows the barrier waiting, or the runtime runs it already.
		sctx, via := withNotes(ctx)
		_, err := l.syncer.OpenBarrier(sctx, pod, attempt)
		l.done(ctx, key, Step{Pod: pod, Action: ActionOpenBarrier, Attempt: attempt, Start: start, Via: via.via, ViaReason: via.reason, Err: err})
		return true
	}
	defer l.queue.Done(key)
	l.sync(ctx, key, pod, attempt, open)
	return true
}

// confirmRetries is how often the loop reads a run again whose go signal the API server did
// not confirm: the queue's backoff makes them 5 to 80 ms apart.
const confirmRetries = 5

// confirmed reports whether the API server confirms the decision to open pod's barrier for
// attempt (Confirm); a refusal or an error is logged, and the pod retried or left for the
// run's next change.
func (l *Loop) confirmed(ctx context.Context, key types.NamespacedName, pod *corev1.Pod, attempt int) bool {
	if l.Confirm == nil {
		return true
	}
	live, open, ok, err := l.Confirm(ctx, pod)
	switch {
	case err != nil:
		l.queue.AddRateLimited(key)
		l.log.Warn("could not confirm a barrier's go signal with the API server; retrying", "pod", key.String(), "attempt", attempt, "error", err)
		return false
	case !ok || !open || live != attempt:
		// Either the cache lags (the run's next change, its watch event, queues the pod
		// again) or the read does: one the pod shared (ConfirmWith) began before the cache
		// saw the go signal, and no change of the run is to come. A few quick retries tell
		// which; then the run's next change.
		if l.queue.NumRequeues(key) < confirmRetries {
			l.queue.AddRateLimited(key)
		} else {
			l.queue.Forget(key)
		}
		l.log.Info("the API server does not confirm the go signal the cache shows; not opening", "pod", key.String(),
			"cached attempt", attempt, "attempt", live, "barrierOpen", open, "decided", ok)
		return false
	}
	return true
}

// sync carries out the decision on one pod.
func (l *Loop) sync(ctx context.Context, key types.NamespacedName, pod *corev1.Pod, attempt int, open bool) {
	start := time.Now()
	sctx, via := withNotes(ctx)
	action, err := l.syncer.Sync(sctx, pod, attempt, open)
	l.done(ctx, key, Step{Pod: pod, Action: action, Attempt: attempt, Start: start, End: via.stoppedAt, Via: via.via, ViaReason: via.reason, Err: err})
}

// done follows up step s on the pod of key (its End is now, unless set): it tells Traced of
// a stop or an open, and forgets the pod or retries it by the outcome.
func (l *Loop) done(ctx context.Context, key types.NamespacedName, s Step) {
	if s.End.IsZero() {
		s.End = time.Now()
	}
	attempt, err := s.Attempt, s.Err
	if errors.Is(err, errNotYet) {
		// A barrier just started and not listening yet: the same open again in a moment
		// (the queue's backoff: 5 ms, then doubling), not a step of the restart.
		l.queue.AddRateLimited(key)
		l.log.Debug("the barrier does not listen yet; opening again", "pod", key.String(), "attempt", attempt)
		return
	}
	if l.Traced != nil && (s.Action == ActionStopWorkers || s.Action == ActionOpenBarrier) {
		l.Traced(ctx, s)
	}
	switch {
	case err == nil:
		l.queue.Forget(key)
	case errors.Is(err, ErrStale):
		// The decision is older than the pod: retrying it cannot help; the next decision
		// queues the pod again.
		l.queue.Forget(key)
		l.log.Info("barrier refused a stale attempt", "pod", key.String(), "attempt", attempt, "error", err)
	default:
		l.queue.AddRateLimited(key)
		l.log.Warn("in-place restart step failed; retrying", "pod", key.String(), "attempt", attempt, "action", s.Action, "error", err)
	}
}
