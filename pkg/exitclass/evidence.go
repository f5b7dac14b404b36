package exitclass

import (
	"encoding/json"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

// timestampSlack absorbs the second granularity of Kubernetes timestamps (metav1.Time is
// serialised to the second) when evidence time is compared with a container's exit.
const timestampSlack = time.Second

// basis names the rule that decided a pod's own cause, in precedence order.
type basis int

const (
	basisNone          basis = iota // no own evidence: the exit code alone
	basisCondition                  // faultline.dev/InfrastructureFault
	basisFaultEvidence              // faultline.dev/fault-evidence
	basisDisruption                 // DisruptionTarget
	basisStatusReason               // pod.Status.Reason
	basisNodeShutdown               // node ShutdownDetectedAt
	basisOOM                        // container OOMKilled
	basisNodeGPU                    // node GPUHealthy=False
	basisNodeCondition              // a health checker's node condition (NodeConditionRule)
	basisNodeLost                   // node Gone / NotReady
	basisHint                       // a framework hint with an infrastructure or application cause
)

// podFailure is one failed pod with the facts found about it and its own cause. Classify
// assesses every pod into one scratch podFailure and keeps only a peer record of each; the
// root and the peers quoted in the evidence are assessed again, and only they are described.
type podFailure struct {
	pod      *corev1.Pod
	index    int
	node     string
	facts    NodeFacts
	known    bool // facts came from Observation.Nodes
	term     termination
	failedAt time.Time

	cause      v1alpha1.Cause
	basis      basis
	conclusive bool
	peerHint   bool // the termination message matched a PeerFailure hint
	// named is the completion index that the PeerFailure hint's match names as the worker
	// that failed (attempt.NoIndex: none); selfNamed says it named this very pod, whose
	// message then tells its own failure, not a peer's (named.go).
	named     int
	selfNamed bool
	// msg is the failing container's termination message the hints were matched against.
	msg string

	// now is the observation's time: how long a lost node has been unreachable, or a hung
	// worker has run on.
	now time.Time
	// hang is the fatal evidence on a worker that still runs, by which the pod has failed;
	// nil for a pod that ended (or is lost).
	hang *hang

	// lifeStart is when the failing worker began its attempt (attempt.WorkerStart: its
	// container's start, or its barrier's recorded open), else when the pod was created: a
	// signal from before it (an earlier incarnation's, or a node's long before) is stale.
	lifeStart time.Time

	// Facts found on the way.
	hint           *Hint                // the first hint that matched (never an infrastructure one)
	infraHint      *Hint                // the first infrastructure hint that matched: not counted
	infraCond      *corev1.PodCondition // faultline.dev/InfrastructureFault=True
	disruption     *corev1.PodCondition // DisruptionTarget=True
	disruptionLate bool                 // set after the container had exited: not the cause
	shutdownWhy    string               // why the node's shutdown announcement does not count
	gpuWhy         string               // why the node's GPUHealthy=False does not count
	condition      *NodeConditionFact   // the health checker's condition that counts
	conditionWhy   []string             // why each of the node's conditions does not, in order
	fe             *v1alpha1.FaultEvidence
	feErr          error
	feAt           time.Time
	feAtErr        error
	xid            uint64
	// feWhy and condWhy say why the evidence annotation and the InfrastructureFault condition
	// were not counted ("" when they were, or are absent): see attest.
	feWhy, condWhy string
}

// assess fills f with the failure of pod and reports whether the pod has failed; f is left
// untouched when it has not. It works in place so that one scratch podFailure serves a
// whole gang.
func (f *podFailure) assess(pod *corev1.Pod, nodes map[string]NodeFacts, hints []Hint, now time.Time) bool {
	facts, known := nodeOf(pod, nodes)
	term, msg := failingContainer(pod)
	failed, h := isFailed(pod, term, facts, known, now)
	if !failed {
		return false
	}
	if h != nil {
		// The worker runs: no exit stands for it (a barrier that exited 0 before it started
		// is no end of it), and no termination message is there for the hints.
		term, msg = termination{container: h.container, startedAt: h.since}, ""
	}
	*f = podFailure{pod: pod, index: attempt.IndexOrNone(pod), node: pod.Spec.NodeName, facts: facts, known: known, term: term, now: now, hang: h}
	f.gather(hints, msg)
	f.failedAt = f.failureTime()
	f.lifeStart = term.startedAt
	if h == nil && !term.startedAt.IsZero() {
		// The ended worker's attempt, not its container's first (a supervising barrier).
		f.lifeStart = attempt.BarrierOf(pod).WorkerStart(term.container, term.startedAt)
	}
	if f.lifeStart.IsZero() {
		f.lifeStart = pod.CreationTimestamp.Time
	}
	f.decide()
	return true
}

// gather collects pod-level facts: conditions, the evidence annotation (parsed once), and
// the first hint matching msg, the failing container's termination message (or the node
// agent's report of the same exit, which keeps more of it: withAgentReport), with the
// worker it names as the one that failed.
func (f *podFailure) gather(hints []Hint, msg string) {
	for i := range f.pod.Status.Conditions {
		c := &f.pod.Status.Conditions[i]
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case v1alpha1.PodConditionInfrastructureFault:
			f.infraCond = c
		case corev1.DisruptionTarget:
			f.disruption = c
		}
	}
	if raw, ok := f.pod.Annotations[v1alpha1.AnnotationFaultEvidence]; ok {
		var fe v1alpha1.FaultEvidence
		if err := json.Unmarshal([]byte(raw), &fe); err != nil {
			f.feErr = err
		} else {
			f.fe = &fe
			if fe.DetectedAt != "" {
				f.feAt, f.feAtErr = time.Parse(time.RFC3339Nano, fe.DetectedAt)
			}
			if fe.GPU != nil {
				f.xid = fe.GPU.XID
			}
		}
	}
	msg = f.withAgentReport(msg)
	f.msg, f.named = msg, attempt.NoIndex
	// Regular expressions cost; most pods of a large gang carry no message at all.
	if msg != "" {
		for i := range hints {
			h := &hints[i]
			if h.Pattern == nil || !h.Pattern.MatchString(msg) {
				continue
			}
			if h.Cause.Class() == v1alpha1.ClassInfrastructure {
				// The program's own words may point at a peer or at itself, never prove the
				// node: anyone can print "uncorrectable ECC error". Noted, and the hints after
				// it still have their say.
				if f.infraHint == nil {
					f.infraHint = h
				}
				continue
			}
			f.hint = h
			f.peerHint = h.Cause == v1alpha1.CausePeerFailure
			if f.peerHint {
				f.named = namedIndex(h, msg, f.pod)
				// A coordination service tells the worker it lost the same as the others
				// (XLA aborts them all): a message that names this very worker as the one
				// that failed is its own failure, not a peer's.
				f.selfNamed = f.named >= 0 && f.named == f.index
				f.peerHint = !f.selfNamed
			}
			break
		}
	}
}

// failureTime is the failing container's exit; for a worker that runs on fatal evidence, the
// evidence's time; for a pod without an exit (lost, or rejected at admission) the earliest
// time a fact about its failure was recorded, else zero (unknown).
func (f *podFailure) failureTime() time.Time {
	if !f.term.finishedAt.IsZero() {
		return f.term.finishedAt
	}
	if f.hang != nil {
		return f.hang.evidence // to the nanosecond, where the condition keeps the second
	}
	var t time.Time
	pick := func(c time.Time) {
		if earlier(c, t) {
			t = c
		}
	}
	if f.infraCond != nil {
		pick(f.infraCond.LastTransitionTime.Time)
	}
	if f.disruption != nil {
		pick(f.disruption.LastTransitionTime.Time)
	}
	if f.pod.DeletionTimestamp != nil {
		pick(f.pod.DeletionTimestamp.Time)
	}
	if f.known && f.facts.Unreachable && f.facts.UnreachableSince != nil {
		pick(*f.facts.UnreachableSince) // nothing reports a lost pod's end: its node went silent then
	}
	return t
}

// happenedBy reports whether evidence recorded at "at" can have caused a failure at failedAt.
// Unknown times never rule evidence out.
func happenedBy(at, failedAt time.Time) bool {
	return at.IsZero() || failedAt.IsZero() || at.Before(failedAt.Add(timestampSlack))
}

// outsideLife says why a signal recorded at "at" cannot have caused this failure: it came
// before the failing container started (stale: an earlier incarnation's, or a node signal
// from before the program ran) or after the container had exited; "" when it falls inside.
// Unknown times rule nothing out.
func (f *podFailure) outsideLife(at time.Time) string {
	switch {
	case at.IsZero():
		return ""
	case !f.lifeStart.IsZero() && at.Before(f.lifeStart.Add(-timestampSlack)):
		return "before the container started at " + clock(f.lifeStart)
	case !happenedBy(at, f.failedAt):
		return "after the container had exited"
	}
	return ""
}

// attest says why the evidence annotation cannot be this pod's (a phrase whose subject is the
// evidence), "" when it can be: the node
// agent writes it for the pods of its own node, at the moment it sees the signal, so it names
// the pod's node and a time within the failing container's life.
func (f *podFailure) attest() string {
	fe := f.fe
	switch {
	case fe.Node == "":
		return "names no node"
	case fe.Node != f.node:
		return "names node " + fe.Node + ", not the pod's node " + orNone(f.node)
	case f.feAtErr != nil || f.feAt.IsZero():
		return "has a missing or unreadable time"
	}
	if why := f.outsideLife(f.feAt); why != "" {
		return "was recorded " + why
	}
	return ""
}

// conditionCause is the infrastructure cause the InfrastructureFault condition proves, or "".
// Only the node agent writes it, into the pod's status (which the edit role cannot write,
// and admission keeps everyone else off it); it counts with the agent's evidence beside it,
// attested (see attest) and of the same cause. A condition without that is noted (condWhy)
// and ignored: a stale condition, or one whose evidence someone changed.
func (f *podFailure) conditionCause() v1alpha1.Cause {
	c := f.infraCond
	if c == nil || !isInfraCause(v1alpha1.Cause(c.Reason)) {
		return ""
	}
	switch {
	case f.fe == nil:
		f.condWhy = "no " + v1alpha1.AnnotationFaultEvidence + " beside it names the node and the time"
	case f.feWhy != "":
		f.condWhy = "its evidence " + f.feWhy
	case f.fe.Cause != v1alpha1.Cause(c.Reason):
		f.condWhy = "its evidence says " + string(f.fe.Cause)
	default:
		return v1alpha1.Cause(c.Reason)
	}
	return ""
}

// decide sets the pod's own cause: the first rule that applies, in the order of the package
// doc, wins.
func (f *podFailure) decide() {
	if f.disruption != nil {
		f.disruptionLate = !happenedBy(f.disruption.LastTransitionTime.Time, f.failedAt)
	}
	if f.fe != nil {
		f.feWhy = f.attest()
	}
	condCause := f.conditionCause()
	feCause := f.faultEvidenceCause(condCause != "")
	shutdown := f.nodeShutdown()
	gpu := f.nodeGPU()
	condition := f.nodeCondition()
	statusCause := f.statusReasonCause()
	switch {
	case condCause != "":
		f.set(condCause, basisCondition)
	case feCause != "":
		f.set(feCause, basisFaultEvidence)
	case f.disruption != nil && !f.disruptionLate:
		f.set(f.disruptionCause(shutdown), basisDisruption)
	case statusCause != "":
		f.set(statusCause, basisStatusReason)
	case shutdown:
		f.set(v1alpha1.CauseNodeShutdown, basisNodeShutdown)
	case f.term.reason == containerReasonOOMKilled:
		f.set(v1alpha1.CauseOOMKilled, basisOOM)
	case gpu:
		f.set(v1alpha1.CauseGPUFault, basisNodeGPU)
	case condition:
		f.set(f.condition.Rule.cause(), basisNodeCondition)
	case f.known && (f.facts.Gone || f.facts.NotReady):
		f.set(v1alpha1.CauseNodeLost, basisNodeLost)
	case f.hint != nil && !f.peerHint && claimable(f.hint.Cause):
		f.set(f.hint.Cause, basisHint)
	case f.term.exitCode != 0 && !f.term.statusUnknown && !isNonSpecificExit(f.term.exitCode) && !f.peerHint:
		// A specific exit code is the program's own doing, but only evidence arriving before
		// the settle deadline can tell it was not provoked.
		f.cause = v1alpha1.CauseAppExit
	default:
		// A bare SIGTERM/SIGKILL, a lost container, exit 0 in a failed pod, or a peer-failure
		// message: nothing says who is to blame.
		f.cause = v1alpha1.CauseUnknown
	}
}

func (f *podFailure) set(c v1alpha1.Cause, b basis) {
	f.cause, f.basis = c, b
	// Everything that a rule decided is conclusive: infrastructure evidence, or explicit
	// application evidence (OOMKilled, a program XID, an application hint or condition).
	f.conclusive = c.Class() != v1alpha1.ClassUnknown
}

// Application evidence is what lets a verdict conclude Application before the settle
// deadline. The classifier's rules and its fuzz test's oracle both read it from here, so that
// a new rule cannot conclude on less:
//   - the runtime's OOMKilled on the failing container (rule 6);
//   - the kubelet's eviction of the pod for a limit of its own (rule 4: evictedForOwnLimit);
//   - the pod's own words, a hint on its termination message or its evidence annotation,
//     asserting an application cause they may claim (rules 2 and 9: claimable), or a
//     program-caused XID in the annotation, attested (rule 2).

// claimable: a cause a hint or the evidence annotation may assert for a pod. Every root cause
// but LimitExceeded, which names the kubelet's eviction of the pod for a limit of its own:
// only the kubelet's write of the pod's status proves that (evictedForOwnLimit), never the
// pod's metadata or its program's output.
func claimable(c v1alpha1.Cause) bool {
	return c.Class() != v1alpha1.ClassUnknown && c != v1alpha1.CauseLimitExceeded
}

// evictedForOwnLimit: the kubelet evicted the pod for exceeding a limit of its own. Its
// eviction manager writes status reason Evicted with one of three messages and, unlike a
// node-pressure eviction, no DisruptionTarget condition (pkg/kubelet/eviction,
// localStorageEviction → evictPod with no condition).
func evictedForOwnLimit(pod *corev1.Pod) bool {
	return pod.Status.Reason == statusReasonEvicted && ownLimitEviction.MatchString(pod.Status.Message)
}

// isInfraCause: a cause the InfrastructureFault condition may carry. The Job's
// podFailurePolicy treats that condition as infrastructure whatever its reason, so an
// application cause there is a contradiction, ignored rather than trusted.
func isInfraCause(c v1alpha1.Cause) bool {
	return c.Class() == v1alpha1.ClassInfrastructure
}

// isNonSpecificExit: exits that only say someone sent SIGTERM or SIGKILL.
func isNonSpecificExit(code int32) bool {
	return code == 128+15 || code == 128+9
}

// faultEvidenceCause is the cause the annotation alone decides, or "": an application cause
// (a program-caused XID), attested. An infrastructure cause needs the condition (conditionCause;
// counted says it was): the annotation is metadata, which anyone who may edit the pod can write.
func (f *podFailure) faultEvidenceCause(counted bool) v1alpha1.Cause {
	c := f.evidenceClaim()
	switch {
	case c == "" || counted || f.feWhy != "":
		return ""
	case c.Class() == v1alpha1.ClassInfrastructure:
		f.feWhy = "has no " + v1alpha1.PodConditionInfrastructureFault + " condition beside it in the pod's status"
		return ""
	}
	return c
}

// evidenceClaim is the cause the annotation claims, or "". An XID decides through the shared
// table, whatever cause the writer put beside it; a Secondary XID decides nothing.
func (f *podFailure) evidenceClaim() v1alpha1.Cause {
	if f.fe == nil {
		return ""
	}
	if f.xid != 0 {
		info := LookupXID(f.xid)
		if info.Secondary {
			return ""
		}
		return info.Cause
	}
	if claimable(f.fe.Cause) {
		return f.fe.Cause
	}
	return ""
}

// nodeShutdown: the node announced a shutdown while the failing container ran.
func (f *podFailure) nodeShutdown() bool {
	at := f.facts.ShutdownDetectedAt
	if at == nil {
		return false
	}
	f.shutdownWhy = f.outsideLife(*at)
	return f.shutdownWhy == ""
}

// nodeGPU: the node's GPUs turned unhealthy while the failing container ran, and it exited
// non-zero. A GPU that was unhealthy before it started says nothing about its exit: the
// condition stays until the GPU is healthy again, and every later bug there would be blamed.
func (f *podFailure) nodeGPU() bool {
	if f.facts.GPUUnhealthyReason == "" || f.term.exitCode == 0 {
		return false
	}
	if since := f.facts.GPUUnhealthySince; since != nil {
		f.gpuWhy = f.outsideLife(*since)
	}
	return f.gpuWhy == ""
}

// nodeCondition: a health checker's condition says the node unhealthy since a time inside
// the failing container's life, and it exited non-zero, as for nodeGPU (a condition from
// before the worker started explains nothing of its exit). The first that counts is the
// evidence; why each other does not is noted.
func (f *podFailure) nodeCondition() bool {
	if f.term.exitCode == 0 {
		return false
	}
	f.conditionWhy = make([]string, len(f.facts.Conditions))
	for i := range f.facts.Conditions {
		c := &f.facts.Conditions[i]
		if c.Since != nil {
			f.conditionWhy[i] = f.outsideLife(*c.Since)
		}
		if f.conditionWhy[i] == "" && f.condition == nil {
			f.condition = c
		}
	}
	return f.condition != nil
}

// disruptionCause maps a DisruptionTarget reason to a cause.
func (f *podFailure) disruptionCause(shutdown bool) v1alpha1.Cause {
	switch f.disruption.Reason {
	case corev1.PodReasonTerminationByKubelet:
		// The kubelet kills for a node shutdown, for node-pressure eviction and to make room
		// for a critical pod; the status reason or the node tells which.
		switch {
		case shutdown || isShutdownStatusReason(f.pod.Status.Reason):
			return v1alpha1.CauseNodeShutdown
		case f.pod.Status.Reason == statusReasonPreempting:
			return v1alpha1.CausePreemption
		default:
			return v1alpha1.CauseEviction
		}
	case corev1.PodReasonPreemptionByScheduler:
		return v1alpha1.CausePreemption
	case reasonEvictionByEvictionAPI:
		if f.drained() {
			return v1alpha1.CausePlannedMaintenance
		}
		return v1alpha1.CauseEviction
	case reasonDeletionByTaintManager:
		if f.known && (f.facts.Gone || f.facts.NotReady) {
			return v1alpha1.CauseNodeLost // the unreachable/not-ready NoExecute taints
		}
		return v1alpha1.CauseNodeMaintenance // a NoExecute taint someone put on a healthy node
	case reasonDeletionByPodGC:
		return v1alpha1.CauseNodeLost
	default:
		// The condition means "the system is disrupting this pod" whatever the reason; an
		// unknown reason from a newer Kubernetes is still not the program.
		return v1alpha1.CauseEviction
	}
}

// drained: the pod was evicted from a node that someone with power over nodes is taking
// away: cordoned (kubectl drain, a node-pool upgrade), tainted for a disruption (Karpenter,
// the cluster autoscaler), or already deleted after its drain. The eviction alone is no
// proof: a tenant may evict their own pods, and must not buy budget-free restarts so; a
// node's cordon, taints and deletion are not theirs to set.
func (f *podFailure) drained() bool {
	return f.known && (f.facts.Unschedulable || f.facts.DisruptionTaint != "" || f.facts.Gone)
}

// ownLimitEviction matches the kubelet's messages when it evicts a pod for a limit of the
// pod's own (pkg/kubelet/eviction/helpers.go: containerEphemeralStorageMessageFmt,
// podEphemeralStorageMessageFmt, emptyDirMessageFmt). Node pressure says "The node was low on
// resource" or "The node had condition" instead, and sets DisruptionTarget.
var ownLimitEviction = regexp.MustCompile(`^(Container \S+ exceeded its local ephemeral storage limit |` +
	`Pod ephemeral local storage usage exceeds the total limit of containers |Usage of EmptyDir volume .* exceeds the limit )`)

func isShutdownStatusReason(r string) bool {
	return r == statusReasonTerminated || r == statusReasonShutdown || r == statusReasonNodeShutdown
}

// statusReasonCause maps pod.Status.Reason to a cause, or "".
func (f *podFailure) statusReasonCause() v1alpha1.Cause {
	switch r := f.pod.Status.Reason; {
	case evictedForOwnLimit(f.pod):
		return v1alpha1.CauseLimitExceeded
	case r == statusReasonEvicted:
		return v1alpha1.CauseEviction
	case r == statusReasonPreempting:
		return v1alpha1.CausePreemption
	case isShutdownStatusReason(r):
		return v1alpha1.CauseNodeShutdown
	case r == statusReasonNodeLost:
		return v1alpha1.CauseNodeLost
	case r == statusReasonOutOfGPU:
		return v1alpha1.CauseGPUFault
	case r == statusReasonUnexpectedAdmissionError && requestsGPU(f.pod):
		// The device plugin failed to allocate the GPUs; the program never ran.
		return v1alpha1.CauseGPUFault
	}
	return ""
}

// ownCause is what the pod's own evidence says for PeerFailure.OwnCause.
func (f *podFailure) ownCause() v1alpha1.Cause {
	switch {
	case f.basis != basisNone:
		return f.cause
	case f.peerHint:
		return v1alpha1.CausePeerFailure
	}
	return ""
}

// peerOnly: all the pod says is that a peer failed; such a pod is never the root while
// another candidate exists.
func (f *podFailure) peerOnly() bool {
	return f.peerHint && f.basis == basisNone
}
