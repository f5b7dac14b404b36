// Package episode records the traces of fault episodes (pkg/tracing has the design) for the
// TrainingRun reconciler. It never holds a span open: each phase's end is persisted in
// status.trace, stamped there by Stamp from the transitions of the status write that ends
// the phase, and the spans of the phases a write ended are emitted once that write has
// succeeded (Written). The reconciler calls it at three places: the decision (Decided), and
// before and after each status write; it asks it for the contexts of its plugin calls.
// With tracing off every method does nothing, and Decided persists no trace.
package episode

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/policy"
	"github.com/faultline-dev/faultline/pkg/tracing"
)

// Recorder records the fault episodes of runs.
type Recorder struct {
	tracing *tracing.Provider
	clock   clock.PassiveClock

	runs sync.Map // types.NamespacedName → *sighting; a run is never reconciled twice at once

	mu sync.Mutex
	// evidence is when the agent's evidence of an episode was first seen, by the episode's
	// traceparent, which is unique: the informer reports it before any reconcile of the run
	// has read the run.
	evidence map[string]time.Time
}

// New is a Recorder that emits through p (nil or a disabled provider: none), reading the
// time of its sightings from c.
func New(p *tracing.Provider, c clock.PassiveClock) *Recorder { return &Recorder{tracing: p, clock: c} }

// enabled reports whether r records anything: a nil Recorder, as one without tracing, does
// not (a reconciler built without one, in tests).
func (r *Recorder) enabled() bool { return r != nil && r.tracing.Enabled() }

func (r *Recorder) provider() *tracing.Provider {
	if r == nil {
		return nil
	}
	return r.tracing
}

// sighting is what this process saw first of a run's attempt, for the phases that end
// without a status transition of their own: when the teardown was over (the next attempt's
// Job waits for its backoff then), and when every worker was first seen bound. A controller
// that restarts forgets them and starts those phases when it next sees the facts.
type sighting struct {
	uid       types.UID
	attempt   int32
	scheduled time.Time
	tornDown  time.Time
}

// evidenceMemory bounds how long the evidence of an episode that no failure followed (a
// cancelled shutdown, a fault that did not stop the program) is remembered.
const evidenceMemory = time.Hour

func (r *Recorder) of(run *v1alpha1.TrainingRun) *sighting {
	key := types.NamespacedName{Namespace: run.Namespace, Name: run.Name}
	if v, ok := r.runs.Load(key); ok {
		if sg := v.(*sighting); sg.uid == run.UID && sg.attempt == run.Status.Attempt {
			return sg
		}
	}
	sg := &sighting{uid: run.UID, attempt: run.Status.Attempt}
	r.runs.Store(key, sg)
	return sg
}

// inEpisode reports whether run's current attempt was started by an episode being traced.
func (r *Recorder) inEpisode(run *v1alpha1.TrainingRun) bool {
	return r.enabled() && run.Status.Trace != nil && run.Status.Trace.Traceparent != ""
}

// SawScheduled notes that every worker of run's current attempt is bound, now if not before:
// the next status write records it.
func (r *Recorder) SawScheduled(run *v1alpha1.TrainingRun, now time.Time) {
	if !r.inEpisode(run) {
		return
	}
	if sg := r.of(run); sg.scheduled.IsZero() {
		sg.scheduled = now
	}
}

// SawTornDown notes that no pod of run's earlier attempts is left, now if not before: the
// teardown is over, and the backoff (if any) goes on until the next attempt is created.
func (r *Recorder) SawTornDown(run *v1alpha1.TrainingRun, now time.Time) {
	if !r.inEpisode(run) {
		return
	}
	if sg := r.of(run); sg.tornDown.IsZero() {
		sg.tornDown = now
	}
}

// SawEvidence notes the agent's evidence on a pod as the informer delivers it, where the
// settle phase of its episode starts (the agent's detect phase ends with its first evidence
// written). Without the run at hand, a traceparent next to evidence may be the run's own (an
// agent without tracing): it is noted, and never looked up.
func (r *Recorder) SawEvidence(o client.Object) {
	if !r.enabled() {
		return
	}
	a := o.GetAnnotations()
	if _, ok := a[v1alpha1.AnnotationFaultEvidence]; !ok {
		return
	}
	tp := a[v1alpha1.AnnotationTraceparent]
	if tp == "" {
		return
	}
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sawEvidence(tp, now)
}

func (r *Recorder) sawEvidence(traceparent string, now time.Time) {
	if _, ok := r.evidence[traceparent]; ok {
		return
	}
	if r.evidence == nil {
		r.evidence = map[string]time.Time{}
	}
	for tp, seen := range r.evidence {
		if now.Sub(seen) > evidenceMemory {
			delete(r.evidence, tp)
		}
	}
	r.evidence[traceparent] = now
}

// settleStart is when the settle phase of ep began, and forgets ep's evidence: when its
// first evidence was seen, or without any (an episode the controller started, or evidence
// this process did not see), when the failure was.
func (r *Recorder) settleStart(ep episode, failure time.Time) time.Time {
	if ep.agent == "" {
		return failure
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	seen, ok := r.evidence[ep.agent]
	delete(r.evidence, ep.agent)
	if ok {
		return seen
	}
	return failure
}

// Forget forgets a deleted run.
func (r *Recorder) Forget(key types.NamespacedName) {
	if r != nil {
		r.runs.Delete(key)
	}
}

// episode is the fault episode of a failure, before it is persisted.
type episode struct {
	// root is the reserved root span: the node agent's, or one reserved from the run.
	root trace.SpanContext
	// agent is the traceparent annotation the root came from, when the agent reserved it.
	agent string
	// detectedAt is the agent's signal, when its evidence explains the failure.
	detectedAt *time.Time
}

// episodeOf is the episode of a failure of run's current attempt whose root pod is pod: the
// root the node agent reserved when pod carries evidence (of cause, unless cause is "") and
// the agent's traceparent, otherwise a root reserved from the run's UID and attempt.
func (r *Recorder) episodeOf(run *v1alpha1.TrainingRun, pod *corev1.Pod, cause v1alpha1.Cause) episode {
	var ep episode
	if pod != nil {
		if ev := v1alpha1.EvidenceOf(pod.Annotations); ev != nil && (cause == "" || ev.Cause == cause) {
			if t, err := time.Parse(time.RFC3339Nano, ev.DetectedAt); err == nil {
				ep.detectedAt = &t
			}
			if tp := agentTraceparent(run, pod); tp != "" {
				if sc, ok := tracing.ParseTraceparent(tp); ok {
					ep.root, ep.agent = sc, tp
				}
			}
		}
	}
	if !ep.root.IsValid() {
		ep.root = r.provider().EpisodeFor(fmt.Sprintf("%s/%d", run.UID, run.Status.Attempt))
	}
	return ep
}

// agentTraceparent is the traceparent the node agent wrote on pod with its evidence: the
// episode it started. The traceparent the Job template copied from the run is the run's, not
// an episode's, and is never taken for one.
func agentTraceparent(run *v1alpha1.TrainingRun, pod *corev1.Pod) string {
	tp := pod.Annotations[v1alpha1.AnnotationTraceparent]
	if _, ok := pod.Annotations[v1alpha1.AnnotationFaultEvidence]; !ok || tp == run.Annotations[v1alpha1.AnnotationTraceparent] {
		return ""
	}
	return tp
}

// HintsContext is ctx for the plugin's hints on a failure of run's current attempt among
// workers: it carries the failure's episode. The verdict has not named its root pod yet, so
// the episode is a guess that the verdict nearly always confirms: the first failed pod that
// carries the agent's episode.
func (r *Recorder) HintsContext(ctx context.Context, run *v1alpha1.TrainingRun, workers []*corev1.Pod) context.Context {
	var failed *corev1.Pod
	for _, p := range workers {
		if exitclass.Failed(p, nil, time.Time{}) && agentTraceparent(run, p) != "" {
			failed = p
			break
		}
	}
	return withEpisode(ctx, r.episodeOf(run, failed, "").root)
}

// Context is ctx carrying the episode that started run's current attempt, if any: the
// plugin host propagates it into the plugin's calls.
func (r *Recorder) Context(ctx context.Context, run *v1alpha1.TrainingRun) context.Context {
	if tr := run.Status.Trace; tr != nil {
		if sc, ok := tracing.ParseTraceparent(tr.Traceparent); ok {
			return withEpisode(ctx, sc)
		}
	}
	return ctx
}

func withEpisode(ctx context.Context, root trace.SpanContext) context.Context {
	if !root.IsValid() {
		return ctx
	}
	return trace.ContextWithSpanContext(ctx, root)
}

// Decided is the status.trace of the episode of a failure of run's current attempt whose
// root is the worker named root among workers, of cause: judging began at judgedAt, the
// decision was taken at decidedAt, and the failure was first seen at seenAt (settle starts
// then, or when the agent's evidence of the episode was first seen). Nil when tracing is off.
func (r *Recorder) Decided(run *v1alpha1.TrainingRun, workers []*corev1.Pod, root string, cause v1alpha1.Cause, seenAt, judgedAt, decidedAt time.Time) *v1alpha1.TraceStatus {
	if !r.enabled() {
		return nil
	}
	var pod *corev1.Pod
	for _, p := range workers {
		if p.Name == root {
			pod = p
		}
	}
	ep := r.episodeOf(run, pod, cause)
	tr := &v1alpha1.TraceStatus{
		Traceparent: tracing.Traceparent(ep.root),
		SeenAt:      micro(r.settleStart(ep, seenAt)),
		JudgedAt:    micro(judgedAt),
		DecidedAt:   micro(decidedAt),
	}
	if ep.detectedAt != nil {
		tr.DetectedAt = micro(*ep.detectedAt)
	}
	return tr
}

// Stamp records in run's status.trace the phases that the status write about to be made
// ends, from what it changes of before (the status the API server holds): the current
// attempt created (its record's start: a Job created, or its barrier opened) ends the
// teardown, the backoff and the creation; every worker Running (the record's running time)
// ends the run-up; and the sightings with it, every worker bound. The stamps are persisted
// in the same write, so a controller that restarts keeps them. A nil before (not known)
// stamps nothing.
func (r *Recorder) Stamp(before *v1alpha1.TrainingRunStatus, run *v1alpha1.TrainingRun, now time.Time) {
	st := &run.Status
	rec := attempt.RecordOf(st, st.Attempt)
	if !r.enabled() || before == nil || rec == nil {
		return
	}
	was := attempt.RecordOf(before, st.Attempt)
	sg := r.of(run)
	if rec.StartTime != nil && (was == nil || was.StartTime == nil) {
		if st.Trace == nil {
			st.Trace = &v1alpha1.TraceStatus{} // the first attempt: its span starts at its creation
		}
		tr := st.Trace
		if tr.Traceparent != "" && tr.TornDownAt == nil {
			tr.TornDownAt = micro(orNow(sg.tornDown, now))
		}
		if tr.CreatingAt == nil {
			// Creating starts when the backoff after the teardown ends.
			creating := now
			if tr.TornDownAt != nil {
				creating = tr.TornDownAt.Time
				if next := before.NextAttemptAt; next != nil && next.After(creating) {
					creating = next.Time
				}
				if creating.After(now) {
					creating = now
				}
			}
			tr.CreatingAt = micro(creating)
		}
		tr.CreatedAt = micro(now)
	}
	if !r.inEpisode(run) {
		return
	}
	tr := st.Trace
	if tr.ScheduledAt == nil && !sg.scheduled.IsZero() {
		tr.ScheduledAt = micro(sg.scheduled)
	}
	if tr.RunningAt == nil && rec.RunningTime != nil && (was == nil || was.RunningTime == nil) {
		tr.RunningAt = micro(rec.RunningTime.Time)
	}
}

func orNow(t, now time.Time) time.Time {
	if t.IsZero() {
		return now
	}
	return t
}

// Written emits, after a successful status write of run from was to is, the spans that write
// ended: those of is's episode whose phases are complete now and were not in was; and for
// each attempt the write ended, its span and, if it never saw every worker Running, the root
// of the restart that started it. It then forgets the sightings of the attempts the write
// ended.
func (r *Recorder) Written(ctx context.Context, was, is *v1alpha1.TrainingRun) {
	if !r.enabled() {
		return
	}
	r.traceWritten(ctx, is, was.Status.Trace)
	for i := range is.Status.Attempts {
		rec := &is.Status.Attempts[i]
		if rec.EndTime == nil || attempt.Ended(&was.Status, rec.Attempt) {
			continue
		}
		end, ended := rec.EndTime.Time, trace.SpanContext{}
		if rec.Outcome == policy.OutcomeRestarted || rec.Outcome == policy.OutcomeFailed {
			// Decided on a failure: the attempt ends at the decision, and that episode ended it.
			end, ended = decidedAt(is.Status.Trace, *rec.EndTime), episodeRoot(is.Status.Trace)
		}
		if was.Status.Attempt == rec.Attempt {
			if root, s, ok := unfinishedRestart(was, rec.EndTime.Time, fmt.Sprintf(unfinishedBecause[rec.Outcome], rec.Attempt)); ok {
				r.tracing.EmitRoot(ctx, root, s)
			}
		}
		if parent, s, ok := attemptSpan(is, rec.Attempt, was.Status.Trace, end, ended); ok {
			r.tracing.Emit(ctx, parent, s)
		}
		if s, ok := checkpointSpan(is, rec); ok && ended.IsValid() {
			r.tracing.Emit(ctx, ended, s)
		}
		key := types.NamespacedName{Namespace: is.Namespace, Name: is.Name}
		if v, ok := r.runs.Load(key); ok && v.(*sighting).attempt == rec.Attempt {
			r.runs.CompareAndDelete(key, v) // not what is already seen of the next attempt
		}
	}
}

// unfinishedBecause says, per outcome, why the restart that started an attempt never saw it
// Running: the error of that restart's root span.
var unfinishedBecause = map[string]string{
	policy.OutcomeRestarted: "attempt %d failed before all its workers were Running",
	policy.OutcomeFailed:    "attempt %d failed before all its workers were Running",
	policy.OutcomeSucceeded: "attempt %d succeeded before all its workers were Running together",
	policy.OutcomeSuspended: "attempt %d was suspended before all its workers were Running",
}

// traceWritten emits the spans of run's episode whose phases are complete in run and not in
// before (the status.trace the write replaced).
func (r *Recorder) traceWritten(ctx context.Context, run *v1alpha1.TrainingRun, before *v1alpha1.TraceStatus) {
	tr := run.Status.Trace
	if tr == nil || equality.Semantic.DeepEqual(before, tr) {
		return
	}
	root, ok := tracing.ParseTraceparent(tr.Traceparent)
	if !ok {
		return
	}
	done := map[string]bool{}
	for _, s := range episodeSpans(run, before) {
		done[s.key] = true
	}
	for _, s := range episodeSpans(run, tr) {
		switch {
		case done[s.key]:
		case s.root:
			r.tracing.EmitRoot(ctx, root, s.Span)
		default:
			r.tracing.Emit(ctx, root, s.Span)
		}
	}
}
