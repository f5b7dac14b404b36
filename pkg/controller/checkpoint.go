package controller

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

// askFirst holds a planned move of run off nodes until its workers saved (spec.checkpoint,
// pkg/checkpoint): the first notice asks every worker of the attempt, and the move waits
// while any worker asked has not answered, up to the request's deadline. wait says the move
// waits (the status is written where it changed; after is when to look again); false lets
// it go on, the request closed in the status for the move's write to carry into the
// attempt's record. A run without spec.checkpoint never waits.
func (r *Reconciler) askFirst(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed, notice string, nodes []string) (wait bool, after time.Duration, err error) {
	signal, _, ok := checkpoint.Policy(run)
	if !ok {
		return false, 0, nil
	}
	now := r.Clock.Now()
	req := checkpoint.Current(run)
	if req == nil {
		req = r.request(run, signal, notice, nodes, now, time.Time{})
		return true, req.Deadline.Sub(now), r.writeStatus(ctx, run)
	}
	if req.EndedAt != nil {
		return false, 0, nil
	}
	p := checkpoint.Gather(req, obs.workers())
	if r.closeIfDone(run, req, p, now, v1alpha1.ActionRestart) {
		return false, 0, nil
	}
	if p.Update(req) {
		err = r.writeStatus(ctx, run)
	}
	return true, req.Deadline.Sub(now), err
}

// closeIfDone closes req (the caller writes it) and says so in an event naming action, what
// comes next, once the move it holds may go on (checkpoint.Progress.Done); it reports
// whether it did.
func (r *Reconciler) closeIfDone(run *v1alpha1.TrainingRun, req *v1alpha1.CheckpointStatus, p checkpoint.Progress, now time.Time, action string) bool {
	if !p.Done(req, now) {
		return false
	}
	p.End(req, now)
	r.event(run, corev1.EventTypeNormal, v1alpha1.ReasonCheckpointDone, action, "attempt %d: %s%s", req.Attempt,
		checkpoint.Summary(req, run.Spec.Workers), missingWhy(p))
	return true
}

// request asks run's current attempt to save, at now, for notice, until the policy's timeout
// or what the notice allows (zero: no bound of its own), the sooner (the caller writes it).
func (r *Reconciler) request(run *v1alpha1.TrainingRun, signal, notice string, nodes []string, now, allows time.Time) *v1alpha1.CheckpointStatus {
	req := checkpoint.Request(run, notice, nodes, now, allows)
	run.Status.Checkpoint = req
	r.event(run, corev1.EventTypeNormal, v1alpha1.ReasonCheckpointRequested, v1alpha1.ActionWait,
		"attempt %d: %s: every worker is asked to save (%s) before it moves, until %s", req.Attempt, notice, signal, req.Deadline.UTC().Format(time.RFC3339))
	return req
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

// askOnShutdown asks run's workers to save when a node of theirs announced a shutdown while
// they ran (spec.checkpoint): the node's agent holds the shutdown back, and its workers'
// evidence, until they answered or its own deadline, and the attempt then ends as any
// node's shutdown ends it. It reports whether the status changed (the caller writes it).
func (r *Reconciler) askOnShutdown(run *v1alpha1.TrainingRun, obs *observed) bool {
	signal, _, ok := checkpoint.Policy(run)
	if !ok {
		return false
	}
	if req := checkpoint.Current(run); req != nil {
		if req.EndedAt != nil {
			return false
		}
		p := checkpoint.Gather(req, obs.workers())
		return r.closeIfDone(run, req, p, r.Clock.Now(), v1alpha1.ActionWait) || p.Update(req)
	}
	var nodes []string
	var at, allows time.Time
	for _, w := range obs.workers() {
		f, ok := obs.nodes[w.Spec.NodeName]
		if !ok || f.ShutdownDetectedAt == nil || w.DeletionTimestamp != nil || w.Status.Phase != corev1.PodRunning {
			continue
		}
		// Announced while this attempt's worker ran: an older announcement is a shutdown that
		// was cancelled, or another attempt's.
		if since, ok := incarnation(w); !ok || f.ShutdownDetectedAt.Before(since) {
			continue
		}
		if !slices.Contains(nodes, w.Spec.NodeName) {
			nodes = append(nodes, w.Spec.NodeName)
		}
		if at.IsZero() || f.ShutdownDetectedAt.Before(at) {
			at = *f.ShutdownDetectedAt
		}
		// What the notice allows: the kubelet stops the node's pods at the announcement, and
		// kills each once its grace period has passed.
		if ends := f.ShutdownDetectedAt.Add(checkpoint.GracePeriod(w)); allows.IsZero() || ends.Before(allows) {
			allows = ends
		}
	}
	if len(nodes) == 0 {
		return false
	}
	slices.Sort(nodes)
	r.request(run, signal, fmt.Sprintf("node %s announced a shutdown at %s", strings.Join(nodes, ", "), at.UTC().Format(time.RFC3339Nano)), nodes, r.Clock.Now(), allows)
	return true
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

// closeCheckpoint moves run's request of the attempt that ends at now into the attempt's
// record, closed: the workers that had not said they saved are missing.
func closeCheckpoint(run *v1alpha1.TrainingRun, rec *v1alpha1.AttemptRecord, now metav1.Time) {
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

// disruptionBudget gives a run with spec.checkpoint its PodDisruptionBudget
// (checkpoint.Budget), before each attempt's workers; a run without it has none (one its
// spec.checkpoint left behind is deleted). ok is false when the run waits (the name is
// another's).
func (r *Reconciler) disruptionBudget(ctx context.Context, run *v1alpha1.TrainingRun) (ctrl.Result, bool, error) {
	pdb := checkpoint.Budget(run)
	if _, _, ok := checkpoint.Policy(run); ok {
		return r.ensureOwned(ctx, run, pdb, "a drain must wait for the workers to save")
	}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pdb), pdb); err != nil {
		return ctrl.Result{}, true, client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(pdb, run) {
		return ctrl.Result{}, true, nil
	}
	return ctrl.Result{}, true, client.IgnoreNotFound(r.Delete(ctx, pdb, client.Preconditions{UID: &pdb.UID}))
}

// holdForSaves holds the judgement of an attempt whose workers were asked to save, while the
// others still save (up to the request's deadline): the workers of a node that shuts down
// save and end first, and the attempt's end would stop the others' save. It holds only where
// every worker that ended answered (saved, or said why not): one that ended without a word
// ended by a fault, and the collective save it belonged to cannot complete.
func (r *Reconciler) holdForSaves(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (after time.Duration, hold bool, err error) {
	req := checkpoint.Current(run)
	if req == nil || req.EndedAt != nil {
		return 0, false, nil
	}
	now := r.Clock.Now()
	workers := obs.workers()
	p := checkpoint.Gather(req, workers)
	if r.closeIfDone(run, req, p, now, v1alpha1.ActionRestart) {
		return 0, false, nil
	}
	for _, w := range workers {
		if exitclass.Failed(w, obs.nodes, now) && checkpoint.AnswerOf(req, w) == nil {
			return 0, false, nil
		}
	}
	if p.Update(req) {
		err = r.writeStatus(ctx, run)
	}
	return req.Deadline.Sub(now), true, err
}
