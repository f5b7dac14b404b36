package exitclass

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/barrier"
)

// supervised makes b's pod one whose worker container's entrypoint is a supervising barrier
// (one container across attempts: attempt.WorkerStart), its container started at started
// and, when opened is not zero, recorded opened for attempt 3 at opened; without a record
// the barrier waits for its first open.
func (b *podBuilder) supervised(started, opened time.Time) *podBuilder {
	b.p.Spec.Volumes = append(b.p.Spec.Volumes, corev1.Volume{Name: v1alpha1.BarrierVolume,
		VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "barrier:1"}}})
	b.p.Spec.Containers[0].Command = []string{v1alpha1.BarrierBinary, barrier.CommandSupervise, "--", "python", "train.py"}
	cs := &b.p.Status.ContainerStatuses[0]
	cs.ContainerID = "containerd://c0"
	if r := cs.State.Running; r != nil {
		r.StartedAt = metav1.NewTime(started)
	}
	if t := cs.State.Terminated; t != nil {
		t.StartedAt = metav1.NewTime(started)
		t.ContainerID = cs.ContainerID
	}
	if opened.IsZero() {
		return b
	}
	raw, err := json.Marshal(v1alpha1.BarrierRecord{ContainerID: "c0", Attempt: 3, OpenedAt: opened.Format(time.RFC3339Nano)})
	if err != nil {
		panic(err)
	}
	return b.annotation(v1alpha1.AnnotationBarrierRecord, string(raw))
}

// TestEveryRuleReadsTheIncarnationNotTheContainer: a supervising barrier keeps one container
// across attempts, so the container's start (at(0), attempt 1's) is not the start of the
// worker's current attempt (its barrier's recorded open of attempt 3, at(100)). Every rule
// that asks "during this worker's life" reads the open: a mark or evidence an earlier attempt
// left on the kept pod (at(50)) is not counted, the same one after the open (at(150)) is;
// and a worker that waits at its barrier runs nothing that can be silent or hang.
func TestEveryRuleReadsTheIncarnationNotTheContainer(t *testing.T) {
	started, opened := at(0), at(100)
	before, after := at(50), at(150)
	now := at(200)
	silent := func(since time.Time) *podBuilder {
		return makePod("r-0").index(0).node("gpu-0").supervised(started, opened).
			condition(v1alpha1.PodConditionNoProgress, corev1.ConditionTrue, v1alpha1.ProgressSignalLog, "no output", since)
	}
	xid := func(when time.Time) *podBuilder {
		return makePod("r-0").index(0).node("gpu-0").supervised(started, opened).gpuXID("gpu-0", 0, 79, when)
	}
	// The worker of attempt 3 ended (exit 1) at at(180), its container started at at(0).
	ended := func() *podBuilder {
		b := makePod("r-0").index(0).node("gpu-0").exit(1).finishedAt(at(180))
		return b.supervised(started, opened)
	}
	type rule struct {
		counted func(when time.Time) bool
	}
	rules := map[string]rule{
		"progress: the gang's NoProgress (Stalled)": {func(when time.Time) bool {
			return Stalled([]*corev1.Pod{silent(when).obj()})
		}},
		"fatal evidence on a running worker (a hang)": {func(when time.Time) bool {
			return Failed(xid(when).obj(), nil, now)
		}},
		"the agent's attested evidence on an ended worker (rule 1)": {func(when time.Time) bool {
			v := Classify(Observation{Pods: []*corev1.Pod{ended().infraFault(v1alpha1.CauseGPUFault, when).obj()}, Now: now})
			return v.Cause == v1alpha1.CauseGPUFault
		}},
		"the node's shutdown announcement (rule 5)": {func(when time.Time) bool {
			v := Classify(Observation{Pods: []*corev1.Pod{ended().obj()}, Now: now,
				Nodes: map[string]NodeFacts{"gpu-0": {ShutdownDetectedAt: &when}}})
			return v.Cause == v1alpha1.CauseNodeShutdown
		}},
		"the node's GPU health (rule 7)": {func(when time.Time) bool {
			v := Classify(Observation{Pods: []*corev1.Pod{ended().obj()}, Now: now,
				Nodes: map[string]NodeFacts{"gpu-0": {GPUUnhealthyReason: "Xid79", GPUUnhealthySince: &when}}})
			return v.Cause == v1alpha1.CauseGPUFault
		}},
	}
	for name, r := range rules {
		t.Run(name, func(t *testing.T) {
			if r.counted(before) {
				t.Errorf("an earlier attempt's mark (%s, before the open at %s) counted against attempt 3", clock(before), clock(opened))
			}
			if !r.counted(after) {
				t.Errorf("attempt 3's own mark (%s, after the open at %s) not counted", clock(after), clock(opened))
			}
		})
	}

	// Waiting at its barrier (no record of an open yet, or stopped for a later attempt), a
	// worker's container runs and writes nothing: that is neither silence nor a hang.
	waiting := makePod("r-0").index(0).node("gpu-0").supervised(started, time.Time{}).
		condition(v1alpha1.PodConditionNoProgress, corev1.ConditionTrue, v1alpha1.ProgressSignalLog, "no output", after).
		gpuXID("gpu-0", 0, 79, after).obj()
	if Stalled([]*corev1.Pod{waiting}) {
		t.Error("a gang waiting at its barriers counted as stalled")
	}
	if Failed(waiting, nil, now) {
		t.Error("a worker waiting at its barrier counted as hung on fatal evidence")
	}
}
