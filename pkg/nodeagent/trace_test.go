package nodeagent

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/nodeagent/inplace"
	"github.com/faultline-dev/faultline/pkg/tracing"
)

func newTracedAgent(t *testing.T, w EvidenceWriter, owners GPUOwnerSource) (*Agent, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	a, err := NewAgent(AgentConfig{
		Node: node, Owners: owners, Writer: w, Tracing: tracing.New(nil, sdktrace.WithSyncer(exp)),
		Clock: clocktesting.NewFakeClock(t0), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return a, exp
}

// TestShutdownStartsOneEpisodePerRun: a shutdown under the pods of two runs starts two fault
// episodes, one per run (each run's controller ends its own): every pod gets its run's
// traceparent in the evidence patch, and each run gets a detect span, child of the reserved
// root in that traceparent, from the signal to the last of its pods marked.
func TestShutdownStartsOneEpisodePerRun(t *testing.T) {
	w, client := newTestWriter(t, false, makeNode(),
		makePod("r-0").run("r").obj(), makePod("r-1").run("r").obj(), makePod("s-0").run("s").obj())
	a, exp := newTracedAgent(t, w, &FakeGPUOwners{})
	if err := a.ShutdownStarted(context.Background(), t0); err != nil {
		t.Fatal(err)
	}

	roots := map[string]trace.SpanContext{}
	for _, name := range []string{"r-0", "r-1", "s-0"} {
		pod := getPod(t, client, name)
		if v1alpha1.EvidenceOf(pod.Annotations) == nil {
			t.Fatalf("pod %s has no evidence", name)
		}
		sc, ok := tracing.TraceparentFrom(pod.Annotations)
		if !ok {
			t.Fatalf("pod %s has no traceparent next to its evidence: %v", name, pod.Annotations)
		}
		roots[name] = sc
	}
	if !roots["r-0"].Equal(roots["r-1"]) {
		t.Errorf("pods of one run carry two episodes: %v, %v", roots["r-0"], roots["r-1"])
	}
	if roots["r-0"].TraceID() == roots["s-0"].TraceID() {
		t.Error("two runs share one episode")
	}

	type detect struct {
		Run, Parent        string
		Start, End         time.Time
		Pods               int64
		Node, Cause, Class string
	}
	var got []detect
	for _, s := range exp.GetSpans().Snapshots() {
		if s.Name() != tracing.SpanDetect {
			t.Errorf("unexpected span %s", s.Name())
			continue
		}
		d := detect{Parent: s.Parent().SpanID().String(), Start: s.StartTime(), End: s.EndTime()}
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case tracing.KeyRun:
				d.Run = kv.Value.AsString()
			case tracing.KeyPods:
				d.Pods = kv.Value.AsInt64()
			case tracing.KeyNode:
				d.Node = kv.Value.AsString()
			case tracing.KeyCause:
				d.Cause = kv.Value.AsString()
			case tracing.KeyClass:
				d.Class = kv.Value.AsString()
			}
		}
		if s.SpanContext().TraceID() != roots[d.Run+"-0"].TraceID() {
			t.Errorf("detect of %s in trace %s, want its episode's", d.Run, s.SpanContext().TraceID())
		}
		got = append(got, d)
	}
	sort.Slice(got, func(i, j int) bool { return got[i].Run < got[j].Run })
	marked := t0.Add(50 * time.Millisecond) // the writer's clock
	want := []detect{
		{Run: "r", Parent: roots["r-0"].SpanID().String(), Start: t0, End: marked, Pods: 2, Node: node, Cause: "NodeShutdown", Class: "Infrastructure"},
		{Run: "s", Parent: roots["s-0"].SpanID().String(), Start: t0, End: marked, Pods: 1, Node: node, Cause: "NodeShutdown", Class: "Infrastructure"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("detect spans (-want +got):\n%s", diff)
	}

	// The same evidence again writes nothing, so it starts no episode: a detect span now
	// would hang under a root that no controller will ever record.
	exp.Reset()
	if err := a.ShutdownStarted(context.Background(), t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("%d detect spans for evidence already on the pods", n)
	}
	if sc, _ := tracing.TraceparentFrom(getPod(t, client, "r-0").Annotations); !sc.Equal(roots["r-0"]) {
		t.Error("the first episode's traceparent was replaced")
	}
}

// TestGPUFaultEpisode: an XID marks the pod holding the GPU; the detect span carries the
// GPU and the XID.
func TestGPUFaultEpisode(t *testing.T) {
	w, client := newTestWriter(t, false, makeNode(), makePod("r-0").run("r").obj())
	a, exp := newTracedAgent(t, w, &FakeGPUOwners{Owners: testOwners})
	if err := a.HandleGPUFault(context.Background(), fault("GPU-a", 79, v1alpha1.CauseGPUFault, true)); err != nil {
		t.Fatal(err)
	}
	sc, ok := tracing.TraceparentFrom(getPod(t, client, "r-0").Annotations)
	if !ok {
		t.Fatal("no traceparent on the pod")
	}
	spans := exp.GetSpans().Snapshots()
	if len(spans) != 1 || spans[0].Parent().SpanID() != sc.SpanID() {
		t.Fatalf("spans %v, want one detect under %s", spans, sc.SpanID())
	}
	attrs := map[string]string{}
	for _, kv := range spans[0].Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	for k, want := range map[string]string{"faultline.xid": "79", "faultline.gpu.uuid": "GPU-a", "faultline.source": "nvml-event", "faultline.cause": "GPUFault"} {
		if attrs[k] != want {
			t.Errorf("%s = %q, want %q", k, attrs[k], want)
		}
	}
}

// TestNoTracingNoTraceparent: without tracing the evidence patch is what it always was.
func TestNoTracingNoTraceparent(t *testing.T) {
	w, client := newTestWriter(t, false, makeNode(), makePod("r-0").run("r").obj())
	a := newTestAgent(t, &FakeGPUOwners{}, w, nil)
	if err := a.ShutdownStarted(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	pod := getPod(t, client, "r-0")
	if v1alpha1.EvidenceOf(pod.Annotations) == nil {
		t.Fatal("no evidence")
	}
	if tp, ok := pod.Annotations[v1alpha1.AnnotationTraceparent]; ok {
		t.Errorf("traceparent %q written without tracing", tp)
	}
}

func TestPodMarkPatchCarriesTheTraceparent(t *testing.T) {
	ev := ShutdownEvidence("gpu-7", t0)
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	annotations, err := evidenceAnnotations(ev, tp)
	if err != nil {
		t.Fatal(err)
	}
	data, err := podMarkPatch("uid-1", nil, annotations)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(ev)
	want, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": "uid-1", "annotations": map[string]string{v1alpha1.AnnotationFaultEvidence: string(raw), v1alpha1.AnnotationTraceparent: tp},
	}})
	jsonEqual(t, string(want), data)
	// A withdrawal leaves the traceparent: without evidence next to it, it starts nothing.
	data, err = podMarkPatch("uid-1", nil, evidenceRemoval())
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, `{"metadata": {"uid": "uid-1", "annotations": {"faultline.dev/fault-evidence": null}}}`, data)
}

// TestDetectEndsWithTheFirstEvidence: the detect phase ends when the run's first evidence
// is written, from when the controller can act, not when the agent has marked its last
// pod: the agent marks the others alongside the decision, and the episode's phases follow
// its critical path without overlapping.
func TestDetectEndsWithTheFirstEvidence(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	e := newEpisodes(tracing.New(nil, sdktrace.WithSyncer(exp)))
	pods := []*corev1.Pod{makePod("r-0").run("r").obj(), makePod("r-1").run("r").obj(), makePod("r-2").run("r").obj()}
	for _, p := range pods {
		e.root(p)
	}
	// Written concurrently: the patches return out of order.
	e.written(pods[1], t0.Add(30*time.Millisecond))
	e.written(pods[0], t0.Add(10*time.Millisecond))
	e.written(pods[2], t0.Add(90*time.Millisecond))
	e.record(context.Background(), ShutdownEvidence(node, t0), t0)
	spans := exp.GetSpans().Snapshots()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want one detect", len(spans))
	}
	if got, want := spans[0].EndTime().Sub(t0), 10*time.Millisecond; got != want {
		t.Errorf("detect ends %v after the signal, want %v (the first evidence written)", got, want)
	}
	for _, kv := range spans[0].Attributes() {
		if kv.Key == tracing.KeyPods && kv.Value.AsInt64() != 3 {
			t.Errorf("%s = %d, want 3", kv.Key, kv.Value.AsInt64())
		}
	}
}

// The agent's steps of a restart in place are children of the run's episode (status.trace,
// which slimRun keeps), with the pod's UID that the kubelet's spans carry; a run without an
// episode gets none.
func TestInPlaceStepsJoinTheRunsEpisode(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	root := tracing.New(nil, sdktrace.WithSyncer(exp)).NewEpisode()
	run := &v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ml", UID: "run-uid"}}
	run.Status.Trace = &v1alpha1.TraceStatus{Traceparent: tracing.Traceparent(root)}
	slim, err := slimRun(run)
	if err != nil {
		t.Fatal(err)
	}
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	if err := store.Add(slim); err != nil {
		t.Fatal(err)
	}
	traced := traceInPlace(tracing.New(nil, sdktrace.WithSyncer(exp)), store, node)
	pod := makePod("r-0").run("r").obj()
	pod.Namespace, pod.UID = "ml", "pod-uid"
	start := time.Now()
	traced(context.Background(), inplace.Step{Pod: pod, Action: inplace.ActionOpenBarrier, Attempt: 2, Start: start, End: start.Add(time.Second),
		Via: inplace.ViaExec, ViaReason: "the barrier's socket is out of reach: a test"})
	other := makePod("q-0").run("q").obj()
	other.Namespace = "ml"
	traced(context.Background(), inplace.Step{Pod: other, Action: inplace.ActionStopWorkers, Attempt: 2, Start: start, End: start.Add(time.Second)})

	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want r-0's open alone (q has no run in the store)", len(spans))
	}
	s := spans[0]
	attrs := map[string]string{}
	for _, kv := range s.Attributes {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if s.Name != tracing.SpanInPlaceOpen || s.Parent.SpanID() != root.SpanID() || s.SpanContext.TraceID() != root.TraceID() ||
		attrs[string(tracing.KeyPodUID)] != "pod-uid" || attrs[string(tracing.KeyAttempt)] != "2" || attrs[string(tracing.KeyNode)] != node ||
		attrs[string(tracing.KeyBarrierSignal)] != inplace.ViaExec || attrs[string(tracing.KeyBarrierSignalReason)] != "the barrier's socket is out of reach: a test" {
		t.Errorf("span %s, parent %s in trace %s, attributes %v; want %s, child of the episode's root %s in %s, with the pod's UID, attempt 2, the node, how the go signal went and why",
			s.Name, s.Parent.SpanID(), s.SpanContext.TraceID(), attrs, tracing.SpanInPlaceOpen, root.SpanID(), root.TraceID())
	}
	if traceInPlace(nil, store, node) != nil {
		t.Error("tracing off: want no tracer of the steps")
	}
}
