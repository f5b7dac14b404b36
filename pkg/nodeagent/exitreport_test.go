package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// The report lands on the pod in one pods/status patch; the same report again writes
// nothing; a pod of another node is refused.
func TestReportWorkerExit(t *testing.T) {
	pod := makePod("llm-0").run("llm").onNode(node).obj()
	w, client := newTestWriter(t, false, pod)
	ex := v1alpha1.WorkerExit{Attempt: 2, Container: "worker", ContainerID: "w2", ExitCode: 1, Reason: "Error", FinishedAt: "2026-11-26T03:01:30Z", Node: node}
	if err := w.ReportWorkerExit(context.Background(), pod, ex); err != nil {
		t.Fatal(err)
	}
	ps := patches(client)
	if len(ps) != 1 || ps[0].GetSubresource() != "status" || ps[0].GetPatchType() != types.StrategicMergePatchType {
		t.Fatalf("patches %v: want one strategic merge patch of pods/status", ps)
	}
	got := getPod(t, client, "llm-0")
	var back v1alpha1.WorkerExit
	if err := json.Unmarshal([]byte(got.Annotations[v1alpha1.AnnotationWorkerExit]), &back); err != nil {
		t.Fatalf("report %q: %v", got.Annotations[v1alpha1.AnnotationWorkerExit], err)
	}
	if diff := cmp.Diff(ex, back); diff != "" {
		t.Errorf("report on the pod (-want +got):\n%s", diff)
	}
	if err := w.ReportWorkerExit(context.Background(), got, ex); err != nil || len(patches(client)) != 1 {
		t.Errorf("the same report again: error %v, %d patches; want none written", err, len(patches(client)))
	}
	other := makePod("llm-1").run("llm").onNode("elsewhere").obj()
	if err := w.ReportWorkerExit(context.Background(), other, ex); !errors.Is(err, ErrOtherNode) {
		t.Errorf("a pod of another node: %v, want ErrOtherNode", err)
	}
}

// A report's message is bounded: its end (how the worker ended) is kept, whole characters.
func TestReportWorkerExitBoundsTheMessage(t *testing.T) {
	pod := makePod("llm-1").run("llm").onNode(node).obj()
	w, client := newTestWriter(t, false, pod)
	msg := strings.Repeat("é", maxReportMessage) + "RuntimeError: the end"
	ex := v1alpha1.WorkerExit{Attempt: 1, Container: "worker", ContainerID: "w1", ExitCode: 1, Message: msg, FinishedAt: "2026-11-26T03:01:30Z", Node: node}
	if err := w.ReportWorkerExit(context.Background(), pod, ex); err != nil {
		t.Fatal(err)
	}
	var back v1alpha1.WorkerExit
	if err := json.Unmarshal([]byte(getPod(t, client, "llm-1").Annotations[v1alpha1.AnnotationWorkerExit]), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Message) > maxReportMessage || !strings.HasSuffix(back.Message, "RuntimeError: the end") || !utf8.ValidString(back.Message) {
		t.Errorf("message of %d bytes ending %q (valid UTF-8: %v); want at most %d bytes, its end kept, whole characters",
			len(back.Message), back.Message[max(0, len(back.Message)-30):], utf8.ValidString(back.Message), maxReportMessage)
	}
}
