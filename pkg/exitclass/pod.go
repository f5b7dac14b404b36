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

// isFailed is the package's definition of a failed pod at now (see the package doc). A pod
// that has failed by the fatal evidence on its running worker comes with that evidence (h).
func isFailed(pod *corev1.Pod, term termination, facts NodeFacts, known bool, now time.Time) (failed bool, h *hang) {
	switch pod.Status.Phase {
	case corev1.PodFailed:
		return true, nil
	case corev1.PodSucceeded:
		return false, nil
	}
	if term.statusUnknown || (term.found && term.exitCode != 0) {
		return true, nil
	}
	if known && isLost(pod, facts, now) {
		return true, nil
	}
	if hg, ok := hangOf(pod); ok && !now.Before(hg.failsAt) {
		return true, &hg
	}
	return false, nil
}

// isLost reports whether the pod's workers are lost with its node at now: the node is gone,
// the pod is being deleted while its node is NotReady (nothing will confirm its end), or the
// node has stayed unreachable past lostAt.
func isLost(pod *corev1.Pod, facts NodeFacts, now time.Time) bool {
	if facts.Gone || pod.DeletionTimestamp != nil && facts.NotReady {
		return true
	}
	at := lostAt(pod, facts)
	return !at.IsZero() && !now.Before(at)
}

// lostAt is when a pod on an unreachable node counts as lost with it, zero when it does not
// (the node is reachable, or the pod is newer than its unreachability, or it tolerates the
// node's silence for ever while the node's agent still renews its heartbeat).
//
// An unreachable node is not a lost one: a kubelet that restarts (an upgrade, a crash loop, a
// configuration change) or a heartbeat that comes late leaves the node unreachable for a
// moment while every worker runs on. Kubernetes itself waits before it evicts anything: the
// pod's toleration of node.kubernetes.io/unreachable (300 s unless the pod says otherwise).
// So a pod is lost once the node has been unreachable for as long as the pod tolerates, or
// sooner once the node's agent, a process apart from the kubelet, has gone silent too
// (its heartbeat expired): two silent processes are a dead or cut-off machine, not a
// kubelet that restarts. A pod created after its node turned unreachable never counts as
// lost by it: it was never seen running there.
func lostAt(pod *corev1.Pod, facts NodeFacts) time.Time {
	if !facts.Unreachable {
		return time.Time{}
	}
	var since time.Time
	if facts.UnreachableSince != nil {
		since = *facts.UnreachableSince
		if pod.CreationTimestamp.Time.After(since) {
			return time.Time{}
		}
	}
	var at time.Time
	if facts.Agent != nil {
		at = later(facts.Agent.ExpiresAt(), since)
	}
	if tolerated, forever := unreachableToleration(pod); !since.IsZero() && !forever {
		if bound := since.Add(tolerated); at.IsZero() || bound.Before(at) {
			at = bound
		}
	}
	return at
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// unreachableToleration is how long the pod tolerates its node's node.kubernetes.io/unreachable
// NoExecute taint before the taint manager would evict it: its tolerationSeconds (the
// DefaultTolerationSeconds admission plugin gives every pod 300 s), none without a
// toleration, for ever with one that has no tolerationSeconds.
func unreachableToleration(pod *corev1.Pod) (d time.Duration, forever bool) {
	found := false
	for i := range pod.Spec.Tolerations {
		t := &pod.Spec.Tolerations[i]
		if !toleratesUnreachable(t) {
			continue
		}
		if t.TolerationSeconds == nil {
			return 0, true
		}
		if s := time.Duration(max(*t.TolerationSeconds, 0)) * time.Second; !found || s > d {
			d, found = s, true
		}
	}
	return d, false
}

// UnreachableTolerations are the tolerations of ts that Classify reads (those of the
// node.kubernetes.io/unreachable NoExecute taint, which bound how long a pod tolerates its
// node's silence), for a cache that keeps no more of a pod than it reads.
func UnreachableTolerations(ts []corev1.Toleration) []corev1.Toleration {
	var out []corev1.Toleration
	for i := range ts {
		if toleratesUnreachable(&ts[i]) {
			out = append(out, ts[i])
		}
	}
	return out
}

// toleratesUnreachable: the toleration matches the node.kubernetes.io/unreachable:NoExecute
// taint (which has no value), as the taint manager matches it.
func toleratesUnreachable(t *corev1.Toleration) bool {
	if t.Effect != "" && t.Effect != corev1.TaintEffectNoExecute {
		return false
	}
	switch t.Operator {
	case corev1.TolerationOpExists:
		return t.Key == "" || t.Key == corev1.TaintNodeUnreachable
	case corev1.TolerationOpEqual, "":
		return t.Key == corev1.TaintNodeUnreachable && t.Value == ""
	}
	return false
}

// Gone reports whether a pod can no longer run a process, whether or not it is still in the
// API: it has ended, or its node is gone, or its node is tainted out-of-service (an
// operator's statement that the node is down, on which the pod garbage collector deletes its
// pods). A pod on an unreachable node is not gone: its process may still run, and would meet
// the next attempt's; nor is a pod being deleted.
func Gone(p *corev1.Pod, nodes map[string]NodeFacts) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return true
	}
	f, known := nodeOf(p, nodes)
	return known && (f.Gone || f.OutOfService)
}

// Failed reports whether pod has failed by this package's definition (see the package doc)
// at now, given what is known of the nodes: the same test Classify applies, for a caller
// that must know when to classify. It is the one definition: the controller asks it of an
// informer's pod alone (nodes nil) as well as of an attempt's.
func Failed(pod *corev1.Pod, nodes map[string]NodeFacts, now time.Time) bool {
	facts, known := nodeOf(pod, nodes)
	term, _ := failingContainer(pod)
	failed, _ := isFailed(pod, term, facts, known, now)
	return failed
}

// EndedAt is when pod's failing container ended (the one Failed and the verdict read); false
// when none has, or its end is unknown.
func EndedAt(pod *corev1.Pod) (time.Time, bool) {
	term, _ := failingContainer(pod)
	return term.finishedAt, term.found && !term.finishedAt.IsZero()
}

// LostAt is the earliest time after now at which one of pods, running on a node that is
// unreachable now, will count as lost with it if nothing changes (see the package doc);
// zero if none will. Nothing else wakes a caller then: no object changes when a toleration
// runs out or an agent's heartbeat expires.
func LostAt(pods []*corev1.Pod, nodes map[string]NodeFacts, now time.Time) time.Time {
	var first time.Time
	for _, p := range pods {
		facts, known := nodeOf(p, nodes)
		if !known || !facts.Unreachable {
			continue
		}
		if at := lostAt(p, facts); at.After(now) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first
}

// FailsAt is the earliest time after now at which one of pods will count as failed if
// nothing changes, zero if none will: a pod lost with its unreachable node (LostAt), or a
// worker that a node shutdown announced under it has not ended within its termination grace
// period (see the package doc, "A fault need not end the program"). No object changes then:
// the caller looks again at that time.
func FailsAt(pods []*corev1.Pod, nodes map[string]NodeFacts, now time.Time) time.Time {
	first := LostAt(pods, nodes, now)
	for _, p := range pods {
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			continue
		}
		if h, ok := hangOf(p); ok && h.failsAt.After(now) && (first.IsZero() || h.failsAt.Before(first)) {
			first = h.failsAt
		}
	}
	return first
}

func nodeOf(pod *corev1.Pod, nodes map[string]NodeFacts) (NodeFacts, bool) {
	if pod.Spec.NodeName == "" {
		return NodeFacts{}, false
	}
	f, ok := nodes[pod.Spec.NodeName]
	return f, ok
}

// Unmonitored names the nodes of workers that ask for GPUs whose agent says it does not
// watch them (Heartbeat.NoGPUMonitoring), each as "node (why)".
func Unmonitored(workers []*corev1.Pod, nodes map[string]NodeFacts) []string {
	var out []string
	for _, p := range workers {
		if f, ok := nodeOf(p, nodes); ok && f.Agent != nil && f.Agent.NoGPUMonitoring != "" && requestsGPU(p) {
			out = append(out, p.Spec.NodeName+" ("+f.Agent.NoGPUMonitoring+")")
		}
	}
	return out
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
