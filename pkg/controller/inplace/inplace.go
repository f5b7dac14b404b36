// Package inplace is the TrainingRun reconciler's coordinator of a gang restart in place
// (docs/in-place-restart.md): the attempt's Job and the pods of the healthy nodes stay; the
// node agents stop the old workers through the container runtime, and each pod's
// RestartAllContainers rule brings it back to its barrier; only the indexes whose pods
// cannot restart where they are (on a faulty node, ended, being deleted) get new pods. Once
// no old worker of the gang runs, the barrier opens (the attempt's barrierOpenedAt), and the
// agents let every pod's workers start with the new attempt.
//
// The coordinator reads (the API server's confirmations, the agents' heartbeats, the nodes)
// and decides, with inplacegate's pure rules, in the shape of the agent's own half: a value
// that says what to do. It changes the run's status in memory only; the reconciler writes
// it, then removes and creates pods, as a Step says, in that order.
package inplace

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/checkpoint"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/goodput"
	"github.com/faultline-dev/faultline/pkg/inplacegate"
)

// Coordinator coordinates the gang restarts in place of runs.
type Coordinator struct {
	// Client reads nodes and the node agents' heartbeats from the manager's cache.
	Client client.Reader
	// APIReader reads the node agents' heartbeats from the API server: the barrier records
	// the gang's barrier opens on must be the API server's, not the cache's.
	APIReader client.Reader
	Clock     clock.PassiveClock
	// BarrierImage is faultline-barrier's image; "" restarts nothing in place.
	BarrierImage string
	// BarrierInWorker makes the barrier the worker container's entrypoint where the template
	// and the nodes allow it (inplacegate.BarrierInWorker).
	BarrierInWorker bool
}

// View is what the reconciler observed of a run's current attempt.
type View struct {
	Job *batchv1.Job
	// Pods are the current attempt's pods of its Job, those a restart in place superseded
	// included; Workers the same without those (what the attempt is judged on).
	Pods, Workers []*corev1.Pod
	// All are every pod under the run's name; Nodes the facts of their nodes.
	All   []*corev1.Pod
	Nodes map[string]exitclass.NodeFacts
	// At are the run's pods as the API server lists them (metadata), read when the barrier
	// may open: the cache may lag a deletion.
	At func(ctx context.Context) ([]metav1.PartialObjectMetadata, error)
}

// Fallback ends waits that ran out: the run's status has the record of the indexes that move
// and the condition that names each pod (Changed: the reconciler writes it, and tells
// Message), then its Pods are deleted.
type Fallback struct {
	Pods    []*corev1.Pod
	Message string
	Changed bool
}

// Stop is the next step of an attempt restarting in place before its barrier opens.
type Stop struct {
	// Fallback, when set, is all there is to do now.
	Fallback *Fallback
	// Remove are the old pods of moved indexes to delete, ForceRemove those to remove at
	// once (their node's shutdown stopped them); Present the pods that hold their index: the
	// others get new pods.
	Remove, ForceRemove, Present []*corev1.Pod
	// Waiting: old workers still stop; the reconciler says what it waits on, and looks
	// again after RequeueAfter at the latest.
	Waiting      bool
	RequeueAfter time.Duration
	// Moved are the indexes that move to new pods.
	Moved []int32
}

// Open is the opening of an attempt's barrier: Opened, the run's status records it (the
// reconciler writes it and tells Message); otherwise look again after RequeueAfter.
type Open struct {
	Opened       bool
	Message      string
	RequeueAfter time.Duration
}

// recheck is how soon to look again when the API server shows something the cache does not:
// no event may come for it.
const recheck = 250 * time.Millisecond

// Starting reports whether run's current attempt restarts in place and its barrier is not
// open yet.
func Starting(run *v1alpha1.TrainingRun) bool {
	rec := attempt.Record(run)
	return rec != nil && rec.RestartMode == v1alpha1.RestartModeInPlace && rec.BarrierOpenedAt == nil
}

// heartbeats reads the node agents' heartbeats from the cache.
func (c *Coordinator) heartbeats(ctx context.Context) inplacegate.Heartbeats {
	return func(node string) *exitclass.Heartbeat {
		l := &coordinationv1.Lease{}
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: agentlease.Namespace, Name: agentlease.Name(node)}, l); err != nil {
			return nil
		}
		return agentlease.Heartbeat(l, node)
	}
}

// Shape is where the next Job's pods get the barrier: its image, "" for pods that do not
// restart in place (restartMode Recreate, Index scope, or Auto on nodes that cannot), and
// whether it is the worker container's entrypoint (BarrierInWorker, and every node the run
// may use mounts image volumes; else the init container). With restartMode InPlace on nodes
// that cannot, unsupported says which.
func (c *Coordinator) Shape(ctx context.Context, run *v1alpha1.TrainingRun) (image string, inWorker bool, unsupported string, err error) {
	if run.Spec.RestartScope == v1alpha1.RestartScopeIndex || run.Spec.FailurePolicy.RestartMode == v1alpha1.RestartModeRecreate || c.BarrierImage == "" {
		return "", false, "", nil
	}
	if cond := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionInPlaceRestarts); cond != nil && cond.Status == metav1.ConditionFalse {
		if run.Spec.FailurePolicy.RestartMode == v1alpha1.RestartModeInPlace {
			return "", false, "spec.failurePolicy.restartMode is InPlace, and " + cond.Message, nil
		}
		return "", false, "", nil // Auto: recreate, as the condition says
	}
	nodes := &corev1.NodeList{}
	if err := c.Client.List(ctx, nodes); err != nil {
		return "", false, "", fmt.Errorf("list nodes: %w", err)
	}
	ok, cannot := inplacegate.Support(run, nodes.Items, c.heartbeats(ctx), c.Clock.Now())
	switch {
	case ok:
		inWorker := c.BarrierInWorker
		if inWorker {
			inWorker, _ = inplacegate.BarrierInWorker(run, nodes.Items)
		}
		return c.BarrierImage, inWorker, "", nil
	case run.Spec.FailurePolicy.RestartMode != v1alpha1.RestartModeInPlace:
		return "", false, "", nil // Auto: recreate
	case len(cannot) == 0:
		return "", false, "spec.failurePolicy.restartMode is InPlace and no schedulable node matches spec.template.spec.nodeSelector", nil
	}
	return "", false, fmt.Sprintf("spec.failurePolicy.restartMode is InPlace, and %s cannot restart a pod in place: "+
		"enable the kubelet's RestartAllContainersOnContainerExits feature and give the node agent its container runtime socket, or set restartMode Auto or Recreate", exitclass.Named(cannot)), nil
}

// Plan is the restart in place of run's current attempt after a failure whose faulty nodes
// the next attempt leaves: the indexes that move to new pods, and whether the attempt
// restarts in place at all (its Job is faultline's, in the shape of pods that restart in
// place, and stays; and not every index moves).
func (c *Coordinator) Plan(ctx context.Context, run *v1alpha1.TrainingRun, v View, faulty []string) (moved []int32, ok bool) {
	if run.Spec.FailurePolicy.RestartMode == v1alpha1.RestartModeRecreate || v.Job == nil || v.Job.DeletionTimestamp != nil ||
		!attempt.Managed(v.Job) || !attempt.InPlaceShape(v.Job) {
		return nil, false
	}
	hb := c.heartbeats(ctx)
	now := c.Clock.Now()
	cannot := func(name string) bool {
		n := &corev1.Node{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return true // a node the cache does not show cannot either
		}
		return inplacegate.NodeCannot(n, hb(name), now) != ""
	}
	moved = inplacegate.MovedIndexes(v.Workers, run.Spec.Workers, faulty, v.Nodes, cannot)
	return moved, len(moved) < int(run.Spec.Workers)
}

// Stop moves a restart in place on: the old pods of moved indexes are stopped, and each gets
// its new pod once the old one is gone. A pod whose wait runs out (inplacegate.BeforeOpen:
// its grace period and a margin, or at once when its node agent is silent) is deleted and
// its index moves (Fallback).
func (c *Coordinator) Stop(ctx context.Context, run *v1alpha1.TrainingRun, v View) Stop {
	n := run.Status.Attempt
	now := c.Clock.Now()
	moved := c.moved(run, v)
	decidedAt, _ := inplacegate.RestartDecidedAt(run)
	waits := inplacegate.BeforeOpen(v.Pods, n, moved, v.Nodes, decidedAt, c.heartbeats(ctx), now)
	if overdue := inplacegate.Overdue(waits, now); len(overdue) > 0 {
		return Stop{Fallback: fallback(run, overdue, "did not stop its workers in place", false)}
	}
	s := Stop{Moved: moved, Waiting: len(waits) > 0}
	var old []*corev1.Pod
	for _, p := range v.Pods {
		i, _ := attempt.Index(p)
		k, _ := attempt.Number(p)
		if k < n && slices.Contains(moved, int32(i)) {
			old = append(old, p)
			// At most one bound pod per index, even on a node the attempt excludes: a new
			// pod made beside one that still runs (a hung worker on a faulted GPU) would
			// share its hostname, and the rendezvous of the frameworks that refuse a
			// duplicate task (TestInPlaceMovedIndexWaitsForItsOldPod).
			if !exitclass.Gone(p, v.Nodes) {
				s.Present = append(s.Present, p)
			}
			continue
		}
		s.Present = append(s.Present, p)
	}
	var endsBy time.Time
	s.Remove, s.ForceRemove, endsBy = inplacegate.NotEndingByShutdown(old, now)
	if at := inplacegate.Earliest(waits, now); s.Waiting && !at.IsZero() {
		s.RequeueAfter = at.Sub(now)
	}
	if s.Waiting && !endsBy.IsZero() && (s.RequeueAfter == 0 || endsBy.Sub(now) < s.RequeueAfter) {
		s.RequeueAfter = endsBy.Sub(now)
	}
	return s
}

// Open opens the barrier of a restart in place whose old workers have all stopped, as the
// cache shows them, once the API server confirms it (the moved indexes' old pods gone, no
// later barrier record than the cache read) and the backoff is over: one status write for
// the gang.
func (c *Coordinator) Open(ctx context.Context, run *v1alpha1.TrainingRun, v View, moved []int32) (Open, error) {
	n := run.Status.Attempt
	// The moved indexes' old pods, gone from the cache: the API server must not have them
	// either, or an agent that has not seen their deletion would open them beside their
	// indexes' new pods.
	list, err := v.At(ctx)
	if err != nil {
		return Open{}, err
	}
	if exitclass.LiveCount(list, func(p *metav1.PartialObjectMetadata) bool {
		// A pod without an index (a warm spare) is no index's old pod.
		k, _ := attempt.Number(p)
		i, ok := attempt.Index(p)
		return ok && attempt.OfRun(p, run) && k < n && slices.Contains(moved, int32(i))
	}, v.All, v.Nodes) > 0 {
		return Open{RequeueAfter: recheck}, nil
	}
	// Nor may the API server have a later barrier record than the cache read: the workers
	// counted as stopped are stopped as of now, not as of the cache.
	at, err := c.recordsAt(ctx, v.Pods, list)
	if err != nil {
		return Open{}, err
	}
	if p := inplacegate.RecordBehind(v.Pods, at); p != nil {
		log.FromContext(ctx).V(1).Info("the cache lags a barrier record: not opening yet", "pod", p.Name, "cached", attempt.BarrierRecord(p), "apiServer", at[p.UID])
		return Open{RequeueAfter: recheck}, nil
	}
	now := metav1.NewTime(c.Clock.Now())
	if next := run.Status.NextAttemptAt; next != nil && now.Before(next) {
		return Open{RequeueAfter: next.Sub(now.Time)}, nil
	}
	rec := attempt.Record(run)
	rec.BarrierOpenedAt = &now
	rec.StartTime = &now
	rec.MovedIndexes = moved
	st := &run.Status
	resumed(run, v.Pods)
	st.Phase = v1alpha1.PhasePending
	st.NextAttemptAt = nil
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionRestarting, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAttemptCreated,
		Message: fmt.Sprintf("attempt %d restarted in place", n)})
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionInPlaceWaiting, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonOpeningBarriers,
		Message: fmt.Sprintf("attempt %d: every old worker stopped; the node agents open the pods' barriers, each within %s of its start (a pod whose node agent is silent moves at once)", n, inplacegate.OpenMargin)})
	return Open{Opened: true, Message: fmt.Sprintf("attempt %d: every old worker stopped, barrier open; %d workers restarted in place, %s",
		n, int(run.Spec.Workers)-len(moved), movedText(moved))}, nil
}

// resumed records, on the record of the attempt before run's current one, the gang's last save
// as its stopped workers' barriers heard it, which the current one resumes from, and the
// training that it does again (the goodput ledger's redone part).
func resumed(run *v1alpha1.TrainingRun, pods []*corev1.Pod) {
	st := &run.Status
	prev := attempt.RecordOf(st, st.Attempt-1)
	if prev == nil || prev.Saved != nil {
		return
	}
	saved, ok := checkpoint.Resume(pods, st.Attempt)
	if !ok {
		return
	}
	prev.Saved = saved
	prev.Redone = &metav1.Duration{Duration: goodput.RedoneOf(prev, st, attempt.ProgressWatched(run))}
}

// recordsAt are the barrier records of pods as the API server has them, by UID: each pod's
// own (list: the run's pods' metadata, read from it) or, where later, its node's heartbeat's,
// from one list of the heartbeats. Nothing is read for a gang with no barrier in a worker
// container, the only one with records.
func (c *Coordinator) recordsAt(ctx context.Context, pods []*corev1.Pod, list []metav1.PartialObjectMetadata) (map[types.UID]*v1alpha1.BarrierRecord, error) {
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
	if err := c.APIReader.List(ctx, leases, client.InNamespace(agentlease.Namespace), client.MatchingLabels(agentlease.Labels())); err != nil {
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

// moved are the indexes of the current attempt, restarting in place, that get new pods:
// those the decision moved, those whose pod cannot restart where it is since (ended,
// deleted, its node excluded now), and those with a pod made for this attempt.
func (c *Coordinator) moved(run *v1alpha1.TrainingRun, v View) []int32 {
	n := run.Status.Attempt
	rec := attempt.Record(run)
	workers := v.Pods
	moved := inplacegate.MovedIndexes(workers, run.Spec.Workers, rec.ExcludedNodes, v.Nodes, func(string) bool { return false })
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

// fallback ends the waits that ran out: their pods go and their indexes move to new pods,
// kept off the nodes whose agents are silent for the attempt, and off every overdue pod's
// node when offNodes (an agent that did not open its barrier in time: a new pod there would
// wait at its barrier for that agent again). The decision is the run's status first (the
// attempt's excluded nodes and moved indexes, the InPlaceWaiting condition that names each
// pod, its node and what it waited for), then the pods are deleted. The record makes the
// deleted pods superseded (inplacegate.Superseded): the exit their deletion causes (the
// barrier's SIGTERM) is no failure of the attempt, whenever a reconcile sees it, and a
// controller that crashed before the deletions makes them after.
func fallback(run *v1alpha1.TrainingRun, overdue []inplacegate.Wait, what string, offNodes bool) *Fallback {
	rec := attempt.Record(run)
	f := &Fallback{}
	var names []string
	for _, w := range overdue {
		names = append(names, w.Describe())
		f.Pods = append(f.Pods, w.Pod)
		if node := w.Pod.Spec.NodeName; (w.Silent || offNodes) && node != "" && !slices.Contains(rec.ExcludedNodes, node) {
			rec.ExcludedNodes = append(rec.ExcludedNodes, node)
			f.Changed = true
		}
		if i, ok := attempt.Index(w.Pod); ok && !slices.Contains(rec.MovedIndexes, int32(i)) {
			rec.MovedIndexes = append(rec.MovedIndexes, int32(i))
			f.Changed = true
		}
	}
	slices.Sort(rec.MovedIndexes)
	pods := "pods"
	if len(overdue) == 1 {
		pods = "pod"
	}
	f.Message = fmt.Sprintf("attempt %d: %d %s %s in time, so their indexes move to new pods elsewhere: %s", run.Status.Attempt, len(overdue), pods, what, exitclass.Named(names))
	if meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionInPlaceWaiting, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonInPlaceFallback, Message: f.Message}) {
		f.Changed = true
	}
	return f
}

// Opening follows an attempt restarted in place whose barrier is open and whose workers do
// not all run it yet: a pod whose barrier is not opened in time (inplacegate.AfterOpen) is
// deleted and its index moves (the Fallback). It returns when to look again.
func (c *Coordinator) Opening(ctx context.Context, run *v1alpha1.TrainingRun, workers []*corev1.Pod) (*Fallback, time.Duration) {
	rec := attempt.Record(run)
	if rec == nil || rec.RestartMode != v1alpha1.RestartModeInPlace || rec.BarrierOpenedAt == nil || rec.RunningTime != nil {
		return nil, 0
	}
	now := c.Clock.Now()
	waits := inplacegate.AfterOpen(workers, run.Status.Attempt, rec.BarrierOpenedAt.Time, c.heartbeats(ctx), now)
	if overdue := inplacegate.Overdue(waits, now); len(overdue) > 0 {
		return fallback(run, overdue, "were not let start by their node agents", true), 0
	}
	if at := inplacegate.Earliest(waits, now); !at.IsZero() {
		return nil, at.Sub(now)
	}
	return nil, 0
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

// Unpullable says what to do of a worker whose barrier image cannot be pulled on its node
// (inplacegate.BarrierUnpullable), which would hold it at its init container with no word:
// restartMode InPlace, which needs the barrier, stalls (stall, naming the image); Auto stops
// restarting in place (the run's InPlaceRestarts=False, naming the image, the pod, the node
// and the kubelet's words, and the current attempt's record no longer in place) and starts
// the attempt again without the barrier, spending no budget. found is false when no worker
// waits on its barrier's image.
func Unpullable(run *v1alpha1.TrainingRun, job *batchv1.Job, workers []*corev1.Pod) (msg string, stall, found bool) {
	p, w := inplacegate.BarrierUnpullable(workers)
	if p == nil {
		return "", false, false
	}
	image := attempt.BarrierImage(&job.Spec.Template.Spec) // the cached pod keeps no image: its Job's template has it
	node := p.Spec.NodeName
	if node == "" {
		node = "(none)"
	}
	what := fmt.Sprintf("the barrier image %s cannot be pulled on node %s (pod %s: %s: %s)", image, node, p.Name, w.Reason, w.Message)
	if run.Spec.FailurePolicy.RestartMode == v1alpha1.RestartModeInPlace {
		return what + ": restartMode InPlace needs it on every node; make it pullable (launcher install --registry or --barrier-image) or set restartMode Auto", true, true
	}
	msg = what + ": the run restarts by recreating its pods from now on, and its attempt starts again without the barrier"
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionInPlaceRestarts, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonBarrierImageUnpullable, Message: msg})
	if rec := attempt.Record(run); rec != nil && rec.RestartMode == v1alpha1.RestartModeInPlace {
		rec.RestartMode, rec.JobAttempt, rec.MovedIndexes, rec.BarrierOpenedAt = v1alpha1.RestartModeRecreate, 0, nil, nil
	}
	return msg, false, true
}
