package cli

import (
	"bytes"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/policy"
)

// A planned move's request to save, in attempt 1's record: describe, explain and the timeline
// (text and HTML) say when it asked and why, each worker's answer with its step, who did not
// answer and what that loses, and how long the move waited.
func TestCheckpointIsShown(t *testing.T) {
	micro := func(s float64) metav1.MicroTime { return metav1.MicroTime(*at(s)) }
	ended := micro(32.5)
	ck := &v1alpha1.CheckpointStatus{
		Attempt: 1, RequestedAt: micro(30), Deadline: micro(90), Notice: "planned maintenance of gpu-node-3 (cordoned)",
		Nodes: []string{"gpu-node-3"}, EndedAt: &ended, Missing: []int32{2},
		Acks: []v1alpha1.CheckpointAck{
			{Index: 0, Pod: "llm-0", At: micro(32), Step: ptr.To[int64](4100)},
			{Index: 1, Pod: "llm-1", At: micro(32.4), Step: ptr.To[int64](4100)},
			{Index: 3, Pod: "llm-3", At: micro(32.1), ExitCode: ptr.To[int32](0)},
		},
	}
	verdict := &v1alpha1.FailureVerdict{Class: v1alpha1.ClassInfrastructure, Cause: v1alpha1.CausePlannedMaintenance,
		Rule: "default-planned-maintenance", Action: v1alpha1.ActionRestartRun, Pod: "llm-0", Index: ptr.To[int32](0), Node: "gpu-node-3",
		FailedAt: at(32.5), DecidedAt: at(32.5), Explanation: "planned maintenance of gpu-node-3"}
	run := makeRun("llm", 4).phase(v1alpha1.PhaseRunning, 2, 4).
		attempt(v1alpha1.AttemptRecord{Attempt: 1, StartTime: at(1), RunningTime: at(5), EndTime: at(32.5), Outcome: policy.OutcomeRestarted, Verdict: verdict, Checkpoint: ck}).
		attempt(v1alpha1.AttemptRecord{Attempt: 2, StartTime: at(33), RunningTime: at(35)}).obj()

	want := "asked 2026-03-14 09:26:30Z (planned maintenance of gpu-node-3 (cordoned)): 3 of 4 workers saved (step 4100 at least); not indexes [2]; the move went on 2.5s after"
	var out bytes.Buffer
	if err := Describe(&out, run, nil, now); err != nil || !strings.Contains(out.String(), "Checkpoint:") || !strings.Contains(out.String(), want) {
		t.Errorf("describe (%v) does not say %q:\n%s", err, want, out.String())
	}
	out.Reset()
	if err := ExplainRun(&out, run, 1); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(out.String()), " ")
	for _, w := range []string{"Checkpoint: " + want, "Saved: index 0 at step 4100, 1 at step 4100, 3 (exited 0)", "Indexes [2] did not say they saved"} {
		if !strings.Contains(text, w) {
			t.Errorf("explain --attempt 1 does not say %q:\n%s", w, out.String())
		}
	}
	out.Reset()
	if err := Timeline(&out, run, nil, now); err != nil || !strings.Contains(out.String(), "checkpoint "+want) {
		t.Errorf("timeline (%v) does not say %q:\n%s", err, want, out.String())
	}
	out.Reset()
	if err := TimelineHTML(&out, run, nil, now); err != nil || !strings.Contains(out.String(), "3 of 4 workers saved (step 4100 at least)") {
		t.Errorf("timeline --html (%v) does not show the checkpoint", err)
	}
}
