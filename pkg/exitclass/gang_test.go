package exitclass

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

var jaxPeer = HintPattern{Pattern: `coordination service.*(heartbeat|unavailable)`, Cause: v1alpha1.CausePeerFailure, Source: "jax"}

func TestClassifyGang(t *testing.T) {
	shutdownAt := at(3.12)
	cases := map[string]struct {
		obs  Observation
		want Verdict
	}{
		"a node that died under one worker explains its peers": {
			obs: Observation{
				Pods: []*corev1.Pod{
					worker(0, 1, at(5.5)).message("coordination service heartbeat timeout").obj(),
					worker(1, 143, at(5.2)).obj(),
					// Failed before the root with a plain exit: in collective communication
					// the worker on the broken node is often the last to go.
					worker(2, 1, at(4.8)).obj(),
					makePod("r-3").index(3).node("gpu-7").exit(143).finishedAt(at(5)).obj(),
					makePod("r-4").index(4).node("gpu-4").obj(), // still running
				},
				Nodes: map[string]NodeFacts{"gpu-7": {ShutdownDetectedAt: &shutdownAt}, "gpu-0": {}, "gpu-1": {}},
				Hints: mustHints(t, jaxPeer),
				Now:   at(6), SettleDeadline: at(7),
			},
			want: Verdict{
				Class: v1alpha1.ClassInfrastructure, Cause: v1alpha1.CauseNodeShutdown,
				RootPod: "r-3", Index: 3, Node: "gpu-7", Container: "trainer", ExitCode: 143, Signal: 15,
				FailedAt: at(5),
				Basis:    "while the node was shutting down (logind PrepareForShutdown at 12:01:03.120)",
				Evidence: []string{
					"pod r-3: container trainer exited 143 (SIGTERM) at 12:01:05.000",
					"node gpu-7: logind PrepareForShutdown at 12:01:03.120",
				},
				Peers: []PeerFailure{
					{Pod: "r-0", Index: 0, ExitCode: 1, Reason: "jax hint: peer failure", Node: "gpu-0", FailedAt: at(5.5), OwnCause: v1alpha1.CausePeerFailure},
					{Pod: "r-1", Index: 1, ExitCode: 143, Reason: "exit 143 (SIGTERM)", Node: "gpu-1", FailedAt: at(5.2)},
					{Pod: "r-2", Index: 2, ExitCode: 1, Reason: "exit 1", Node: "gpu-2", FailedAt: at(4.8)},
				},
				Conclusive: true, Final: true,
			},
		},
		"earliest infrastructure failure; equal times go to the lowest index": {
			obs: Observation{
				Pods: []*corev1.Pod{
					worker(1, 1, at(0.5)).obj(),
					makePod("r-5").index(5).node("gpu-x").deleting(at(2)).obj(),
					makePod("r-2").index(2).node("gpu-x").deleting(at(2)).obj(),
				},
				Nodes: map[string]NodeFacts{"gpu-x": {Gone: true}},
				Now:   at(3), SettleDeadline: at(4),
			},
			want: Verdict{
				Class: v1alpha1.ClassInfrastructure, Cause: v1alpha1.CauseNodeLost,
				RootPod: "r-2", Index: 2, Node: "gpu-x", FailedAt: at(2),
				Basis: "and its node is gone",
				Evidence: []string{
					"pod r-2: no container exit recorded (phase Running)",
					"node gpu-x: the Node object is gone",
					"pod r-2: being deleted (deletionTimestamp 12:01:02.000)",
				},
				Peers: []PeerFailure{
					{Pod: "r-1", Index: 1, ExitCode: 1, Reason: "exit 1", Node: "gpu-1", FailedAt: at(0.5)},
					{Pod: "r-5", Index: 5, Reason: "own evidence: NodeLost", Node: "gpu-x", FailedAt: at(2), OwnCause: v1alpha1.CauseNodeLost},
				},
				Conclusive: true, Final: true,
			},
		},
		"a peer's own application evidence is noted; the root stays": {
			obs: Observation{
				Pods: []*corev1.Pod{
					worker(3, 1, at(1)).gpuXID("gpu-3", 3, 79, at(0.9)).obj(),
					worker(4, 137, at(1.2)).containerReason("OOMKilled").obj(),
					worker(5, 1, at(1.3)).infraFault(v1alpha1.CauseNodeShutdown, at(1.1)).obj(),
				},
				Now: at(2), SettleDeadline: at(3),
			},
			want: Verdict{
				Class: v1alpha1.ClassInfrastructure, Cause: v1alpha1.CauseGPUFault,
				RootPod: "r-3", Index: 3, Node: "gpu-3", Container: "trainer", ExitCode: 1, XID: 79,
				FailedAt: at(1),
				Basis:    "after XID 79 (GPU has fallen off the bus) on GPU 3",
				Evidence: []string{
					"pod r-3: container trainer exited 1 at 12:01:01.000",
					"pod r-3: condition faultline.dev/InfrastructureFault=True, reason GPUFault: from the node agent",
					"pod r-3: fault evidence from nvml-event on node gpu-3 at 12:01:00.900: GPUFault, GPU 3 (GPU-3) XID 79 (GPU has fallen off the bus, GPUFault; fatal: the GPU needs a reset or drain)",
					"node gpu-3: no facts observed",
					"index 4 (pod r-4) has evidence of its own: OOMKilled (because it ran out of memory (OOMKilled)); the root stays index 3 (pod r-3)",
					"index 5 (pod r-5) has evidence of its own: NodeShutdown (while the node was shutting down (test-agent at 12:01:01.100)); the root stays index 3 (pod r-3)",
				},
				Peers: []PeerFailure{
					{Pod: "r-4", Index: 4, ExitCode: 137, Reason: "own evidence: OOMKilled", Node: "gpu-4", FailedAt: at(1.2), OwnCause: v1alpha1.CauseOOMKilled},
					{Pod: "r-5", Index: 5, ExitCode: 1, Reason: "own evidence: NodeShutdown", Node: "gpu-5", FailedAt: at(1.3), OwnCause: v1alpha1.CauseNodeShutdown},
				},
				Conclusive: true, Final: true,
			},
		},
		"a bare SIGTERM first is the root; a specific exit after it is a peer": {
			obs: Observation{
				Pods: []*corev1.Pod{worker(5, 1, at(1.5)).obj(), worker(2, 143, at(1)).obj()},
				Now:  at(2), SettleDeadline: at(3),
			},
			want: Verdict{
				Class: v1alpha1.ClassUnknown, Cause: v1alpha1.CauseUnknown,
				RootPod: "r-2", Index: 2, Node: "gpu-2", Container: "trainer", ExitCode: 143, Signal: 15,
				FailedAt: at(1),
				Basis:    "with no evidence of who sent the signal",
				Evidence: []string{
					"pod r-2: container trainer exited 143 (SIGTERM) at 12:01:01.000",
					"node gpu-2: no facts observed",
				},
				Peers:     []PeerFailure{{Pod: "r-5", Index: 5, ExitCode: 1, Reason: "exit 1", Node: "gpu-5", FailedAt: at(1.5)}},
				WaitUntil: at(3),
			},
		},
		"unknown times and indexes sort last": {
			obs: Observation{
				Pods: []*corev1.Pod{
					makePod("r-1").index(1).node("gpu-1").phase(corev1.PodFailed).obj(), // no time at all
					makePod("r-b").node("gpu-b").exit(1).finishedAt(at(1)).obj(),        // no index
					worker(9, 1, at(1)).obj(),
					makePod("r-a").node("gpu-a").exit(1).finishedAt(at(1)).obj(),
				},
				Now: at(5), SettleDeadline: at(3),
			},
			want: Verdict{
				Class: v1alpha1.ClassApplication, Cause: v1alpha1.CauseAppExit,
				RootPod: "r-9", Index: 9, Node: "gpu-9", Container: "trainer", ExitCode: 1,
				FailedAt: at(1),
				Basis:    "with no infrastructure evidence",
				Evidence: []string{
					"pod r-9: container trainer exited 1 at 12:01:01.000",
					"node gpu-9: no facts observed",
				},
				Peers: []PeerFailure{
					{Pod: "r-1", Index: 1, Reason: "no container exit", Node: "gpu-1"},
					{Pod: "r-a", Index: -1, ExitCode: 1, Reason: "exit 1", Node: "gpu-a", FailedAt: at(1)},
					{Pod: "r-b", Index: -1, ExitCode: 1, Reason: "exit 1", Node: "gpu-b", FailedAt: at(1)},
				},
				Final: true,
			},
		},
		"only peer-failure messages: the earliest, cause Unknown": {
			obs: Observation{
				Pods: []*corev1.Pod{
					worker(1, 1, at(1.2)).message("coordination service unavailable").obj(),
					worker(4, 1, at(1)).message("coordination service heartbeat timeout").obj(),
					makePod("r-7").index(7).node("gpu-7").statusUnknown().obj(),
				},
				Hints: mustHints(t, jaxPeer),
				Now:   at(2), SettleDeadline: at(3),
			},
			want: Verdict{
				Class: v1alpha1.ClassUnknown, Cause: v1alpha1.CauseUnknown,
				RootPod: "r-7", Index: 7, Node: "gpu-7", Container: "trainer", ExitCode: 137,
				Basis: "with no evidence either way",
				Evidence: []string{
					"pod r-7: container trainer state unknown (ContainerStatusUnknown); exit code 137 is the kubelet's placeholder",
					"node gpu-7: no facts observed",
				},
				Peers: []PeerFailure{
					{Pod: "r-1", Index: 1, ExitCode: 1, Reason: "jax hint: peer failure", Node: "gpu-1", FailedAt: at(1.2), OwnCause: v1alpha1.CausePeerFailure},
					{Pod: "r-4", Index: 4, ExitCode: 1, Reason: "jax hint: peer failure", Node: "gpu-4", FailedAt: at(1), OwnCause: v1alpha1.CausePeerFailure},
				},
				WaitUntil: at(3),
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Classify(tc.obs)); diff != "" {
				t.Errorf("Classify() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestClassifySharedFaultIsNotIndependent(t *testing.T) {
	// Eight workers on the node that shut down, and one on a second node that shut down too.
	var pods []*corev1.Pod
	for i := range 8 {
		pods = append(pods, makePod("r-"+strconv.Itoa(i)).index(i).node("gpu-7").exit(143).finishedAt(at(5+float64(i)/10)).obj())
	}
	pods = append(pods, makePod("r-8").index(8).node("gpu-8").exit(143).finishedAt(at(6)).obj())
	got := Classify(Observation{
		Pods: pods,
		Nodes: map[string]NodeFacts{
			"gpu-7": {ShutdownDetectedAt: ptrTime(at(3))},
			"gpu-8": {ShutdownDetectedAt: ptrTime(at(4))},
		},
		Now: at(7), SettleDeadline: at(8),
	})
	if got.RootPod != "r-0" || got.Cause != v1alpha1.CauseNodeShutdown {
		t.Fatalf("root %s cause %s, want r-0 NodeShutdown", got.RootPod, got.Cause)
	}
	var own []string
	for _, l := range got.Evidence {
		if strings.Contains(l, "evidence of its own") {
			own = append(own, l)
		}
	}
	want := []string{"index 8 (pod r-8) has evidence of its own: NodeShutdown (while the node was shutting down (logind PrepareForShutdown at 12:01:04.000)); the root stays index 0 (pod r-0)"}
	if diff := cmp.Diff(want, own); diff != "" {
		t.Errorf("independent-evidence lines (-want +got):\n%s", diff)
	}
}

func TestClassifyCapsPeerEvidence(t *testing.T) {
	pods := []*corev1.Pod{worker(0, 1, at(1)).infraFault(v1alpha1.CauseGPUFault, at(0.5)).obj()}
	for i := 1; i <= 12; i++ {
		pods = append(pods, worker(i, 137, at(2)).containerReason("OOMKilled").obj())
	}
	got := Classify(Observation{Pods: pods, Now: at(3), SettleDeadline: at(4)})
	n := 0
	for _, l := range got.Evidence {
		if strings.Contains(l, "has evidence of its own") {
			n++
		}
	}
	last := got.Evidence[len(got.Evidence)-1]
	if n != maxPeerEvidence || last != "… and 4 more peers with evidence of their own" {
		t.Errorf("%d peer lines, last %q; want %d and a summary of 4 more", n, last, maxPeerEvidence)
	}
	if len(got.Peers) != 12 {
		t.Errorf("%d peers, want 12", len(got.Peers))
	}
}

func TestFailedBeforeTieBreaksOnName(t *testing.T) {
	a := PeerFailure{Pod: "a", Index: 1, FailedAt: time.Time{}}
	b := PeerFailure{Pod: "b", Index: 1, FailedAt: time.Time{}}
	if !failedBefore(&a, &b) || failedBefore(&b, &a) {
		t.Error("equal time and index must order by name")
	}
}

func TestClassifyOddPeers(t *testing.T) {
	long := strings.Repeat("x", 300)
	got := Classify(Observation{
		Pods: []*corev1.Pod{
			// Root: lost, its time taken from the agent's condition.
			makePod("r-0").index(0).node("gpu-0").phase(corev1.PodFailed).infraFault(v1alpha1.CauseGPUFault, at(1)).obj(),
			// Peers without an index and with evidence of their own, in name order.
			makePod("r-z").node("gpu-z").exit(137).finishedAt(at(2)).containerReason("OOMKilled").obj(),
			makePod("r-y").node("gpu-y").exit(137).finishedAt(at(2)).containerReason("OOMKilled").obj(),
			// A peer whose container the kubelet lost, with a long status message.
			makePod("r-5").index(5).node("gpu-5").statusUnknown().statusReason("Weird", long).obj(),
		},
		Now: at(3), SettleDeadline: at(4),
	})
	if got.RootPod != "r-0" || !got.FailedAt.Equal(at(1)) {
		t.Fatalf("root %s failed at %v, want r-0 at %v", got.RootPod, got.FailedAt, at(1))
	}
	wantReasons := map[string]string{"r-5": "container state unknown", "r-y": "own evidence: OOMKilled", "r-z": "own evidence: OOMKilled"}
	for _, p := range got.Peers {
		if p.Reason != wantReasons[p.Pod] {
			t.Errorf("peer %s reason %q, want %q", p.Pod, p.Reason, wantReasons[p.Pod])
		}
	}
	var own []string
	for _, l := range got.Evidence {
		if strings.Contains(l, "of its own") {
			own = append(own, l[:strings.Index(l, " has")])
		}
	}
	if diff := cmp.Diff([]string{"pod r-y", "pod r-z"}, own); diff != "" {
		t.Errorf("independent peers (-want +got):\n%s", diff)
	}

	// The long status message is cut in the evidence of a root.
	v := Classify(Observation{Pods: []*corev1.Pod{worker(1, 1, at(1)).statusReason("Weird", long).obj()}})
	if !containsLine(v.Evidence, "status reason Weird: "+strings.Repeat("x", maxMessage)+"…") {
		t.Errorf("long message not cut at %d characters: %q", maxMessage, v.Evidence)
	}
}

func TestUnexpectedAdmissionErrorSeesGPURequests(t *testing.T) {
	p := makePod("r-1").index(1).node("gpu-1").phase(corev1.PodFailed).statusReason("UnexpectedAdmissionError", "").obj()
	p.Spec.InitContainers = []corev1.Container{{Name: "warmup"}}
	p.Spec.InitContainers[0].Resources.Requests = corev1.ResourceList{v1alpha1.ResourceGPU: resourceOne()}
	if got := Classify(Observation{Pods: []*corev1.Pod{p}}); got.Cause != v1alpha1.CauseGPUFault {
		t.Errorf("cause %s, want GPUFault for a pod requesting GPUs in an init container", got.Cause)
	}
}
