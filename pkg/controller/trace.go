package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/policy"
	"github.com/faultline-dev/faultline/pkg/tracing"
)

// The controller's side of the fault-episode traces (pkg/tracing has the design). It never
// holds a span open: each phase's end is persisted in status.trace, and the spans of the
// phases a status write ended are emitted once that write has succeeded (traceWritten, called
// by the observer of every status write, transitioned).
// Everything here that builds spans is a pure function of the run.

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
func (r *Reconciler) episodeOf(run *v1alpha1.TrainingRun, pod *corev1.Pod, cause v1alpha1.Cause) episode {
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
		ep.root = r.Tracing.EpisodeFor(fmt.Sprintf("%s/%d", run.UID, run.Status.Attempt))
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

// failedPodWithEpisode is the first failed pod that carries the agent's episode: before the
// verdict names the root pod, the best guess of the episode the plugin's hints belong to.
func failedPodWithEpisode(run *v1alpha1.TrainingRun, pods []*corev1.Pod) *corev1.Pod {
	for _, p := range pods {
		if exitclass.Failed(p, nil, time.Time{}) && agentTraceparent(run, p) != "" {
			return p
		}
	}
	return nil
}

func podNamed(pods []*corev1.Pod, name string) *corev1.Pod {
	for _, p := range pods {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// newEpisodeTrace is the status.trace of an episode decided at decidedAt: judging began at
// judgedAt, and the failure was first seen at seenAt. Nil when tracing is off.
func (r *Reconciler) newEpisodeTrace(ep episode, seenAt, judgedAt, decidedAt time.Time) *v1alpha1.TraceStatus {
	if !r.Tracing.Enabled() {
		return nil
	}
	tr := &v1alpha1.TraceStatus{
		Traceparent: tracing.Traceparent(ep.root),
		SeenAt:      micro(seenAt),
		JudgedAt:    micro(judgedAt),
		DecidedAt:   micro(decidedAt),
	}
	if ep.detectedAt != nil {
		tr.DetectedAt = micro(*ep.detectedAt)
	}
	return tr
}

// sightings remember what this process saw first, for the phases that span reconciles
// (failureClock remembers when each run's current attempt was first seen failing, where
// settle starts without the agent): when the node agent's first evidence of an episode
// reached it (settle starts then instead: the agent's detect phase ends with its first
// evidence written, and settle covers the workers stopping, or the wait for the root
// worker's evidence), and when every worker was first seen bound, until a status write
// records it. A controller that restarts forgets them and starts the phases when it next
// sees the facts; the settle window itself is measured from the pod's failure time and does
// not depend on them.
type sightings struct {
	runs sync.Map // types.NamespacedName → *sighting; a run is never reconciled twice at once

	mu sync.Mutex
	// evidence is when the agent's evidence of an episode was first seen, by the episode's
	// traceparent, which is unique: the informer reports it before any reconcile of the run
	// has read the run.
	evidence map[string]time.Time
}

type sighting struct {
	uid       types.UID
	attempt   int32
	scheduled time.Time
	// progressWritten: when updateProgress last wrote the attempt's status.
	progressWritten time.Time
}

// evidenceMemory bounds how long the evidence of an episode that no failure followed (a
// cancelled shutdown, a fault that did not stop the program) is remembered.
const evidenceMemory = time.Hour

func (s *sightings) of(run *v1alpha1.TrainingRun) *sighting {
	key := runKey(run)
	if v, ok := s.runs.Load(key); ok {
		if sg := v.(*sighting); sg.uid == run.UID && sg.attempt == run.Status.Attempt {
			return sg
		}
	}
	sg := &sighting{uid: run.UID, attempt: run.Status.Attempt}
	s.runs.Store(key, sg)
	return sg
}

// scheduled is when every worker of the current attempt was first seen bound, now if not
// before: recorded in status.trace with the next write there is anyway.
func (s *sightings) scheduled(run *v1alpha1.TrainingRun, now time.Time) time.Time {
	sg := s.of(run)
	if sg.scheduled.IsZero() {
		sg.scheduled = now
	}
	return sg.scheduled
}

// sawEvidence notes the agent's evidence of the episode traceparent.
func (s *sightings) sawEvidence(traceparent string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.evidence[traceparent]; ok {
		return
	}
	if s.evidence == nil {
		s.evidence = map[string]time.Time{}
	}
	for tp, seen := range s.evidence {
		if now.Sub(seen) > evidenceMemory {
			delete(s.evidence, tp)
		}
	}
	s.evidence[traceparent] = now
}

// settleStart is when the settle phase of ep began, and forgets ep's evidence: when its
// first evidence was seen, or without any (an episode the controller started, or evidence
// this process did not see), when the failure was.
func (s *sightings) settleStart(ep episode, failure time.Time) time.Time {
	if ep.agent == "" {
		return failure
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen, ok := s.evidence[ep.agent]
	delete(s.evidence, ep.agent)
	if ok {
		return seen
	}
	return failure
}

func (s *sightings) forget(key types.NamespacedName) { s.runs.Delete(key) }

// forgetAttempt forgets what was seen of a run's attempt, once it is decided; not what is
// already seen of the next one (a restart's teardown).
func (s *sightings) forgetAttempt(key types.NamespacedName, attempt int32) {
	if v, ok := s.runs.Load(key); ok && v.(*sighting).attempt == attempt {
		s.runs.CompareAndDelete(key, v)
	}
}

// noteEvidence notes the agent's evidence on a pod as the informer delivers it (see
// sightings). Without the run at hand, a traceparent next to evidence may be the run's own
// (an agent without tracing): it is noted, and never looked up.
func (r *Reconciler) noteEvidence(o client.Object) {
	if !r.Tracing.Enabled() {
		return
	}
	a := o.GetAnnotations()
	if _, ok := a[v1alpha1.AnnotationFaultEvidence]; !ok {
		return
	}
	if tp := a[v1alpha1.AnnotationTraceparent]; tp != "" {
		r.seen.sawEvidence(tp, r.Clock.Now())
	}
}

// traceWritten emits, after a successful status write, the spans of run's episode whose
// phases that write ended: those complete now and not in before (the status.trace the write
// replaced).
func (r *Reconciler) traceWritten(ctx context.Context, run *v1alpha1.TrainingRun, before *v1alpha1.TraceStatus) {
	tr := run.Status.Trace
	if !r.Tracing.Enabled() || tr == nil || equality.Semantic.DeepEqual(before, tr) {
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
			r.Tracing.EmitRoot(ctx, root, s.Span)
		default:
			r.Tracing.Emit(ctx, root, s.Span)
		}
	}
}

// episodeSpan is a span of an episode; key tells it from the spans of other episodes.
type episodeSpan struct {
	tracing.Span
	root bool
	key  string
}

// restartPhases are the controller's phases of a restart, in order; a fail has the first two.
var restartPhases = []struct {
	name       string
	start, end func(*v1alpha1.TraceStatus) *metav1.MicroTime
}{
	{tracing.SpanSettle, func(t *v1alpha1.TraceStatus) *metav1.MicroTime { return t.SeenAt }, func(t *v1alpha1.TraceStatus) *metav1.MicroTime { return t.JudgedAt }},
	{tracing.SpanClassify, func(t *v1alpha1.TraceStatus) *metav1.MicroTime { return t.JudgedAt }, func(t *v1alpha1.TraceStatus) *metav1.MicroTime { return t.DecidedAt }},
	{tracing.SpanTeardown, func(t *v1alpha1.TraceStatus) *metav1.MicroTime { return t.DecidedAt }, func(t *v1alpha1.TraceStatus) *metav1.MicroTime { return t.TornDownAt }},
	{tracing.SpanBackoff, func(t *v1alpha1.TraceStatus) *metav1.MicroTime { return t.TornDownAt }, func(t *v1alpha1.TraceStatus) *metav1.MicroTime { return t.CreatingAt }},
	{tracing.SpanCreate, func(t *v1alpha1.TraceStatus) *metav1.MicroTime { return t.CreatingAt }, func(t *v1alpha1.TraceStatus) *metav1.MicroTime { return t.CreatedAt }},
	{tracing.SpanSchedule, func(t *v1alpha1.TraceStatus) *metav1.MicroTime { return t.CreatedAt }, func(t *v1alpha1.TraceStatus) *metav1.MicroTime { return t.ScheduledAt }},
	{tracing.SpanRunning, func(t *v1alpha1.TraceStatus) *metav1.MicroTime { return t.ScheduledAt }, func(t *v1alpha1.TraceStatus) *metav1.MicroTime { return t.RunningAt }},
}

// failPhases is how many of restartPhases a fail has.
const failPhases = 2

// episodeSpans are the spans of the episode in tr (a status.trace of run) whose phases have
// ended: the controller's phases, and the root once the episode is over (faultline.restart
// when every worker of the new attempt Runs, faultline.fail at the decision). The node
// agent's detect span is not among them: the agent recorded it.
func episodeSpans(run *v1alpha1.TrainingRun, tr *v1alpha1.TraceStatus) []episodeSpan {
	lf := run.Status.LastFailure
	if tr == nil || tr.Traceparent == "" || lf == nil {
		return nil
	}
	failed := lf.Action == v1alpha1.ActionFailRun
	phases := restartPhases
	if failed {
		phases = phases[:failPhases]
	}
	common := []attribute.KeyValue{tracing.KeyRun.String(run.Name), tracing.KeyNamespace.String(run.Namespace)}
	var out []episodeSpan
	for _, ph := range phases {
		start, end := ph.start(tr), ph.end(tr)
		if start == nil || end == nil {
			continue
		}
		out = append(out, episodeSpan{
			Span: tracing.Span{Name: ph.name, Start: start.Time, End: end.Time, Attributes: append(phaseAttributes(run, ph.name), common...)},
			key:  tr.Traceparent + "/" + ph.name,
		})
	}
	var root *tracing.Span
	switch {
	case failed && tr.DecidedAt != nil:
		root = ptr.To(failRoot(run, tr))
	case !failed && tr.RunningAt != nil:
		root = ptr.To(restartRoot(run, tr, tr.RunningAt.Time))
	}
	if root != nil {
		out = append(out, episodeSpan{Span: *root, root: true, key: tr.Traceparent + "/" + root.Name})
	}
	return out
}

func phaseAttributes(run *v1alpha1.TrainingRun, phase string) []attribute.KeyValue {
	lf := run.Status.LastFailure
	switch phase {
	case tracing.SpanClassify:
		return []attribute.KeyValue{
			tracing.KeyClass.String(string(lf.Class)), tracing.KeyCause.String(string(lf.Cause)),
			tracing.KeyRule.String(lf.Rule), tracing.KeyAction.String(string(lf.Action)),
		}
	case tracing.SpanTeardown:
		return []attribute.KeyValue{tracing.KeyAttempt.Int64(int64(run.Status.Attempt) - 1)}
	case tracing.SpanCreate:
		return []attribute.KeyValue{tracing.KeyAttempt.Int64(int64(run.Status.Attempt))}
	case tracing.SpanSchedule, tracing.SpanRunning:
		return []attribute.KeyValue{tracing.KeyWorkers.Int64(int64(run.Spec.Workers))}
	}
	return nil
}

// episodeStart is when the episode began: the node's signal, or the failure first seen.
func episodeStart(tr *v1alpha1.TraceStatus) time.Time {
	var start time.Time
	for _, t := range []*metav1.MicroTime{tr.DetectedAt, tr.SeenAt, tr.JudgedAt, tr.DecidedAt} {
		if t != nil && (start.IsZero() || t.Time.Before(start)) {
			start = t.Time
		}
	}
	return start
}

// failureAttributes describe the root failure (status.lastFailure).
func failureAttributes(run *v1alpha1.TrainingRun) []attribute.KeyValue {
	lf := run.Status.LastFailure
	attrs := []attribute.KeyValue{
		tracing.KeyRun.String(run.Name),
		tracing.KeyNamespace.String(run.Namespace),
		tracing.KeyClass.String(string(lf.Class)),
		tracing.KeyCause.String(string(lf.Cause)),
		tracing.KeyRule.String(lf.Rule),
		tracing.KeyAction.String(string(lf.Action)),
		tracing.KeyWorkers.Int64(int64(run.Spec.Workers)),
	}
	if lf.Pod != "" {
		attrs = append(attrs, tracing.KeyPod.String(lf.Pod))
	}
	if lf.Index != nil {
		attrs = append(attrs, tracing.KeyIndex.Int64(int64(*lf.Index)))
	}
	if lf.Node != "" {
		attrs = append(attrs, tracing.KeyNode.String(lf.Node))
	}
	if lf.ExitCode != nil {
		attrs = append(attrs, tracing.KeyExitCode.Int64(int64(*lf.ExitCode)))
	}
	if lf.XID != 0 {
		attrs = append(attrs, tracing.KeyXID.Int64(lf.XID))
	}
	if lf.PeerFailures != 0 {
		attrs = append(attrs, tracing.KeyPeerFailures.Int64(int64(lf.PeerFailures)))
	}
	if lf.StillRunning {
		// A worker that hung on its fault: the trace says so, and for how long it ran on.
		attrs = append(attrs, tracing.KeyStillRunning.Bool(true))
		if lf.FailedAt != nil && lf.DecidedAt != nil {
			attrs = append(attrs, tracing.KeyRunningSeconds.Float64(lf.DecidedAt.Sub(lf.FailedAt.Time).Seconds()))
		}
	}
	return attrs
}

// runLinks link an episode root to the run's own trace, when the run has one.
func runLinks(run *v1alpha1.TrainingRun) []trace.Link {
	if sc, ok := tracing.TraceparentFrom(run.Annotations); ok {
		return []trace.Link{{SpanContext: sc, Attributes: []attribute.KeyValue{tracing.KeyLink.String(tracing.LinkRun)}}}
	}
	return nil
}

// restartRoot is the faultline.restart span of the episode in tr, ending at end: from
// attempt Attempt-1 to attempt Attempt.
func restartRoot(run *v1alpha1.TrainingRun, tr *v1alpha1.TraceStatus, end time.Time) tracing.Span {
	attrs := append(failureAttributes(run),
		tracing.KeyAttemptFrom.Int64(int64(run.Status.Attempt)-1),
		tracing.KeyAttemptTo.Int64(int64(run.Status.Attempt)))
	return tracing.Span{Name: tracing.SpanRestart, Start: episodeStart(tr), End: end, Attributes: attrs, Links: runLinks(run)}
}

// failRoot is the faultline.fail span of the episode in tr: the failure of attempt Attempt.
func failRoot(run *v1alpha1.TrainingRun, tr *v1alpha1.TraceStatus) tracing.Span {
	lf := run.Status.LastFailure
	attrs := append(failureAttributes(run),
		tracing.KeyAttemptFrom.Int64(int64(run.Status.Attempt)),
		tracing.KeyErrorType.String(string(lf.Cause)))
	return tracing.Span{
		Name: tracing.SpanFail, Start: episodeStart(tr), End: tr.DecidedAt.Time, Attributes: attrs, Links: runLinks(run),
		Error: fmt.Sprintf("%s failure (%s): rule %s failed the run", lf.Class, lf.Cause, lf.Rule),
	}
}

// unfinishedRestart is the root of run's restart episode that will never see its attempt
// Running, because that attempt ends now (at) for why; ok is false when there is none. It is
// taken from the run as it was before the attempt's end is recorded, and emitted after.
func unfinishedRestart(run *v1alpha1.TrainingRun, at time.Time, why string) (root trace.SpanContext, s tracing.Span, ok bool) {
	tr, lf := run.Status.Trace, run.Status.LastFailure
	if tr == nil || tr.RunningAt != nil || lf == nil || lf.Action == v1alpha1.ActionFailRun {
		return root, s, false
	}
	if root, ok = tracing.ParseTraceparent(tr.Traceparent); !ok {
		return root, s, false
	}
	s = restartRoot(run, tr, at)
	s.Error = why
	return root, s, true
}

// attemptSpan is the faultline.attempt span of attempt n of run, which ended at end; started
// is the status.trace of the attempt (its creation, and the episode that started it), ended
// the root of the episode that ended it (invalid for a success or a suspend). The span is a
// child of the run's own trace when the run has one. ok is false for an attempt that never
// started.
func attemptSpan(run *v1alpha1.TrainingRun, n int32, started *v1alpha1.TraceStatus, end time.Time, ended trace.SpanContext) (parent trace.SpanContext, s tracing.Span, ok bool) {
	var rec *v1alpha1.AttemptRecord
	for i := range run.Status.Attempts {
		if run.Status.Attempts[i].Attempt == n {
			rec = &run.Status.Attempts[i]
		}
	}
	if rec == nil {
		return parent, s, false
	}
	switch {
	case started != nil && started.CreatedAt != nil:
		s.Start = started.CreatedAt.Time
	case rec.StartTime != nil:
		s.Start = rec.StartTime.Time
	default:
		return parent, s, false
	}
	s.Name, s.End = tracing.SpanAttempt, end
	s.Attributes = []attribute.KeyValue{
		tracing.KeyRun.String(run.Name),
		tracing.KeyNamespace.String(run.Namespace),
		tracing.KeyAttempt.Int64(int64(n)),
		tracing.KeyOutcome.String(rec.Outcome),
		tracing.KeyWorkers.Int64(int64(run.Spec.Workers)),
	}
	if v := rec.Verdict; v != nil {
		s.Attributes = append(s.Attributes, tracing.KeyClass.String(string(v.Class)), tracing.KeyCause.String(string(v.Cause)))
	}
	if rec.Outcome == policy.OutcomeFailed {
		s.Error = "the run failed in this attempt"
	}
	if started != nil {
		if sc, ok := tracing.ParseTraceparent(started.Traceparent); ok {
			s.Links = append(s.Links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{tracing.KeyLink.String(tracing.LinkStartedBy)}})
		}
	}
	if ended.IsValid() {
		s.Links = append(s.Links, trace.Link{SpanContext: ended, Attributes: []attribute.KeyValue{tracing.KeyLink.String(tracing.LinkEndedBy)}})
	}
	parent, _ = tracing.TraceparentFrom(run.Annotations)
	return parent, s, true
}

// withEpisode is ctx carrying the episode's root as its (remote) span: the plugin host
// propagates it into the plugin's calls.
func withEpisode(ctx context.Context, root trace.SpanContext) context.Context {
	if !root.IsValid() {
		return ctx
	}
	return trace.ContextWithSpanContext(ctx, root)
}

// withCurrentEpisode is ctx carrying the episode that started the current attempt, if any.
func withCurrentEpisode(ctx context.Context, run *v1alpha1.TrainingRun) context.Context {
	if tr := run.Status.Trace; tr != nil {
		if sc, ok := tracing.ParseTraceparent(tr.Traceparent); ok {
			return withEpisode(ctx, sc)
		}
	}
	return ctx
}

func micro(t time.Time) *metav1.MicroTime {
	m := metav1.NewMicroTime(t)
	return &m
}

// decidedAt is when the episode in tr was decided, or at when there is no trace.
func decidedAt(tr *v1alpha1.TraceStatus, at metav1.Time) time.Time {
	if tr != nil && tr.DecidedAt != nil {
		return tr.DecidedAt.Time
	}
	return at.Time
}

// episodeRoot is the reserved root of the episode in tr (invalid without one).
func episodeRoot(tr *v1alpha1.TraceStatus) trace.SpanContext {
	if tr == nil {
		return trace.SpanContext{}
	}
	sc, _ := tracing.ParseTraceparent(tr.Traceparent)
	return sc
}
