package exitclass

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/barrier"
)

// reportedPod is a pod that restarts in place on node n1, its worker back at the barrier
// (the kubelet's synthesized 137 in lastState), with report as its exit report ("" none).
func reportedPod(report string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "r-1", Namespace: "ns", Labels: map[string]string{v1alpha1.LabelAttempt: "1"}},
		Spec: corev1.PodSpec{
			NodeName:       "n1",
			InitContainers: []corev1.Container{{Name: v1alpha1.BarrierContainer}},
			Containers:     []corev1.Container{{Name: "worker"}},
		},
		Status: corev1.PodStatus{
			Phase:                 corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: v1alpha1.BarrierContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "worker", RestartCount: 1,
				State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "RestartingAllContainers"}}}},
		},
	}
	if report != "" {
		p.Annotations = map[string]string{v1alpha1.AnnotationWorkerExit: report}
	}
	return p
}

func reportJSON(t *testing.T, ex v1alpha1.WorkerExit) string {
	t.Helper()
	raw, err := json.Marshal(ex)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func TestWithReportedExit(t *testing.T) {
	finished := time.Date(2026, 11, 26, 3, 0, 2, 500, time.UTC)
	exit1 := v1alpha1.WorkerExit{Attempt: 2, Container: "worker", ContainerID: "c1", ExitCode: 1, Reason: "Error", Node: "n1",
		StartedAt: finished.Add(-time.Minute).Format(time.RFC3339Nano), FinishedAt: finished.Format(time.RFC3339Nano)}
	with := func(f func(*v1alpha1.WorkerExit)) v1alpha1.WorkerExit {
		ex := exit1
		f(&ex)
		return ex
	}
	judged := &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
		StartedAt: metav1.NewTime(finished.Add(-time.Minute)), FinishedAt: metav1.NewTime(finished)}
	cases := map[string]struct {
		pod  *corev1.Pod
		want *corev1.ContainerStateTerminated // the worker's state.terminated as judged; nil: the pod as it is
	}{
		"a report of the current attempt: the worker ended with its exit": {pod: reportedPod(reportJSON(t, exit1)), want: judged},
		"no reason: Error, as the kubelet says": {
			pod:  reportedPod(reportJSON(t, with(func(e *v1alpha1.WorkerExit) { e.Reason = "" }))),
			want: judged,
		},
		"no report":                       {pod: reportedPod("")},
		"garbled":                         {pod: reportedPod("{")},
		"an earlier attempt's":            {pod: reportedPod(reportJSON(t, with(func(e *v1alpha1.WorkerExit) { e.Attempt = 1 })))},
		"exit 0 (the rule does not fire)": {pod: reportedPod(reportJSON(t, with(func(e *v1alpha1.WorkerExit) { e.ExitCode = 0 })))},
		"from another node's agent":       {pod: reportedPod(reportJSON(t, with(func(e *v1alpha1.WorkerExit) { e.Node = "n2" })))},
		"of a container that is no worker": {
			pod: reportedPod(reportJSON(t, with(func(e *v1alpha1.WorkerExit) { e.Container = v1alpha1.BarrierContainer }))),
		},
		"a pod that does not restart in place": {pod: func() *corev1.Pod {
			p := reportedPod(reportJSON(t, exit1))
			p.Spec.InitContainers = nil
			return p
		}()},
		"the kubelet's own record of the exit wins": {pod: func() *corev1.Pod {
			p := reportedPod(reportJSON(t, exit1))
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error"}}
			return p
		}()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := tc.pod.DeepCopy()
			got := withReportedExit(tc.pod, 2)
			if diff := cmp.Diff(before, tc.pod); diff != "" {
				t.Fatalf("the cached pod changed (-before +after):\n%s", diff)
			}
			if tc.want == nil {
				if got != tc.pod {
					t.Fatalf("the pod was replaced: %+v", got.Status.ContainerStatuses)
				}
				return
			}
			if diff := cmp.Diff(corev1.ContainerState{Terminated: tc.want}, got.Status.ContainerStatuses[0].State); diff != "" {
				t.Errorf("the worker's state (-want +got):\n%s", diff)
			}
			if !Failed(got, nil, time.Time{}) || Failed(tc.pod, nil, time.Time{}) {
				t.Errorf("exitclass.Failed: %t with the report, %t without; want true, false", Failed(got, nil, time.Time{}), Failed(tc.pod, nil, time.Time{}))
			}
		})
	}
}

// TestWithRestartedExit: a pod that restarts in place whose worker of the current attempt
// ended on its own, its node agent's report lost: the kubelet's record (the barrier started
// again after it had opened for the attempt, the worker's last termination) is judged like
// any failure, never lost; a restart the controller decided (for a later attempt) is not.
func TestWithRestartedExit(t *testing.T) {
	restarted := func(openedFor string, workerLast corev1.ContainerStateTerminated) *corev1.Pod {
		p := reportedPod("")
		p.Status.InitContainerStatuses[0].LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: "attempt=" + openedFor}}
		p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &workerLast
		return p
	}
	own := corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}
	killed := corev1.ContainerStateTerminated{ExitCode: 137, Reason: "RestartingAllContainers"}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		n    int32
		want *corev1.ContainerStateTerminated // the worker's state after; nil: the pod unchanged
	}{
		"its worker exited 1 in attempt 2":           {restarted("2", own), 2, &own},
		"restarted by a sibling's rule, attempt 2":   {restarted("2", killed), 2, &killed},
		"restarted for attempt 3, which was decided": {restarted("2", own), 3, nil},
		"never opened: at its barrier for the first": {reportedPod(""), 1, nil},
	} {
		t.Run(name, func(t *testing.T) {
			got := workerExit(tc.pod, tc.n)
			if tc.want == nil {
				if got != tc.pod {
					t.Fatalf("the pod changed: %+v", got.Status.ContainerStatuses)
				}
				if Failed(got, nil, time.Time{}) {
					t.Errorf("judged failed")
				}
				return
			}
			if diff := cmp.Diff(tc.want, got.Status.ContainerStatuses[0].State.Terminated); diff != "" {
				t.Errorf("the worker's state (-want +got):\n%s", diff)
			}
			if !Failed(got, nil, time.Time{}) {
				t.Errorf("not judged failed")
			}
		})
	}
}

// A worker its node agent stopped for a restart in place, whose end the status still shows,
// is judged by no one: the gang's barrier may open on the agent's record of the stop before
// the kubelet restarts the pod; nor is the end of a container older than the one the agent's
// record names (opened before the kubelet's status showed it). Another container's end, or
// one the agent did not record stopping, is judged as before.
func TestWithoutStoppedWorker(t *testing.T) {
	pod := func(id string, exit int32, rec v1alpha1.BarrierRecord, restarts ...int32) *corev1.Pod {
		raw, _ := json.Marshal(rec)
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "r-1", Namespace: "ns", Labels: map[string]string{v1alpha1.LabelAttempt: "1"},
				Annotations: map[string]string{v1alpha1.AnnotationBarrierRecord: string(raw)}},
			Spec: corev1.PodSpec{
				NodeName:   "n1",
				Containers: []corev1.Container{{Name: "worker", Command: []string{v1alpha1.BarrierBinary, barrier.CommandSupervise, "--", "train"}}},
				Volumes:    []corev1.Volume{{Name: v1alpha1.BarrierVolume, VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "barrier"}}}},
			},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "worker", ContainerID: "containerd://" + id,
				RestartCount: append(restarts, 0)[0],
				State:        corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Reason: "Error"}}}}},
		}
	}
	// The worker of container c0 ended on its own (exit 1), the kubelet started c1, and the
	// agent opened c1 for attempt 2 before the kubelet's status showed c1.
	openedNext := v1alpha1.BarrierRecord{ContainerID: "c1", Restart: 1, Attempt: 2}
	opened1 := v1alpha1.BarrierRecord{ContainerID: "c0", Attempt: 1}
	stopped := opened1
	stopped.StoppedFor = 2
	for name, tc := range map[string]struct {
		pod    *corev1.Pod
		judged bool
	}{
		"stopped for 2 by its agent, its end still shown": {pod("c0", 143, stopped), false},
		"ended, no stop recorded":                         {pod("c0", 143, opened1), true},
		"another container's end":                         {pod("cX", 1, stopped), true},
		"an earlier container's end, the next one opened": {pod("c0", 1, openedNext), false},
		"the opened container's own end":                  {pod("c1", 1, openedNext, 1), true},
	} {
		t.Run(name, func(t *testing.T) {
			before := tc.pod.DeepCopy()
			view := withoutStoppedWorker(tc.pod)
			if got := Failed(view, nil, time.Now()); got != tc.judged {
				t.Errorf("failed %v, want %v: %+v", got, tc.judged, view.Status.ContainerStatuses)
			}
			if tc.judged && view != tc.pod {
				t.Error("a pod judged as it is was copied")
			}
			if diff := cmp.Diff(before, tc.pod); diff != "" {
				t.Errorf("the cached pod was changed (-before +after):\n%s", diff)
			}
		})
	}
}
