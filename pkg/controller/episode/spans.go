package episode

import (
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/checkpoint"
	"github.com/faultline-dev/faultline/pkg/policy"
	"github.com/faultline-dev/faultline/pkg/tracing"
)

// The spans of an episode, each a pure function of the run's persisted status: a phase's
// span is the time between two of status.trace's stamps.

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

// checkpointSpan is the request to save that rec's attempt got before the move that ended it
// (spec.checkpoint), from the request to the move, for the episode that ended the attempt.
func checkpointSpan(run *v1alpha1.TrainingRun, rec *v1alpha1.AttemptRecord) (tracing.Span, bool) {
	c := rec.Checkpoint
	if c == nil || c.EndedAt == nil {
		return tracing.Span{}, false
	}
	missing := make([]int64, len(c.Missing))
	for i, m := range c.Missing {
		missing[i] = int64(m)
	}
	s := tracing.Span{Name: tracing.SpanCheckpoint, Start: c.RequestedAt.Time, End: c.EndedAt.Time, Attributes: []attribute.KeyValue{
		tracing.KeyRun.String(run.Name), tracing.KeyNamespace.String(run.Namespace), tracing.KeyAttempt.Int64(int64(rec.Attempt)),
		tracing.KeyWorkers.Int64(int64(run.Spec.Workers)), tracing.KeyCheckpointSaved.Int64(int64(len(c.Acks))),
		tracing.KeyCheckpointMissing.Int64Slice(missing),
	}}
	if step, ok := checkpoint.LowestStep(c); ok {
		s.Attributes = append(s.Attributes, tracing.KeyCheckpointStep.Int64(step))
	}
	if len(c.Missing) > 0 {
		s.Error = fmt.Sprintf("indexes %v did not say they saved", c.Missing)
	}
	return s, true
}
