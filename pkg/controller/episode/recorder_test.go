package episode

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/policy"
	"github.com/faultline-dev/faultline/pkg/tracing"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func mt(ms int) *metav1.MicroTime { return micro(at(ms)) }

func newRecorder() (*Recorder, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	return New(tracing.New(nil, sdktrace.WithSyncer(exp)), clocktesting.NewFakeClock(at(0))), exp
}

// withStatus is run with status st instead of its own (a shallow copy: read only).
func withStatus(run *v1alpha1.TrainingRun, st *v1alpha1.TrainingRunStatus) *v1alpha1.TrainingRun {
	out := *run
	out.Status = *st
	return &out
}

// runBuilder builds test runs: makeRun("llm", 4).trace(tr).obj().
type runBuilder struct{ r *v1alpha1.TrainingRun }

func makeRun(name string, workers int32) *runBuilder {
	return &runBuilder{r: &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: "uid-" + "run"},
		Spec:       v1alpha1.TrainingRunSpec{Workers: workers},
		Status:     v1alpha1.TrainingRunStatus{Attempt: 1, Attempts: []v1alpha1.AttemptRecord{{Attempt: 1, StartTime: ptr.To(metav1.NewTime(at(-60000)))}}},
	}}
}

func (b *runBuilder) obj() *v1alpha1.TrainingRun { return b.r }

func (b *runBuilder) traceparent(sc trace.SpanContext) *runBuilder {
	b.r.Annotations = map[string]string{}
	tracing.SetTraceparent(b.r.Annotations, sc)
	return b
}

func (b *runBuilder) trace(tr *v1alpha1.TraceStatus) *runBuilder {
	b.r.Status.Trace = tr
	return b
}

// failed records a decided failure of the current attempt as the reconciler's restart and
// fail do.
func (b *runBuilder) failed(v *v1alpha1.FailureVerdict, tr *v1alpha1.TraceStatus) *runBuilder {
	st := &b.r.Status
	rec := attempt.Record(b.r)
	rec.EndTime, rec.Verdict, rec.Outcome = ptr.To(metav1.NewTime(v.DecidedAt.Time)), v, policy.OutcomeRestarted
	if v.Action == v1alpha1.ActionFailRun {
		rec.Outcome = policy.OutcomeFailed
	}
	st.LastFailure = v
	if v.Action != v1alpha1.ActionFailRun {
		st.Attempt++
		st.Attempts = append(st.Attempts, v1alpha1.AttemptRecord{Attempt: st.Attempt})
	}
	st.Trace = tr
	return b
}

func shutdownVerdict(decided time.Time) *v1alpha1.FailureVerdict {
	return &v1alpha1.FailureVerdict{
		Class: v1alpha1.ClassInfrastructure, Cause: v1alpha1.CauseNodeShutdown, Rule: "default-infrastructure",
		Action: v1alpha1.ActionRestartRun, Pod: "llm-1", Index: ptr.To[int32](1), Node: "gpu-node-4",
		Container: "worker", ExitCode: ptr.To[int32](143), Signal: 15, PeerFailures: 3,
		FailedAt: ptr.To(metav1.NewTime(at(150))), DecidedAt: ptr.To(metav1.NewTime(decided)),
	}
}

// spanTree is what the tests compare: names, parents (by name), times relative to t0 and
// the attributes that matter.
type spanView struct {
	Name, Parent string
	Start, End   time.Duration
	Attrs        map[string]string
	Error        string
}

func view(spans []sdktrace.ReadOnlySpan, keys ...attribute.Key) []spanView {
	names := map[trace.SpanID]string{}
	for _, s := range spans {
		names[s.SpanContext().SpanID()] = s.Name()
	}
	var out []spanView
	for _, s := range spans {
		v := spanView{Name: s.Name(), Start: s.StartTime().Sub(t0), End: s.EndTime().Sub(t0), Attrs: map[string]string{}}
		if s.Parent().IsValid() {
			v.Parent = names[s.Parent().SpanID()]
			if v.Parent == "" {
				v.Parent = "remote:" + s.Parent().SpanID().String()
			}
		}
		for _, kv := range s.Attributes() {
			for _, k := range keys {
				if kv.Key == k {
					v.Attrs[string(k)] = kv.Value.String()
				}
			}
		}
		if len(v.Attrs) == 0 {
			v.Attrs = nil
		}
		if s.Status().Code == codes.Error {
			v.Error = s.Status().Description
		}
		out = append(out, v)
	}
	sort.SliceStable(out, func(i, j int) bool {
		return out[i].Start < out[j].Start || out[i].Start == out[j].Start && out[i].Name < out[j].Name
	})
	return out
}

// TestRestartTrace follows one maintenance restart through the status writes that end its
// phases, as the reconciler makes them, with the node agent's detect span recorded by
// "another process": every span is emitted once, when its phase ends, and the whole lands in
// one trace under faultline.restart, whose children cover it but for the time between the
// evidence written and the controller seeing the failure (here, a controller that did not
// see the evidence before the failure).
func TestRestartTrace(t *testing.T) {
	ctx := context.Background()
	r, exp := newRecorder()
	agentExp := tracetest.NewInMemoryExporter()
	agent := tracing.New(nil, sdktrace.WithSyncer(agentExp))

	// The agent reserves the episode, records detect and writes the traceparent on the pods.
	root := agent.NewEpisode()
	agent.Emit(ctx, root, tracing.Span{Name: tracing.SpanDetect, Start: at(0), End: at(40)})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "llm-1", Annotations: map[string]string{}}}
	tracing.SetTraceparent(pod.Annotations, root)
	raw, _ := json.Marshal(v1alpha1.FaultEvidence{Source: "logind", Node: "gpu-node-4", Cause: v1alpha1.CauseNodeShutdown, DetectedAt: at(0).Format(time.RFC3339Nano)})
	pod.Annotations[v1alpha1.AnnotationFaultEvidence] = string(raw)

	runTrace := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true})
	run := makeRun("llm", 4).traceparent(runTrace).trace(&v1alpha1.TraceStatus{CreatingAt: mt(-60010), CreatedAt: mt(-60000)}).obj()
	ep := r.episodeOf(run, pod, v1alpha1.CauseNodeShutdown)
	if !ep.root.Equal(root) || ep.detectedAt == nil || !ep.detectedAt.Equal(at(0)) {
		t.Fatalf("episode %v detected %v; want the agent's %v at t0", ep.root, ep.detectedAt, root)
	}

	// restart(): the decision is persisted with the episode.
	before := run.Status.DeepCopy()
	tr := r.Decided(run, []*corev1.Pod{pod}, pod.Name, v1alpha1.CauseNodeShutdown, at(150), at(160), at(170))
	run = makeRun("llm", 4).traceparent(runTrace).trace(before.Trace.DeepCopy()).failed(shutdownVerdict(at(170)), tr).obj()
	r.Written(ctx, withStatus(run, before), run)
	steps := []struct {
		step string
		set  func(*v1alpha1.TraceStatus)
		want []string
	}{
		{"decision persisted", nil, []string{tracing.SpanSettle, tracing.SpanClassify, tracing.SpanAttempt}},
		{"backoff write (teardown over)", func(tr *v1alpha1.TraceStatus) { tr.TornDownAt = mt(700) }, []string{tracing.SpanTeardown}},
		{"job created", func(tr *v1alpha1.TraceStatus) { tr.CreatingAt, tr.CreatedAt = mt(710), mt(730) }, []string{tracing.SpanBackoff, tracing.SpanCreate}},
		{"readiness write, unchanged trace", func(*v1alpha1.TraceStatus) {}, nil},
		{"all bound", func(tr *v1alpha1.TraceStatus) { tr.ScheduledAt = mt(900) }, []string{tracing.SpanSchedule}},
		{"all running", func(tr *v1alpha1.TraceStatus) { tr.RunningAt = mt(1000) }, []string{tracing.SpanRunning, tracing.SpanRestart}},
	}
	seen := 0
	for _, st := range steps {
		if st.set != nil {
			before := run.Status.DeepCopy()
			st.set(run.Status.Trace)
			r.Written(ctx, withStatus(run, before), run)
		}
		spans := exp.GetSpans().Snapshots()
		var got []string
		for _, s := range spans[seen:] {
			got = append(got, s.Name())
		}
		seen = len(spans)
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Errorf("%s: spans emitted (-want +got):\n%s", st.step, diff)
		}
	}

	all := append(agentExp.GetSpans().Snapshots(), exp.GetSpans().Snapshots()...)
	var episodeSpans []sdktrace.ReadOnlySpan
	for _, s := range all {
		if s.Name() != tracing.SpanAttempt {
			episodeSpans = append(episodeSpans, s)
			if s.SpanContext().TraceID() != root.TraceID() {
				t.Errorf("%s is in trace %s, want the episode's %s", s.Name(), s.SpanContext().TraceID(), root.TraceID())
			}
		}
	}
	ms := time.Millisecond
	want := []spanView{
		{Name: tracing.SpanDetect, Parent: tracing.SpanRestart, Start: 0, End: 40 * ms},
		{Name: tracing.SpanRestart, Start: 0, End: 1000 * ms, Attrs: map[string]string{
			"faultline.run": "llm", "k8s.namespace.name": "ml", "faultline.attempt.from": "1", "faultline.attempt.to": "2",
			"faultline.class": "Infrastructure", "faultline.cause": "NodeShutdown", "k8s.pod.name": "llm-1", "faultline.index": "1",
			"k8s.node.name": "gpu-node-4", "faultline.exit_code": "143",
		}},
		{Name: tracing.SpanSettle, Parent: tracing.SpanRestart, Start: 150 * ms, End: 160 * ms, Attrs: map[string]string{"faultline.run": "llm"}},
		{Name: tracing.SpanClassify, Parent: tracing.SpanRestart, Start: 160 * ms, End: 170 * ms, Attrs: map[string]string{"faultline.run": "llm", "faultline.class": "Infrastructure", "faultline.cause": "NodeShutdown"}},
		{Name: tracing.SpanTeardown, Parent: tracing.SpanRestart, Start: 170 * ms, End: 700 * ms, Attrs: map[string]string{"faultline.run": "llm"}},
		{Name: tracing.SpanBackoff, Parent: tracing.SpanRestart, Start: 700 * ms, End: 710 * ms, Attrs: map[string]string{"faultline.run": "llm"}},
		{Name: tracing.SpanCreate, Parent: tracing.SpanRestart, Start: 710 * ms, End: 730 * ms, Attrs: map[string]string{"faultline.run": "llm"}},
		{Name: tracing.SpanSchedule, Parent: tracing.SpanRestart, Start: 730 * ms, End: 900 * ms, Attrs: map[string]string{"faultline.run": "llm"}},
		{Name: tracing.SpanRunning, Parent: tracing.SpanRestart, Start: 900 * ms, End: 1000 * ms, Attrs: map[string]string{"faultline.run": "llm"}},
	}
	keys := []attribute.Key{tracing.KeyRun, tracing.KeyNamespace, tracing.KeyAttemptFrom, tracing.KeyAttemptTo, tracing.KeyClass, tracing.KeyCause, tracing.KeyPod, tracing.KeyIndex, tracing.KeyNode, tracing.KeyExitCode}
	got := view(episodeSpans, keys...)
	// Only the root carries the failure's details; compare the run attribute on the others.
	for i := range got {
		if got[i].Name != tracing.SpanRestart && got[i].Name != tracing.SpanDetect {
			for k := range got[i].Attrs {
				if k != "faultline.run" && !(got[i].Name == tracing.SpanClassify && (k == "faultline.class" || k == "faultline.cause")) {
					delete(got[i].Attrs, k)
				}
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("restart trace (-want +got):\n%s", diff)
	}

	var rootSpan sdktrace.ReadOnlySpan
	for _, s := range episodeSpans {
		if s.Name() == tracing.SpanRestart {
			rootSpan = s
		}
	}
	if rootSpan.SpanContext().SpanID() != root.SpanID() || rootSpan.Parent().IsValid() {
		t.Errorf("root span %s (parent %v), want the reserved %s without a parent", rootSpan.SpanContext().SpanID(), rootSpan.Parent(), root.SpanID())
	}
	if l := rootSpan.Links(); len(l) != 1 || !l[0].SpanContext.Equal(runTrace) {
		t.Errorf("root links %v, want the run's trace", l)
	}
	// The children cover the root but for the 110ms from the evidence to the failure seen.
	var sum time.Duration
	for _, s := range episodeSpans {
		if s.Parent().SpanID() == root.SpanID() {
			sum += s.EndTime().Sub(s.StartTime())
		}
	}
	if gap := rootSpan.EndTime().Sub(rootSpan.StartTime()) - sum; gap != 110*time.Millisecond {
		t.Errorf("children leave %v of the root uncovered, want the 110ms before the failure was seen", gap)
	}
}

// TestFailFastTrace: an application error without node evidence fails the run: the
// controller reserves the episode itself and records faultline.fail with settle and
// classify, error.type = the cause, and the attempt's span linked to it.
func TestFailFastTrace(t *testing.T) {
	ctx := context.Background()
	r, exp := newRecorder()
	run := makeRun("app", 2).trace(&v1alpha1.TraceStatus{CreatingAt: mt(-5010), CreatedAt: mt(-5000)}).obj()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app-0"}}
	ep := r.episodeOf(run, pod, v1alpha1.CauseAppExit)
	if !ep.root.IsValid() || ep.detectedAt != nil {
		t.Fatalf("episode %v detected %v; want one reserved by the controller, no detection", ep.root, ep.detectedAt)
	}
	if again := r.episodeOf(run, pod, v1alpha1.CauseAppExit); !again.root.Equal(ep.root) {
		t.Error("two reconciles of one failure reserved two episodes")
	}
	v := &v1alpha1.FailureVerdict{
		Class: v1alpha1.ClassApplication, Cause: v1alpha1.CauseAppExit, Rule: "default-application", Action: v1alpha1.ActionFailRun,
		Pod: "app-0", Index: ptr.To[int32](0), Node: "gpu-node-1", Container: "worker", ExitCode: ptr.To[int32](1),
		DecidedAt: ptr.To(metav1.NewTime(at(1005))),
	}
	before := run.Status.DeepCopy()
	tr := r.Decided(run, []*corev1.Pod{pod}, pod.Name, v1alpha1.CauseAppExit, at(0), at(1000), at(1005))
	run = makeRun("app", 2).trace(before.Trace.DeepCopy()).failed(v, tr).obj()
	run.Status.Phase = v1alpha1.PhaseFailed
	r.Written(ctx, withStatus(run, before), run)

	ms := time.Millisecond
	failure := "Application failure (AppExit): rule default-application failed the run"
	want := []spanView{
		{Name: tracing.SpanAttempt, Start: -5000 * ms, End: 1005 * ms, Attrs: map[string]string{"faultline.attempt.number": "1", "faultline.attempt.outcome": "Failed", "faultline.cause": "AppExit"}, Error: "the run failed in this attempt"},
		{Name: tracing.SpanFail, Start: 0, End: 1005 * ms, Attrs: map[string]string{"error.type": "AppExit", "faultline.cause": "AppExit", "faultline.attempt.from": "1", "faultline.exit_code": "1"}, Error: failure},
		{Name: tracing.SpanSettle, Parent: tracing.SpanFail, Start: 0, End: 1000 * ms},
		{Name: tracing.SpanClassify, Parent: tracing.SpanFail, Start: 1000 * ms, End: 1005 * ms, Attrs: map[string]string{"faultline.cause": "AppExit"}},
	}
	got := view(exp.GetSpans().Snapshots(), tracing.KeyErrorType, tracing.KeyCause, tracing.KeyAttemptFrom, tracing.KeyExitCode, tracing.KeyAttempt, tracing.KeyOutcome)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fail trace (-want +got):\n%s", diff)
	}
	for _, s := range exp.GetSpans().Snapshots() {
		switch s.Name() {
		case tracing.SpanFail:
			if s.SpanContext().SpanID() != ep.root.SpanID() || s.SpanContext().TraceID() != ep.root.TraceID() {
				t.Errorf("faultline.fail is %v, want the reserved root %v", s.SpanContext(), ep.root)
			}
		case tracing.SpanAttempt:
			if l := s.Links(); len(l) != 1 || !l[0].SpanContext.Equal(ep.root) || l[0].Attributes[0] != tracing.KeyLink.String(tracing.LinkEndedBy) {
				t.Errorf("attempt links %v, want ended-by the fail episode", l)
			}
		}
	}
}

func TestEpisodeOf(t *testing.T) {
	r, _ := newRecorder()
	agentRoot := r.tracing.NewEpisode()
	runTrace := r.tracing.NewEpisode()
	evidence := func(cause v1alpha1.Cause) string {
		raw, _ := json.Marshal(v1alpha1.FaultEvidence{Source: "logind", Cause: cause, DetectedAt: at(0).Format(time.RFC3339Nano)})
		return string(raw)
	}
	minted := r.tracing.EpisodeFor("uid-run/1")
	for name, tc := range map[string]struct {
		annotations  map[string]string
		cause        v1alpha1.Cause
		want         trace.SpanContext
		wantDetected bool
	}{
		"agent's episode": {
			annotations: map[string]string{v1alpha1.AnnotationFaultEvidence: evidence(v1alpha1.CauseNodeShutdown), v1alpha1.AnnotationTraceparent: tracing.Traceparent(agentRoot)},
			cause:       v1alpha1.CauseNodeShutdown, want: agentRoot, wantDetected: true,
		},
		"any cause before the verdict": {
			annotations: map[string]string{v1alpha1.AnnotationFaultEvidence: evidence(v1alpha1.CauseNodeShutdown), v1alpha1.AnnotationTraceparent: tracing.Traceparent(agentRoot)},
			want:        agentRoot, wantDetected: true,
		},
		"evidence of another cause": {
			annotations: map[string]string{v1alpha1.AnnotationFaultEvidence: evidence(v1alpha1.CauseAppGPUError), v1alpha1.AnnotationTraceparent: tracing.Traceparent(agentRoot)},
			cause:       v1alpha1.CauseAppExit, want: minted,
		},
		"the run's traceparent, copied by the Job template": {
			annotations: map[string]string{v1alpha1.AnnotationFaultEvidence: evidence(v1alpha1.CauseNodeShutdown), v1alpha1.AnnotationTraceparent: tracing.Traceparent(runTrace)},
			cause:       v1alpha1.CauseNodeShutdown, want: minted, wantDetected: true,
		},
		"a traceparent without evidence": {
			annotations: map[string]string{v1alpha1.AnnotationTraceparent: tracing.Traceparent(agentRoot)},
			cause:       v1alpha1.CauseUnknown, want: minted,
		},
		"nothing": {cause: v1alpha1.CauseUnknown, want: minted},
	} {
		t.Run(name, func(t *testing.T) {
			run := makeRun("run", 2).traceparent(runTrace).obj()
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "run-0", Annotations: tc.annotations}}
			ep := r.episodeOf(run, pod, tc.cause)
			if !ep.root.Equal(tc.want) {
				t.Errorf("root %v, want %v", ep.root, tc.want)
			}
			if (ep.detectedAt != nil) != tc.wantDetected {
				t.Errorf("detectedAt %v, want set: %v", ep.detectedAt, tc.wantDetected)
			}
		})
	}
	if ep := (&Recorder{}).episodeOf(makeRun("run", 2).obj(), nil, ""); ep.root.IsValid() {
		t.Error("an episode was reserved without tracing")
	}
}

// TestUnfinishedRestart: a restart whose attempt ends before its workers all ran still gets
// its root, ended then and marked failed, so its children are not orphans.
func TestUnfinishedRestart(t *testing.T) {
	r, _ := newRecorder()
	ep := episode{root: r.tracing.EpisodeFor("x")}
	tr := &v1alpha1.TraceStatus{Traceparent: tracing.Traceparent(ep.root), SeenAt: mt(0), JudgedAt: mt(10), DecidedAt: mt(20)}
	run := makeRun("llm", 4).failed(shutdownVerdict(at(20)), tr).obj()
	root, s, ok := unfinishedRestart(run, at(5000), "attempt 2 failed before all its workers were Running")
	if !ok || !root.Equal(ep.root) || s.Name != tracing.SpanRestart || !s.End.Equal(at(5000)) || s.Error == "" {
		t.Errorf("unfinishedRestart = %v, %+v, %v", root, s, ok)
	}
	run.Status.Trace.RunningAt = mt(900)
	if _, _, ok := unfinishedRestart(run, at(5000), "x"); ok {
		t.Error("a finished restart is unfinished")
	}
}

// TestAttemptSpan: an attempt that a restart started and another ended is linked to both,
// and is a child of the run's own trace.
func TestAttemptSpan(t *testing.T) {
	r, _ := newRecorder()
	runTrace, startedBy, endedBy := r.tracing.NewEpisode(), r.tracing.NewEpisode(), r.tracing.NewEpisode()
	run := makeRun("llm", 4).traceparent(runTrace).obj()
	run.Status.Attempts = append(run.Status.Attempts, v1alpha1.AttemptRecord{Attempt: 2, StartTime: ptr.To(metav1.NewTime(at(0))), Outcome: policy.OutcomeRestarted})
	started := &v1alpha1.TraceStatus{Traceparent: tracing.Traceparent(startedBy), CreatedAt: mt(730)}
	parent, s, ok := attemptSpan(run, 2, started, at(9000), endedBy)
	if !ok || !parent.Equal(runTrace) {
		t.Fatalf("attemptSpan parent %v ok %v, want the run's trace", parent, ok)
	}
	if !s.Start.Equal(at(730)) || !s.End.Equal(at(9000)) {
		t.Errorf("attempt %v → %v, want the Job's creation (microseconds) to its end", s.Start, s.End)
	}
	var links []string
	for _, l := range s.Links {
		links = append(links, l.Attributes[0].Value.AsString()+"="+l.SpanContext.SpanID().String())
	}
	want := []string{tracing.LinkStartedBy + "=" + startedBy.SpanID().String(), tracing.LinkEndedBy + "=" + endedBy.SpanID().String()}
	if diff := cmp.Diff(want, links); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
	if _, _, ok := attemptSpan(run, 7, nil, at(0), trace.SpanContext{}); ok {
		t.Error("a span for an attempt not in the history")
	}
}

// TestSightings: settle starts when the recorder first saw the agent's evidence of the
// episode (the agent's detect phase ends with its first evidence written), whether the
// failure came before or after it, and when it first saw the failure if it saw no evidence;
// a new attempt, or another run under the same name, starts afresh.
func TestSightings(t *testing.T) {
	r, _ := newRecorder()
	run := makeRun("llm", 4).trace(&v1alpha1.TraceStatus{Traceparent: "tp-run"}).obj()
	scheduled := func(run *v1alpha1.TrainingRun, now time.Time) time.Time {
		r.SawScheduled(run, now)
		return r.of(run).scheduled
	}
	if got := scheduled(run, at(0)); !got.Equal(at(0)) {
		t.Errorf("first sighting %v", got)
	}
	if got := scheduled(run, at(500)); !got.Equal(at(0)) {
		t.Errorf("second sighting %v, want the first's time", got)
	}
	run.Status.Attempt = 2
	r.sawEvidence("tp-a", at(700))
	r.sawEvidence("tp-a", at(800)) // more of the episode's workers marked
	r.sawEvidence("tp-c", at(950))
	if got := scheduled(run, at(900)); !got.Equal(at(900)) {
		t.Errorf("next attempt's first sighting %v", got)
	}
	for _, tc := range []struct {
		name string
		ep   episode
		want time.Time
	}{
		{"an episode the controller reserved", episode{}, at(900)},
		{"another episode", episode{agent: "tp-b"}, at(900)},
		{"evidence seen after the failure", episode{agent: "tp-c"}, at(950)},
		{"evidence seen before the failure", episode{agent: "tp-a"}, at(700)},
		{"the same, once consumed", episode{agent: "tp-a"}, at(900)},
	} {
		if got := r.settleStart(tc.ep, at(900)); !got.Equal(tc.want) {
			t.Errorf("%s: settle starts %v, want %v", tc.name, got.Sub(t0), tc.want.Sub(t0))
		}
	}
	r.sawEvidence("tp-old", at(0))
	r.sawEvidence("tp-new", at(0).Add(evidenceMemory+time.Second))
	if _, ok := r.evidence["tp-old"]; ok {
		t.Error("evidence of an episode that never failed is remembered for ever")
	}

	recreated := makeRun("llm", 4).trace(&v1alpha1.TraceStatus{Traceparent: "tp-run"}).obj()
	recreated.UID = "uid-other"
	recreated.Status.Attempt = 2
	if got := scheduled(recreated, at(1000)); !got.Equal(at(1000)) {
		t.Errorf("a new run of the same name inherited %v", got)
	}
	r.Forget(types.NamespacedName{Namespace: recreated.Namespace, Name: recreated.Name})
	if got := scheduled(recreated, at(1100)); !got.Equal(at(1100)) {
		t.Errorf("after forget %v", got)
	}
}

// TestStampEndsPhasesFromTransitions: the stamps of status.trace come from what a status
// write changes: the attempt's creation (its record's start) ends the teardown where it was
// seen over, the backoff at the persisted next attempt's time, and the creation at the write;
// every worker Running ends the run-up, with every worker bound as first seen. A write that
// changes neither stamps nothing, and without tracing nothing is stamped at all.
func TestStampEndsPhasesFromTransitions(t *testing.T) {
	r, _ := newRecorder()
	episodeTrace := &v1alpha1.TraceStatus{Traceparent: tracing.Traceparent(r.tracing.EpisodeFor("x")), SeenAt: mt(0), JudgedAt: mt(10), DecidedAt: mt(20)}
	run := makeRun("llm", 2).failed(shutdownVerdict(at(20)), episodeTrace).obj()
	run.Status.NextAttemptAt = ptr.To(metav1.NewTime(at(3000)))

	// The teardown over at 1000, in the backoff: nothing is written, nothing stamped.
	r.SawTornDown(run, at(1000))
	r.SawTornDown(run, at(2000))
	before := run.Status.DeepCopy()
	r.Stamp(before, run, at(2500))
	if tr := run.Status.Trace; tr.TornDownAt != nil || tr.CreatingAt != nil || tr.CreatedAt != nil {
		t.Fatalf("a write that creates nothing stamped %+v", tr)
	}

	// The Job created at 3100: teardown ends where it was first seen over, the backoff at
	// the persisted deadline, the creation now.
	before = run.Status.DeepCopy()
	run.Status.NextAttemptAt = nil
	attempt.Record(run).StartTime = ptr.To(metav1.NewTime(at(3000)))
	r.Stamp(before, run, at(3100))
	tr := run.Status.Trace
	if !tr.TornDownAt.Time.Equal(at(1000)) || !tr.CreatingAt.Time.Equal(at(3000)) || !tr.CreatedAt.Time.Equal(at(3100)) {
		t.Errorf("created: torn down %v, creating %v, created %v; want 1000, 3000, 3100 ms", tr.TornDownAt, tr.CreatingAt, tr.CreatedAt)
	}

	// Every worker bound at 3500, Running at 4000.
	r.SawScheduled(run, at(3500))
	r.SawScheduled(run, at(3900))
	before = run.Status.DeepCopy()
	attempt.Record(run).RunningTime = ptr.To(metav1.NewTime(at(4000)))
	r.Stamp(before, run, at(4001))
	if !tr.ScheduledAt.Time.Equal(at(3500)) || !tr.RunningAt.Time.Equal(at(4000)) {
		t.Errorf("running: scheduled %v, running %v; want 3500, 4000 ms", tr.ScheduledAt, tr.RunningAt)
	}
	stamped := tr.DeepCopy()
	before = run.Status.DeepCopy()
	r.Stamp(before, run, at(9000))
	if !equality.Semantic.DeepEqual(stamped, run.Status.Trace) {
		t.Errorf("a later write restamped %+v into %+v", stamped, run.Status.Trace)
	}

	// The first attempt, traced: its creation starts its attempt span.
	first := makeRun("first", 2).obj()
	first.Status.Attempts[0].StartTime = nil
	before = first.Status.DeepCopy()
	first.Status.Attempts[0].StartTime = ptr.To(metav1.NewTime(at(50)))
	r.Stamp(before, first, at(60))
	if tr := first.Status.Trace; tr == nil || tr.Traceparent != "" || !tr.CreatedAt.Time.Equal(at(60)) || tr.TornDownAt != nil {
		t.Errorf("first attempt created: trace %+v, want its creation alone", tr)
	}

	// Without tracing, nothing.
	off := New(nil, clocktesting.NewFakeClock(at(0)))
	untraced := makeRun("off", 2).obj()
	untraced.Status.Attempts[0].StartTime = nil
	before = untraced.Status.DeepCopy()
	untraced.Status.Attempts[0].StartTime = ptr.To(metav1.NewTime(at(50)))
	off.Stamp(before, untraced, at(60))
	if untraced.Status.Trace != nil {
		t.Errorf("stamped without tracing: %+v", untraced.Status.Trace)
	}
}

// TestTraceSaysTheWorkerStillRan: the trace of an episode whose worker hung says so, and how long it ran on after its
// evidence until the decision.
func TestTraceSaysTheWorkerStillRan(t *testing.T) {
	failed := metav1.NewTime(time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC))
	decided := metav1.NewTime(failed.Add(2 * time.Second))
	run := &v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml"}, Status: v1alpha1.TrainingRunStatus{
		LastFailure: &v1alpha1.FailureVerdict{Class: v1alpha1.ClassInfrastructure, Cause: v1alpha1.CauseGPUFault, StillRunning: true, FailedAt: &failed, DecidedAt: &decided},
	}}
	attrs := map[string]string{}
	for _, a := range failureAttributes(run) {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["faultline.worker.still_running"] != "true" || attrs["faultline.worker.running_seconds"] != "2" {
		t.Errorf("attributes %v: want the worker still running, for 2 s", attrs)
	}
	run.Status.LastFailure.StillRunning = false
	for _, a := range failureAttributes(run) {
		if strings.HasPrefix(string(a.Key), "faultline.worker.") {
			t.Errorf("a worker that exited: attribute %s", a.Key)
		}
	}
}

// A planned move's request to save is a span of the episode that ended the attempt: from
// the request to the move, with what the workers saved and who did not.
func TestCheckpointSpan(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	ended := metav1.NewMicroTime(t0.Add(2 * time.Second))
	step := int64(4100)
	run := &v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml"}, Spec: v1alpha1.TrainingRunSpec{Workers: 4}}
	rec := &v1alpha1.AttemptRecord{Attempt: 3}
	if _, ok := checkpointSpan(run, rec); ok {
		t.Error("a span for an attempt whose workers were never asked")
	}
	rec.Checkpoint = &v1alpha1.CheckpointStatus{Attempt: 3, RequestedAt: metav1.NewMicroTime(t0), EndedAt: &ended, Missing: []int32{2},
		Acks: []v1alpha1.CheckpointAck{{Index: 0, Step: &step}, {Index: 1}, {Index: 3}}}
	s, ok := checkpointSpan(run, rec)
	if !ok || s.Name != tracing.SpanCheckpoint || !s.Start.Equal(t0) || s.End.Sub(s.Start) != 2*time.Second || s.Error == "" {
		t.Fatalf("span %+v, want checkpoint over the 2 s the move waited, in error for index 2", s)
	}
	got := map[attribute.Key]string{}
	for _, a := range s.Attributes {
		got[a.Key] = a.Value.String()
	}
	if got[tracing.KeyCheckpointSaved] != "3" || got[tracing.KeyCheckpointMissing] != "[2]" || got[tracing.KeyCheckpointStep] != "4100" || got[tracing.KeyAttempt] != "3" {
		t.Errorf("attributes %v", got)
	}
}
