// Package savegate is the TrainingRun reconciler's gate of a checkpoint on notice
// (spec.checkpoint, pkg/checkpoint): a planned move, and the judgement of an attempt whose
// workers are saving, wait until every worker asked answered or the request's deadline. Each
// function reads the run and its workers and returns a Step: whether to wait and until when,
// whether the status changed, and the events to say so; the reconciler emits and writes.
package savegate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/checkpoint"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// Step is what a run's request to save calls for now.
type Step struct {
	// Wait: the move (or the judgement) waits, until After from now at the latest.
	Wait  bool
	After time.Duration
	// Changed: the run's status changed (a request made, answers gathered, the request
	// closed).
	Changed bool
	// Events are the run's events to emit (type Normal).
	Events []Event
}

// Event is one event of the run.
type Event struct{ Reason, Action, Message string }

// Ask holds a planned move of run off nodes until its workers saved: the first notice asks
// every worker of the attempt (a new request: Changed, Wait), and the move waits while any
// worker asked has not answered, up to the request's deadline (Changed where answers came).
// Once every worker answered or the deadline passed, the request is closed (Changed, not
// Wait: the move's own write carries it into the attempt's record). A run without
// spec.checkpoint never waits.
func Ask(run *v1alpha1.TrainingRun, workers []*corev1.Pod, notice string, nodes []string, now time.Time) Step {
	signal, _, ok := checkpoint.Policy(run)
	if !ok {
		return Step{}
	}
	req := checkpoint.Current(run)
	if req == nil {
		req, ev := request(run, signal, notice, nodes, now, time.Time{})
		return Step{Wait: true, After: req.Deadline.Sub(now), Changed: true, Events: []Event{ev}}
	}
	if req.EndedAt != nil {
		return Step{}
	}
	p := checkpoint.Gather(req, workers)
	if ev, ok := closeIfDone(run, req, p, now, v1alpha1.ActionRestart); ok {
		return Step{Changed: true, Events: []Event{ev}}
	}
	return Step{Wait: true, After: req.Deadline.Sub(now), Changed: p.Update(req)}
}

// OnShutdown asks run's workers to save when a node of theirs announced a shutdown while
// they ran: the node's agent holds the shutdown back, and its workers' evidence, until they
// answered or its own deadline, and the attempt then ends as any node's shutdown ends it.
// The request's deadline is, if sooner than the policy's, the workers' grace period from the
// announcement (the kubelet kills them then). Step.Changed says the status changed.
func OnShutdown(run *v1alpha1.TrainingRun, workers []*corev1.Pod, nodes map[string]exitclass.NodeFacts, now time.Time) Step {
	signal, _, ok := checkpoint.Policy(run)
	if !ok {
		return Step{}
	}
	if req := checkpoint.Current(run); req != nil {
		if req.EndedAt != nil {
			return Step{}
		}
		p := checkpoint.Gather(req, workers)
		if ev, ok := closeIfDone(run, req, p, now, v1alpha1.ActionWait); ok {
			return Step{Changed: true, Events: []Event{ev}}
		}
		return Step{Changed: p.Update(req)}
	}
	var names []string
	var at, allows time.Time
	for _, w := range workers {
		f, ok := nodes[w.Spec.NodeName]
		if !ok || f.ShutdownDetectedAt == nil || w.DeletionTimestamp != nil || w.Status.Phase != corev1.PodRunning {
			continue
		}
		// Announced while this attempt's worker ran: an older announcement is a shutdown that
		// was cancelled, or another attempt's.
		if since, ok := incarnation(w); !ok || f.ShutdownDetectedAt.Before(since) {
			continue
		}
		if !slices.Contains(names, w.Spec.NodeName) {
			names = append(names, w.Spec.NodeName)
		}
		if at.IsZero() || f.ShutdownDetectedAt.Before(at) {
			at = *f.ShutdownDetectedAt
		}
		if ends := f.ShutdownDetectedAt.Add(checkpoint.GracePeriod(w)); allows.IsZero() || ends.Before(allows) {
			allows = ends
		}
	}
	if len(names) == 0 {
		return Step{}
	}
	slices.Sort(names)
	_, ev := request(run, signal, fmt.Sprintf("node %s announced a shutdown at %s", strings.Join(names, ", "), at.UTC().Format(time.RFC3339Nano)), names, now, allows)
	return Step{Changed: true, Events: []Event{ev}}
}

// Hold holds the judgement of an attempt whose workers were asked to save, while the others
// still save (up to the request's deadline): the workers of a node that shuts down save and
// end first, and the attempt's end would stop the others' save. It holds only where every
// worker that ended answered (saved, or said why not): one that ended without a word ended
// by a fault, and the collective save it belonged to cannot complete. A worker of a node
// that announced its shutdown is the exception for lateAnswer after its end: it saved on the
// container's SIGTERM and then ended, and its answer, which its barrier keeps for the node
// agent's request, can reach its record after its kubelet reported the end (seen in CI:
// the request closed at once with the workers still saving counted missing).
func Hold(run *v1alpha1.TrainingRun, workers []*corev1.Pod, nodes map[string]exitclass.NodeFacts, now time.Time) Step {
	req := checkpoint.Current(run)
	if req == nil || req.EndedAt != nil {
		return Step{}
	}
	p := checkpoint.Gather(req, workers)
	if ev, ok := closeIfDone(run, req, p, now, v1alpha1.ActionRestart); ok {
		return Step{Changed: true, Events: []Event{ev}} // the judgement's write carries it
	}
	wait := req.Deadline.Sub(now)
	for _, w := range workers {
		if !exitclass.Failed(w, nodes, now) || checkpoint.AnswerOf(req, w) != nil {
			continue
		}
		due, ok := answerDue(w, nodes)
		if !ok || !now.Before(due) {
			return Step{}
		}
		wait = min(wait, due.Sub(now))
	}
	return Step{Wait: true, After: wait, Changed: p.Update(req)}
}

// lateAnswer bounds the wait for the answer of a worker that ended in its node's shutdown:
// the barrier keeps it 5 s for the agent's request (barrier.keptFor), and the agent's record
// write follows.
const lateAnswer = 10 * time.Second

// answerDue is until when the answer of pod, which ended without one, may still come: where
// its node announced a shutdown and its worker ended after that, lateAnswer after its end.
func answerDue(pod *corev1.Pod, nodes map[string]exitclass.NodeFacts) (time.Time, bool) {
	f, ok := nodes[pod.Spec.NodeName]
	if !ok || f.ShutdownDetectedAt == nil {
		return time.Time{}, false
	}
	end, ok := exitclass.EndedAt(pod)
	if !ok || end.Before(*f.ShutdownDetectedAt) {
		return time.Time{}, false
	}
	return end.Add(lateAnswer), true
}

// request asks run's current attempt to save, at now, for notice, until the policy's timeout
// or what the notice allows (zero: no bound of its own), the sooner.
func request(run *v1alpha1.TrainingRun, signal, notice string, nodes []string, now, allows time.Time) (*v1alpha1.CheckpointStatus, Event) {
	req := checkpoint.Request(run, notice, nodes, now, allows)
	run.Status.Checkpoint = req
	return req, Event{Reason: v1alpha1.ReasonCheckpointRequested, Action: v1alpha1.ActionWait,
		Message: fmt.Sprintf("attempt %d: %s: every worker is asked to save (%s) before it moves, until %s", req.Attempt, notice, signal, req.Deadline.UTC().Format(time.RFC3339))}
}

// closeIfDone closes req once the move it holds may go on (checkpoint.Progress.Done), with
// the event that says so, naming action, what comes next.
func closeIfDone(run *v1alpha1.TrainingRun, req *v1alpha1.CheckpointStatus, p checkpoint.Progress, now time.Time, action string) (Event, bool) {
	if !p.Done(req, now) {
		return Event{}, false
	}
	p.End(req, now)
	return Event{Reason: v1alpha1.ReasonCheckpointDone, Action: action,
		Message: fmt.Sprintf("attempt %d: %s%s", req.Attempt, checkpoint.Summary(req, run.Spec.Workers), missingWhy(p))}, true
}

// missingWhy says why the workers that did not save did not, for the event.
func missingWhy(p checkpoint.Progress) string {
	var parts []string
	for _, i := range p.Missing {
		if w := p.Why[i]; w != "" {
			parts = append(parts, fmt.Sprintf("index %d: %s", i, w))
		}
	}
	if len(p.Waiting) > 0 {
		parts = append(parts, fmt.Sprintf("indexes %v did not answer by the deadline", p.Waiting))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, "; ")
}

// incarnation is when w's worker began its current attempt (the earliest of its running
// workers'); ok is false when none runs.
func incarnation(w *corev1.Pod) (time.Time, bool) {
	var since time.Time
	for _, rw := range attempt.RunningWorkers(w) {
		if since.IsZero() || rw.Since.Before(since) {
			since = rw.Since
		}
	}
	return since, !since.IsZero()
}

// Close moves run's request of the attempt that ends at now (rec) into the attempt's record,
// closed: the workers that had not said they saved are missing.
func Close(run *v1alpha1.TrainingRun, rec *v1alpha1.AttemptRecord, now metav1.Time) {
	req := run.Status.Checkpoint
	if req == nil {
		return
	}
	run.Status.Checkpoint = nil
	if req.Attempt != rec.Attempt {
		return
	}
	if req.EndedAt == nil {
		acked := map[int32]bool{}
		for _, a := range req.Acks {
			acked[a.Index] = true
		}
		req.Missing = nil
		for i := int32(0); i < run.Spec.Workers; i++ {
			if !acked[i] {
				req.Missing = append(req.Missing, i)
			}
		}
		at := metav1.NewMicroTime(now.Time)
		req.EndedAt = &at
	}
	rec.Checkpoint = req
}

// Budget gives a run with spec.checkpoint its PodDisruptionBudget (checkpoint.Budget) through
// ensure, the reconciler's create of an object the run owns, before each attempt's workers;
// a run without it has none (one its spec.checkpoint left behind, by an edit of the spec, is
// deleted: read from the API server, whose reads r makes). ok is false when the run waits
// (ensure's).
func Budget(ctx context.Context, r client.Reader, w client.Writer, run *v1alpha1.TrainingRun, ensure func(client.Object) (ctrl.Result, bool, error)) (ctrl.Result, bool, error) {
	pdb := checkpoint.Budget(run)
	if _, _, ok := checkpoint.Policy(run); ok {
		return ensure(pdb)
	}
	if run.Generation <= 1 {
		// The spec as created, without spec.checkpoint: no budget was ever made, and the
		// attempt's creation, a restart's path, reads nothing more.
		return ctrl.Result{}, true, nil
	}
	if err := r.Get(ctx, client.ObjectKeyFromObject(pdb), pdb); err != nil {
		return ctrl.Result{}, true, client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(pdb, run) {
		return ctrl.Result{}, true, nil
	}
	return ctrl.Result{}, true, client.IgnoreNotFound(w.Delete(ctx, pdb, client.Preconditions{UID: &pdb.UID}))
}
