package inplacegate

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// What a restart in place takes beyond what the pods themselves ask for. On the real nodes
// each hop is a second or two (docs/in-place-restart-proof.md); the margins cover a loaded
// node many times over, and are paid only by a pod whose agent does not act.
const (
	// StopMargin is what stopping a pod's old workers takes beyond their grace period: its
	// agent sees the decision (a watch event), stops them through the CRI, and the kubelet
	// restarts every container of the pod to its barrier and reports it (a relist, a status
	// write).
	StopMargin = 30 * time.Second
	// OpenMargin is what opening a waiting barrier takes: its agent sees the gang's go
	// signal (a watch event), confirms it with the API server and execs the open, and the
	// kubelet starts the workers and reports them.
	OpenMargin = 30 * time.Second
)

// Wait is one pod the gang waits for.
type Wait struct {
	Pod *corev1.Pod
	// For says what is awaited, completing "waiting for pod P on node N ...".
	For string
	// Until is when the wait runs out, and the pod's index moves to a new pod elsewhere;
	// zero for a wait faultline cannot end (the pod is being deleted: the stall check names
	// it when it takes too long).
	Until time.Time
	// Silent: the pod's node agent is silent (its heartbeat expired, or it has none), so
	// nothing on its node will act: the wait runs out at once.
	Silent bool
	// Recheck is when the agent's heartbeat expires unless renewed, if before Until: nothing
	// wakes the controller then, so it looks again (see Earliest).
	Recheck time.Time
}

// Overdue reports whether the wait has run out at now.
func (w Wait) Overdue(now time.Time) bool { return !w.Until.IsZero() && !now.Before(w.Until) }

// Describe names the pod, its node and what is awaited, and until when.
func (w Wait) Describe() string {
	s := fmt.Sprintf("pod %s on node %s %s", w.Pod.Name, orNone(w.Pod.Spec.NodeName), w.For)
	switch {
	case w.Silent:
		s += " (its node agent is silent: moved at once)"
	case !w.Until.IsZero():
		s += " (until " + w.Until.UTC().Format(time.RFC3339) + ")"
	}
	return s
}

// BeforeOpen are the pods that hold the gang's barrier for attempt n, decided at decidedAt:
// every pod of the attempt's Job that still runs a worker of an older attempt (see Stopped),
// until its grace period and StopMargin have passed since the decision (or at once when its
// node's agent is silent); and the old pods of the moved indexes that may still run until
// they are gone, with no end of their own: they are being deleted, or ended by their node's
// shutdown (the caller deletes those at its bound, and confirms with the API server that
// they are gone before it opens the barrier). Pure.
func BeforeOpen(pods []*corev1.Pod, n int32, moved []int32, nodes map[string]exitclass.NodeFacts, decidedAt time.Time, hb Heartbeats, now time.Time) []Wait {
	var waits []Wait
	for _, p := range pods {
		k, _ := attempt.Number(p)
		i, _ := attempt.Index(p)
		if k < n && slices.Contains(moved, int32(i)) {
			if !exitclass.Gone(p, nodes) { // an ended pod runs nothing, wherever it is
				waits = append(waits, Wait{Pod: p, For: "to be gone from the API: its index moves to a new pod"})
			}
			continue
		}
		if Stopped(p, n) && !recordsUnread(p, hb) {
			continue
		}
		w := Wait{Pod: p, For: fmt.Sprintf("to stop its workers of attempt %d", n-1),
			Until: decidedAt.Add(Grace(p) + StopMargin)}
		if p.Spec.NodeName != "" {
			w.agent(hb(p.Spec.NodeName), now)
		}
		waits = append(waits, w)
	}
	return waits
}

// AfterOpen are the pods of attempt n whose barrier waits for its go signal since the gang's
// opened at openedAt: until OpenMargin after the later of that and the barrier's start, or
// at once when the pod's node agent is silent. A pod whose barrier has not started (not
// scheduled, its image being pulled) is not waiting for an open: the scheduler's and the
// kubelet's business, and the stall check's. Pure.
func AfterOpen(pods []*corev1.Pod, n int32, openedAt time.Time, hb Heartbeats, now time.Time) []Wait {
	var waits []Wait
	for _, p := range pods {
		started, ok := barrierWaitingSince(p)
		if !ok || OpenedFor(p, n) {
			continue
		}
		from := openedAt
		if started.After(from) {
			from = started
		}
		w := Wait{Pod: p, For: fmt.Sprintf("to open its barrier for attempt %d", n), Until: from.Add(OpenMargin)}
		w.agent(hb(p.Spec.NodeName), now)
		waits = append(waits, w)
	}
	return waits
}

// agent ends the wait at once when the pod's node agent is silent, and has it looked at
// again when the agent's heartbeat would expire.
func (w *Wait) agent(hb *exitclass.Heartbeat, now time.Time) {
	switch {
	case !agentlease.Alive(hb, now):
		w.Until, w.Silent = now, true
	case hb.ExpiresAt().Before(w.Until):
		w.Recheck = hb.ExpiresAt()
	}
}

// recordsUnread: p's barrier is its worker container's entrypoint, whose state only its node
// agent's records tell (on the pod, or on the agent's heartbeat Lease), and p's node has no
// heartbeat to read them from. A deleted Lease takes the records of a supervised worker that
// runs with it, and such a worker would read as one that never opened: it never counts as
// stopped. Its wait ends at once (its agent is silent) and the gang is recreated.
func recordsUnread(p *corev1.Pod, hb Heartbeats) bool {
	return p.Spec.NodeName != "" && attempt.BarrierOf(p).Place == attempt.BarrierInWorker && hb(p.Spec.NodeName) == nil
}

// barrierWaitingSince is when pod's barrier started waiting, if it waits now.
func barrierWaitingSince(p *corev1.Pod) (time.Time, bool) { return attempt.BarrierOf(p).Waiting() }

// Earliest is the soonest moment after now when a wait may end (its deadline, or its agent's
// heartbeat expiring), zero if none.
func Earliest(waits []Wait, now time.Time) time.Time {
	var first time.Time
	for _, w := range waits {
		for _, t := range []time.Time{w.Until, w.Recheck} {
			if t.After(now) && (first.IsZero() || t.Before(first)) {
				first = t
			}
		}
	}
	return first
}

// Grace is the pod's termination grace period: what its workers are given to stop.
func Grace(p *corev1.Pod) time.Duration {
	s := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if p.Spec.TerminationGracePeriodSeconds != nil {
		s = *p.Spec.TerminationGracePeriodSeconds
	}
	return time.Duration(s) * time.Second
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// MaxGrace is the longest termination grace period of pods (Grace): how long their workers
// may take to stop.
func MaxGrace(pods []*corev1.Pod) time.Duration {
	var g time.Duration
	for _, p := range pods {
		g = max(g, Grace(p))
	}
	return g
}
