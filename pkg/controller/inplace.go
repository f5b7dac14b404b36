package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/inplacegate"
)

// A gang restart in place (docs/in-place-restart.md): the attempt's Job and the pods of the
// healthy nodes stay; the node agents stop the old workers through the container runtime, and
// each pod's RestartAllContainers rule brings it back to its barrier; only the indexes whose
// pods cannot restart where they are (on a faulty node, ended, being deleted) get new pods.
// Once no old worker of the gang runs, the controller writes barrierOpenedAt, and the agents
// let every pod's workers start with the new attempt.

// inPlaceStarting reports whether the current attempt restarts in place and its barrier is
// not open yet.
func inPlaceStarting(run *v1alpha1.TrainingRun) bool {
	rec := attempt.Record(run)
	return rec != nil && rec.RestartMode == v1alpha1.RestartModeInPlace && rec.BarrierOpenedAt == nil
}

// heartbeats reads the node agents' heartbeats from the cache.
func (r *Reconciler) heartbeats(ctx context.Context) inplacegate.Heartbeats {
	return func(node string) *exitclass.Heartbeat { return r.agentHeartbeat(ctx, node) }
}

// barrier is where the next Job's pods get the barrier: its image, "" for pods that do not
// restart in place (restartMode Recreate, Index scope, or Auto on nodes that cannot), and
// whether it is the worker container's entrypoint (BarrierInWorker, and every node the run
// may use mounts image volumes: inplacegate.BarrierInWorker; else the init container). With
// restartMode InPlace on nodes that cannot, why says which.
func (r *Reconciler) barrier(ctx context.Context, run *v1alpha1.TrainingRun) (image string, inWorker bool, why string, err error) {
	if run.Spec.RestartScope == v1alpha1.RestartScopeIndex || run.Spec.FailurePolicy.RestartMode == v1alpha1.RestartModeRecreate || r.BarrierImage == "" {
		return "", false, "", nil
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionInPlaceRestarts); c != nil && c.Status == metav1.ConditionFalse {
		if run.Spec.FailurePolicy.RestartMode == v1alpha1.RestartModeInPlace {
			return "", false, "spec.failurePolicy.restartMode is InPlace, and " + c.Message, nil
		}
		return "", false, "", nil // Auto: recreate, as the condition says
	}
	nodes := &corev1.NodeList{}
	if err := r.List(ctx, nodes); err != nil {
		return "", false, "", fmt.Errorf("list nodes: %w", err)
	}
	ok, unsupported := inplacegate.Support(run, nodes.Items, r.heartbeats(ctx), r.now().Time)
	switch {
	case ok:
		inWorker := r.BarrierInWorker
		if inWorker {
			inWorker, _ = inplacegate.BarrierInWorker(run, nodes.Items)
		}
		return r.BarrierImage, inWorker, "", nil
	case run.Spec.FailurePolicy.RestartMode != v1alpha1.RestartModeInPlace:
		return "", false, "", nil // Auto: recreate
	case len(unsupported) == 0:
		return "", false, "spec.failurePolicy.restartMode is InPlace and no schedulable node matches spec.template.spec.nodeSelector", nil
	}
	return "", false, fmt.Sprintf("spec.failurePolicy.restartMode is InPlace, and %s cannot restart a pod in place: "+
		"enable the kubelet's RestartAllContainersOnContainerExits feature and give the node agent its container runtime socket, or set restartMode Auto or Recreate", named(unsupported)), nil
}

// inPlace moves a restart in place on: the old pods of moved indexes are stopped, and each
// gets its new pod once the old one is gone; once no worker of an older attempt runs in the
// gang, the moved indexes' old pods are gone from the API and the backoff is over, the
// barrier opens (one status write for the gang). A pod whose wait runs out
// (inplacegate.BeforeOpen: its grace period and a margin, or at once when its node agent is
// silent) is deleted and its index moves; what faultline cannot end is named in Stalled.
func (r *Reconciler) inPlace(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, error) {
	n := run.Status.Attempt
	rec := attempt.Record(run)
	workers := obs.jobPods()
	now := r.now()
	hb := r.heartbeats(ctx)
	moved := r.inPlaceMoved(run, workers, obs)
	decidedAt, _ := restartDecidedAt(run)
	waits := inplacegate.BeforeOpen(workers, n, moved, obs.nodes, decidedAt, hb, now.Time)
	if overdue := overdueWaits(waits, now.Time); len(overdue) > 0 {
		return r.inPlaceFallback(ctx, run, overdue, "did not stop its workers in place", false)
	}
	var old, present []*corev1.Pod
	for _, p := range workers {
		i, _ := attempt.Index(p)
		k, _ := attempt.Number(p)
		if k < n && slices.Contains(moved, int32(i)) {
			old = append(old, p)
			// At most one bound pod per index, even on a node the attempt excludes: a new
			// pod made beside one that still runs (a hung worker on a faulted GPU) would
			// share its hostname, and the rendezvous of the frameworks that refuse a
			// duplicate task (TestInPlaceMovedIndexWaitsForItsOldPod).
			if !exitclass.Gone(p, obs.nodes) {
				present = append(present, p)
			}
			continue
		}
		present = append(present, p)
	}
	remove, stopped, endsBy := notEndingByShutdown(old, now.Time)
	if err := r.removePods(ctx, remove, true); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.forceRemovePods(ctx, stopped); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.createPods(ctx, run, obs.job, present, attempt.PodOptions{Attempt: n, ExcludedNodes: rec.ExcludedNodes}); err != nil {
		return ctrl.Result{}, err
	}
	if len(waits) > 0 {
		res, err := r.waitingFor(ctx, run, obs)
		if at := inplacegate.Earliest(waits, now.Time); err == nil && !at.IsZero() {
			res.RequeueAfter = earliest(res.RequeueAfter, at.Sub(now.Time))
		}
		if err == nil && !endsBy.IsZero() {
			res.RequeueAfter = earliest(res.RequeueAfter, endsBy.Sub(now.Time))
		}
		return res, err
	}
	// The moved indexes' old pods, gone from the cache: the API server must not have them
	// either, or an agent that has not seen their deletion would open them beside their
	// indexes' new pods.
	list, err := r.podsAt(ctx, run.Namespace, run.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if livePods(list, func(p *metav1.PartialObjectMetadata) bool {
		k, _ := attempt.Number(p)
		i, _ := attempt.Index(p)
		return attempt.OfRun(p, run) && k < n && slices.Contains(moved, int32(i))
	}, obs.all, obs.nodes) > 0 {
		return ctrl.Result{RequeueAfter: recheck}, nil
	}
	// Nor may the API server have a later barrier record than the cache read: the workers
	// counted as stopped are stopped as of now, not as of the cache.
	at, err := r.recordsAt(ctx, workers, list)
	if err != nil {
		return ctrl.Result{}, err
	}
	if p := inplacegate.RecordBehind(workers, at); p != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("the cache lags a barrier record: not opening yet", "pod", p.Name, "cached", attempt.BarrierRecord(p), "apiServer", at[p.UID])
		return ctrl.Result{RequeueAfter: recheck}, nil
	}
	if next := run.Status.NextAttemptAt; next != nil && now.Before(next) {
		return ctrl.Result{RequeueAfter: next.Sub(now.Time)}, nil
	}
	rec.BarrierOpenedAt = &now
	rec.StartTime = &now
	rec.MovedIndexes = moved
	st := &run.Status
	st.Phase = v1alpha1.PhasePending
	st.NextAttemptAt = nil
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionRestarting, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAttemptCreated,
		Message: fmt.Sprintf("attempt %d restarted in place", n)})
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionInPlaceWaiting, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonOpeningBarriers,
		Message: fmt.Sprintf("attempt %d: every old worker stopped; the node agents open the pods' barriers, each within %s of its start (a pod whose node agent is silent moves at once)", n, inplacegate.OpenMargin)})
	unstall(run)
	if err := r.writeStatus(ctx, run); err != nil {
		return ctrl.Result{}, err
	}
	r.event(run, corev1.EventTypeNormal, v1alpha1.ReasonAttemptCreated, v1alpha1.ActionCreateAttempt, "attempt %d: every old worker stopped, barrier open; %d workers restarted in place, %s",
		n, int(run.Spec.Workers)-len(moved), movedText(moved))
	return ctrl.Result{}, nil
}

// recordsAt are the barrier records of pods as the API server has them, by UID: each pod's
// own (list: the run's pods' metadata, read from it) or, where later, its node's heartbeat's,
// from one list of the heartbeats. Nothing is read for a gang with no barrier in a worker
// container, the only one with records.
func (r *Reconciler) recordsAt(ctx context.Context, pods []*corev1.Pod, list []metav1.PartialObjectMetadata) (map[types.UID]*v1alpha1.BarrierRecord, error) {
	nodeOf := map[types.UID]string{}
	for _, p := range pods {
		if _, place := attempt.BarrierContainer(&p.Spec); place == attempt.BarrierInWorker {
			nodeOf[p.UID] = p.Spec.NodeName
		}
	}
	if len(nodeOf) == 0 {
		return nil, nil
	}
	leases := &coordinationv1.LeaseList{}
	if err := r.APIReader.List(ctx, leases, client.InNamespace(agentlease.Namespace), client.MatchingLabels(agentlease.Labels())); err != nil {
		return nil, fmt.Errorf("list the node agents' heartbeats: %w", err)
	}
	byName := map[string]*coordinationv1.Lease{}
	for i := range leases.Items {
		byName[leases.Items[i].Name] = &leases.Items[i]
	}
	var fresh []*corev1.Pod
	for _, m := range list {
		if node, ok := nodeOf[m.UID]; ok {
			fresh = append(fresh, &corev1.Pod{ObjectMeta: m.ObjectMeta, Spec: corev1.PodSpec{NodeName: node}})
		}
	}
	fresh = agentlease.WithRecords(fresh, func(node string) *coordinationv1.Lease { return byName[agentlease.Name(node)] })
	at := make(map[types.UID]*v1alpha1.BarrierRecord, len(fresh))
	for _, p := range fresh {
		if rec := attempt.BarrierRecord(p); rec != nil {
			at[p.UID] = rec
		}
	}
	return at, nil
}

// inPlaceMoved are the indexes of the current attempt, restarting in place, that get new
// pods: those the decision moved, those whose pod cannot restart where it is since (ended,
// deleted, its node excluded now), and those with a pod made for this attempt.
func (r *Reconciler) inPlaceMoved(run *v1alpha1.TrainingRun, workers []*corev1.Pod, obs *observed) []int32 {
	n := run.Status.Attempt
	rec := attempt.Record(run)
	moved := inplacegate.MovedIndexes(workers, run.Spec.Workers, rec.ExcludedNodes, obs.nodes, func(string) bool { return false })
	moved = append(moved, rec.MovedIndexes...)
	for _, p := range workers {
		if i, ok := attempt.Index(p); ok {
			if k, _ := attempt.Number(p); k == n && n > attempt.JobAttempt(run) {
				moved = append(moved, int32(i)) // a new pod made for this attempt
			}
		}
	}
	return slices.Compact(slices.Sorted(slices.Values(moved)))
}

// overdueWaits are the waits that have run out at now.
func overdueWaits(waits []inplacegate.Wait, now time.Time) []inplacegate.Wait {
	var out []inplacegate.Wait
	for _, w := range waits {
		if w.Overdue(now) {
			out = append(out, w)
		}
	}
	return out
}

// inPlaceFallback ends the waits that ran out: their pods are deleted and their indexes move
// to new pods, kept off the nodes whose agents are silent for the attempt, and off every
// overdue pod's node when offNodes (an agent that did not open its barrier in time: a new pod
// there would wait at its barrier for that agent again). The decision is
// written first (the attempt's excluded nodes and moved indexes, the InPlaceWaiting
// condition that names each pod, its node and what it waited for), then the pods are
// deleted. The record makes the deleted pods superseded: the exit their deletion causes (the
// barrier's SIGTERM) is no failure of the attempt, whenever a reconcile sees it, and a
// controller that crashed before the deletions makes them after (track).
func (r *Reconciler) inPlaceFallback(ctx context.Context, run *v1alpha1.TrainingRun, overdue []inplacegate.Wait, what string, offNodes bool) (ctrl.Result, error) {
	rec := attempt.Record(run)
	var names []string
	var pods []*corev1.Pod
	changed := false
	for _, w := range overdue {
		names = append(names, w.Describe())
		pods = append(pods, w.Pod)
		if node := w.Pod.Spec.NodeName; (w.Silent || offNodes) && node != "" && !slices.Contains(rec.ExcludedNodes, node) {
			rec.ExcludedNodes = append(rec.ExcludedNodes, node)
			changed = true
		}
		if i, ok := attempt.Index(w.Pod); ok && !slices.Contains(rec.MovedIndexes, int32(i)) {
			rec.MovedIndexes = append(rec.MovedIndexes, int32(i))
			changed = true
		}
	}
	slices.Sort(rec.MovedIndexes)
	msg := fmt.Sprintf("attempt %d: %d %s %s in time, so their indexes move to new pods elsewhere: %s", run.Status.Attempt, len(overdue), plural(len(overdue), "pod", "pods"), what, named(names))
	if meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionInPlaceWaiting, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonInPlaceFallback, Message: msg}) {
		changed = true
	}
	if changed {
		if err := r.writeStatus(ctx, run); err != nil {
			return ctrl.Result{}, err
		}
		r.event(run, corev1.EventTypeWarning, v1alpha1.ReasonInPlaceFallback, v1alpha1.ActionStopWorkers, "%s", msg)
	}
	if err := r.removePods(ctx, pods, true); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: recheck}, nil
}

// inPlaceOpening follows an attempt restarted in place whose barrier is open and whose
// workers do not all run it yet: a pod whose barrier is not opened in time
// (inplacegate.AfterOpen) is deleted and its index moves. It returns when to look again.
func (r *Reconciler) inPlaceOpening(ctx context.Context, run *v1alpha1.TrainingRun, workers []*corev1.Pod) (time.Duration, bool, error) {
	rec := attempt.Record(run)
	if rec == nil || rec.RestartMode != v1alpha1.RestartModeInPlace || rec.BarrierOpenedAt == nil || rec.RunningTime != nil {
		return 0, false, nil
	}
	now := r.now().Time
	waits := inplacegate.AfterOpen(workers, run.Status.Attempt, rec.BarrierOpenedAt.Time, r.heartbeats(ctx), now)
	if overdue := overdueWaits(waits, now); len(overdue) > 0 {
		res, err := r.inPlaceFallback(ctx, run, overdue, "were not let start by their node agents", true)
		return res.RequeueAfter, true, err
	}
	if at := inplacegate.Earliest(waits, now); !at.IsZero() {
		return at.Sub(now), false, nil
	}
	return 0, false, nil
}

func movedText(moved []int32) string {
	if len(moved) == 0 {
		return "no index moved"
	}
	s := make([]string, len(moved))
	for i, m := range moved {
		s[i] = fmt.Sprint(m)
	}
	return "indexes " + strings.Join(s, ",") + " on new pods"
}

// restartDecidedAt is when the restart into the current attempt was decided: the end of the
// attempt before.
func restartDecidedAt(run *v1alpha1.TrainingRun) (time.Time, bool) {
	h := run.Status.Attempts
	if len(h) < 2 || h[len(h)-2].EndTime == nil {
		return time.Time{}, false
	}
	return h[len(h)-2].EndTime.Time, true
}

// canRestartInPlace reports whether the run's current attempt can end in a restart in place:
// its Job is faultline's, made in the shape of pods that restart in place, and stays.
func canRestartInPlace(run *v1alpha1.TrainingRun, obs *observed) bool {
	return run.Spec.FailurePolicy.RestartMode != v1alpha1.RestartModeRecreate && obs.job != nil && obs.job.DeletionTimestamp == nil &&
		attempt.Managed(obs.job) && attempt.InPlaceShape(obs.job)
}

// cannotRestartInPlace says of a node (from the cache) whether it cannot restart a pod in
// place now: its node agent went, or lost its container runtime. A node the cache does not
// show cannot either.
func (r *Reconciler) cannotRestartInPlace(ctx context.Context) func(node string) bool {
	hb := r.heartbeats(ctx)
	now := r.now().Time
	return func(name string) bool {
		n := &corev1.Node{}
		if err := r.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return true
		}
		return inplacegate.NodeCannot(n, hb(name), now) != ""
	}
}

// barrierUnpullable handles a worker whose barrier image cannot be pulled on its node
// (inplacegate.BarrierUnpullable), which would hold it at its init container with no word:
// restartMode InPlace, which needs the barrier, stalls naming the image; Auto stops
// restarting in place (InPlaceRestarts=False, naming the image, the pod, the node and the
// kubelet's words) and starts the attempt again without the barrier, spending no budget.
// done says it acted.
func (r *Reconciler) barrierUnpullable(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, bool, error) {
	p, w := inplacegate.BarrierUnpullable(obs.workers())
	if p == nil {
		if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionStalled); c != nil && c.Reason == v1alpha1.ReasonBarrierImageUnpullable && unstall(run) {
			return ctrl.Result{}, true, r.writeStatus(ctx, run) // pulled after all
		}
		return ctrl.Result{}, false, nil
	}
	image := attempt.BarrierImage(&obs.job.Spec.Template.Spec) // the cached pod keeps no image: its Job's template has it
	what := fmt.Sprintf("the barrier image %s cannot be pulled on node %s (pod %s: %s: %s)", image, orNone(p.Spec.NodeName), p.Name, w.Reason, w.Message)
	if run.Spec.FailurePolicy.RestartMode == v1alpha1.RestartModeInPlace {
		res, err := r.stall(ctx, run, v1alpha1.ReasonBarrierImageUnpullable, what+
			": restartMode InPlace needs it on every node; make it pullable (launcher install --registry or --barrier-image) or set restartMode Auto")
		return res, true, err
	}
	msg := what + ": the run restarts by recreating its pods from now on, and its attempt starts again without the barrier"
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionInPlaceRestarts, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonBarrierImageUnpullable, Message: msg})
	if rec := attempt.Record(run); rec != nil && rec.RestartMode == v1alpha1.RestartModeInPlace {
		rec.RestartMode, rec.JobAttempt, rec.MovedIndexes, rec.BarrierOpenedAt = v1alpha1.RestartModeRecreate, 0, nil, nil
	}
	if err := r.writeStatus(ctx, run); err != nil {
		return ctrl.Result{}, true, err
	}
	r.event(run, corev1.EventTypeWarning, v1alpha1.ReasonBarrierImageUnpullable, v1alpha1.ActionCreateAttempt, "%s", msg)
	// The attempt's pods and Job go; the Job is made again for the same attempt, without
	// the barrier, once none is left.
	res, err := r.teardown(ctx, run, &observed{job: obs.job, older: append(obs.older, obs.current...), all: obs.all, nodes: obs.nodes})
	return res, true, err
}

// notEndingByShutdown sorts the old pods of moved indexes for removal. Those that their own
// kubelet is ending, their node having announced a graceful shutdown under them
// (exitclass.ShutdownEndsBy) whose bound has not passed, are left to it; endsBy is the
// earliest such bound, when to look again. Deleting a pod its kubelet is killing ends it no
// sooner, and costs that kubelet's status manager, which writes one pod after another, a
// status write and a removal more per pod, ahead of the terminal statuses of its node's
// other pods (a 32-worker gang: the last at +11 s after the decision with the deletions, +6
// to +9 s without). Of those, the pods whose node agent attests that the shutdown stopped
// them at the runtime (exitclass.StoppedByShutdown: sandbox down, no container running) are
// removed at once, without a grace period (stopped): no process of theirs runs, and the
// index need not wait for that kubelet's status write, one pod after another, to show it.
// Every other pod is removed (remove), an ended one at once: the API server removes it
// without its kubelet.
func notEndingByShutdown(old []*corev1.Pod, now time.Time) (remove, stopped []*corev1.Pod, endsBy time.Time) {
	for _, p := range old {
		at, ending := exitclass.ShutdownEndsBy(p)
		switch {
		case !ending || !now.Before(at):
			remove = append(remove, p)
		case exitclass.StoppedByShutdown(p):
			stopped = append(stopped, p)
		case endsBy.IsZero() || at.Before(endsBy):
			endsBy = at
		}
	}
	return remove, stopped, endsBy
}
