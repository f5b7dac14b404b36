package inplace

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// podWrapper builds in-place pods for the tests: a barrier init container, a sidecar and
// two workers.
type podWrapper struct{ corev1.Pod }

func makePod() *podWrapper {
	return &podWrapper{corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "llm-0", UID: "uid-1"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "sidecar"}, {Name: v1alpha1.BarrierContainer}},
			Containers:     []corev1.Container{{Name: "worker"}, {Name: "helper"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}}
}

func (w *podWrapper) barrier(s corev1.ContainerState) *podWrapper {
	w.Status.InitContainerStatuses = append(w.Status.InitContainerStatuses,
		corev1.ContainerStatus{Name: "sidecar", ContainerID: "containerd://side", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		corev1.ContainerStatus{Name: v1alpha1.BarrierContainer, ContainerID: "containerd://bar", State: s})
	return w
}

func (w *podWrapper) label(k, v string) *podWrapper {
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	w.Labels[k] = v
	return w
}

func (w *podWrapper) opened(msg string) *podWrapper {
	return w.barrier(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", Message: msg}})
}

func (w *podWrapper) worker(name, id string, s corev1.ContainerState) *podWrapper {
	w.Status.ContainerStatuses = append(w.Status.ContainerStatuses, corev1.ContainerStatus{Name: name, ContainerID: id, State: s})
	return w
}

func (w *podWrapper) phase(p corev1.PodPhase) *podWrapper { w.Status.Phase = p; return w }
func (w *podWrapper) obj() *corev1.Pod                    { return &w.Pod }

var (
	running    = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	waiting    = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}
	exited143  = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 143, Reason: "Error"}}
	restarting = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "RestartingAllContainers"}}
)

func TestDecide(t *testing.T) {
	deleted := makePod().opened("attempt=1").worker("worker", "containerd://w1", running).obj()
	deleted.DeletionTimestamp = &metav1.Time{}
	notInPlace := makePod().obj()
	notInPlace.Spec.InitContainers = nil
	for name, tc := range map[string]struct {
		pod         *corev1.Pod
		attempt     int
		barrierOpen bool
		want        Decision
	}{
		"old attempt's workers run: stop exactly them": {
			pod:     makePod().opened("attempt=1").worker("worker", "containerd://w1", running).worker("helper", "containerd://h1", running).obj(),
			attempt: 2,
			want:    Decision{Action: ActionStopWorkers, Containers: []string{"w1", "h1"}},
		},
		"old attempt, one worker died of the fault: stop the other": {
			pod:     makePod().opened("attempt=3").worker("worker", "containerd://w1", exited143).worker("helper", "containerd://h1", running).obj(),
			attempt: 4,
			want:    Decision{Action: ActionStopWorkers, Containers: []string{"h1"}},
		},
		"old attempt, every worker ended: the kubelet restarts the pod": {
			pod:     makePod().opened("attempt=1").worker("worker", "containerd://w1", exited143).worker("helper", "", restarting).obj(),
			attempt: 2,
			want:    Decision{Action: ActionWait, Restarting: true},
		},
		"the gang's barrier open does not spare an old worker": {
			pod:         makePod().opened("attempt=1").worker("worker", "containerd://w1", running).obj(),
			attempt:     2,
			barrierOpen: true,
			want:        Decision{Action: ActionStopWorkers, Containers: []string{"w1"}},
		},
		"runs the attempt": {
			pod:     makePod().opened("attempt=2").worker("worker", "containerd://w2", running).obj(),
			attempt: 2,
			want:    Decision{Action: ActionNone},
		},
		"runs a newer attempt than a late decision": {
			pod:     makePod().opened("attempt=3").worker("worker", "containerd://w3", running).obj(),
			attempt: 2,
			want:    Decision{Action: ActionNone},
		},
		"barrier waits, gang not released": {
			pod:     makePod().barrier(running).worker("worker", "", restarting).obj(),
			attempt: 2,
			want:    Decision{Action: ActionWait},
		},
		"barrier waits, gang released": {
			pod:         makePod().barrier(running).worker("worker", "", restarting).obj(),
			attempt:     2,
			barrierOpen: true,
			want:        Decision{Action: ActionOpenBarrier},
		},
		"a new pod's barrier, gang released": {
			pod:         makePod().barrier(running).worker("worker", "", waiting).phase(corev1.PodPending).obj(),
			attempt:     1,
			barrierOpen: true,
			want:        Decision{Action: ActionOpenBarrier},
		},
		"a pod made for attempt 3, the run read at attempt 2 with its barrier open: a stale view opens nothing": {
			pod:         makePod().label(v1alpha1.LabelAttempt, "3").barrier(running).worker("worker", "", waiting).phase(corev1.PodPending).obj(),
			attempt:     2,
			barrierOpen: true,
			want:        Decision{Action: ActionWait},
		},
		"a pod made for attempt 3, the run at attempt 3": {
			pod:         makePod().label(v1alpha1.LabelAttempt, "3").barrier(running).worker("worker", "", waiting).phase(corev1.PodPending).obj(),
			attempt:     3,
			barrierOpen: true,
			want:        Decision{Action: ActionOpenBarrier},
		},
		"barrier not started yet": {
			pod:         makePod().barrier(waiting).phase(corev1.PodPending).obj(),
			attempt:     2,
			barrierOpen: true,
			want:        Decision{Action: ActionWait, Restarting: true},
		},
		"no status yet": {
			pod:         makePod().phase(corev1.PodPending).obj(),
			attempt:     1,
			barrierOpen: true,
			want:        Decision{Action: ActionWait, Restarting: true},
		},
		"a pod made for attempt 3, its barrier not started, the run read at attempt 2: no runtime's word opens it": {
			pod:         makePod().label(v1alpha1.LabelAttempt, "3").barrier(waiting).phase(corev1.PodPending).obj(),
			attempt:     2,
			barrierOpen: true,
			want:        Decision{Action: ActionWait},
		},
		"barrier killed before it opened": {
			pod:     makePod().barrier(exited143).phase(corev1.PodFailed).obj(),
			attempt: 2,
			want:    Decision{Action: ActionNone},
		},
		"barrier exited 0 with no attempt: unknown, left alone": {
			pod:     makePod().opened("").worker("worker", "containerd://w1", running).obj(),
			attempt: 2,
			want:    Decision{Action: ActionNone},
		},
		"pod being deleted": {
			pod:     deleted,
			attempt: 2,
			want:    Decision{Action: ActionNone},
		},
		"pod failed": {
			pod:     makePod().opened("attempt=1").worker("worker", "containerd://w1", exited143).phase(corev1.PodFailed).obj(),
			attempt: 2,
			want:    Decision{Action: ActionNone},
		},
		"pod succeeded": {
			pod:     makePod().opened("attempt=1").phase(corev1.PodSucceeded).obj(),
			attempt: 2,
			want:    Decision{Action: ActionNone},
		},
		"not an in-place pod": {
			pod:         notInPlace,
			attempt:     2,
			barrierOpen: true,
			want:        Decision{Action: ActionNone},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := Decide(tc.pod, tc.attempt, tc.barrierOpen)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(Decision{}, "Reason")); diff != "" {
				t.Errorf("Decide (-want +got):\n%s\nreason: %s", diff, got.Reason)
			}
			if got.Reason == "" {
				t.Error("no reason given")
			}
		})
	}
}
