package exitclass

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/pkg/attempt"
)

// withAgentReport is msg, the failing container's termination message, as the node agent's
// report of this very container's exit (v1alpha1.AnnotationWorkerExit, which the agent
// writes for every failed worker it sees exit) tells it, and it refines the exit's time:
//
//   - the report's message holds what the kubelet's holds (the log's last 80 lines, 2 KiB)
//     and, before it, the lines that matter from further up (the first Python traceback,
//     the framework's error and fatal records: pkg/nodeagent/termmsg), which the kubelet's
//     cut often loses: a JAX worker's tail is its abort's stack trace;
//   - its finishedAt is the runtime's, to the nanosecond, where the pod's status has the
//     second: exits in the same second are ordered by it.
//
// It counts for the container it names only: the same container ID, node and exit code
// as the pod's status shows, and a time in the same second. A pod that restarts in place
// does not show its worker's exit at all; the controller puts the report in its status
// before Classify sees it, and this finds nothing more to do.
func (f *podFailure) withAgentReport(msg string) string {
	if !f.term.found || f.term.statusUnknown {
		return msg
	}
	ex, ok := attempt.ReportedExit(f.pod)
	if !ok || ex.Node == "" || ex.Node != f.node || ex.Container != f.term.container || ex.ExitCode != f.term.exitCode {
		return msg
	}
	if id := terminatedID(f.pod, f.term.container); id == "" || attempt.RuntimeID(id) != attempt.RuntimeID(ex.ContainerID) {
		return msg
	}
	if t, err := time.Parse(time.RFC3339Nano, ex.FinishedAt); err == nil && !f.term.finishedAt.IsZero() &&
		t.Truncate(time.Second).Equal(f.term.finishedAt.Truncate(time.Second)) {
		f.term.finishedAt = t
	}
	if ex.Message != "" {
		return ex.Message
	}
	return msg
}

// terminatedID is the runtime's ID of the terminated container name of pod, "" if none.
func terminatedID(pod *corev1.Pod, name string) string {
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for i := range statuses {
			if cs := &statuses[i]; cs.Name == name && cs.State.Terminated != nil {
				if id := cs.State.Terminated.ContainerID; id != "" {
					return id
				}
				return cs.ContainerID
			}
		}
	}
	return ""
}
