package controller

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

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
	if !attempt.RestartsInPlace(&pod.Spec) {
		return pod
	}
	ex, ok := attempt.ReportedExit(pod)
	if !ok || ex.Attempt != n || ex.ExitCode == 0 || ex.Node == "" || ex.Node != pod.Spec.NodeName {
		return pod
	}
	i := slices.IndexFunc(pod.Status.ContainerStatuses, func(cs corev1.ContainerStatus) bool { return cs.Name == ex.Container })
	if i < 0 || !slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == ex.Container }) {
		return pod
	}
	if t := pod.Status.ContainerStatuses[i].State.Terminated; t != nil && t.ExitCode != 0 {
		return pod
	}
	out := pod.DeepCopy()
	term := ex.Terminated()
	out.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &term}
	return out
}
