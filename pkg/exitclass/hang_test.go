package exitclass

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// runningSince sets when the main (running) container started.
func (b *podBuilder) runningSince(t time.Time) *podBuilder {
	b.p.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t)}}
	return b
}

// atBarrier makes the pod one that waits at its barrier: the init container runs, the
// worker waits.
func (b *podBuilder) atBarrier() *podBuilder {
	b.p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: v1alpha1.BarrierContainer,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at(0))}}}}
	b.p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}
	return b
}

// openedBarrier adds the barrier init container that exited 0 before the worker started, as
// in every pod that restarts in place.
func (b *podBuilder) openedBarrier(t time.Time) *podBuilder {
	b.p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: v1alpha1.BarrierContainer,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: metav1.NewTime(t)}}}}
	return b
}

// healthLost writes what the node agent writes when the health poll finds the pod's GPU lost:
// GPU evidence without an XID, and the condition.
func (b *podBuilder) healthLost(gpu int, when time.Time) *podBuilder {
	return b.bareCondition(v1alpha1.CauseGPUFault, when).faultEvidence(v1alpha1.FaultEvidence{
		Source: v1alpha1.EvidenceSourceNVMLHealth, Node: b.p.Spec.NodeName, Cause: v1alpha1.CauseGPUFault,
		DetectedAt: when.Format(time.RFC3339Nano), GPU: &v1alpha1.GPUEvidence{UUID: "GPU-x", Index: gpu}, Detail: "GPU is lost",
	})
}

// hungWorker is index i on node gpu-<i>, its worker running since at(0).
func hungWorker(i int) *podBuilder {
	return makePod("r-" + strconv.Itoa(i)).index(i).node("gpu-" + strconv.Itoa(i)).runningSince(at(0))
}

// A worker that runs on fatal infrastructure evidence has failed; on evidence that is not
// fatal, not attested, or not about the running worker, it has not.
func TestFailedByFatalEvidenceOnARunningWorker(t *testing.T) {
	for name, tc := range map[string]struct {
		pod *corev1.Pod
		now time.Time
		// failed says whether the pod has failed at now; failsAt when it will (FailsAt).
		failed  bool
		failsAt time.Time
	}{
		"XID 79 on its GPU: at once": {
			pod: hungWorker(3).gpuXID("gpu-3", 0, 79, at(10)).obj(), now: at(10), failed: true,
		},
		"XID 74 (NVLink) on its GPU": {
			pod: hungWorker(3).gpuXID("gpu-3", 0, 74, at(10)).obj(), now: at(11), failed: true,
		},
		"XID 48 (double-bit ECC) on its GPU": {
			pod: hungWorker(3).gpuXID("gpu-3", 0, 48, at(10)).obj(), now: at(11), failed: true,
		},
		"its GPU lost (the health poll, no XID)": {
			pod: hungWorker(3).healthLost(2, at(10)).obj(), now: at(11), failed: true,
		},
		"a restarted-in-place worker whose barrier exited 0": {
			pod: hungWorker(3).openedBarrier(at(0)).gpuXID("gpu-3", 0, 79, at(10)).obj(), now: at(11), failed: true,
		},
		"XID 31, the program's: never": {
			pod: hungWorker(3).gpuXID("gpu-3", 0, 31, at(10)).obj(), now: at(100),
		},
		"XID 13, the program's: never": {
			pod: hungWorker(3).gpuXID("gpu-3", 0, 13, at(10)).obj(), now: at(100),
		},
		"XID 43, the program's: never": {
			pod: hungWorker(3).gpuXID("gpu-3", 0, 43, at(10)).obj(), now: at(100),
		},
		"XID 63, not fatal: never": {
			pod: hungWorker(3).gpuXID("gpu-3", 0, 63, at(10)).obj(), now: at(100),
		},
		"XID 94, not fatal: never": {
			pod: hungWorker(3).gpuXID("gpu-3", 0, 94, at(10)).obj(), now: at(100),
		},
		"an XID nobody knows: not fatal": {
			pod: hungWorker(3).gpuXID("gpu-3", 0, 999, at(10)).obj(), now: at(100),
		},
		"the condition without the agent's evidence": {
			pod: hungWorker(3).bareCondition(v1alpha1.CauseGPUFault, at(10)).obj(), now: at(100),
		},
		"evidence naming another node": {
			pod: hungWorker(3).gpuXID("gpu-9", 0, 79, at(10)).obj(), now: at(100),
		},
		"an earlier incarnation's evidence (stale)": {
			pod: hungWorker(3).runningSince(at(30)).gpuXID("gpu-3", 0, 79, at(10)).obj(), now: at(100),
		},
		"a worker held at its barrier runs no worker": {
			pod: hungWorker(3).atBarrier().gpuXID("gpu-3", 0, 79, at(10)).obj(), now: at(100),
		},
		"its node's shutdown, within the grace period and the kubelet's report": {
			pod: hungWorker(3).infraFault(v1alpha1.CauseNodeShutdown, at(10)).obj(), now: at(44), failsAt: at(45),
		},
		"its node's shutdown, past the default grace period (30 s) and the report (5 s)": {
			pod: hungWorker(3).infraFault(v1alpha1.CauseNodeShutdown, at(10)).obj(), now: at(45), failed: true,
		},
		"its node's shutdown, past its own grace period": {
			pod: func() *corev1.Pod {
				p := hungWorker(3).infraFault(v1alpha1.CauseNodeShutdown, at(10)).obj()
				p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
				return p
			}(), now: at(20), failed: true,
		},
		"an eviction's mark is no fault the worker hangs on": {
			pod: hungWorker(3).infraFault(v1alpha1.CauseEviction, at(10)).obj(), now: at(100),
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := Failed(tc.pod, nil, tc.now); got != tc.failed {
				t.Errorf("Failed at %s = %v, want %v", clock(tc.now), got, tc.failed)
			}
			if got := FailsAt([]*corev1.Pod{tc.pod}, nil, tc.now); !got.Equal(tc.failsAt) {
				t.Errorf("FailsAt = %v, want %v", got, tc.failsAt)
			}
			v := Classify(Observation{Pods: []*corev1.Pod{tc.pod}, Now: tc.now, SettleDeadline: tc.now.Add(time.Hour)})
			if (v.RootPod != "") != tc.failed {
				t.Errorf("Classify found root %q, want a root: %v", v.RootPod, tc.failed)
			}
		})
	}
}

// The verdict on a worker that hangs on an XID: its GPU fault, conclusive, the worker named
// as still running and for how long.
func TestVerdictOnAHungWorker(t *testing.T) {
	hung := hungWorker(3).gpuXID("gpu-3", 0, 79, at(10.25)).obj()
	peer := hungWorker(1).obj() // blocked in the same collective: running, no evidence
	v := Classify(Observation{Pods: []*corev1.Pod{peer, hung}, Now: at(12.25), SettleDeadline: at(100)})
	want := Verdict{
		Class: v1alpha1.ClassInfrastructure, Cause: v1alpha1.CauseGPUFault, RootPod: "r-3", Index: 3, Node: "gpu-3",
		Container: "trainer", XID: 79, FailedAt: at(10.25), StillRunning: true, RunningFor: 2 * time.Second,
		Basis:      "was still running 2.0 s after XID 79 (GPU has fallen off the bus) on GPU 0",
		Conclusive: true, Final: true,
	}
	if diff := cmp.Diff(want, v, cmpIgnoreEvidence); diff != "" {
		t.Errorf("verdict (-want +got):\n%s", diff)
	}
	if !containsLine(v.Evidence, "pod r-3: container trainer still running at 12:01:12.250 (started 12:01:00.000), 2.0 s after its fatal GPUFault evidence") {
		t.Errorf("evidence does not say the worker still runs:\n%s", strings.Join(v.Evidence, "\n"))
	}
	wantExplain := "index 3 (pod r-3) on node gpu-3 was still running 2.0 s after XID 79 (GPU has fallen off the bus) on GPU 0; no other worker failed → infrastructure: GPUFault"
	if got := v.Explain(); got != wantExplain {
		t.Errorf("Explain\n got %q\nwant %q", got, wantExplain)
	}

	// The same worker, once it exited of the fault: the usual verdict, its exit and all.
	exited := hungWorker(3).gpuXID("gpu-3", 0, 79, at(10.25)).exit(1).finishedAt(at(11)).obj()
	v = Classify(Observation{Pods: []*corev1.Pod{peer, exited}, Now: at(12.25), SettleDeadline: at(100)})
	if v.StillRunning || v.ExitCode != 1 || v.Cause != v1alpha1.CauseGPUFault || !strings.HasPrefix(v.Explain(), "index 3 (pod r-3) on node gpu-3 exited 1 after XID 79") {
		t.Errorf("an exited worker: StillRunning %v exit %d cause %s: %q", v.StillRunning, v.ExitCode, v.Cause, v.Explain())
	}
}

// A shutdown that did not end the worker: the verdict says it outlived its grace period.
func TestVerdictOnAWorkerTheShutdownDidNotEnd(t *testing.T) {
	p := hungWorker(2).infraFault(v1alpha1.CauseNodeShutdown, at(10)).obj()
	v := Classify(Observation{Pods: []*corev1.Pod{p}, Now: at(46), SettleDeadline: at(100)})
	if v.Cause != v1alpha1.CauseNodeShutdown || !v.StillRunning || !v.FailedAt.Equal(at(10)) || v.RunningFor != 36*time.Second {
		t.Fatalf("verdict %+v", v)
	}
	want := "index 2 (pod r-2) on node gpu-2 was still running 36.0 s after its node announced a shutdown (test-agent at 12:01:10.000), past its 30 s termination grace period: the kubelet did not end it; no other worker failed → infrastructure: NodeShutdown"
	if got := v.Explain(); got != want {
		t.Errorf("Explain\n got %q\nwant %q", got, want)
	}
}

var cmpIgnoreEvidence = cmp.FilterPath(func(p cmp.Path) bool {
	return p.String() == "Evidence" || p.String() == "Peers"
}, cmp.Ignore())

// ShutdownEndsBy: a pod whose node announced a graceful shutdown while it ran is its kubelet's
// to end, by the announcement, its grace period and the kubelet's report; whether its worker
// still runs or has ended already, as long as the pod has not. Any other evidence, evidence
// not attested or from before the pod started, and an ended pod: none.
func TestShutdownEndsBy(t *testing.T) {
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want time.Time // zero: not ok
	}{
		"a running worker": {
			pod: hungWorker(3).infraFault(v1alpha1.CauseNodeShutdown, at(10)).obj(), want: at(45),
		},
		"its own grace period": {
			pod: func() *corev1.Pod {
				p := hungWorker(3).infraFault(v1alpha1.CauseNodeShutdown, at(10)).obj()
				p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
				return p
			}(), want: at(20),
		},
		"its worker ended, the pod not yet": {
			pod: hungWorker(3).exit(143).finishedAt(at(11)).phase(corev1.PodRunning).infraFault(v1alpha1.CauseNodeShutdown, at(10)).obj(), want: at(45),
		},
		"the pod ended": {
			pod: hungWorker(3).exit(143).finishedAt(at(11)).phase(corev1.PodFailed).infraFault(v1alpha1.CauseNodeShutdown, at(10)).obj(),
		},
		"a GPU fault": {
			pod: hungWorker(3).gpuXID("gpu-3", 0, 79, at(10)).obj(),
		},
		"the condition without the agent's evidence": {
			pod: hungWorker(3).bareCondition(v1alpha1.CauseNodeShutdown, at(10)).obj(),
		},
		"evidence naming another node": {
			pod: hungWorker(3).node("gpu-4").infraFault(v1alpha1.CauseNodeShutdown, at(10)).node("gpu-3").obj(),
		},
		"announced before the pod started": {
			pod: hungWorker(3).created(at(30)).infraFault(v1alpha1.CauseNodeShutdown, at(10)).obj(),
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := ShutdownEndsBy(tc.pod)
			if ok != !tc.want.IsZero() || !got.Equal(tc.want) {
				t.Errorf("ShutdownEndsBy = %v, %v; want %v", got, ok, tc.want)
			}
		})
	}
}

func TestStoppedByShutdown(t *testing.T) {
	shutdown := func(announced time.Time, stopped string) *podBuilder {
		b := hungWorker(3).bareCondition(v1alpha1.CauseNodeShutdown, announced)
		return b.faultEvidence(v1alpha1.FaultEvidence{Source: v1alpha1.EvidenceSourceLogind, Node: "gpu-3", Cause: v1alpha1.CauseNodeShutdown,
			DetectedAt: announced.Format(time.RFC3339Nano), PodStoppedAt: stopped})
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"stopped after the announcement":  {shutdown(at(10), at(12).Format(time.RFC3339Nano)).obj(), true},
		"announced, not stopped yet":      {shutdown(at(10), "").obj(), false},
		"stopped before the announcement": {shutdown(at(10), at(9).Format(time.RFC3339Nano)).obj(), false},
		"a garbled stop":                  {shutdown(at(10), "soon").obj(), false},
		"the stop without the condition": {func() *corev1.Pod {
			p := shutdown(at(10), at(12).Format(time.RFC3339Nano)).obj()
			p.Status.Conditions = nil
			return p
		}(), false},
		"announced before the pod started": {shutdown(at(10), at(12).Format(time.RFC3339Nano)).created(at(30)).obj(), false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := StoppedByShutdown(tc.pod); got != tc.want {
				t.Errorf("StoppedByShutdown = %v, want %v", got, tc.want)
			}
		})
	}
}
