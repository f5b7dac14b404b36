package exitclass

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// maxPeerEvidence caps the evidence lines about peers with evidence of their own, so that a
// 4096-worker gang on a failing rack still yields a readable verdict.
const maxPeerEvidence = 8

// Classify decides who is to blame for an attempt's failure. It is pure: everything it uses
// is in obs. With no failed pod the verdict is NoProgress when the gang has stopped making
// progress (Stalled), else Unknown, index -1 and not Final.
func Classify(obs Observation) Verdict {
	// One pass assesses every pod into a reused scratch podFailure and keeps only its peer
	// record and what choosing the root needs; the root, and the peers quoted in the
	// evidence, are assessed again in full. A full podFailure per pod of a 4096-pod gang
	// would cost more in allocation and garbage collection than all the deciding.
	var scratch podFailure
	recs := make([]PeerFailure, 0, len(obs.Pods))
	meta := make([]failureMeta, 0, len(obs.Pods))
	var mentions []mention
	for i, pod := range obs.Pods {
		if pod == nil || !scratch.assess(pod, obs.Nodes, obs.Hints, obs.Now) {
			continue
		}
		if scratch.named >= 0 {
			mentions = append(mentions, mention{rec: len(recs), index: scratch.named, hint: scratch.hint})
		}
		recs = append(recs, scratch.peerRecord())
		meta = append(meta, failureMeta{pos: i, tier: scratch.rootTier()})
	}
	if len(recs) == 0 {
		if v, ok := stallVerdict(obs); ok {
			return v
		}
		return Verdict{Class: v1alpha1.ClassUnknown, Cause: v1alpha1.CauseUnknown, Index: -1}
	}

	names := nameRoot(mentions, recs, meta)
	ri := chooseRoot(recs, meta)
	var root podFailure
	root.assess(obs.Pods[meta[ri].pos], obs.Nodes, obs.Hints, obs.Now)
	v := Verdict{
		Class:       root.cause.Class(),
		Cause:       root.cause,
		RootPod:     root.pod.Name,
		Index:       root.index,
		Node:        root.node,
		Container:   root.term.container,
		ExitCode:    root.term.exitCode,
		Signal:      root.signal(),
		XID:         root.evidenceXID(),
		FailedAt:    root.failedAt,
		Basis:       root.basisPhrase(),
		Evidence:    append(append(root.describe(), root.outputLines()...), names.evidence(recs)...),
		NamedBy:     names.namedBy(ri),
		AwaitsNamed: names.awaited(),
		Conclusive:  root.conclusive,
	}
	if root.hang != nil {
		v.StillRunning, v.RunningFor, v.Basis = true, obs.Now.Sub(root.hang.evidence), root.hungPhrase()
	}
	v.Evidence = appendIndependent(v.Evidence, obs, &root, recs, meta, ri)
	v.Peers = slices.Delete(recs, ri, ri+1)
	slices.SortFunc(v.Peers, func(a, b PeerFailure) int {
		if c := compareIndex(a.Index, b.Index); c != 0 {
			return c
		}
		return strings.Compare(a.Pod, b.Pod)
	})
	v.finalize(obs)
	return v
}

// finalize sets Final and WaitUntil: a verdict is Final when Conclusive or once the settle
// deadline is reached.
func (v *Verdict) finalize(obs Observation) {
	v.Final = v.Conclusive || !obs.Now.Before(obs.SettleDeadline)
	if !v.Final {
		v.WaitUntil = obs.SettleDeadline
	}
}

// failureMeta goes with each peer record: where the pod is in Observation.Pods, and its tier
// as a root candidate.
type failureMeta struct {
	pos  int
	tier uint8
}

// Root candidate tiers, best first.
const (
	tierInfrastructure uint8 = iota // has infrastructure evidence
	tierNamed                       // the worker the failed pods' messages all name (named.go)
	tierOwnFailure                  // anything but a mere peer-failure message
	tierPeerOnly                    // only says that a peer failed
)

func (f *podFailure) rootTier() uint8 {
	switch {
	case f.cause.Class() == v1alpha1.ClassInfrastructure:
		return tierInfrastructure
	case !f.peerOnly():
		return tierOwnFailure
	default:
		return tierPeerOnly
	}
}

// chooseRoot returns the position in recs of the root: the earliest failure with
// infrastructure evidence, else the worker the failed pods' messages name, else the
// earliest failure that is not merely a peer-failure message, else the earliest failure.
func chooseRoot(recs []PeerFailure, meta []failureMeta) int {
	best := 0
	for i := 1; i < len(recs); i++ {
		if t, bt := meta[i].tier, meta[best].tier; t < bt || (t == bt && failedBefore(&recs[i], &recs[best])) {
			best = i
		}
	}
	return best
}

// failedBefore orders failures by time (unknown last), then index (unknown last), then name.
func failedBefore(a, b *PeerFailure) bool {
	if !sameInstant(a.FailedAt, b.FailedAt) {
		return earlier(a.FailedAt, b.FailedAt)
	}
	if a.Index != b.Index {
		return compareIndex(a.Index, b.Index) < 0
	}
	return a.Pod < b.Pod
}

// sameInstant: the same time, or two times in the same second of which one is known only to
// the second. The API server keeps a container's finishedAt to the second; the runtime (the
// node agent's report) to the nanosecond: 12:00:50 may be later than 12:00:50.300, and only
// two times to the nanosecond order exits within a second.
func sameInstant(a, b time.Time) bool {
	if a.Equal(b) {
		return true
	}
	if a.IsZero() || b.IsZero() {
		return false
	}
	sa, sb := a.Truncate(time.Second), b.Truncate(time.Second)
	return sa.Equal(sb) && (a.Equal(sa) || b.Equal(sb))
}

// compareIndex orders completion indexes with unknown (-1) last.
func compareIndex(a, b int) int {
	switch {
	case a == b:
		return 0
	case a < 0:
		return 1
	case b < 0:
		return -1
	}
	return cmp.Compare(a, b)
}

// appendIndependent appends a line for each peer (up to maxPeerEvidence, by index) whose own
// evidence is independent of the root's.
func appendIndependent(evidence []string, obs Observation, root *podFailure, recs []PeerFailure, meta []failureMeta, ri int) []string {
	var independent []int
	for i := range recs {
		if i != ri && independentOf(&recs[i], root) {
			independent = append(independent, i)
		}
	}
	slices.SortFunc(independent, func(a, b int) int {
		if c := compareIndex(recs[a].Index, recs[b].Index); c != 0 {
			return c
		}
		return strings.Compare(recs[a].Pod, recs[b].Pod)
	})
	for n, i := range independent {
		if n == maxPeerEvidence {
			return append(evidence, "… and "+strconv.Itoa(len(independent)-n)+" more peers with evidence of their own")
		}
		var f podFailure
		f.assess(obs.Pods[meta[i].pos], obs.Nodes, obs.Hints, obs.Now)
		evidence = append(evidence, f.who()+" has evidence of its own: "+string(f.cause)+
			" ("+f.basisPhrase()+"); the root stays "+root.who())
	}
	return evidence
}

// independentOf: the peer's own evidence points elsewhere than the root's, e.g. an OOMKilled
// peer, or a second node with its own fault. Pods that share the root's fault on the root's
// node are not independent: one node shutdown takes all its workers.
func independentOf(p *PeerFailure, root *podFailure) bool {
	switch {
	case p.OwnCause == "" || p.OwnCause == v1alpha1.CausePeerFailure:
		return false
	case p.OwnCause.Class() == v1alpha1.ClassApplication:
		return true
	}
	return p.OwnCause != root.cause || p.Node != root.node
}

// peerRecord is the pod as a peer of the root.
func (f *podFailure) peerRecord() PeerFailure {
	return PeerFailure{
		Pod:      f.pod.Name,
		Index:    f.index,
		ExitCode: f.term.exitCode,
		Reason:   f.peerReason(),
		Node:     f.node,
		FailedAt: f.failedAt,
		OwnCause: f.ownCause(),
	}
}

// signal is the signal behind the exit code; none for a lost container's placeholder code.
func (f *podFailure) signal() int32 {
	if !f.term.found || f.term.statusUnknown {
		return 0
	}
	return signalOf(f.term.exitCode)
}

// evidenceXID is the XID that counts among the pod's evidence, or 0.
func (f *podFailure) evidenceXID() uint64 {
	if f.xid != 0 && f.feWhy == "" && !LookupXID(f.xid).Secondary {
		return f.xid
	}
	if f.basis == basisNodeGPU {
		if n, ok := strings.CutPrefix(f.facts.GPUUnhealthyReason, "Xid"); ok {
			if x, err := strconv.ParseUint(n, 10, 64); err == nil {
				return x
			}
		}
	}
	return 0
}

// peerReason says in a few words how a peer failed.
func (f *podFailure) peerReason() string {
	switch {
	case f.basis != basisNone:
		return "own evidence: " + string(f.cause)
	case f.peerHint:
		return f.hint.Source + " hint: peer failure"
	case f.term.statusUnknown:
		return "container state unknown"
	case !f.term.found:
		return "no container exit"
	}
	return exitPhrase(f.term.exitCode, f.signal())
}

// who names a pod as "index 3 (pod r-3)", or "pod r-3" when its index is unknown.
func (f *podFailure) who() string {
	if f.index < 0 {
		return "pod " + f.pod.Name
	}
	return "index " + strconv.Itoa(f.index) + " (pod " + f.pod.Name + ")"
}
