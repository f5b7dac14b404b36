package exitclass

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

// AsJudged is pod as the judgement of attempt n reads it: a worker its node agent stopped for
// a restart in place shows no exit (withoutStoppedWorker), and a worker that ended attempt n
// on its own in a pod that restarts in place shows that exit (workerExit). Pure; pod (a
// cached object) is not modified.
func AsJudged(pod *corev1.Pod, n int32) *corev1.Pod {
	return workerExit(withoutStoppedWorker(pod), n)
}

// FailedAttempt says whether pod, as one event of it shows it alone (no node's facts), is a
// failed worker, and of which attempt: the one it runs, or the one its node agent's report
// or the kubelet's restart of the pod names (a worker of a pod that restarts in place that
// exited on its own: its status never shows it, the pod being back at its barrier). ok is
// false for a pod of no attempt.
func FailedAttempt(pod *corev1.Pod, now time.Time) (n int32, failed, ok bool) {
	n, ok = attempt.Running(pod)
	if !ok {
		return 0, false, false
	}
	failed = Failed(pod, nil, now)
	if ex, reported := attempt.ReportedExit(pod); reported && ex.Attempt >= n {
		if _, counts := reportCounts(pod, ex); counts {
			n, failed = ex.Attempt, true
		}
	}
	// Or, the report lost, the kubelet's record of the pod restarted on its own.
	if _, ended, restarted := restartedOnItsOwn(pod); restarted && ended >= n {
		n, failed = ended, true
	}
	return n, failed, true
}

// withReportedExit is pod as the exit its node agent reported shows it: a pod that restarts
// in place, whose worker exited non-zero on its own in attempt n (the current one), gets
// that worker's exit as its status (state terminated, with the real exit code, reason and
// times), and is judged as any failed pod of the attempt (exitclass). The pod's own status
// does not keep that exit: the kubelet restarts every container of the pod at once and
// shows a synthesized 137, RestartingAllContainers (docs/in-place-restart.md). Pure; pod
// (a cached object) is not modified: a changed copy is returned, or pod itself.
//
// A report counts only for the attempt it names (an earlier attempt's says nothing of
// this one), from the agent of the pod's own node (as the admission policy requires of
// its writer), for a worker container the status does not show terminated non-zero
// already (the kubelet's own record of an exit wins).
func withReportedExit(pod *corev1.Pod, n int32) *corev1.Pod {
	ex, ok := attempt.ReportedExit(pod)
	if !ok || ex.Attempt != n {
		return pod
	}
	i, ok := reportCounts(pod, ex)
	if !ok {
		return pod
	}
	out := pod.DeepCopy()
	term := ex.Terminated()
	out.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &term}
	return out
}

// reportCounts says whether ex, pod's report, is a failure of the attempt it names (see
// withReportedExit), and the index of its worker in the pod's container statuses. Pure, and
// copies nothing: the failure clock asks it at every pod event.
func reportCounts(pod *corev1.Pod, ex v1alpha1.WorkerExit) (int, bool) {
	if !attempt.RestartsInPlace(&pod.Spec) || ex.ExitCode == 0 || ex.Node == "" || ex.Node != pod.Spec.NodeName {
		return 0, false
	}
	i := slices.IndexFunc(pod.Status.ContainerStatuses, func(cs corev1.ContainerStatus) bool { return cs.Name == ex.Container })
	if i < 0 || !slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == ex.Container }) {
		return 0, false
	}
	if t := pod.Status.ContainerStatuses[i].State.Terminated; t != nil && t.ExitCode != 0 {
		return 0, false
	}
	return i, true
}

// withoutStoppedWorker is pod as the controller judges it while its status still shows the
// end of a worker that its node agent stopped for a later attempt (attempt.Barrier's
// StoppedWorker): the gang's barrier may open on the agent's record of the stop, before the
// kubelet restarts the pod, and that exit (the agent's SIGTERM) ended the attempt before; or
// the end of a container older than the one the agent's record names (EndedBeforeRecord).
// The view shows the container waiting, as the kubelet's next status will: exitclass judges
// no exit of it. Pure; pod is not modified. Every reconcile asks it of every worker: a pod
// that shows no ended container is returned before its record is read.
func withoutStoppedWorker(pod *corev1.Pod) *corev1.Pod {
	if !slices.ContainsFunc(pod.Status.ContainerStatuses, func(cs corev1.ContainerStatus) bool { return cs.State.Terminated != nil }) {
		return pod
	}
	b := attempt.BarrierOf(pod)
	message := "its node agent stopped it for a restart in place; the kubelet restarts the pod"
	switch {
	case b.EndedBeforeRecord():
		message = "an earlier container's end: its node agent opened the next one, which the kubelet's status does not show yet"
	case !b.StoppedWorker():
		return pod
	}
	out := pod.DeepCopy()
	for i := range out.Status.ContainerStatuses {
		if cs := &out.Status.ContainerStatuses[i]; cs.Name == b.Status.Name {
			cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reasonStoppedInPlace, Message: message}}
		}
	}
	return out
}

// reasonStoppedInPlace is the waiting reason withoutStoppedWorker shows.
const reasonStoppedInPlace = "StoppedInPlace"

// workerExit is pod as its workers' end in attempt n shows it, for a pod that restarts in
// place: the node agent's report (withReportedExit), else, when that report was lost (the
// agent retries a bounded number of times, and cannot rebuild it once the kubelet removed
// the container), the kubelet's own record (withRestartedExit). Either way the pod is
// judged like any failed pod, never lost. Pure.
func workerExit(pod *corev1.Pod, n int32) *corev1.Pod {
	if out := withReportedExit(pod, n); out != pod {
		return out
	}
	return withRestartedExit(pod, n)
}

// withRestartedExit is pod with the exit of a worker that ended attempt n on its own without
// a report: a pod that restarts in place whose barrier had opened for n and has started
// again (its worker's exit fired the RestartAllContainers rule, and the kubelet restarted
// every container), without a decision of the controller (which would have moved the run
// past n). The worker that ended is the one whose last termination is not the kubelet's
// RestartingAllContainers, else any: its last termination becomes its state, and exitclass
// judges it (a 137 RestartingAllContainers alone is Unknown). Pure; pod is not modified.
func withRestartedExit(pod *corev1.Pod, n int32) *corev1.Pod {
	i, ended, ok := restartedOnItsOwn(pod)
	if !ok || ended != n {
		return pod
	}
	out := pod.DeepCopy()
	term := *out.Status.ContainerStatuses[i].LastTerminationState.Terminated
	out.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &term}
	return out
}

// restartedOnItsOwn reports whether pod, which restarts in place, has started again since its
// barrier last opened (see withRestartedExit): the attempt whose workers then ended, and the
// index in its container statuses of the worker whose last termination stands for them.
// Copies nothing: the failure clock asks it at every pod event.
func restartedOnItsOwn(pod *corev1.Pod) (i int, ended int32, ok bool) {
	m, opened := attempt.BarrierOf(pod).OpenedBefore()
	if !opened {
		return 0, 0, false // it has not started again since it last opened
	}
	stands := -1
	for j := range pod.Status.ContainerStatuses {
		cs := &pod.Status.ContainerStatuses[j]
		t := cs.LastTerminationState.Terminated
		if t == nil || !slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == cs.Name }) {
			continue
		}
		if cs.State.Terminated != nil && cs.State.Terminated.ExitCode != 0 {
			return 0, 0, false // the kubelet's own record of the exit is there already
		}
		if stands < 0 || t.Reason != reasonRestartingAllContainers {
			stands = j
			if t.Reason != reasonRestartingAllContainers {
				break
			}
		}
	}
	return stands, int32(m), stands >= 0
}

// reasonRestartingAllContainers is the kubelet's reason for the containers it restarts with
// a RestartAllContainers rule (KEP-5532), beside the one whose exit fired it.
const reasonRestartingAllContainers = "RestartingAllContainers"
