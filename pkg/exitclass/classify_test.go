package exitclass

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// summary is the projection of a Verdict that the rule tables compare.
type summary struct {
	Class      v1alpha1.Class
	Cause      v1alpha1.Cause
	Root       string
	Index      int
	ExitCode   int32
	Signal     int32
	XID        uint64
	Conclusive bool
	Final      bool
	Peers      []string
}

func summarize(v Verdict) summary {
	s := summary{
		Class: v.Class, Cause: v.Cause, Root: v.RootPod, Index: v.Index, ExitCode: v.ExitCode,
		Signal: v.Signal, XID: v.XID, Conclusive: v.Conclusive, Final: v.Final,
	}
	for _, p := range v.Peers {
		s.Peers = append(s.Peers, p.Pod)
	}
	return s
}

// Shorthands for the expected projections.
func infra(c v1alpha1.Cause, root string, index int, exit int32) summary {
	return summary{Class: v1alpha1.ClassInfrastructure, Cause: c, Root: root, Index: index,
		ExitCode: exit, Signal: signalOf(exit), Conclusive: true, Final: true}
}

func app(c v1alpha1.Cause, root string, index int, exit int32, conclusive bool) summary {
	return summary{Class: v1alpha1.ClassApplication, Cause: c, Root: root, Index: index,
		ExitCode: exit, Signal: signalOf(exit), Conclusive: conclusive, Final: conclusive}
}

func unknown(root string, index int, exit int32) summary {
	return summary{Class: v1alpha1.ClassUnknown, Cause: v1alpha1.CauseUnknown, Root: root, Index: index,
		ExitCode: exit, Signal: signalOf(exit)}
}

func (s summary) withXID(x uint64) summary      { s.XID = x; return s }
func (s summary) withSignal(sig int32) summary  { s.Signal = sig; return s }
func (s summary) withFinal() summary            { s.Final = true; return s }
func (s summary) withPeers(p ...string) summary { s.Peers = p; return s }
func mustHints(t testing.TB, p ...HintPattern) []Hint {
	t.Helper()
	h, err := CompileHints(p)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

type ruleCase struct {
	pods          []*corev1.Pod
	nodes         map[string]NodeFacts
	hints         []HintPattern
	afterDeadline bool
	want          summary
	// wantBasis, when set, is compared with Verdict.Basis.
	wantBasis string
	// wantEvidence lists substrings that must each appear in some evidence line.
	wantEvidence []string
}

func runRuleCases(t *testing.T, cases map[string]ruleCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			obs := Observation{
				Pods: tc.pods, Nodes: tc.nodes, Hints: mustHints(t, tc.hints...),
				Now: at(2), SettleDeadline: at(3),
			}
			if tc.afterDeadline {
				obs.Now = at(3)
			}
			got := Classify(obs)
			if diff := cmp.Diff(tc.want, summarize(got)); diff != "" {
				t.Errorf("Classify() mismatch (-want +got):\n%s\nevidence:\n  %s", diff, strings.Join(got.Evidence, "\n  "))
			}
			if tc.wantBasis != "" && got.Basis != tc.wantBasis {
				t.Errorf("Basis = %q, want %q", got.Basis, tc.wantBasis)
			}
			for _, want := range tc.wantEvidence {
				if !containsLine(got.Evidence, want) {
					t.Errorf("no evidence line contains %q; evidence:\n  %s", want, strings.Join(got.Evidence, "\n  "))
				}
			}
		})
	}
}

func containsLine(lines []string, sub string) bool {
	for _, l := range lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

func TestClassifyNoFailure(t *testing.T) {
	cases := map[string]struct {
		pods  []*corev1.Pod
		nodes map[string]NodeFacts
	}{
		"no pods": {},
		"running, succeeded and nil pods": {pods: []*corev1.Pod{
			makePod("r-0").index(0).node("gpu-0").obj(),
			worker(1, 0, at(1)).obj(),
			nil,
		}},
		"succeeded pod on a gone node": {
			pods:  []*corev1.Pod{worker(1, 0, at(1)).deleting(at(1)).obj()},
			nodes: map[string]NodeFacts{"gpu-1": {Gone: true}},
		},
		"deleted pod whose node facts are unknown is not lost": {
			pods: []*corev1.Pod{makePod("r-2").index(2).node("gpu-2").deleting(at(1)).obj()},
		},
		"deleted pod on a ready node": {
			pods:  []*corev1.Pod{makePod("r-2").index(2).node("gpu-2").deleting(at(1)).obj()},
			nodes: map[string]NodeFacts{"gpu-2": {}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Classify(Observation{Pods: tc.pods, Nodes: tc.nodes, Now: at(5), SettleDeadline: at(3)})
			want := Verdict{Class: v1alpha1.ClassUnknown, Cause: v1alpha1.CauseUnknown, Index: -1}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Classify() mismatch (-want +got):\n%s", diff)
			}
			if got.Explain() != "no pod of this attempt has failed" {
				t.Errorf("Explain() = %q", got.Explain())
			}
		})
	}
}

func TestClassifyExitSemantics(t *testing.T) {
	runRuleCases(t, map[string]ruleCase{
		"exit 1 without evidence waits for the settle deadline": {
			pods:      []*corev1.Pod{worker(3, 1, at(1)).obj()},
			nodes:     map[string]NodeFacts{"gpu-3": {}},
			want:      app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
			wantBasis: "with no infrastructure evidence",
		},
		"exit 1 without evidence is final at the settle deadline": {
			pods:          []*corev1.Pod{worker(3, 1, at(1)).obj()},
			afterDeadline: true,
			want:          app(v1alpha1.CauseAppExit, "r-3", 3, 1, false).withFinal(),
			wantEvidence:  []string{"node gpu-3: no facts observed", "pod r-3: container trainer exited 1 at 12:01:01.000"},
		},
		"bare 143 is unknown and not final": {
			pods:      []*corev1.Pod{worker(3, 143, at(1)).obj()},
			want:      unknown("r-3", 3, 143),
			wantBasis: "with no evidence of who sent the signal",
		},
		"bare 137 is unknown, final but not conclusive after the deadline": {
			pods:          []*corev1.Pod{worker(3, 137, at(1)).obj()},
			afterDeadline: true,
			want:          unknown("r-3", 3, 137).withFinal(),
		},
		"137 OOMKilled is conclusive application before the deadline": {
			pods:         []*corev1.Pod{worker(3, 137, at(1)).containerReason("OOMKilled").obj()},
			want:         app(v1alpha1.CauseOOMKilled, "r-3", 3, 137, true),
			wantBasis:    "because it ran out of memory (OOMKilled)",
			wantEvidence: []string{"exited 137 (SIGKILL) at 12:01:01.000, reason OOMKilled"},
		},
		"128+n is signal n: SIGSEGV is the program's": {
			pods: []*corev1.Pod{worker(3, 139, at(1)).obj()},
			want: app(v1alpha1.CauseAppExit, "r-3", 3, 139, false).withSignal(11),
		},
		"exit 255 is not a signal": {
			pods: []*corev1.Pod{worker(3, 255, at(1)).obj()},
			want: app(v1alpha1.CauseAppExit, "r-3", 3, 255, false),
		},
		"failed pod whose container exited 0, no evidence": {
			pods: []*corev1.Pod{worker(3, 0, at(1)).phase(corev1.PodFailed).obj()},
			want: unknown("r-3", 3, 0),
		},
		"failed init container": {
			pods: []*corev1.Pod{makePod("r-3").index(3).node("gpu-3").initFailed("setup", 2, at(1)).obj()},
			want: app(v1alpha1.CauseAppExit, "r-3", 3, 2, false),
		},
		"earliest non-zero container stands for the pod": {
			pods: []*corev1.Pod{worker(3, 143, at(2)).sidecar("logger", 1, at(1)).sidecar("proxy", 0, at(0.5)).obj()},
			want: app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
		},
		"non-zero exit in a running pod is a failure": {
			pods: []*corev1.Pod{makePod("r-3").index(3).node("gpu-3").sidecar("logger", 2, at(1)).obj()},
			want: app(v1alpha1.CauseAppExit, "r-3", 3, 2, false),
		},
		"index from the label when the annotation is missing": {
			pods: []*corev1.Pod{makePod("r-4").label(batchv1.JobCompletionIndexAnnotation, "4").node("gpu-4").exit(1).finishedAt(at(1)).obj()},
			want: app(v1alpha1.CauseAppExit, "r-4", 4, 1, false),
		},
		"malformed index is unknown": {
			pods: []*corev1.Pod{makePod("r-x").annotation(batchv1.JobCompletionIndexAnnotation, "x").node("gpu-4").exit(1).finishedAt(at(1)).obj()},
			want: app(v1alpha1.CauseAppExit, "r-x", -1, 1, false),
		},
		"unscheduled failed pod": {
			pods:         []*corev1.Pod{makePod("r-5").index(5).exit(1).obj()},
			want:         app(v1alpha1.CauseAppExit, "r-5", 5, 1, false),
			wantEvidence: []string{"pod r-5: not scheduled to a node"},
		},
	})
}

func TestClassifyNodeShutdown(t *testing.T) {
	shutdown := map[string]NodeFacts{"gpu-7": {ShutdownDetectedAt: ptrTime(at(3.12))}}
	runRuleCases(t, map[string]ruleCase{
		"143 after the node announced its shutdown": {
			pods:         []*corev1.Pod{makePod("r-3").index(3).node("gpu-7").exit(143).finishedAt(at(5)).obj()},
			nodes:        shutdown,
			want:         infra(v1alpha1.CauseNodeShutdown, "r-3", 3, 143),
			wantBasis:    "while the node was shutting down (logind PrepareForShutdown at 12:01:03.120)",
			wantEvidence: []string{"node gpu-7: logind PrepareForShutdown at 12:01:03.120"},
		},
		"exit 1 after the shutdown announcement is the shutdown's too": {
			pods:  []*corev1.Pod{makePod("r-3").index(3).node("gpu-7").exit(1).finishedAt(at(5)).obj()},
			nodes: shutdown,
			want:  infra(v1alpha1.CauseNodeShutdown, "r-3", 3, 1),
		},
		"exit within the second of the announcement counts (timestamp granularity)": {
			pods:  []*corev1.Pod{makePod("r-3").index(3).node("gpu-7").exit(143).finishedAt(at(3)).obj()},
			nodes: shutdown,
			want:  infra(v1alpha1.CauseNodeShutdown, "r-3", 3, 143),
		},
		"shutdown announced after the exit is not the cause": {
			pods:         []*corev1.Pod{makePod("r-3").index(3).node("gpu-7").exit(1).finishedAt(at(1)).obj()},
			nodes:        shutdown,
			want:         app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
			wantEvidence: []string{"logind PrepareForShutdown at 12:01:03.120 (after the container had exited; not counted)"},
		},
		"lost pod with no exit on a shutting-down node": {
			pods:  []*corev1.Pod{makePod("r-3").index(3).node("gpu-7").phase(corev1.PodFailed).obj()},
			nodes: shutdown,
			want:  infra(v1alpha1.CauseNodeShutdown, "r-3", 3, 0),
		},
		"kubelet graceful shutdown status reason Terminated, program exited 0": {
			pods: []*corev1.Pod{worker(3, 0, at(1)).phase(corev1.PodFailed).
				statusReason("Terminated", "Pod was terminated in response to imminent node shutdown.").obj()},
			want:         infra(v1alpha1.CauseNodeShutdown, "r-3", 3, 0),
			wantBasis:    "while the node was shutting down (pod status reason Terminated)",
			wantEvidence: []string{"pod r-3: status reason Terminated: Pod was terminated in response to imminent node shutdown."},
		},
		"old kubelet status reason Shutdown": {
			pods: []*corev1.Pod{worker(3, 143, at(1)).statusReason("Shutdown", "").obj()},
			want: infra(v1alpha1.CauseNodeShutdown, "r-3", 3, 143),
		},
		"not admitted while the node shuts down": {
			pods: []*corev1.Pod{makePod("r-3").index(3).node("gpu-3").phase(corev1.PodFailed).statusReason("NodeShutdown", "").obj()},
			want: infra(v1alpha1.CauseNodeShutdown, "r-3", 3, 0),
		},
		"agent's InfrastructureFault condition decides, whatever the exit code": {
			pods:         []*corev1.Pod{worker(3, 1, at(1)).infraFault(v1alpha1.CauseNodeShutdown, at(0.5)).obj()},
			want:         infra(v1alpha1.CauseNodeShutdown, "r-3", 3, 1),
			wantBasis:    "while the node was shutting down (test-agent at 12:01:00.500)",
			wantEvidence: []string{"condition faultline.dev/InfrastructureFault=True, reason NodeShutdown"},
		},
		"agent's InfrastructureFault condition with a cause other than a shutdown": {
			pods:      []*corev1.Pod{worker(3, 1, at(1)).infraFault(v1alpha1.CauseNodeMaintenance, at(0.5)).obj()},
			want:      infra(v1alpha1.CauseNodeMaintenance, "r-3", 3, 1),
			wantBasis: "with the node agent's InfrastructureFault condition (NodeMaintenance: from the node agent)",
		},
		"InfrastructureFault outranks OOMKilled": {
			pods: []*corev1.Pod{worker(3, 137, at(1)).containerReason("OOMKilled").infraFault(v1alpha1.CauseGPUFault, at(0.5)).obj()},
			want: infra(v1alpha1.CauseGPUFault, "r-3", 3, 137),
		},
		"InfrastructureFault with an application cause is a contradiction, ignored": {
			pods:         []*corev1.Pod{worker(3, 1, at(1)).bareCondition(v1alpha1.CauseAppGPUError, at(0.5)).obj()},
			want:         app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
			wantEvidence: []string{"reason AppGPUError: from the node agent (not an infrastructure cause; ignored)"},
		},
		"InfrastructureFault with a reason that is no cause is ignored": {
			pods:         []*corev1.Pod{worker(3, 1, at(1)).bareCondition("Meteor", at(0.5)).obj()},
			want:         app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
			wantEvidence: []string{"reason Meteor: from the node agent (not an infrastructure cause; ignored)"},
		},
		"InfrastructureFault PeerFailure is no root cause": {
			pods: []*corev1.Pod{worker(3, 143, at(1)).bareCondition(v1alpha1.CausePeerFailure, at(0.5)).obj()},
			want: unknown("r-3", 3, 143),
		},
		"InfrastructureFault not True is no evidence": {
			pods: []*corev1.Pod{worker(3, 1, at(1)).condition(v1alpha1.PodConditionInfrastructureFault, corev1.ConditionFalse, "GPUFault", "", at(0.5)).obj()},
			want: app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
		},
	})
}

func TestClassifyDisruptionTarget(t *testing.T) {
	notReady := map[string]NodeFacts{"gpu-3": {NotReady: true}}
	runRuleCases(t, map[string]ruleCase{
		"TerminationByKubelet in a graceful node shutdown": {
			pods: []*corev1.Pod{worker(3, 143, at(1)).disruption(corev1.PodReasonTerminationByKubelet, at(0.5)).
				statusReason("Terminated", "Pod was terminated in response to imminent node shutdown.").obj()},
			want:      infra(v1alpha1.CauseNodeShutdown, "r-3", 3, 143),
			wantBasis: "while the node was shutting down (DisruptionTarget: TerminationByKubelet)",
		},
		"TerminationByKubelet on a node that announced its shutdown": {
			pods:  []*corev1.Pod{worker(3, 143, at(1)).disruption(corev1.PodReasonTerminationByKubelet, at(0.5)).obj()},
			nodes: map[string]NodeFacts{"gpu-3": {ShutdownDetectedAt: ptrTime(at(0.2))}},
			want:  infra(v1alpha1.CauseNodeShutdown, "r-3", 3, 143),
		},
		"TerminationByKubelet for node-pressure eviction": {
			pods: []*corev1.Pod{worker(3, 137, at(1)).disruption(corev1.PodReasonTerminationByKubelet, at(0.5)).
				statusReason("Evicted", "The node was low on resource: memory.").obj()},
			want:      infra(v1alpha1.CauseEviction, "r-3", 3, 137),
			wantBasis: "after Kubernetes disrupted it (DisruptionTarget: TerminationByKubelet)",
		},
		"TerminationByKubelet to make room for a critical pod": {
			pods: []*corev1.Pod{worker(3, 143, at(1)).disruption(corev1.PodReasonTerminationByKubelet, at(0.5)).
				statusReason("Preempting", "").obj()},
			want: infra(v1alpha1.CausePreemption, "r-3", 3, 143),
		},
		"TerminationByKubelet alone": {
			pods: []*corev1.Pod{worker(3, 143, at(1)).disruption(corev1.PodReasonTerminationByKubelet, at(0.5)).obj()},
			want: infra(v1alpha1.CauseEviction, "r-3", 3, 143),
		},
		"PreemptionByScheduler": {
			pods: []*corev1.Pod{worker(3, 143, at(1)).disruption(corev1.PodReasonPreemptionByScheduler, at(0.5)).obj()},
			want: infra(v1alpha1.CausePreemption, "r-3", 3, 143),
		},
		"PreemptionByScheduler, program exited 1 on SIGTERM": {
			pods: []*corev1.Pod{worker(3, 1, at(1)).disruption(corev1.PodReasonPreemptionByScheduler, at(0.5)).obj()},
			want: infra(v1alpha1.CausePreemption, "r-3", 3, 1),
		},
		"EvictionByEvictionAPI": {
			pods: []*corev1.Pod{worker(3, 143, at(1)).disruption("EvictionByEvictionAPI", at(0.5)).obj()},
			want: infra(v1alpha1.CauseEviction, "r-3", 3, 143),
		},
		"EvictionByEvictionAPI on a cordoned node is a planned drain": {
			pods:         []*corev1.Pod{worker(3, 143, at(1)).disruption("EvictionByEvictionAPI", at(0.5)).obj()},
			nodes:        map[string]NodeFacts{"gpu-3": {Unschedulable: true}},
			want:         infra(v1alpha1.CausePlannedMaintenance, "r-3", 3, 143),
			wantEvidence: []string{"node gpu-3: cordoned (unschedulable)"},
		},
		"EvictionByEvictionAPI on a node Karpenter disrupts is planned": {
			pods:         []*corev1.Pod{worker(3, 143, at(1)).disruption("EvictionByEvictionAPI", at(0.5)).obj()},
			nodes:        map[string]NodeFacts{"gpu-3": {DisruptionTaint: v1alpha1.TaintKarpenterDisrupted}},
			want:         infra(v1alpha1.CausePlannedMaintenance, "r-3", 3, 143),
			wantEvidence: []string{"node gpu-3: tainted karpenter.sh/disrupted (drained by its platform)"},
		},
		"EvictionByEvictionAPI from a node already deleted is planned": {
			pods:  []*corev1.Pod{worker(3, 143, at(1)).disruption("EvictionByEvictionAPI", at(0.5)).obj()},
			nodes: map[string]NodeFacts{"gpu-3": {Gone: true}},
			want:  infra(v1alpha1.CausePlannedMaintenance, "r-3", 3, 143),
		},
		"EvictionByEvictionAPI from a node nobody takes away stays a budgeted eviction": {
			pods:  []*corev1.Pod{worker(3, 143, at(1)).disruption("EvictionByEvictionAPI", at(0.5)).obj()},
			nodes: map[string]NodeFacts{"gpu-3": {}},
			want:  infra(v1alpha1.CauseEviction, "r-3", 3, 143),
		},
		"DeletionByTaintManager on a NotReady node": {
			pods:  []*corev1.Pod{makePod("r-3").index(3).node("gpu-3").disruption("DeletionByTaintManager", at(0.5)).deleting(at(1)).obj()},
			nodes: notReady,
			want:  infra(v1alpha1.CauseNodeLost, "r-3", 3, 0),
		},
		"DeletionByTaintManager on a gone node": {
			pods:  []*corev1.Pod{worker(3, 143, at(1)).disruption("DeletionByTaintManager", at(0.5)).obj()},
			nodes: map[string]NodeFacts{"gpu-3": {Gone: true}},
			want:  infra(v1alpha1.CauseNodeLost, "r-3", 3, 143),
		},
		"DeletionByTaintManager on a healthy node is maintenance": {
			pods:  []*corev1.Pod{worker(3, 143, at(1)).disruption("DeletionByTaintManager", at(0.5)).obj()},
			nodes: map[string]NodeFacts{"gpu-3": {}},
			want:  infra(v1alpha1.CauseNodeMaintenance, "r-3", 3, 143),
		},
		"DeletionByPodGC": {
			pods: []*corev1.Pod{makePod("r-3").index(3).node("gpu-3").phase(corev1.PodFailed).
				disruption("DeletionByPodGC", at(0.5)).deleting(at(0.5)).obj()},
			want:         infra(v1alpha1.CauseNodeLost, "r-3", 3, 0),
			wantEvidence: []string{"pod r-3: no container exit recorded (phase Failed)", "being deleted (deletionTimestamp 12:01:00.500)"},
		},
		"unknown DisruptionTarget reason is still a disruption": {
			pods: []*corev1.Pod{worker(3, 143, at(1)).disruption("SomethingNew", at(0.5)).obj()},
			want: infra(v1alpha1.CauseEviction, "r-3", 3, 143),
		},
		"DisruptionTarget set after the exit is not the cause": {
			pods:         []*corev1.Pod{worker(3, 1, at(1)).disruption(corev1.PodReasonPreemptionByScheduler, at(4)).obj()},
			want:         app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
			wantEvidence: []string{"reason PreemptionByScheduler at 12:01:04.000 (set after the container had exited; not counted)"},
		},
		"DisruptionTarget not True is no evidence": {
			pods: []*corev1.Pod{worker(3, 143, at(1)).condition(corev1.DisruptionTarget, corev1.ConditionFalse, "PreemptionByScheduler", "", at(0.5)).obj()},
			want: unknown("r-3", 3, 143),
		},
	})
}

func TestClassifyStatusReason(t *testing.T) {
	runRuleCases(t, map[string]ruleCase{
		"Evicted": {
			pods:      []*corev1.Pod{worker(3, 137, at(1)).statusReason("Evicted", "The node was low on resource: ephemeral-storage.").obj()},
			want:      infra(v1alpha1.CauseEviction, "r-3", 3, 137),
			wantBasis: "with pod status reason Evicted",
		},
		"Evicted for its container's own ephemeral-storage limit": {
			pods: []*corev1.Pod{worker(3, 137, at(1)).statusReason("Evicted", `Container worker exceeded its local ephemeral storage limit "1Mi". `).obj()},
			want: app(v1alpha1.CauseLimitExceeded, "r-3", 3, 137, true),
		},
		"Evicted for its pod's own ephemeral-storage limit": {
			pods: []*corev1.Pod{worker(3, 137, at(1)).statusReason("Evicted", "Pod ephemeral local storage usage exceeds the total limit of containers 2Mi. ").obj()},
			want: app(v1alpha1.CauseLimitExceeded, "r-3", 3, 137, true),
		},
		"Evicted for an emptyDir's sizeLimit": {
			pods: []*corev1.Pod{worker(3, 137, at(1)).statusReason("Evicted", `Usage of EmptyDir volume "scratch" exceeds the limit "1Gi". `).obj()},
			want: app(v1alpha1.CauseLimitExceeded, "r-3", 3, 137, true),
		},
		"Evicted for node pressure naming a container stays infrastructure": {
			pods: []*corev1.Pod{worker(3, 137, at(1)).statusReason("Evicted", "The node was low on resource: ephemeral-storage. Container worker was using 20Ki, request is 0, has larger consumption of ephemeral-storage. ").obj()},
			want: infra(v1alpha1.CauseEviction, "r-3", 3, 137),
		},
		"Preempting": {
			pods: []*corev1.Pod{worker(3, 143, at(1)).statusReason("Preempting", "").obj()},
			want: infra(v1alpha1.CausePreemption, "r-3", 3, 143),
		},
		"NodeLost": {
			pods: []*corev1.Pod{makePod("r-3").index(3).node("gpu-3").phase(corev1.PodFailed).statusReason("NodeLost", "").obj()},
			want: infra(v1alpha1.CauseNodeLost, "r-3", 3, 0),
		},
		"UnexpectedAdmissionError for a GPU pod": {
			pods: []*corev1.Pod{makePod("r-3").index(3).node("gpu-3").gpus(8).phase(corev1.PodFailed).
				statusReason("UnexpectedAdmissionError", "Allocate failed due to no healthy devices present").obj()},
			want: infra(v1alpha1.CauseGPUFault, "r-3", 3, 0),
		},
		"UnexpectedAdmissionError without GPUs says nothing": {
			pods:          []*corev1.Pod{makePod("r-3").index(3).node("gpu-3").phase(corev1.PodFailed).statusReason("UnexpectedAdmissionError", "").obj()},
			afterDeadline: true,
			want:          unknown("r-3", 3, 0).withFinal(),
			wantBasis:     "with no evidence either way",
		},
		"OutOfnvidia.com/gpu at admission": {
			pods: []*corev1.Pod{makePod("r-3").index(3).node("gpu-3").phase(corev1.PodFailed).statusReason("OutOfnvidia.com/gpu", "").obj()},
			want: infra(v1alpha1.CauseGPUFault, "r-3", 3, 0),
		},
	})
}

func TestClassifyFaultEvidence(t *testing.T) {
	runRuleCases(t, map[string]ruleCase{
		"CUDA error right after a fatal XID on the pod's GPU": {
			pods:      []*corev1.Pod{makePod("r-3").index(3).node("gpu-7").exit(1).finishedAt(at(1)).gpuXID("gpu-7", 3, 79, at(0.9)).obj()},
			want:      infra(v1alpha1.CauseGPUFault, "r-3", 3, 1).withXID(79),
			wantBasis: "after XID 79 (GPU has fallen off the bus) on GPU 3",
			wantEvidence: []string{
				"pod r-3: fault evidence from nvml-event on node gpu-7 at 12:01:00.900: GPUFault, GPU 3 (GPU-3) XID 79 (GPU has fallen off the bus, GPUFault; fatal: the GPU needs a reset or drain)",
			},
		},
		"program-caused XID is conclusive application": {
			pods: []*corev1.Pod{worker(3, 1, at(1)).gpuXID("gpu-3", 0, 31, at(0.9)).obj()},
			want: app(v1alpha1.CauseAppGPUError, "r-3", 3, 1, true).withXID(31),
		},
		"the XID decides, not the cause written beside it": {
			pods: []*corev1.Pod{worker(3, 1, at(1)).faultEvidence(v1alpha1.FaultEvidence{
				Source: "nvml-event", Node: "gpu-3", Cause: v1alpha1.CauseGPUFault, DetectedAt: at(0.9).Format(time.RFC3339Nano),
				GPU: &v1alpha1.GPUEvidence{Index: 1, XID: 13},
			}).obj()},
			want: app(v1alpha1.CauseAppGPUError, "r-3", 3, 1, true).withXID(13),
		},
		"XID 45 alone is an echo and decides nothing": {
			pods:         []*corev1.Pod{worker(3, 143, at(1)).gpuXID("gpu-3", 0, 45, at(0.9)).obj()},
			want:         unknown("r-3", 3, 143),
			wantEvidence: []string{"XID 45 (Preemptive cleanup, due to previous errors, AppGPUError; a consequence of another fault, not counted)"},
		},
		"unknown XID is a GPU fault": {
			pods: []*corev1.Pod{worker(3, 1, at(1)).gpuXID("gpu-3", 2, 999, at(0.9)).obj()},
			want: infra(v1alpha1.CauseGPUFault, "r-3", 3, 1).withXID(999),
		},
		"shutdown evidence with the agent's condition": {
			pods: []*corev1.Pod{worker(3, 143, at(5)).bareCondition(v1alpha1.CauseNodeShutdown, at(3.12)).faultEvidence(v1alpha1.FaultEvidence{
				Source: "logind", Node: "gpu-3", Cause: v1alpha1.CauseNodeShutdown, DetectedAt: at(3.12).Format(time.RFC3339Nano),
			}).obj()},
			want:      infra(v1alpha1.CauseNodeShutdown, "r-3", 3, 143),
			wantBasis: "while the node was shutting down (logind at 12:01:03.120)",
		},
		"evidence with another infrastructure cause and no XID": {
			pods: []*corev1.Pod{worker(3, 143, at(5)).bareCondition(v1alpha1.CauseGPUFault, at(4)).faultEvidence(v1alpha1.FaultEvidence{
				Source: "nvml-health", Node: "gpu-3", Cause: v1alpha1.CauseGPUFault, DetectedAt: at(4).Format(time.RFC3339Nano), Detail: "row remap pending",
			}).obj()},
			want:      infra(v1alpha1.CauseGPUFault, "r-3", 3, 143),
			wantBasis: "with the node agent's InfrastructureFault condition (GPUFault: from the node agent)",
		},
		"malformed JSON is an unreadable-evidence line, not a panic": {
			pods:         []*corev1.Pod{worker(3, 1, at(1)).annotation(v1alpha1.AnnotationFaultEvidence, `{"cause": "GPUFault",`).obj()},
			want:         app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
			wantEvidence: []string{"pod r-3: annotation faultline.dev/fault-evidence unreadable: unexpected end of JSON input"},
		},
		"evidence with a cause that is no cause is ignored": {
			pods:         []*corev1.Pod{worker(3, 1, at(1)).faultEvidence(v1alpha1.FaultEvidence{Source: "x", Cause: "Gremlins"}).obj()},
			want:         app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
			wantEvidence: []string{"fault evidence from x: Gremlins (not a cause faultline knows; ignored)"},
		},
		"evidence claiming LimitExceeded is no eviction": {
			pods: []*corev1.Pod{worker(3, 137, at(1)).faultEvidence(v1alpha1.FaultEvidence{
				Source: "nvml-event", Node: "gpu-3", Cause: v1alpha1.CauseLimitExceeded, DetectedAt: at(0.9).Format(time.RFC3339Nano),
			}).obj()},
			want:         unknown("r-3", 3, 137),
			wantEvidence: []string{"LimitExceeded (only the kubelet's eviction in the pod's status proves LimitExceeded; ignored)"},
		},
		"unreadable detectedAt is not attested": {
			pods: []*corev1.Pod{worker(3, 1, at(1)).bareCondition(v1alpha1.CauseGPUFault, at(0.5)).faultEvidence(v1alpha1.FaultEvidence{
				Source: "nvml-event", Node: "gpu-3", Cause: v1alpha1.CauseGPUFault, DetectedAt: "yesterday", GPU: &v1alpha1.GPUEvidence{XID: 48},
			}).obj()},
			want: app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
			wantEvidence: []string{
				`at an unreadable time ("yesterday")`,
				"(not attested: it has a missing or unreadable time; ignored)",
				"reason GPUFault: from the node agent (not attested: its evidence has a missing or unreadable time; ignored)",
			},
		},
	})
}

func TestClassifyNodeFacts(t *testing.T) {
	runRuleCases(t, map[string]ruleCase{
		"unhealthy GPU on the node and a non-zero exit": {
			pods:         []*corev1.Pod{worker(3, 1, at(1)).obj()},
			nodes:        map[string]NodeFacts{"gpu-3": {GPUUnhealthyReason: "Xid79"}},
			want:         infra(v1alpha1.CauseGPUFault, "r-3", 3, 1).withXID(79),
			wantBasis:    "on a node with an unhealthy GPU (faultline.dev/GPUHealthy=False, reason Xid79)",
			wantEvidence: []string{"node gpu-3: faultline.dev/GPUHealthy=False, reason Xid79"},
		},
		"unhealthy GPU without an XID reason": {
			pods:  []*corev1.Pod{worker(3, 1, at(1)).obj()},
			nodes: map[string]NodeFacts{"gpu-3": {GPUUnhealthyReason: "DoubleBitECC"}},
			want:  infra(v1alpha1.CauseGPUFault, "r-3", 3, 1),
		},
		"unhealthy GPU but exit 0 in a failed pod": {
			pods:  []*corev1.Pod{worker(3, 0, at(1)).phase(corev1.PodFailed).obj()},
			nodes: map[string]NodeFacts{"gpu-3": {GPUUnhealthyReason: "Xid79"}},
			want:  unknown("r-3", 3, 0),
		},
		"OOMKilled outranks the node's GPU health": {
			pods:  []*corev1.Pod{worker(3, 137, at(1)).containerReason("OOMKilled").obj()},
			nodes: map[string]NodeFacts{"gpu-3": {GPUUnhealthyReason: "Xid79", NotReady: true}},
			want:  app(v1alpha1.CauseOOMKilled, "r-3", 3, 137, true),
		},
		"a health checker's node condition set while the container ran": {
			pods: []*corev1.Pod{worker(3, 1, at(10)).startedAt(at(0)).obj()},
			nodes: map[string]NodeFacts{"gpu-3": {Conditions: []NodeConditionFact{{
				Rule: DefaultNodeConditionRules[4], Reason: "GpuAllWatchIsNotHealthy", Message: "XID 95 on GPU 0", Since: ptrTime(at(9)),
			}}}},
			want:         infra(v1alpha1.CauseGPUFault, "r-3", 3, 1),
			wantBasis:    "on a node its health checker calls unhealthy (NVSentinel: GpuAllWatch=True, reason GpuAllWatchIsNotHealthy)",
			wantEvidence: []string{"node gpu-3: NVSentinel's GpuAllWatch=True, reason GpuAllWatchIsNotHealthy: XID 95 on GPU 0 since 12:01:09.000"},
		},
		"a health checker's node condition from before the container started": {
			pods: []*corev1.Pod{worker(3, 1, at(3600)).startedAt(at(1800)).obj()},
			nodes: map[string]NodeFacts{"gpu-3": {Conditions: []NodeConditionFact{{
				Rule: NodeConditionRule{Type: "GpuProblem", Cause: v1alpha1.CauseNodeMaintenance, Source: "node condition"}, Since: ptrTime(at(0)),
			}}}},
			want:         app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
			wantEvidence: []string{"node gpu-3: node condition's GpuProblem=True, reason (none) since 12:01:00.000 (before the container started at 12:31:00.000; not counted)"},
		},
		"a health checker's node condition with its own cause, exit 0 in a failed pod": {
			pods: []*corev1.Pod{worker(3, 0, at(1)).phase(corev1.PodFailed).obj()},
			nodes: map[string]NodeFacts{"gpu-3": {Conditions: []NodeConditionFact{{
				Rule: NodeConditionRule{Type: "GpuProblem", Cause: v1alpha1.CauseNodeMaintenance, Source: "node condition"}, Since: ptrTime(at(0.5)),
			}}}},
			want: unknown("r-3", 3, 0),
		},
		"NotReady node": {
			pods:         []*corev1.Pod{worker(3, 1, at(1)).obj()},
			nodes:        map[string]NodeFacts{"gpu-3": {NotReady: true}},
			want:         infra(v1alpha1.CauseNodeLost, "r-3", 3, 1),
			wantBasis:    "and its node is NotReady",
			wantEvidence: []string{"node gpu-3: NotReady"},
		},
		"lost pod: deleted while its node is gone": {
			pods:         []*corev1.Pod{makePod("r-3").index(3).node("gpu-3").deleting(at(1)).obj()},
			nodes:        map[string]NodeFacts{"gpu-3": {Gone: true}},
			want:         infra(v1alpha1.CauseNodeLost, "r-3", 3, 0),
			wantBasis:    "and its node is gone",
			wantEvidence: []string{"node gpu-3: the Node object is gone"},
		},
		"container status unknown on a gone node": {
			pods:  []*corev1.Pod{makePod("r-3").index(3).node("gpu-3").statusUnknown().obj()},
			nodes: map[string]NodeFacts{"gpu-3": {Gone: true}},
			want:  infra(v1alpha1.CauseNodeLost, "r-3", 3, 137).withSignal(0),
			wantEvidence: []string{
				"pod r-3: container trainer state unknown (ContainerStatusUnknown); exit code 137 is the kubelet's placeholder",
			},
		},
		"container status unknown with no node facts": {
			pods: []*corev1.Pod{makePod("r-3").index(3).node("gpu-3").statusUnknown().obj()},
			want: unknown("r-3", 3, 137).withSignal(0),
		},
		"container status unknown in the current state": {
			pods: []*corev1.Pod{worker(3, 137, at(1)).containerReason(containerReasonStatusUnknown).phase(corev1.PodRunning).obj()},
			want: unknown("r-3", 3, 137).withSignal(0),
		},
	})
}

func TestClassifyHints(t *testing.T) {
	peer := HintPattern{Pattern: `coordination service.*(heartbeat|unavailable)`, Cause: v1alpha1.CausePeerFailure, Source: "jax"}
	oom := HintPattern{Pattern: `RESOURCE_EXHAUSTED: Out of memory`, Cause: v1alpha1.CauseOOMKilled, Source: "jax"}
	nvlink := HintPattern{Pattern: `NCCL.*NVLink error`, Cause: v1alpha1.CauseGPUFault, Source: "nccl"}
	anyErr := HintPattern{Pattern: `error`, Cause: v1alpha1.CauseAppExit, Source: "generic"}
	runRuleCases(t, map[string]ruleCase{
		"application hint is conclusive": {
			pods:         []*corev1.Pod{worker(3, 1, at(1)).message("RESOURCE_EXHAUSTED: Out of memory while trying to allocate").obj()},
			hints:        []HintPattern{peer, oom},
			want:         app(v1alpha1.CauseOOMKilled, "r-3", 3, 1, true),
			wantBasis:    "with a termination message matching the jax hint for OOMKilled",
			wantEvidence: []string{"termination message matches the jax hint for OOMKilled (/RESOURCE_EXHAUSTED: Out of memory/)"},
		},
		"an infrastructure hint is the program's word, not node evidence": {
			pods:         []*corev1.Pod{worker(3, 1, at(1)).message("NCCL WARN NET/IB : NVLink error on link 3").obj()},
			hints:        []HintPattern{nvlink},
			want:         app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
			wantBasis:    "with no infrastructure evidence (ignored: its output matches the nccl hint for GPUFault, which only node evidence could prove)",
			wantEvidence: []string{"matches the nccl hint for GPUFault (/NCCL.*NVLink error/): the program's output, not node evidence; ignored"},
		},
		"an infrastructure hint does not hide the hints after it": {
			pods:  []*corev1.Pod{worker(3, 143, at(1)).message("NVLink error; coordination service heartbeat lost").obj()},
			hints: []HintPattern{{Pattern: `NVLink error`, Cause: v1alpha1.CauseGPUFault, Source: "nccl"}, peer},
			want:  unknown("r-3", 3, 143),
		},
		"node evidence outranks a program's message": {
			pods:  []*corev1.Pod{worker(3, 1, at(1)).message("RESOURCE_EXHAUSTED: Out of memory").obj()},
			nodes: map[string]NodeFacts{"gpu-3": {NotReady: true}},
			hints: []HintPattern{oom},
			want:  infra(v1alpha1.CauseNodeLost, "r-3", 3, 1),
		},
		"a pod with only a peer-failure message is never a root cause": {
			pods:      []*corev1.Pod{worker(3, 1, at(1)).message("coordination service heartbeat timeout for task 7").obj()},
			hints:     []HintPattern{peer},
			want:      unknown("r-3", 3, 1),
			wantBasis: "with a termination message that only blames a peer (jax hint) and no other failure to blame",
		},
		"the first matching hint wins": {
			pods:  []*corev1.Pod{worker(3, 1, at(1)).message("coordination service unavailable: error").obj()},
			hints: []HintPattern{peer, anyErr},
			want:  unknown("r-3", 3, 1),
		},
		"hints in the other order": {
			pods:  []*corev1.Pod{worker(3, 1, at(1)).message("coordination service unavailable: error").obj()},
			hints: []HintPattern{anyErr, peer},
			want:  app(v1alpha1.CauseAppExit, "r-3", 3, 1, true),
		},
		"no message, no regex work, no match": {
			pods:  []*corev1.Pod{worker(3, 1, at(1)).obj()},
			hints: []HintPattern{anyErr},
			want:  app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
		},
		"peer-failure message loses the root to a plain exit": {
			pods: []*corev1.Pod{
				worker(1, 1, at(1)).message("coordination service heartbeat lost").obj(),
				worker(2, 2, at(1.5)).obj(),
			},
			hints: []HintPattern{peer},
			want:  app(v1alpha1.CauseAppExit, "r-2", 2, 2, false).withPeers("r-1"),
		},
	})
}

func TestClassifyHandBuiltHints(t *testing.T) {
	// Hints that bypassed CompileHints: a nil pattern is skipped, a cause that is no root
	// cause concludes nothing.
	obs := Observation{
		Pods: []*corev1.Pod{worker(3, 1, at(1)).message("boom").obj()},
		Hints: []Hint{
			{Pattern: nil, Cause: v1alpha1.CauseGPUFault, Source: "nil"},
			{Pattern: regexp.MustCompile("boom"), Cause: v1alpha1.CauseUnknown, Source: "odd"},
		},
		Now: at(2), SettleDeadline: at(3),
	}
	got := summarize(Classify(obs))
	if diff := cmp.Diff(app(v1alpha1.CauseAppExit, "r-3", 3, 1, false), got); diff != "" {
		t.Errorf("Classify() mismatch (-want +got):\n%s", diff)
	}
}

func TestClassifyZeroDeadlineIsFinal(t *testing.T) {
	got := Classify(Observation{Pods: []*corev1.Pod{worker(3, 143, at(1)).obj()}, Now: at(2)})
	if !got.Final || got.Conclusive || !got.WaitUntil.IsZero() {
		t.Errorf("Final=%v Conclusive=%v WaitUntil=%v, want final, not conclusive, no wait", got.Final, got.Conclusive, got.WaitUntil)
	}
}

// TestClassifyAttestation: infrastructure is proven only by the node agent's condition with
// its evidence beside it, for the pod's own node and inside the failing container's life;
// everything a tenant or the program itself could write is noted and ignored.
func TestClassifyAttestation(t *testing.T) {
	gpuFault := func(node string, when time.Time) v1alpha1.FaultEvidence {
		return v1alpha1.FaultEvidence{Source: "nvml-event", Node: node, Cause: v1alpha1.CauseGPUFault, DetectedAt: when.Format(time.RFC3339Nano),
			GPU: &v1alpha1.GPUEvidence{UUID: "GPU-1", Index: 1, XID: 79}}
	}
	runRuleCases(t, map[string]ruleCase{
		"the annotation alone, as a tenant with the edit role writes it, is not infrastructure": {
			pods:      []*corev1.Pod{worker(3, 1, at(1)).faultEvidence(gpuFault("gpu-3", at(0.9))).obj()},
			want:      app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
			wantBasis: "with no infrastructure evidence (ignored: its fault evidence is not attested (it has no faultline.dev/InfrastructureFault condition beside it in the pod's status))",
			wantEvidence: []string{
				"(not attested: it has no faultline.dev/InfrastructureFault condition beside it in the pod's status; ignored)",
			},
		},
		"the condition without the agent's evidence is not infrastructure": {
			pods:         []*corev1.Pod{worker(3, 143, at(1)).bareCondition(v1alpha1.CauseNodeShutdown, at(0.5)).obj()},
			want:         unknown("r-3", 3, 143),
			wantEvidence: []string{"(not attested: no faultline.dev/fault-evidence beside it names the node and the time; ignored)"},
		},
		"evidence that names another node": {
			pods: []*corev1.Pod{worker(3, 1, at(1)).bareCondition(v1alpha1.CauseGPUFault, at(0.9)).faultEvidence(gpuFault("gpu-9", at(0.9))).obj()},
			want: app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
			wantEvidence: []string{
				"(not attested: it names node gpu-9, not the pod's node gpu-3; ignored)",
				"(not attested: its evidence names node gpu-9, not the pod's node gpu-3; ignored)",
			},
		},
		"evidence from before the container started is stale": {
			pods: []*corev1.Pod{worker(3, 143, at(10)).startedAt(at(5)).infraFault(v1alpha1.CauseNodeShutdown, at(1)).obj()},
			want: unknown("r-3", 3, 143),
			wantEvidence: []string{
				"(not attested: it was recorded before the container started at 12:01:05.000; ignored)",
			},
		},
		"evidence from well after the exit did not cause it": {
			pods:         []*corev1.Pod{worker(3, 1, at(1)).infraFault(v1alpha1.CauseNodeShutdown, at(2.5)).obj()},
			want:         app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
			wantEvidence: []string{"(not attested: it was recorded after the container had exited; ignored)"},
		},
		"evidence changed to another cause than the condition's": {
			pods: []*corev1.Pod{worker(3, 1, at(1)).bareCondition(v1alpha1.CauseNodeShutdown, at(0.9)).faultEvidence(gpuFault("gpu-3", at(0.9))).obj()},
			want: app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
			wantEvidence: []string{
				"reason NodeShutdown: from the node agent (not attested: its evidence says GPUFault; ignored)",
			},
		},
		"evidence inside the life of a container that started after the pod": {
			pods: []*corev1.Pod{worker(3, 143, at(10)).startedAt(at(5)).infraFault(v1alpha1.CauseNodeShutdown, at(6)).obj()},
			want: infra(v1alpha1.CauseNodeShutdown, "r-3", 3, 143),
		},
		"a program-caused XID recorded for another node is not the pod's": {
			pods: []*corev1.Pod{worker(3, 1, at(1)).faultEvidence(v1alpha1.FaultEvidence{
				Source: "nvml-event", Node: "gpu-8", Cause: v1alpha1.CauseAppGPUError, DetectedAt: at(0.9).Format(time.RFC3339Nano),
				GPU: &v1alpha1.GPUEvidence{Index: 0, XID: 31},
			}).obj()},
			want: app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
		},
		"a shutdown announced before the container started is stale": {
			pods:         []*corev1.Pod{worker(3, 1, at(3600)).startedAt(at(1800)).obj()},
			nodes:        map[string]NodeFacts{"gpu-3": {ShutdownDetectedAt: ptrTime(at(0))}},
			want:         app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
			wantEvidence: []string{"node gpu-3: logind PrepareForShutdown at 12:01:00.000 (before the container started at 12:31:00.000; not counted)"},
		},
		"a GPU unhealthy since before the container started does not explain its exit": {
			pods:         []*corev1.Pod{worker(3, 1, at(3600)).startedAt(at(1800)).obj()},
			nodes:        map[string]NodeFacts{"gpu-3": {GPUUnhealthyReason: "Xid79", GPUUnhealthySince: ptrTime(at(0))}},
			want:         app(v1alpha1.CauseAppExit, "r-3", 3, 1, false),
			wantEvidence: []string{"node gpu-3: faultline.dev/GPUHealthy=False, reason Xid79 since 12:01:00.000 (before the container started at 12:31:00.000; not counted)"},
		},
		"a GPU that turned unhealthy while the container ran": {
			pods:  []*corev1.Pod{worker(3, 1, at(3600)).startedAt(at(1800)).obj()},
			nodes: map[string]NodeFacts{"gpu-3": {GPUUnhealthyReason: "Xid79", GPUUnhealthySince: ptrTime(at(3599))}},
			want:  infra(v1alpha1.CauseGPUFault, "r-3", 3, 1).withXID(79),
		},
	})
}

// TestClassifyLostPods: a pod whose node is unreachable (the node lifecycle controller's
// taint) or gone has failed, though nothing reports its end: it runs in the API forever
// otherwise. Its time is when its node went silent.
func TestClassifyLostPods(t *testing.T) {
	silent := at(0.5)
	runRuleCases(t, map[string]ruleCase{
		"running on an unreachable node": {
			pods:      []*corev1.Pod{makePod("r-3").index(3).node("gpu-3").obj()},
			nodes:     map[string]NodeFacts{"gpu-3": {NotReady: true, Unreachable: true, UnreachableSince: &silent}},
			want:      infra(v1alpha1.CauseNodeLost, "r-3", 3, 0),
			wantBasis: "and its node has been unreachable for 2 s",
			wantEvidence: []string{"node gpu-3: unreachable (node.kubernetes.io/unreachable) since 12:01:00.500, for 2 s; " +
				"the pod tolerates 0 s, no node agent heartbeat"},
		},
		"past its toleration of the node's silence": {
			pods:  []*corev1.Pod{makePod("r-3").index(3).node("gpu-3").toleratesUnreachable(1).obj()},
			nodes: map[string]NodeFacts{"gpu-3": {NotReady: true, Unreachable: true, UnreachableSince: &silent}},
			want:  infra(v1alpha1.CauseNodeLost, "r-3", 3, 0),
		},
		"its node agent silent too, within the toleration": {
			pods: []*corev1.Pod{makePod("r-3").index(3).node("gpu-3").toleratesUnreachable(300).obj()},
			nodes: map[string]NodeFacts{"gpu-3": {NotReady: true, Unreachable: true, UnreachableSince: &silent,
				Agent: &Heartbeat{RenewedAt: at(0), Duration: time.Second}}},
			want:         infra(v1alpha1.CauseNodeLost, "r-3", 3, 0),
			wantEvidence: []string{"the pod tolerates 300 s, its node agent silent since 12:01:00.000 (heartbeat expired at 12:01:01.000)"},
		},
		"running on a node that is gone": {
			pods:  []*corev1.Pod{makePod("r-3").index(3).node("gpu-3").obj()},
			nodes: map[string]NodeFacts{"gpu-3": {Gone: true}},
			want:  infra(v1alpha1.CauseNodeLost, "r-3", 3, 0),
		},
		"running on a NotReady node that the kubelet still reports": {
			pods:  []*corev1.Pod{makePod("r-3").index(3).node("gpu-3").obj(), worker(1, 1, at(1)).obj()},
			nodes: map[string]NodeFacts{"gpu-3": {NotReady: true}},
			want:  app(v1alpha1.CauseAppExit, "r-1", 1, 1, false),
		},
	})
}

// TestFailedIsClassifysDefinition: Failed says of one pod what Classify counts as failed.
func TestFailedIsClassifysDefinition(t *testing.T) {
	lost := map[string]NodeFacts{"gpu-3": {NotReady: true, Unreachable: true, UnreachableSince: ptrTime(at(0))}}
	for name, tc := range map[string]struct {
		pod   *corev1.Pod
		nodes map[string]NodeFacts
		want  bool
	}{
		"a phase Unknown pod whose node is gone": {makePod("r-3").node("gpu-3").phase(corev1.PodUnknown).obj(), map[string]NodeFacts{"gpu-3": {Gone: true}}, true},
		"running":                                {makePod("r-3").node("gpu-3").obj(), nil, false},
		"exit 1":                                 {worker(3, 1, at(1)).obj(), nil, true},
		"succeeded":                              {worker(3, 0, at(1)).obj(), lost, false},
		"on an unreachable node":                 {makePod("r-3").node("gpu-3").obj(), lost, true},
		"unknown node facts":                     {makePod("r-3").node("gpu-3").obj(), nil, false},
		"deleted, node NotReady":                 {makePod("r-3").node("gpu-3").deleting(at(1)).obj(), map[string]NodeFacts{"gpu-3": {NotReady: true}}, true},
		"deleted, node Ready":                    {makePod("r-3").node("gpu-3").deleting(at(1)).obj(), map[string]NodeFacts{"gpu-3": {}}, false},
	} {
		got := Failed(tc.pod, tc.nodes, at(2))
		classified := Classify(Observation{Pods: []*corev1.Pod{tc.pod}, Nodes: tc.nodes, Now: at(2)}).RootPod != ""
		if got != tc.want || got != classified {
			t.Errorf("%s: Failed = %v, Classify counts it %v; want %v", name, got, classified, tc.want)
		}
	}
}

// TestAnUnreachableNodeIsNotLostWithinItsBound: a node that blinks (a kubelet that restarts,
// a heartbeat that comes late) is not a lost one: its pods count as lost only once the node
// has stayed unreachable for as long as they tolerate it, or once its node agent has gone
// silent too; never a pod created after the node went silent; and LostAt says when.
func TestAnUnreachableNodeIsNotLostWithinItsBound(t *testing.T) {
	since := at(10)
	unreachable := func(agent *Heartbeat) map[string]NodeFacts {
		return map[string]NodeFacts{"gpu-3": {NotReady: true, Unreachable: true, UnreachableSince: &since, Agent: agent}}
	}
	alive := &Heartbeat{RenewedAt: at(55), Duration: 40 * time.Second} // until at(95)
	silent := &Heartbeat{RenewedAt: at(5), Duration: 40 * time.Second} // expired at(45)
	pod := func() *podBuilder { return makePod("r-3").index(3).node("gpu-3").created(at(0)) }
	for name, tc := range map[string]struct {
		pod    *corev1.Pod
		nodes  map[string]NodeFacts
		now    time.Time
		want   bool
		lostAt time.Time // zero: never, without a change
	}{
		"within the default toleration, agent alive":  {pod().toleratesUnreachable(300).obj(), unreachable(alive), at(60), false, at(95)},
		"within the default toleration, no agent":     {pod().toleratesUnreachable(300).obj(), unreachable(nil), at(60), false, at(310)},
		"past the toleration, agent alive":            {pod().toleratesUnreachable(30).obj(), unreachable(alive), at(40), true, time.Time{}},
		"agent silent, within the toleration":         {pod().toleratesUnreachable(300).obj(), unreachable(silent), at(46), true, time.Time{}},
		"agent silent before the node: at the node's": {pod().toleratesUnreachable(300).obj(), unreachable(&Heartbeat{RenewedAt: at(0), Duration: time.Second}), at(9), false, at(10)},
		"tolerated for ever, agent alive":             {pod().toleratesUnreachable(-1).obj(), unreachable(alive), at(60), false, at(95)},
		"tolerated for ever, no agent":                {pod().toleratesUnreachable(-1).obj(), unreachable(nil), at(500), false, time.Time{}},
		"no toleration: lost at once":                 {pod().obj(), unreachable(alive), at(10), true, time.Time{}},
		"created after the node went silent":          {pod().created(at(11)).obj(), unreachable(silent), at(500), false, time.Time{}},
		"back within the bound":                       {pod().toleratesUnreachable(300).obj(), map[string]NodeFacts{"gpu-3": {}}, at(60), false, time.Time{}},
	} {
		t.Run(name, func(t *testing.T) {
			if got := Failed(tc.pod, tc.nodes, tc.now); got != tc.want {
				t.Errorf("Failed at %s = %v, want %v", clock(tc.now), got, tc.want)
			}
			v := Classify(Observation{Pods: []*corev1.Pod{tc.pod}, Nodes: tc.nodes, Now: tc.now, SettleDeadline: tc.now})
			if (v.RootPod != "") != tc.want || tc.want && v.Cause != v1alpha1.CauseNodeLost {
				t.Errorf("Classify: root %q cause %s, want failed=%v (NodeLost)", v.RootPod, v.Cause, tc.want)
			}
			if got := LostAt([]*corev1.Pod{tc.pod}, tc.nodes, tc.now); !got.Equal(tc.lostAt) {
				t.Errorf("LostAt = %v, want %v", got, tc.lostAt)
			}
		})
	}
}

// TestNodeConditionRules: a health checker's node condition is read from the Node as its rule
// says (status True unless the rule names another), and rules parse as the controller's flag
// writes them, refusing a cause that would make a node condition prove the program's fault.
func TestNodeConditionRules(t *testing.T) {
	node := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: "GpuMemWatch", Status: corev1.ConditionTrue, Reason: "GpuMemWatchIsNotHealthy", LastTransitionTime: metav1.NewTime(at(5))},
		{Type: "GpuNvlinkWatch", Status: corev1.ConditionFalse, Reason: "GpuNvlinkWatchIsHealthy"},
		{Type: "GPUHealth", Status: corev1.ConditionFalse, Reason: "Xid79"},
	}}}
	health, err := ParseNodeConditionRule("GPUHealth=False:GPUFault")
	if err != nil {
		t.Fatal(err)
	}
	facts := FactsOfNode(node, append(slices.Clone(DefaultNodeConditionRules), health))
	var got []string
	for _, c := range facts.Conditions {
		got = append(got, c.Rule.Source+" "+c.Rule.String()+" "+c.Reason)
	}
	if diff := cmp.Diff([]string{"NVSentinel GpuMemWatch GpuMemWatchIsNotHealthy", "node condition GPUHealth=False:GPUFault Xid79"}, got); diff != "" {
		t.Errorf("conditions read (-want +got):\n%s", diff)
	}
	if len(FactsOfNode(node, nil).Conditions) != 0 {
		t.Error("conditions read without a rule")
	}
	for in, want := range map[string]string{
		"":                   "no condition type",
		"GpuProblem=Maybe":   `status "Maybe" is not True, False or Unknown`,
		"GpuProblem:AppExit": `cause "AppExit" is not an infrastructure cause`,
	} {
		if _, err := ParseNodeConditionRule(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseNodeConditionRule(%q) = %v, want an error saying %q", in, err, want)
		}
	}
}
