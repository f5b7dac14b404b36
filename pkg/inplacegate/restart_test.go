package inplacegate

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// TestSuperseded: in an attempt restarted in place, the pods made before it of the indexes it
// moved (by its record, or because a pod made for it exists) are no workers of it.
func TestSuperseded(t *testing.T) {
	uid := func(p *corev1.Pod, u string) *corev1.Pod { p.UID = types.UID(u); return p }
	current := []*corev1.Pod{
		uid(inPlacePod("0", "1", "up"), "keep-0"),
		uid(inPlacePod("1", "1", "down"), "old-1"), // moved by the record, no new pod yet
		uid(inPlacePod("2", "1", "up"), "old-2"),   // moved since: its new pod exists
		uid(inPlacePod("2", "2", "up"), "new-2"),
	}
	run := &v1alpha1.TrainingRun{Status: v1alpha1.TrainingRunStatus{Attempt: 2, Attempts: []v1alpha1.AttemptRecord{
		{Attempt: 1}, {Attempt: 2, RestartMode: v1alpha1.RestartModeInPlace, JobAttempt: 1, MovedIndexes: []int32{1}},
	}}}
	got := Superseded(run, current)
	if len(got) != 2 || !got["old-1"] || !got["old-2"] {
		t.Errorf("superseded %v, want old-1 and old-2", got)
	}
	// A pod made for attempt 2 of a recorded index, retired (deleted) before its barrier
	// opened, is superseded; one of an index the record did not move is judged.
	deleting := func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }
	retired := append(slices.Clone(current), uid(inPlacePod("1", "2", "up", deleting), "retired-1"), uid(inPlacePod("2", "2", "up", deleting), "gone-2"))
	retired = slices.DeleteFunc(retired, func(p *corev1.Pod) bool { return p.UID == "new-2" })
	if got := Superseded(run, retired); len(got) != 3 || !got["retired-1"] || got["gone-2"] {
		t.Errorf("superseded %v, want old-1, old-2 and retired-1", got)
	}
	run.Status.Attempts[1].RestartMode = v1alpha1.RestartModeRecreate
	if got := Superseded(run, current); len(got) != 0 {
		t.Errorf("a recreated attempt supersedes %v", got)
	}
}
