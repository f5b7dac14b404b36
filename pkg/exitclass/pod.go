package exitclass

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// termination is the container exit that stands for the pod's failure.
type termination struct {
	container  string
	exitCode   int32
	reason     string
	startedAt  time.Time
	finishedAt time.Time
	// found: some container has a terminated state.
	found bool
	// statusUnknown: the state is ContainerStatusUnknown, so exitCode is a placeholder.
	statusUnknown bool
}

// failingContainer picks the exit that stands for the pod: the earliest non-zero exit, else a
// container whose state the kubelet lost, else any terminated container (a pod can be Failed
// with exit 0, e.g. a program that handles SIGTERM during a node shutdown). Init containers
// count: with restartPolicy Never their failure fails the pod. The chosen container's
// termination message comes back beside it, for the hints.
func failingContainer(pod *corev1.Pod) (termination, string) {
	var best termination
	var message string
	bestRank := 0 // 3 non-zero exit, 2 status unknown, 1 terminated
	consider := func(statuses []corev1.ContainerStatus) {
		for i := range statuses {
			cs := &statuses[i]
			t := cs.State.Terminated
			if t == nil && cs.LastTerminationState.Terminated != nil &&
				cs.LastTerminationState.Terminated.Reason == containerReasonStatusUnknown {
				// The kubelet reports a lost container as waiting, with the unknown state
				// as its last termination.
				t = cs.LastTerminationState.Terminated
			}
			if t == nil {
				continue
			}
			rank := 1
			switch {
			case t.Reason == containerReasonStatusUnknown:
				rank = 2
			case t.ExitCode != 0:
				rank = 3
			}
			at := t.FinishedAt.Time
			if rank < bestRank || (rank == bestRank && !earlier(at, best.finishedAt)) {
				continue
			}
			bestRank = rank
			best = termination{
				container:     cs.Name,
				exitCode:      t.ExitCode,
				reason:        t.Reason,
				startedAt:     t.StartedAt.Time,
				finishedAt:    at,
				found:         true,
				statusUnknown: rank == 2,
			}
			message = t.Message
		}
	}
	consider(pod.Status.InitContainerStatuses)
	consider(pod.Status.ContainerStatuses)
	return best, message
}

// earlier orders times with unknown (zero) last.
func earlier(a, b time.Time) bool {
	switch {
	case a.IsZero():
		return false
	case b.IsZero():
		return true
	default:
		return a.Before(b)
	}
}

// isFailed is the package's definition of a failed pod (see the package doc).
func isFailed(pod *corev1.Pod, term termination, facts NodeFacts, known bool) bool {
	switch pod.Status.Phase {
	case corev1.PodFailed:
		return true
	case corev1.PodSucceeded:
		return false
	}
	if term.statusUnknown || (term.found && term.exitCode != 0) {
		return true
	}
	return known && (facts.Gone || facts.Unreachable || pod.DeletionTimestamp != nil && facts.NotReady)
}

// Failed reports whether pod has failed by this package's definition (see the package doc),
// given what is known of the nodes: the same test Classify applies, for a caller that must
// know when to classify.
func Failed(pod *corev1.Pod, nodes map[string]NodeFacts) bool {
	var facts NodeFacts
	known := false
	if pod.Spec.NodeName != "" {
		facts, known = nodes[pod.Spec.NodeName]
	}
	term, _ := failingContainer(pod)
	return isFailed(pod, term, facts, known)
}

// requestsGPU reports whether any container asks for nvidia.com/gpu.
func requestsGPU(pod *corev1.Pod) bool {
	has := func(cs []corev1.Container) bool {
		for i := range cs {
			if _, ok := cs[i].Resources.Limits[v1alpha1.ResourceGPU]; ok {
				return true
			}
			if _, ok := cs[i].Resources.Requests[v1alpha1.ResourceGPU]; ok {
				return true
			}
		}
		return false
	}
	return has(pod.Spec.Containers) || has(pod.Spec.InitContainers)
}
