package cli

import (
	"bytes"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/policy"
)

// The Kueue integration's runs, as the launcher shows them.

const preemptionMessage = "Preempted to accommodate a workload (UID: 7b1e, JobUID: 2c9a) due to prioritization in the ClusterQueue"

func queued(b *runBuilder, queue string) *runBuilder {
	b.run.Labels[v1alpha1.LabelQueueName] = queue
	return b
}

// preemptedRun: attempt 1 ran on flavor h100 of ClusterQueue research-cq until Kueue
// preempted it; it waits to be admitted again.
func preemptedRun() *v1alpha1.TrainingRun {
	b := queued(makeRun("llm", 16), "research").phase(v1alpha1.PhaseSuspended, 1, 0).
		attempt(v1alpha1.AttemptRecord{Attempt: 1, StartTime: at(1), RunningTime: at(3), EndTime: at(40),
			Outcome: policy.OutcomeSuspended, Suspension: "Kueue (Preempted) for workload research/trainingrun-gpt-11aa3 (TrainingRun research/gpt): " + preemptionMessage}).
		condition(v1alpha1.ConditionSuspended, metav1.ConditionTrue, v1alpha1.ReasonPreempted, "attempt 1 suspended by Kueue (Preempted): "+preemptionMessage, 40).
		condition(v1alpha1.ConditionAdmitted, metav1.ConditionFalse, v1alpha1.ReasonPreempted, "Kueue evicted workload trainingrun-llm-3f2a1 (Preempted): "+preemptionMessage, 40)
	b.run.Status.Queue = &v1alpha1.QueueStatus{Name: "research", Workload: "trainingrun-llm-3f2a1", Evictions: 1,
		LastEviction: &v1alpha1.QueueEviction{Reason: "Preempted", Message: preemptionMessage, Time: *at(40), Preemptor: "research/trainingrun-gpt-11aa3 (TrainingRun research/gpt)"}}
	return b.obj()
}

// admittedRun: running in its first attempt, admitted on flavor h100.
func admittedRun() *v1alpha1.TrainingRun {
	b := queued(makeRun("bert", 8), "research").phase(v1alpha1.PhaseRunning, 1, 8).
		attempt(v1alpha1.AttemptRecord{Attempt: 1, StartTime: at(1), RunningTime: at(2)}).
		condition(v1alpha1.ConditionAdmitted, metav1.ConditionTrue, v1alpha1.ReasonAdmitted, "workload trainingrun-bert-9c0d2 admitted by ClusterQueue research-cq (flavors nvidia.com/gpu=h100)", 1)
	b.run.Status.Queue = &v1alpha1.QueueStatus{Name: "research", Workload: "trainingrun-bert-9c0d2", ClusterQueue: "research-cq",
		Flavors: map[string]string{v1alpha1.ResourceGPU: "h100"}, AdmittedAt: at(1)}
	return b.obj()
}

// waitingRun: its Workload waits in the queue; no attempt yet.
func waitingRun() *v1alpha1.TrainingRun {
	b := queued(makeRun("gpt", 32), "research").phase(v1alpha1.PhaseSuspended, 0, 0).
		condition(v1alpha1.ConditionAdmitted, metav1.ConditionFalse, v1alpha1.ReasonQueued, "workload trainingrun-gpt-11aa3 waits for Kueue to admit it in queue research", 0)
	b.run.Status.Queue = &v1alpha1.QueueStatus{Name: "research", Workload: "trainingrun-gpt-11aa3"}
	return b.obj()
}

func TestGoldenQueue(t *testing.T) {
	var b bytes.Buffer
	runs := []v1alpha1.TrainingRun{*admittedRun(), *preemptedRun(), *waitingRun(), *succeededRun()}
	if err := PrintRuns(&b, runs, PrintOptions{Output: "wide", Now: now}); err != nil {
		t.Fatal(err)
	}
	golden(t, "get-wide-queued", b.Bytes())

	b.Reset()
	if err := Describe(&b, preemptedRun(), nil, now); err != nil {
		t.Fatal(err)
	}
	golden(t, "describe-preempted", b.Bytes())

	b.Reset()
	if err := Describe(&b, admittedRun(), nil, now); err != nil {
		t.Fatal(err)
	}
	golden(t, "describe-admitted", b.Bytes())

	b.Reset()
	if err := ExplainRun(&b, preemptedRun(), 0); err != nil {
		t.Fatal(err)
	}
	golden(t, "explain-preempted", b.Bytes())

	b.Reset()
	if err := ExplainRun(&b, preemptedRun(), 1); err != nil {
		t.Fatal(err)
	}
	golden(t, "explain-preempted-attempt-1", b.Bytes())

	b.Reset()
	if err := Timeline(&b, preemptedRun(), nil, now); err != nil {
		t.Fatal(err)
	}
	golden(t, "timeline-preempted", b.Bytes())
}
