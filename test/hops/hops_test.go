package hops

import (
	"strings"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/faultline-dev/faultline/pkg/nodeagent/inplace"
	"github.com/faultline-dev/faultline/pkg/tracing"
	"github.com/faultline-dev/faultline/test/otlp"
)

var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// spans builds the spans of the test's restart: trace "aa", the kubelet's in trace "bb".
type spans struct{ list []otlp.Span }

func (s *spans) add(service, trace, id, parent, name string, from, to time.Duration, attrs ...string) {
	var kvs []*commonpb.KeyValue
	for i := 0; i+1 < len(attrs); i += 2 {
		kvs = append(kvs, &commonpb.KeyValue{Key: attrs[i], Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: attrs[i+1]}}})
	}
	hex := func(s string) []byte {
		if s == "" {
			return nil
		}
		return []byte(s)
	}
	s.list = append(s.list, otlp.Span{Service: service, Span: &tracepb.Span{
		TraceId: hex(trace), SpanId: hex(id), ParentSpanId: hex(parent), Name: name, Attributes: kvs,
		StartTimeUnixNano: uint64(t0.Add(from).UnixNano()), EndTimeUnixNano: uint64(t0.Add(to).UnixNano()),
	}})
}

const s = time.Second

// Two pods restarted in place and one new pod (a moved index): each moment read from its span,
// the kubelet's calls joined on the pod's UID, and the hops from them.
func TestBreakdown(t *testing.T) {
	var sp spans
	tr := "aa"
	sp.add(tracing.ServiceController, tr, "c1", "r", tracing.SpanClassify, 0, 1*s)
	sp.add(tracing.ServiceController, tr, "c2", "r", tracing.SpanTeardown, 1*s, 5*s)
	sp.add(tracing.ServiceController, tr, "c3", "r", tracing.SpanRunning, 6*s, 9*s)
	sp.add(tracing.ServiceAgent, tr, "a1", "r", tracing.SpanInPlaceStop, 1200*time.Millisecond, 1500*time.Millisecond, string(tracing.KeyPodUID), "old")
	sp.add(tracing.ServiceAgent, tr, "a2", "r", tracing.SpanInPlaceOpen, 5300*time.Millisecond, 5400*time.Millisecond, string(tracing.KeyPodUID), "old", string(tracing.KeyBarrierSignal), "socket")
	sp.add(tracing.ServiceAgent, tr, "a3", "r", tracing.SpanInPlaceOpen, 5200*time.Millisecond, 5300*time.Millisecond, string(tracing.KeyPodUID), "new")
	// The in-place pod queued again while its status lagged: a stop that found its old worker
	// gone (the kubelet restarting the pod already), and an open that found nothing.
	sp.add(tracing.ServiceAgent, tr, "a5", "r", tracing.SpanInPlaceStop, 3400*time.Millisecond, 3401*time.Millisecond, string(tracing.KeyPodUID), "old")
	sp.add(tracing.ServiceAgent, tr, "a4", "r", tracing.SpanInPlaceOpen, 5500*time.Millisecond, 5600*time.Millisecond, string(tracing.KeyPodUID), "old")
	// The kubelet: the in-place pod's containers removed, the barrier started, then the worker.
	sp.add("kubelet", "bb", "k1", "", kubeletSync, 2*s, 3*s, string(tracing.KeyPodUID), "old")
	sp.add("kubelet", "bb", "k1a", "k1", "runtime.v1.RuntimeService/RemoveContainer", 2100*time.Millisecond, 2200*time.Millisecond)
	sp.add("kubelet", "bb", "k1b", "k1", "runtime.v1.RuntimeService/RemoveContainer", 2300*time.Millisecond, 2400*time.Millisecond)
	sp.add("kubelet", "bb", "k2", "", kubeletSync, 3*s, 4*s, string(tracing.KeyPodUID), "old")
	sp.add("kubelet", "bb", "k2a", "k2", "runtime.v1.RuntimeService/StartContainer", 3100*time.Millisecond, 3500*time.Millisecond)
	sp.add("kubelet", "bb", "k3", "", kubeletSync, 6*s, 7*s, string(tracing.KeyPodUID), "old")
	sp.add("kubelet", "bb", "k3a", "k3", "runtime.v1.RuntimeService/StartContainer", 6100*time.Millisecond, 6200*time.Millisecond)
	// The new pod: its sandbox, its barrier, then its worker; a sync of another pod between.
	sp.add("kubelet", "cc", "n0", "", kubeletSync, 3*s, 4*s, string(tracing.KeyPodUID), "new")
	sp.add("kubelet", "cc", "n0a", "n0", "runtime.v1.RuntimeService/RunPodSandbox", 3200*time.Millisecond, 3800*time.Millisecond)
	sp.add("kubelet", "cc", "n1", "", kubeletSync, 4*s, 5*s, string(tracing.KeyPodUID), "new")
	sp.add("kubelet", "cc", "n1a", "n1", "runtime.v1.RuntimeService/StartContainer", 4500*time.Millisecond, 4600*time.Millisecond)
	sp.add("kubelet", "cc", "x1", "", kubeletSync, 5*s, 6*s, string(tracing.KeyPodUID), "other")
	sp.add("kubelet", "cc", "x1a", "x1", "runtime.v1.RuntimeService/StartContainer", 5500*time.Millisecond, 5600*time.Millisecond)
	sp.add("kubelet", "cc", "n2", "", kubeletSync, 6*s, 7*s, string(tracing.KeyPodUID), "new")
	sp.add("kubelet", "cc", "n2a", "n2", "runtime.v1.RuntimeService/StartContainer", 6300*time.Millisecond, 6400*time.Millisecond)

	// Another in-place pod whose barrier the agent opened on the runtime's word, before the
	// kubelet's call that started it returned.
	sp.add(tracing.ServiceAgent, tr, "e1", "r", tracing.SpanInPlaceStop, 1200*time.Millisecond, 1500*time.Millisecond, string(tracing.KeyPodUID), "early")
	sp.add(tracing.ServiceAgent, tr, "e2", "r", tracing.SpanInPlaceOpen, 5400*time.Millisecond, 5420*time.Millisecond, string(tracing.KeyPodUID), "early", string(tracing.KeyBarrierSignal), "socket")
	sp.add("kubelet", "dd", "e3", "", kubeletSync, 2*s, 6*s, string(tracing.KeyPodUID), "early")
	sp.add("kubelet", "dd", "e3a", "e3", "runtime.v1.RuntimeService/RemoveContainer", 2300*time.Millisecond, 2400*time.Millisecond)
	sp.add("kubelet", "dd", "e3b", "e3", "runtime.v1.RuntimeService/StartContainer", 5300*time.Millisecond, 5500*time.Millisecond)
	sp.add("kubelet", "dd", "e4", "", kubeletSync, 6*s, 7*s, string(tracing.KeyPodUID), "early")
	sp.add("kubelet", "dd", "e4a", "e4", "runtime.v1.RuntimeService/StartContainer", 6000*time.Millisecond, 6300*time.Millisecond)

	// A pod restarted in place whose barrier is its worker's entrypoint: one start, the
	// container's; the open's end is its worker's start. The kubelet's next start of it
	// (a later restart) is no worker start of this one.
	// A supervised worker stopped through its barrier's socket: its container goes on, and
	// the kubelet's removal of an older one (its garbage collection) is no step of the restart.
	sp.add(tracing.ServiceAgent, tr, "s1", "r", tracing.SpanInPlaceStop, 1200*time.Millisecond, 1300*time.Millisecond, string(tracing.KeyPodUID), "supervised",
		string(tracing.KeyBarrierSignal), inplace.ViaSocket)
	sp.add(tracing.ServiceAgent, tr, "s2", "r", tracing.SpanInPlaceOpen, 5250*time.Millisecond, 5350*time.Millisecond, string(tracing.KeyPodUID), "supervised", string(tracing.KeyBarrierSignal), "socket")
	sp.add("kubelet", "gg", "s3", "", kubeletSync, 2*s, 4*s, string(tracing.KeyPodUID), "supervised")
	sp.add("kubelet", "gg", "s3a", "s3", "runtime.v1.RuntimeService/RemoveContainer", 2300*time.Millisecond, 2400*time.Millisecond)

	// Its barrier supervised the worker, its socket out of reach: stopped through the runtime.
	sp.add(tracing.ServiceAgent, tr, "w1", "r", tracing.SpanInPlaceStop, 1200*time.Millisecond, 1500*time.Millisecond, string(tracing.KeyPodUID), "inworker",
		string(tracing.KeyBarrierSignal), inplace.ViaRuntime, string(tracing.KeyBarrierSignalReason), "no /proc")
	sp.add(tracing.ServiceAgent, tr, "w2", "r", tracing.SpanInPlaceOpen, 5250*time.Millisecond, 5350*time.Millisecond, string(tracing.KeyPodUID), "inworker", string(tracing.KeyBarrierSignal), "socket")
	sp.add("kubelet", "ee", "w3", "", kubeletSync, 2*s, 4*s, string(tracing.KeyPodUID), "inworker")
	sp.add("kubelet", "ee", "w3a", "w3", "runtime.v1.RuntimeService/RemoveContainer", 2300*time.Millisecond, 2400*time.Millisecond)
	sp.add("kubelet", "ee", "w3b", "w3", "runtime.v1.RuntimeService/StartContainer", 3000*time.Millisecond, 3200*time.Millisecond)
	sp.add("kubelet", "ee", "w4", "", kubeletSync, 8*s, 9*s, string(tracing.KeyPodUID), "inworker")
	sp.add("kubelet", "ee", "w4a", "w4", "runtime.v1.RuntimeService/StartContainer", 8100*time.Millisecond, 8200*time.Millisecond)

	// The new pod's way through the API, as a watch saw it: the old pod's sandbox stopped
	// +1.1 s, that written on it +1.3 s, the old pod gone +1.6 s, the new one made +2.2 s,
	// bound +2.5 s (at its kubelet +3 s).
	moved := APIMoments{OldExitReported: t0.Add(900 * time.Millisecond), OldStopped: t0.Add(1100 * time.Millisecond), OldStopWritten: t0.Add(1300 * time.Millisecond),
		OldGone: t0.Add(1600 * time.Millisecond), Made: t0.Add(2200 * time.Millisecond), Bound: t0.Add(2500 * time.Millisecond)}
	// Its old pod's end at the kubelet of the node shutting down: two containers stopped,
	// then its sandbox.
	sp.add("kubelet", "ff", "g1", "", "syncTerminatingPod", 800*time.Millisecond, 1200*time.Millisecond, string(tracing.KeyPodUID), "gone")
	sp.add("kubelet", "ff", "g1a", "g1", "runtime.v1.RuntimeService/StopContainer", 820*time.Millisecond, 900*time.Millisecond)
	sp.add("kubelet", "ff", "g1b", "g1", "runtime.v1.RuntimeService/StopContainer", 810*time.Millisecond, 950*time.Millisecond)
	sp.add("kubelet", "ff", "g1c", "g1", "runtime.v1.RuntimeService/StopPodSandbox", 960*time.Millisecond, 1100*time.Millisecond)
	ep, err := Breakdown(sp.list, hexOf(tr), []Pod{{UID: "old", Name: "r-0", InPlace: true}, {UID: "new", Name: "r-1", API: moved, OldUID: "gone"}, {UID: "early", Name: "r-2", InPlace: true}, {UID: "inworker", Name: "r-3", InPlace: true, InWorker: true}, {UID: "supervised", Name: "r-4", InPlace: true, InWorker: true}})
	if err != nil {
		t.Fatal(err)
	}
	old, fresh, early, inWorker, supervised := ep.Pods[0], ep.Pods[1], ep.Pods[2], ep.Pods[3], ep.Pods[4]
	if !supervised.Removed.IsZero() || !supervised.BarrierStarted.Equal(supervised.Stopped) {
		t.Errorf("a worker stopped through its barrier's socket: removed %s, barrier waiting %s; want no removal, waiting at the stop's end %s (its container went on)",
			supervised.Removed.Sub(t0), supervised.BarrierStarted.Sub(t0), supervised.Stopped.Sub(t0))
	}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, c := range []struct {
		what      string
		got, want time.Time
	}{
		{"in place: stop began (the first stop)", old.StopBegan, at(1200 * time.Millisecond)},
		{"in place: stopped (the first stop)", old.Stopped, at(1500 * time.Millisecond)},
		{"in place: removed (the last removal)", old.Removed, at(2400 * time.Millisecond)},
		{"in place: barrier started", old.BarrierStarted, at(3500 * time.Millisecond)},
		{"in place: worker started", old.WorkerStarted, at(6200 * time.Millisecond)},
		{"in place: the open that gave the go signal", old.OpenBegan, at(5300 * time.Millisecond)},
		{"opened on the runtime's word: the barrier's start began", early.BarrierStarting, at(5300 * time.Millisecond)},
		{"opened on the runtime's word: the worker's start, not the barrier's", early.WorkerStarted, at(6300 * time.Millisecond)},
		{"in the worker: removed", inWorker.Removed, at(2400 * time.Millisecond)},
		{"in the worker: its container started", inWorker.BarrierStarted, at(3200 * time.Millisecond)},
		{"in the worker: the worker, as the open ended", inWorker.WorkerStarted, at(5350 * time.Millisecond)},
		{"new pod: at its kubelet (its first sync)", fresh.Synced, at(3 * s)},
		{"new pod: sandbox ready", fresh.SandboxReady, at(3800 * time.Millisecond)},
		{"new pod: barrier started", fresh.BarrierStarted, at(4600 * time.Millisecond)},
		{"new pod: worker started (not another pod's start)", fresh.WorkerStarted, at(6400 * time.Millisecond)},
	} {
		if !c.got.Equal(c.want) {
			t.Errorf("%s: %s, want %s", c.what, c.got.Sub(t0), c.want.Sub(t0))
		}
	}
	stats := Stats(ep)
	want := map[string]time.Duration{
		Hops[0].Name:  200 * time.Millisecond,  // decision → stop
		Hops[2].Name:  900 * time.Millisecond,  // exit → removed
		Hops[3].Name:  2600 * time.Millisecond, // removed → the gang's barrier open
		Hops[5].Name:  3700 * time.Millisecond, // stopped by its barrier → the gang's barrier open
		Hops[6].Name:  3600 * time.Millisecond, // the new pod's barrier
		Hops[7].Name:  2 * s,                   // decision → the new pod at its kubelet
		Hops[20].Name: 800 * time.Millisecond,  // its sandbox
		Hops[21].Name: 800 * time.Millisecond,  // sandbox → its barrier
		Hops[22].Name: 300 * time.Millisecond,  // the in-place pod's: from the open (later than its barrier's start)
		Hops[24].Name: 1100 * time.Millisecond, // opened → worker started, the new pod's
	}
	for _, st := range stats {
		if w, ok := want[st.Name]; ok && st.Worst != w {
			t.Errorf("hop %q: worst %s, want %s", st.Name, st.Worst, w)
		}
	}
	if stats[0].Pods != 4 || stats[5].Pods != 1 || stats[6].Pods != 1 || stats[20].Pods != 1 || stats[22].Pods != 5 || stats[24].Pods != 3 || stats[25].Pods != 5 {
		t.Errorf("pods per hop %d, %d, %d, %d, %d, %d, %d; want 4 in place, 1 stopped by its barrier, 1 moved, 1 moved, 5 in all, 3 with the init container, 5 in all",
			stats[0].Pods, stats[5].Pods, stats[6].Pods, stats[20].Pods, stats[22].Pods, stats[24].Pods, stats[25].Pods)
	}
	if table := Table(ep); !strings.Contains(table, "| ·· made → bound | scheduler, API | 1 | 300ms | 300ms |") || strings.Contains(table, "| 0 |") {
		t.Errorf("the table lacks the moved index's hop through the scheduler, or has a hop no pod has:\n%s", table)
	}
	if table := Table(ep); !strings.Contains(table, "1 supervised workers stopped through the runtime, their barriers' sockets out of reach (the first: no /proc)") {
		t.Errorf("the table does not say that a supervised worker was stopped through the runtime:\n%s", table)
	}
	if !ep.Complete() {
		t.Errorf("every moment of every pod is there, Complete says not: %+v", ep.Pods)
	}
	if old.OpenVia != "socket" || fresh.OpenVia != "" {
		t.Errorf("opened via %q and %q, want socket and none said", old.OpenVia, fresh.OpenVia)
	}
	if _, err := Breakdown(sp.list, hexOf("zz"), nil); err == nil {
		t.Error("a trace without the controller's spans: want an error")
	}
}

// A moved index a warm spare took: no kubelet work of its own, its barrier waiting since
// before the restart; it is handed the index once its old pod is gone, then opened, its
// worker started as the open ends (the barrier supervises it).
func TestBreakdownOfASpare(t *testing.T) {
	var sp spans
	tr := "aa"
	sp.add(tracing.ServiceController, tr, "c1", "r", tracing.SpanClassify, 0, 1*s)
	sp.add(tracing.ServiceController, tr, "c2", "r", tracing.SpanTeardown, 1*s, 2*s)
	sp.add(tracing.ServiceController, tr, "c3", "r", tracing.SpanRunning, 2*s, 3*s)
	sp.add(tracing.ServiceAgent, tr, "a1", "r", tracing.SpanInPlaceOpen, 2100*time.Millisecond, 2400*time.Millisecond, string(tracing.KeyPodUID), "spare", string(tracing.KeyBarrierSignal), "socket")
	moved := APIMoments{OldGone: t0.Add(1500 * time.Millisecond), Handed: t0.Add(1700 * time.Millisecond)}
	ep, err := Breakdown(sp.list, hexOf(tr), []Pod{{UID: "spare", Name: "r-spare0-1", InWorker: true, Spare: true, API: moved, OldUID: "gone"}})
	if err != nil {
		t.Fatal(err)
	}
	if !ep.Complete() {
		t.Fatalf("every moment of the spare is there, Complete says not: %+v", ep.Pods)
	}
	got := map[string]Stat{}
	for _, st := range Stats(ep) {
		got[st.Name] = st
	}
	for name, want := range map[string]time.Duration{
		"decision → a moved index handed to a spare":           700 * time.Millisecond,
		"·· the old pod gone → handed to a spare":              200 * time.Millisecond,
		"barrier open and started → the agent opens":           100 * time.Millisecond,
		"the agent's open (confirmation, go signal)":           300 * time.Millisecond,
		"decision → the new pod at its kubelet":                0,
		"decision → a moved index's barrier started (new pod)": 0,
	} {
		if st := got[name]; want == 0 && st.Pods != 0 || want != 0 && (st.Pods != 1 || st.Worst != want) {
			t.Errorf("hop %q: %d pods, worst %s; want %s", name, st.Pods, st.Worst, want)
		}
	}
}

func hexOf(s string) string { return otlp.Span{Span: &tracepb.Span{TraceId: []byte(s)}}.TraceID() }
