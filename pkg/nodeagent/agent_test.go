package nodeagent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/gpu"
)

func newTestAgent(t *testing.T, owners GPUOwnerSource, w EvidenceWriter, m *Metrics) *Agent {
	t.Helper()
	a, err := NewAgent(AgentConfig{
		Node: node, Owners: owners, Writer: w, Metrics: m, QueueSize: 2,
		Clock:  clocktesting.NewFakeClock(t0),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var testOwners = GPUOwners{
	"GPU-a": {{Namespace: "ml", Pod: "r-0", Container: "trainer"}},
	"GPU-b": {{Namespace: "ml", Pod: "r-1", Container: "trainer"}},
}

func fault(uuid string, xid uint64, cause v1alpha1.Cause, fatal bool) gpu.Fault {
	return gpu.Fault{UUID: uuid, Index: 0, XID: xid, Cause: cause, Fatal: fatal, Source: v1alpha1.EvidenceSourceNVMLEvent,
		Reason: gpu.XIDReason(xid), Detail: "d", DetectedAt: t0}
}

func TestHandleGPUFault(t *testing.T) {
	for name, tc := range map[string]struct {
		fault     gpu.Fault
		wantPods  []types.NamespacedName
		wantNode  []string
		ownersErr error
		wantErr   bool
	}{
		"fatal XID: its pod and the node": {
			fault: fault("GPU-a", 79, v1alpha1.CauseGPUFault, true), wantPods: []types.NamespacedName{ref("r-0")}, wantNode: []string{"Xid79"},
		},
		"non-fatal XID: its pod only": {
			fault: fault("GPU-b", 94, v1alpha1.CauseGPUFault, false), wantPods: []types.NamespacedName{ref("r-1")},
		},
		"program XID: its pod, never the node": {
			fault: fault("GPU-a", 13, v1alpha1.CauseAppGPUError, false), wantPods: []types.NamespacedName{ref("r-0")},
		},
		"unattributed fatal XID: every GPU pod and the node": {
			fault: unattributed(fault("", 79, v1alpha1.CauseGPUFault, true)), wantPods: []types.NamespacedName{ref("r-0"), ref("r-1")}, wantNode: []string{"Xid79"},
		},
		"idle GPU: the node only": {
			fault: fault("GPU-z", 79, v1alpha1.CauseGPUFault, true), wantNode: []string{"Xid79"},
		},
		"kubelet unreachable: the node still marked, error reported": {
			fault: fault("GPU-a", 79, v1alpha1.CauseGPUFault, true), ownersErr: errors.New("no socket"), wantNode: []string{"Xid79"}, wantErr: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			w := &FakeEvidenceWriter{}
			a := newTestAgent(t, &FakeGPUOwners{Owners: testOwners, Err: tc.ownersErr}, w, nil)
			err := a.HandleGPUFault(context.Background(), tc.fault)
			if (err != nil) != tc.wantErr {
				t.Fatalf("HandleGPUFault error %v, want error %v", err, tc.wantErr)
			}
			marks, nodeMarks, _ := w.Snapshot()
			var pods []types.NamespacedName
			for _, m := range marks {
				pods = append(pods, m.Pod)
				if want := GPUEvidence(node, tc.fault); !cmp.Equal(m.Evidence, want) {
					t.Errorf("evidence %+v, want %+v", m.Evidence, want)
				}
			}
			if diff := cmp.Diff(tc.wantPods, pods, cmp.Transformer("sort", sortRefs)); diff != "" {
				t.Errorf("marked pods (-want +got):\n%s", diff)
			}
			var reasons []string
			for _, m := range nodeMarks {
				reasons = append(reasons, m.Reason)
			}
			if diff := cmp.Diff(tc.wantNode, reasons); diff != "" {
				t.Errorf("node marks (-want +got):\n%s", diff)
			}
		})
	}
}

func unattributed(f gpu.Fault) gpu.Fault {
	f.Index = -1
	return f
}

func sortRefs(in []types.NamespacedName) []string {
	out := make([]string, len(in))
	for i, r := range in {
		out[i] = r.String()
	}
	slices.Sort(out)
	return out
}

func TestPodGoneIsNoError(t *testing.T) {
	w := &FakeEvidenceWriter{MarkErr: map[types.NamespacedName]error{
		ref("r-0"): apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "r-0"),
	}}
	a := newTestAgent(t, &FakeGPUOwners{Owners: testOwners}, w, nil)
	if err := a.HandleGPUFault(context.Background(), fault("GPU-a", 79, v1alpha1.CauseGPUFault, false)); err != nil {
		t.Errorf("a pod deleted meanwhile is an error: %v", err)
	}
	w.MarkErr[ref("r-0")] = errors.New("forbidden")
	if err := a.HandleGPUFault(context.Background(), fault("GPU-a", 74, v1alpha1.CauseGPUFault, false)); err == nil {
		t.Error("a failed mark is no error")
	}
}

func TestRepeatsAndHealthStates(t *testing.T) {
	w := &FakeEvidenceWriter{}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	a := newTestAgent(t, &FakeGPUOwners{Owners: testOwners}, w, m)
	fc := a.cfg.Clock.(*clocktesting.FakeClock)
	ctx := context.Background()
	count := func() int {
		marks, _, _ := w.Snapshot()
		return len(marks)
	}

	xid := fault("GPU-a", 94, v1alpha1.CauseGPUFault, false)
	for range 3 {
		if err := a.HandleGPUFault(ctx, xid); err != nil {
			t.Fatal(err)
		}
	}
	if count() != 1 {
		t.Errorf("a storm of one XID handled %d times, want once", count())
	}
	if got := testutil.ToFloat64(m.events.WithLabelValues(v1alpha1.EvidenceSourceNVMLEvent)); got != 3 {
		t.Errorf("events = %v, want every repeat counted", got)
	}
	fc.Step(DefaultRepeatWindow)
	if err := a.HandleGPUFault(ctx, xid); err != nil || count() != 2 {
		t.Errorf("after the window: err %v, %d marks; want it handled again", err, count())
	}

	// A failure is not remembered: the repeat gets another chance.
	w.MarkErr = map[types.NamespacedName]error{ref("r-1"): errors.New("apiserver down")}
	xidB := fault("GPU-b", 94, v1alpha1.CauseGPUFault, false)
	if err := a.HandleGPUFault(ctx, xidB); err == nil {
		t.Fatal("no error")
	}
	w.MarkErr = nil
	if err := a.HandleGPUFault(ctx, xidB); err != nil || count() != 3 {
		t.Errorf("retry after failure: err %v, %d marks", err, count())
	}

	// Health states: only fatal ones mark pods.
	pending := gpu.Fault{UUID: "GPU-a", Cause: v1alpha1.CauseGPUFault, Source: v1alpha1.EvidenceSourceNVMLHealth, Reason: v1alpha1.GPUReasonRetiredPagesPending, DetectedAt: t0}
	lost := gpu.Fault{UUID: "GPU-a", Cause: v1alpha1.CauseGPUFault, Fatal: true, Source: v1alpha1.EvidenceSourceNVMLHealth, Reason: v1alpha1.GPUReasonGPULost, DetectedAt: t0}
	if err := a.HandleGPUFault(ctx, pending); err != nil || count() != 3 {
		t.Errorf("pending pages: err %v, %d marks; want no pod marked", err, count())
	}
	if err := a.HandleGPUFault(ctx, lost); err != nil || count() != 4 {
		t.Errorf("GPU lost: err %v, %d marks; want its pod marked", err, count())
	}
	if _, nodeMarks, _ := w.Snapshot(); len(nodeMarks) != 1 || nodeMarks[0].Reason != v1alpha1.GPUReasonGPULost {
		t.Errorf("node marks %+v, want GPULost", nodeMarks)
	}
}

func TestShutdownMarksEveryRunPodAndTheNode(t *testing.T) {
	w := &FakeEvidenceWriter{Pods: []types.NamespacedName{ref("r-0"), ref("r-1"), ref("s-0")}}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	a := newTestAgent(t, &FakeGPUOwners{}, w, m)
	if err := a.ShutdownStarted(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	marks, _, shutdowns := w.Snapshot()
	if diff := cmp.Diff([]time.Time{t0}, shutdowns); diff != "" {
		t.Errorf("node annotation (-want +got):\n%s", diff)
	}
	var pods []types.NamespacedName
	for _, mk := range marks {
		pods = append(pods, mk.Pod)
		if want := ShutdownEvidence(node, t0); mk.Evidence != want {
			t.Errorf("evidence %+v, want %+v", mk.Evidence, want)
		}
	}
	if diff := cmp.Diff(w.Pods, pods, cmp.Transformer("sort", sortRefs)); diff != "" {
		t.Errorf("marked pods (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(m.events.WithLabelValues(v1alpha1.EvidenceSourceLogind)); got != 1 {
		t.Errorf("logind events = %v, want 1", got)
	}

	w.AnnotateErr = errors.New("apiserver down")
	if err := a.ShutdownStarted(context.Background(), t0); err == nil {
		t.Error("a failed node annotation is no error")
	}
}

func TestShutdownCancelledWithdraws(t *testing.T) {
	w := &FakeEvidenceWriter{Pods: []types.NamespacedName{ref("r-0"), ref("r-1")}}
	a := newTestAgent(t, &FakeGPUOwners{}, w, nil)
	if err := a.ShutdownCancelled(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	if w.ClearCalls != 1 || len(w.Withdrawn) != 2 {
		t.Errorf("cleared %d times, withdrew %v", w.ClearCalls, w.Withdrawn)
	}
	w.WithdrawErr = errors.New("boom")
	if err := a.ShutdownCancelled(context.Background(), t0); err == nil {
		t.Error("a failed withdrawal is no error")
	}
}

func TestRunClearsStaleShutdownAndDrainsTheQueue(t *testing.T) {
	w := &FakeEvidenceWriter{}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	a := newTestAgent(t, &FakeGPUOwners{Owners: testOwners}, w, m)

	// The queue holds 2; the third fault of a storm is dropped without blocking the monitor.
	a.OnGPUFault(fault("GPU-a", 79, v1alpha1.CauseGPUFault, true))
	a.OnGPUFault(fault("GPU-b", 48, v1alpha1.CauseGPUFault, true))
	a.OnGPUFault(fault("GPU-b", 48, v1alpha1.CauseGPUFault, true))
	if got := testutil.ToFloat64(m.dropped); got != 1 {
		t.Errorf("dropped = %v, want 1", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		marks, _, _ := w.Snapshot()
		if len(marks) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("marks %v", marks)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	marks, _, _ := w.Snapshot()
	if marks[0].Pod != ref("r-0") || marks[1].Pod != ref("r-1") {
		t.Errorf("faults handled out of order: %v", marks)
	}
	if w.ClearCalls != 1 {
		t.Errorf("stale shutdown annotation cleared %d times, want 1", w.ClearCalls)
	}
	if got := testutil.ToFloat64(m.events.WithLabelValues(v1alpha1.EvidenceSourceNVMLEvent)); got != 2 {
		t.Errorf("nvml-event events = %v, want 2", got)
	}
}

func TestNewAgentNeedsItsParts(t *testing.T) {
	if _, err := NewAgent(AgentConfig{Node: node, Owners: &FakeGPUOwners{}}); err == nil {
		t.Error("no error without a writer")
	}
}

func TestMetricsOfTheWriter(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	w, _ := newTestWriter(t, false, makePod("r-0").run("r").obj())
	w.cfg.Metrics = m
	if _, err := w.MarkPod(context.Background(), ref("r-0"), xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault)); err != nil {
		t.Fatal(err)
	}
	for target, want := range map[string]float64{targetPodCondition: 1, targetPodAnnotation: 1} {
		if got := testutil.ToFloat64(m.marks.WithLabelValues(target, "GPUFault")); got != want {
			t.Errorf("marks{%s} = %v, want %v", target, got, want)
		}
	}
	// The writer's clock is 50ms after detection.
	want := `
		# HELP faultline_nodeagent_detection_to_mark_seconds Time from detecting a fault to its evidence being on the pod, by source.
		# TYPE faultline_nodeagent_detection_to_mark_seconds histogram
		faultline_nodeagent_detection_to_mark_seconds_bucket{source="nvml-event",le="0.005"} 0
		faultline_nodeagent_detection_to_mark_seconds_bucket{source="nvml-event",le="0.01"} 0
		faultline_nodeagent_detection_to_mark_seconds_bucket{source="nvml-event",le="0.025"} 0
		faultline_nodeagent_detection_to_mark_seconds_bucket{source="nvml-event",le="0.05"} 1
		faultline_nodeagent_detection_to_mark_seconds_bucket{source="nvml-event",le="0.1"} 1
		faultline_nodeagent_detection_to_mark_seconds_bucket{source="nvml-event",le="0.25"} 1
		faultline_nodeagent_detection_to_mark_seconds_bucket{source="nvml-event",le="0.5"} 1
		faultline_nodeagent_detection_to_mark_seconds_bucket{source="nvml-event",le="1"} 1
		faultline_nodeagent_detection_to_mark_seconds_bucket{source="nvml-event",le="2.5"} 1
		faultline_nodeagent_detection_to_mark_seconds_bucket{source="nvml-event",le="5"} 1
		faultline_nodeagent_detection_to_mark_seconds_bucket{source="nvml-event",le="10"} 1
		faultline_nodeagent_detection_to_mark_seconds_bucket{source="nvml-event",le="30"} 1
		faultline_nodeagent_detection_to_mark_seconds_bucket{source="nvml-event",le="+Inf"} 1
		faultline_nodeagent_detection_to_mark_seconds_sum{source="nvml-event"} 0.05
		faultline_nodeagent_detection_to_mark_seconds_count{source="nvml-event"} 1
	`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "faultline_nodeagent_detection_to_mark_seconds"); err != nil {
		t.Error(err)
	}
}

// savesOnNotice is a Checkpoints whose WaitNode returns when released, having seen the marks
// written so far.
type savesOnNotice struct {
	saving  map[types.NamespacedName]bool
	w       *FakeEvidenceWriter
	release chan struct{}
	before  []PodMark
}

func (s *savesOnNotice) SavesOnNotice(p types.NamespacedName) bool { return s.saving[p] }

func (s *savesOnNotice) WaitNode(context.Context, time.Time) []string {
	<-s.release
	s.before, _, _ = s.w.Snapshot()
	return nil
}

// A node's shutdown marks the pods of runs that do not save on notice at once, and those of
// runs that do once their workers answered (WaitNode): the evidence ends an attempt, and a
// run without spec.checkpoint must not wait for another's save.
func TestShutdownWaitsOnlyForTheWorkersThatSave(t *testing.T) {
	w := &FakeEvidenceWriter{Pods: []types.NamespacedName{ref("r-0"), ref("s-0"), ref("s-1")}}
	ck := &savesOnNotice{saving: map[types.NamespacedName]bool{ref("s-0"): true, ref("s-1"): true}, w: w, release: make(chan struct{})}
	a, err := NewAgent(AgentConfig{Node: node, Owners: &FakeGPUOwners{}, Writer: w, Metrics: NewMetrics(prometheus.NewRegistry()), QueueSize: 2,
		Clock: clocktesting.NewFakeClock(t0), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Checkpoints: ck, CheckpointWait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.ShutdownStarted(context.Background(), t0) }()
	for {
		marks, _, _ := w.Snapshot()
		if len(marks) > 0 {
			break
		}
		time.Sleep(time.Millisecond) // the mark of r-0 comes while WaitNode holds
	}
	close(ck.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(ck.before) != 1 || ck.before[0].Pod != ref("r-0") {
		t.Errorf("marked before the saves were answered: %+v, want r-0 alone", ck.before)
	}
	if marks, _, _ := w.Snapshot(); len(marks) != 3 {
		t.Errorf("marks %+v, want all three pods", marks)
	}
}
