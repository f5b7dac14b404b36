package exitclass

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

// A gang can hang with no evidence at all (a deadlock in the input pipeline, a stuck
// filesystem): nothing exits, nothing is marked. With the run's progress deadline the node
// agent watches each worker's progress and, once a worker has shown none for the deadline,
// says so on its pod (the NoProgress condition). A gang none of whose workers progresses has
// stopped (see the package doc, "Progress").

// silence is a worker's attested NoProgress condition.
type silence struct {
	pod *corev1.Pod
	// since is its last progress (the condition's lastTransitionTime); container the
	// running worker.
	since     time.Time
	container string
	cond      *corev1.PodCondition
}

// silenceOf reads the NoProgress condition of a pod whose worker runs, attested: True, in
// the pod's status (which only the node agent of the pod's node writes there), and about the
// running incarnation (its last progress not before the incarnation started: a condition an
// earlier incarnation left, before a restart in place, says nothing of this one).
func silenceOf(pod *corev1.Pod) (silence, bool) {
	if pod == nil || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return silence{}, false
	}
	container, start, running := runningSince(pod)
	if !running {
		return silence{}, false
	}
	for i := range pod.Status.Conditions {
		c := &pod.Status.Conditions[i]
		if c.Type != v1alpha1.PodConditionNoProgress || c.Status != corev1.ConditionTrue {
			continue
		}
		since := c.LastTransitionTime.Time
		if since.IsZero() || since.Before(start.Add(-timestampSlack)) {
			return silence{}, false
		}
		return silence{pod: pod, since: since, container: container, cond: c}, true
	}
	return silence{}, false
}

// Stalled reports whether the attempt whose pods are pods has stopped making progress: it
// has pods, and each runs a worker that carries the node agent's attested NoProgress
// condition (see the package doc, "Progress"). A gang in which one worker still progresses
// has not stopped, whatever the others do (many programs log from one rank only).
func Stalled(pods []*corev1.Pod) bool {
	// Asked at every look at a running attempt: it allocates nothing, and stops at the first
	// worker that has not gone silent.
	n := 0
	for _, p := range pods {
		if p == nil {
			continue
		}
		if _, ok := silenceOf(p); !ok {
			return false
		}
		n++
	}
	return n > 0
}

// silences are the pods' NoProgress conditions when every pod has one.
func silences(pods []*corev1.Pod) ([]silence, bool) {
	out := make([]silence, 0, len(pods))
	for _, p := range pods {
		if p == nil {
			continue
		}
		s, ok := silenceOf(p)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, len(out) > 0
}

// stallVerdict is the verdict on a gang that stopped making progress, none of whose pods has
// failed: cause NoProgress (class Unknown, never Conclusive). Its root is the worker silent
// the longest (ties by index, then name); FailedAt is when the last worker went silent (the
// gang's last progress), RunningFor how long the gang had been silent at Now; the other
// workers are its peers.
func stallVerdict(obs Observation) (Verdict, bool) {
	ss, ok := silences(obs.Pods)
	if !ok {
		return Verdict{}, false
	}
	slices.SortFunc(ss, func(a, b silence) int {
		if c := a.since.Compare(b.since); c != 0 {
			return c
		}
		if c := compareIndex(attempt.IndexOrNone(a.pod), attempt.IndexOrNone(b.pod)); c != 0 {
			return c
		}
		return strings.Compare(a.pod.Name, b.pod.Name)
	})
	root := ss[0]
	last := slices.MaxFunc(ss, func(a, b silence) int { return a.since.Compare(b.since) }).since
	v := Verdict{
		Class:        v1alpha1.ClassUnknown,
		Cause:        v1alpha1.CauseNoProgress,
		RootPod:      root.pod.Name,
		Index:        attempt.IndexOrNone(root.pod),
		Node:         root.pod.Spec.NodeName,
		Container:    root.container,
		FailedAt:     last,
		StillRunning: true,
		RunningFor:   obs.Now.Sub(last),
		Basis: "was still running, and no worker of its gang had shown progress for " + tenths(obs.Now.Sub(last)) +
			" (" + root.cond.Reason + ": the last one since " + clock(last) + ")",
	}
	byIndex := slices.Clone(ss)
	slices.SortFunc(byIndex, func(a, b silence) int {
		return cmp.Or(compareIndex(attempt.IndexOrNone(a.pod), attempt.IndexOrNone(b.pod)), strings.Compare(a.pod.Name, b.pod.Name))
	})
	for n, s := range byIndex {
		if n == maxPeerEvidence {
			v.Evidence = append(v.Evidence, "… and "+strconv.Itoa(len(byIndex)-n)+" more workers without progress")
			break
		}
		v.Evidence = append(v.Evidence, s.line())
	}
	for _, s := range byIndex {
		if s.pod == root.pod {
			continue
		}
		v.Peers = append(v.Peers, PeerFailure{
			Pod: s.pod.Name, Index: attempt.IndexOrNone(s.pod), Reason: "no progress since " + clock(s.since),
			Node: s.pod.Spec.NodeName, FailedAt: s.since, OwnCause: v1alpha1.CauseNoProgress,
		})
	}
	v.finalize(obs)
	return v, true
}

// line is the evidence line of one silent worker.
func (s silence) line() string {
	who := "pod " + s.pod.Name
	if i := attempt.IndexOrNone(s.pod); i >= 0 {
		who = "index " + strconv.Itoa(i) + " (pod " + s.pod.Name + ")"
	}
	return who + ": container " + s.container + " running, no progress since " + clock(s.since) + " (" + s.cond.Reason + quote(s.cond.Message) + ")"
}

// GangProgressing is, for an attempt whose progress is watched, the gang's first progress:
// the latest of its workers' first outputs in their current incarnations (the node agent's
// Progressing condition, attested as silenceOf's is, about the running incarnation). A
// worker on a node where no node agent has run, or of an attempt that started without the
// deadline, counts from its incarnation's start: nothing watches its output, and the goodput
// ledger must not count it as starting for ever.
// False while a worker does not run or has not shown progress.
func GangProgressing(pods []*corev1.Pod, nodes map[string]NodeFacts) (time.Time, bool) {
	var last time.Time
	n := 0
	for _, p := range pods {
		if p == nil {
			continue
		}
		_, start, running := runningSince(p)
		if !running || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return time.Time{}, false
		}
		at, ok := FirstProgress(p, start)
		_, watched := p.Annotations[v1alpha1.AnnotationProgressDeadline] // an attempt started before the deadline was set
		if f, known := nodeOf(p, nodes); !watched || known && f.Agent == nil {
			at, ok = start, true
		}
		if !ok {
			return time.Time{}, false
		}
		if at.After(last) {
			last = at
		}
		n++
	}
	return last, n > 0
}

// FirstProgress is the pod's Progressing condition's time where it is about the incarnation
// that began at start (to the second: not before start's second).
func FirstProgress(pod *corev1.Pod, start time.Time) (time.Time, bool) {
	for i := range pod.Status.Conditions {
		c := &pod.Status.Conditions[i]
		if c.Type != v1alpha1.PodConditionProgressing || c.Status != corev1.ConditionTrue {
			continue
		}
		at := c.LastTransitionTime.Time
		return at, !at.IsZero() && !at.Before(start.Truncate(time.Second))
	}
	return time.Time{}, false
}
