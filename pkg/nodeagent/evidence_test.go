package nodeagent

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/gpu"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

func xidEvidence(uuid string, xid uint64, cause v1alpha1.Cause) v1alpha1.FaultEvidence {
	return v1alpha1.FaultEvidence{
		Source: v1alpha1.EvidenceSourceNVMLEvent, Node: "gpu-7", Cause: cause, DetectedAt: formatTime(t0),
		GPU: &v1alpha1.GPUEvidence{UUID: uuid, Index: 3, XID: xid},
	}
}

func healthEvidence(uuid string) v1alpha1.FaultEvidence {
	return v1alpha1.FaultEvidence{
		Source: v1alpha1.EvidenceSourceNVMLHealth, Node: "gpu-7", Cause: v1alpha1.CauseGPUFault, DetectedAt: formatTime(t0),
		GPU: &v1alpha1.GPUEvidence{UUID: uuid, Index: 3},
	}
}

func TestEvidenceFromSignals(t *testing.T) {
	f := gpu.Fault{UUID: "GPU-a", Index: 3, XID: 79, Cause: v1alpha1.CauseGPUFault, Fatal: true, Source: v1alpha1.EvidenceSourceNVMLEvent,
		Reason: "Xid79", Detail: "XID 79: GPU has fallen off the bus", DetectedAt: t0.In(time.FixedZone("CET", 3600))}
	want := v1alpha1.FaultEvidence{
		Source: "nvml-event", Node: "gpu-7", Cause: v1alpha1.CauseGPUFault, DetectedAt: "2026-03-01T12:00:00.123456789Z",
		GPU: &v1alpha1.GPUEvidence{UUID: "GPU-a", Index: 3, XID: 79}, Detail: "XID 79: GPU has fallen off the bus",
	}
	if diff := cmp.Diff(want, GPUEvidence("gpu-7", f)); diff != "" {
		t.Errorf("GPUEvidence (-want +got):\n%s", diff)
	}
	want = v1alpha1.FaultEvidence{
		Source: "logind", Node: "gpu-7", Cause: v1alpha1.CauseNodeShutdown, DetectedAt: "2026-03-01T12:00:00.123456789Z",
		Detail: "systemd-logind announced a shutdown (PrepareForShutdown)",
	}
	if diff := cmp.Diff(want, ShutdownEvidence("gpu-7", t0)); diff != "" {
		t.Errorf("ShutdownEvidence (-want +got):\n%s", diff)
	}
}

func TestSupersedes(t *testing.T) {
	shutdown := ShutdownEvidence("gpu-7", t0)
	for name, tc := range map[string]struct {
		prev, next v1alpha1.FaultEvidence
		want       bool
	}{
		"first XID stays against a later one":          {prev: xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault), next: xidEvidence("GPU-a", 48, v1alpha1.CauseGPUFault)},
		"program XID stays against an infrastructure":  {prev: xidEvidence("GPU-a", 13, v1alpha1.CauseAppGPUError), next: xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault)},
		"secondary XID 45 gives way to XID 48":         {prev: xidEvidence("GPU-a", 45, v1alpha1.CauseAppGPUError), next: xidEvidence("GPU-a", 48, v1alpha1.CauseGPUFault), want: true},
		"secondary XID 45 gives way to health":         {prev: xidEvidence("GPU-a", 45, v1alpha1.CauseAppGPUError), next: healthEvidence("GPU-a"), want: true},
		"secondary XID 45 does not give way to itself": {prev: xidEvidence("GPU-a", 45, v1alpha1.CauseAppGPUError), next: xidEvidence("GPU-a", 45, v1alpha1.CauseAppGPUError)},
		"health poll gets its XID":                     {prev: healthEvidence("GPU-a"), next: xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault), want: true},
		"health poll keeps a non-fatal XID out":        {prev: healthEvidence("GPU-a"), next: xidEvidence("GPU-a", 63, v1alpha1.CauseGPUFault)},
		"a non-fatal XID gives way to a fatal one":     {prev: xidEvidence("GPU-a", 63, v1alpha1.CauseGPUFault), next: xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault), want: true},
		"a non-fatal XID gives way to its GPU lost":    {prev: xidEvidence("GPU-a", 94, v1alpha1.CauseGPUFault), next: healthEvidence("GPU-a"), want: true},
		"a non-fatal XID keeps another GPU's out":      {prev: xidEvidence("GPU-a", 63, v1alpha1.CauseGPUFault), next: xidEvidence("GPU-b", 79, v1alpha1.CauseGPUFault)},
		"a fatal XID stays against a later fatal one":  {prev: xidEvidence("GPU-a", 48, v1alpha1.CauseGPUFault), next: xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault)},
		"a non-fatal XID stays against another":        {prev: xidEvidence("GPU-a", 63, v1alpha1.CauseGPUFault), next: xidEvidence("GPU-a", 94, v1alpha1.CauseGPUFault)},
		"health poll keeps another GPU's XID out":      {prev: healthEvidence("GPU-a"), next: xidEvidence("GPU-b", 79, v1alpha1.CauseGPUFault)},
		"health poll keeps a program XID out":          {prev: healthEvidence("GPU-a"), next: xidEvidence("GPU-a", 13, v1alpha1.CauseAppGPUError)},
		"shutdown stays against a GPU lost after it":   {prev: shutdown, next: healthEvidence("GPU-a")},
		"GPU fault stays against a shutdown after it":  {prev: xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault), next: shutdown},
	} {
		t.Run(name, func(t *testing.T) {
			if got := supersedes(tc.next, tc.prev); got != tc.want {
				t.Errorf("supersedes = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSameEvidenceIgnoresWhenAndWhere(t *testing.T) {
	a := xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault)
	b := a
	b.GPU = &v1alpha1.GPUEvidence{UUID: "GPU-a", Index: 3, XID: 79}
	b.DetectedAt, b.Node = formatTime(t0.Add(time.Second)), "elsewhere"
	if !sameEvidence(a, b) {
		t.Error("equal evidence seen at another time is not the same")
	}
	b.GPU.XID = 48
	if sameEvidence(a, b) {
		t.Error("another XID is the same")
	}
	if sameEvidence(a, ShutdownEvidence("gpu-7", t0)) {
		t.Error("GPU and shutdown evidence are the same")
	}
}

func TestConditionMessage(t *testing.T) {
	ev := xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault)
	ev.Detail = "XID 79: GPU has fallen off the bus"
	want := "GPUFault on node gpu-7, GPU 3 (GPU-a): XID 79: GPU has fallen off the bus [nvml-event, detected 2026-03-01T12:00:00.123456789Z]"
	if got := conditionMessage(ev); got != want {
		t.Errorf("message\n got %q\nwant %q", got, want)
	}
	ev.GPU.UUID = ""
	if got := conditionMessage(ev); got != "GPUFault on node gpu-7, an unidentified GPU: XID 79: GPU has fallen off the bus [nvml-event, detected 2026-03-01T12:00:00.123456789Z]" {
		t.Errorf("unidentified GPU message %q", got)
	}
}

func TestParseEvidence(t *testing.T) {
	if v1alpha1.EvidenceOf(nil) != nil {
		t.Error("evidence from no annotations")
	}
	if v1alpha1.EvidenceOf(map[string]string{v1alpha1.AnnotationFaultEvidence: "{not json"}) != nil {
		t.Error("evidence from garbage")
	}
	ev := v1alpha1.EvidenceOf(map[string]string{v1alpha1.AnnotationFaultEvidence: `{"source":"logind","node":"n","cause":"NodeShutdown","detectedAt":"2026-03-01T12:00:00Z"}`})
	if ev == nil || ev.Cause != v1alpha1.CauseNodeShutdown {
		t.Errorf("parsed %+v", ev)
	}
}
