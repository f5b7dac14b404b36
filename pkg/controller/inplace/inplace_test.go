package inplace

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

// TestOpenWaitsForTheAPIServerAndTheBackoff: the barrier of a restart in place opens only
// once the API server has no pod left of a moved index's older attempt (the cache may lag
// its deletion) and the backoff is over; then the run's status records the open, in memory,
// and the message names the moved indexes.
func TestOpenWaitsForTheAPIServerAndTheBackoff(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	run := &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "uid-llm"},
		Spec:       v1alpha1.TrainingRunSpec{Workers: 2},
		Status: v1alpha1.TrainingRunStatus{Attempt: 2, Phase: v1alpha1.PhaseRestarting, NextAttemptAt: ptr.To(metav1.NewTime(now.Add(3 * time.Second))),
			Attempts: []v1alpha1.AttemptRecord{{Attempt: 1}, {Attempt: 2, RestartMode: v1alpha1.RestartModeInPlace, JobAttempt: 1, MovedIndexes: []int32{1}}}},
	}
	meta := func(index, n string) metav1.PartialObjectMetadata {
		return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "llm-" + index + "-a" + n, UID: types.UID("uid-" + index + "-" + n),
			Labels:      map[string]string{v1alpha1.LabelRun: "llm", v1alpha1.LabelRunUID: "uid-llm", v1alpha1.LabelAttempt: n},
			Annotations: map[string]string{"batch.kubernetes.io/job-completion-index": index}}}
	}
	atServer := []metav1.PartialObjectMetadata{meta("0", "1"), meta("1", "1"), meta("1", "2")} // index 1's old pod, gone from the cache
	c := &Coordinator{Clock: clocktesting.NewFakePassiveClock(now)}
	v := View{At: func(context.Context) ([]metav1.PartialObjectMetadata, error) { return atServer, nil }}

	if o, err := c.Open(ctx, run, v, []int32{1}); err != nil || o.Opened || o.RequeueAfter != recheck {
		t.Fatalf("the API server still has index 1's old pod: %+v (%v), want a look again in %v", o, err, recheck)
	}
	atServer = atServer[:1:1]
	atServer = append(atServer, meta("1", "2"))
	if o, err := c.Open(ctx, run, v, []int32{1}); err != nil || o.Opened || o.RequeueAfter != 3*time.Second {
		t.Fatalf("in the backoff: %+v (%v), want a look again at its end", o, err)
	}
	run.Status.NextAttemptAt = ptr.To(metav1.NewTime(now))
	o, err := c.Open(ctx, run, v, []int32{1})
	if err != nil || !o.Opened || !strings.Contains(o.Message, "1 workers restarted in place, indexes 1 on new pods") {
		t.Fatalf("open: %+v (%v)", o, err)
	}
	rec := attempt.Record(run)
	if rec.BarrierOpenedAt == nil || !rec.BarrierOpenedAt.Time.Equal(now) || rec.StartTime == nil || run.Status.Phase != v1alpha1.PhasePending || run.Status.NextAttemptAt != nil {
		t.Errorf("after the open: record %+v, phase %s", rec, run.Status.Phase)
	}
}

// TestOpenIsNotHeldByASpare: a warm spare that took no index (none was ready for a hand-over:
// the moved index got a new pod) is no old pod of a moved index, whatever index its missing
// one would read as: the barrier opens beside it.
func TestOpenIsNotHeldByASpare(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	run := &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "uid-llm"},
		Spec:       v1alpha1.TrainingRunSpec{Workers: 2, Spares: 1},
		Status: v1alpha1.TrainingRunStatus{Attempt: 2, Phase: v1alpha1.PhaseRestarting,
			Attempts: []v1alpha1.AttemptRecord{{Attempt: 1}, {Attempt: 2, RestartMode: v1alpha1.RestartModeInPlace, JobAttempt: 1, MovedIndexes: []int32{0}}}},
	}
	own := map[string]string{v1alpha1.LabelRun: "llm", v1alpha1.LabelRunUID: "uid-llm"}
	labels := func(extra map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range own {
			out[k] = v
		}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	atServer := []metav1.PartialObjectMetadata{
		{ObjectMeta: metav1.ObjectMeta{Name: "llm-0-a2", UID: "uid-0-2", Labels: labels(map[string]string{v1alpha1.LabelAttempt: "2"}),
			Annotations: map[string]string{"batch.kubernetes.io/job-completion-index": "0"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "llm-1-a1", UID: "uid-1-1", Labels: labels(map[string]string{v1alpha1.LabelAttempt: "1"}),
			Annotations: map[string]string{"batch.kubernetes.io/job-completion-index": "1"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "llm-spare0-1", UID: "uid-spare", Labels: labels(map[string]string{v1alpha1.LabelAttempt: "1", v1alpha1.LabelSpare: "0"})}},
	}
	c := &Coordinator{Clock: clocktesting.NewFakePassiveClock(now)}
	v := View{At: func(context.Context) ([]metav1.PartialObjectMetadata, error) { return atServer, nil }}
	if o, err := c.Open(ctx, run, v, []int32{0}); err != nil || !o.Opened {
		t.Fatalf("a spare without an index beside the gang: %+v (%v), want the barrier open", o, err)
	}
}

// TestStartingIsTheBarrierNotOpen: an attempt restarting in place starts until its barrier
// opens; a recreated attempt never does.
func TestStartingIsTheBarrierNotOpen(t *testing.T) {
	run := &v1alpha1.TrainingRun{Status: v1alpha1.TrainingRunStatus{Attempt: 2, Attempts: []v1alpha1.AttemptRecord{{Attempt: 1}, {Attempt: 2, RestartMode: v1alpha1.RestartModeInPlace}}}}
	if !Starting(run) {
		t.Error("an attempt restarting in place, its barrier closed, does not start")
	}
	run.Status.Attempts[1].BarrierOpenedAt = &metav1.Time{Time: time.Now()}
	if Starting(run) {
		t.Error("an attempt whose barrier opened still starts")
	}
	run.Status.Attempts[1] = v1alpha1.AttemptRecord{Attempt: 2, RestartMode: v1alpha1.RestartModeRecreate}
	if Starting(run) {
		t.Error("a recreated attempt starts in place")
	}
}
