package controller

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

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
