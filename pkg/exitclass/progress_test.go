package exitclass

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// silent marks the pod as the node agent does when its worker has shown no progress since
// since.
func (b *podBuilder) silent(since time.Time) *podBuilder {
	return b.condition(v1alpha1.PodConditionNoProgress, corev1.ConditionTrue, v1alpha1.ProgressSignalLog,
		"no output in the logs of container trainer for 60 s", since)
}

// A gang has stopped making progress when every worker carries the agent's NoProgress
// condition about its running incarnation; one worker that still progresses, or a
// condition an earlier incarnation left, and it has not.
func TestStalled(t *testing.T) {
	for name, tc := range map[string]struct {
		pods []*corev1.Pod
		want bool
	}{
		"every worker silent": {pods: []*corev1.Pod{hungWorker(0).silent(at(5)).obj(), hungWorker(1).silent(at(3)).obj()}, want: true},
		"one worker still logs (rank 0 logs, the others never do)": {
			pods: []*corev1.Pod{hungWorker(0).obj(), hungWorker(1).silent(at(3)).obj()},
		},
		"the condition False": {
			pods: []*corev1.Pod{hungWorker(0).condition(v1alpha1.PodConditionNoProgress, corev1.ConditionFalse, "LogSilent", "", at(3)).obj()},
		},
		"an earlier incarnation's condition": {pods: []*corev1.Pod{hungWorker(0).runningSince(at(30)).silent(at(3)).obj()}},
		"a worker at its barrier":            {pods: []*corev1.Pod{hungWorker(0).atBarrier().silent(at(3)).obj()}},
		"a worker that ended":                {pods: []*corev1.Pod{hungWorker(0).silent(at(3)).exit(0).obj()}},
		"no worker":                          {},
	} {
		t.Run(name, func(t *testing.T) {
			if got := Stalled(tc.pods); got != tc.want {
				t.Errorf("Stalled = %v, want %v", got, tc.want)
			}
			v := Classify(Observation{Pods: tc.pods, Now: at(100), SettleDeadline: at(90)})
			if (v.Cause == v1alpha1.CauseNoProgress) != tc.want {
				t.Errorf("verdict %s (root %q), want NoProgress: %v", v.Cause, v.RootPod, tc.want)
			}
		})
	}
}

// The verdict on a gang without progress: the worker silent the longest is the root, the
// gang's last progress its time, every other worker a peer, and each one's silence a line.
func TestVerdictOnAGangWithoutProgress(t *testing.T) {
	pods := []*corev1.Pod{hungWorker(0).silent(at(5)).obj(), hungWorker(1).silent(at(2)).obj(), hungWorker(2).silent(at(7)).obj()}
	v := Classify(Observation{Pods: pods, Now: at(70), SettleDeadline: at(71)})
	want := Verdict{
		Class: v1alpha1.ClassUnknown, Cause: v1alpha1.CauseNoProgress, RootPod: "r-1", Index: 1, Node: "gpu-1", Container: "trainer",
		FailedAt: at(7), StillRunning: true, RunningFor: 63 * time.Second,
		Basis: "was still running, and no worker of its gang had shown progress for 63.0 s (LogSilent: the last one since 12:01:07.000)",
		Evidence: []string{
			"index 0 (pod r-0): container trainer running, no progress since 12:01:05.000 (LogSilent: no output in the logs of container trainer for 60 s)",
			"index 1 (pod r-1): container trainer running, no progress since 12:01:02.000 (LogSilent: no output in the logs of container trainer for 60 s)",
			"index 2 (pod r-2): container trainer running, no progress since 12:01:07.000 (LogSilent: no output in the logs of container trainer for 60 s)",
		},
		Peers: []PeerFailure{
			{Pod: "r-0", Index: 0, Reason: "no progress since 12:01:05.000", Node: "gpu-0", FailedAt: at(5), OwnCause: v1alpha1.CauseNoProgress},
			{Pod: "r-2", Index: 2, Reason: "no progress since 12:01:07.000", Node: "gpu-2", FailedAt: at(7), OwnCause: v1alpha1.CauseNoProgress},
		},
		WaitUntil: at(71),
	}
	if diff := cmp.Diff(want, v); diff != "" {
		t.Errorf("verdict (-want +got):\n%s", diff)
	}
	wantExplain := "index 1 (pod r-1) on node gpu-1 was still running, and no worker of its gang had shown progress for 63.0 s (LogSilent: the last one since 12:01:07.000); " +
		"none of its 2 peers showed progress either → unknown: NoProgress; not final: waiting for node evidence until 12:02:11.000"
	if got := v.Explain(); got != wantExplain {
		t.Errorf("Explain\n got %q\nwant %q", got, wantExplain)
	}

	// A failure beside the silence is the verdict's: the failed pod is the root.
	pods[2] = hungWorker(2).silent(at(7)).exit(1).finishedAt(at(8)).obj()
	if v := Classify(Observation{Pods: pods, Now: at(70), SettleDeadline: at(71)}); v.Cause != v1alpha1.CauseAppExit || v.RootPod != "r-2" {
		t.Errorf("a failed worker beside silent ones: %s on %s, want AppExit on r-2", v.Cause, v.RootPod)
	}
}

// A large gang's verdict quotes eight workers and counts the rest.
func TestVerdictOnALargeSilentGangIsBounded(t *testing.T) {
	var pods []*corev1.Pod
	for i := range 10 {
		pods = append(pods, hungWorker(i).silent(at(float64(i))).obj())
	}
	v := Classify(Observation{Pods: pods, Now: at(100), SettleDeadline: at(0)})
	if len(v.Evidence) != maxPeerEvidence+1 || !strings.HasPrefix(v.Evidence[maxPeerEvidence], "… and 2 more workers") || len(v.Peers) != 9 || !v.Final {
		t.Errorf("evidence %d lines (%q), %d peers, Final %v", len(v.Evidence), v.Evidence[len(v.Evidence)-1], len(v.Peers), v.Final)
	}
}

// watched makes the pod's run one whose progress is watched; progressing gives it the node
// agent's Progressing condition, first output at first.
func (b *podBuilder) watched() *podBuilder {
	return b.annotation(v1alpha1.AnnotationProgressDeadline, "60")
}

func (b *podBuilder) progressing(first time.Time) *podBuilder {
	return b.condition(v1alpha1.PodConditionProgressing, corev1.ConditionTrue, v1alpha1.ProgressSignalOutput, "", first)
}

// The gang's first progress is its last worker's first output in the running incarnation; a
// worker without one holds it back, unless nothing watches it (no agent on its node, an
// attempt started without the deadline).
func TestGangProgressing(t *testing.T) {
	agent := map[string]NodeFacts{"gpu-0": {Agent: &Heartbeat{}}, "gpu-1": {Agent: &Heartbeat{}}, "gpu-9": {}}
	for name, tc := range map[string]struct {
		pods []*corev1.Pod
		want time.Time
	}{
		"every worker wrote":       {pods: []*corev1.Pod{hungWorker(0).watched().progressing(at(7)).obj(), hungWorker(1).watched().progressing(at(12)).obj()}, want: at(12)},
		"one has not":              {pods: []*corev1.Pod{hungWorker(0).watched().progressing(at(7)).obj(), hungWorker(1).watched().obj()}},
		"an earlier incarnation's": {pods: []*corev1.Pod{hungWorker(0).watched().runningSince(at(30)).progressing(at(7)).obj()}},
		"no agent on its node": {pods: []*corev1.Pod{hungWorker(0).watched().progressing(at(7)).obj(),
			makePod("r-9").index(9).node("gpu-9").runningSince(at(20)).watched().obj()}, want: at(20)},
		"not watched":             {pods: []*corev1.Pod{hungWorker(0).watched().progressing(at(7)).obj(), hungWorker(1).runningSince(at(3)).obj()}, want: at(7)},
		"a worker at its barrier": {pods: []*corev1.Pod{hungWorker(0).watched().atBarrier().progressing(at(7)).obj()}},
		"no worker":               {},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := GangProgressing(tc.pods, agent)
			if ok != !tc.want.IsZero() || !got.Equal(tc.want) {
				t.Errorf("GangProgressing = %s, %v; want %s", got, ok, tc.want)
			}
		})
	}
}
