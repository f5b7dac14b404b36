package exitclass

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

// A fault need not end the program: a GPU that fell off the bus, an NVLink or double-bit ECC
// error often leave the worker blocked inside a CUDA call or a collective, and its peers in
// the same collective, until a framework's timeout (minutes) or never. The node agent's
// evidence is on the pod within milliseconds; these are the rules by which a worker that
// still runs has failed by it (see the package doc, "A fault need not end the program").

// hang is fatal infrastructure evidence on a worker that still runs.
type hang struct {
	cause v1alpha1.Cause
	// evidence is when the node agent recorded it; failsAt is when the pod counts as failed
	// by it: at once for its GPU, after its termination grace period (and the kubelet's
	// report of its kill, shutdownReportSlack) for its node's shutdown: the kubelet's
	// graceful shutdown had that long to end the worker.
	evidence, failsAt time.Time
	// grace is the pod's termination grace period, for a shutdown.
	grace time.Duration
	// container and since are the running worker: the first of the pod's containers that
	// runs, and when the earliest of them started (its running incarnation's start).
	container string
	since     time.Time
}

// hangOf reads the fatal infrastructure evidence on a pod whose worker runs, attested as
// rule 1 attests it: the InfrastructureFault condition in the pod's status, the evidence
// annotation of the same cause beside it naming the pod's node and a time inside the running
// incarnation's life. Fatal is a GPU fault with an XID that LookupXID calls Fatal, or one
// without an XID (the agent marks a pod so only for a fatal state: its GPU lost, a double-bit
// ECC error, a recovery the driver requires); or the node's shutdown. A pod whose containers
// do not run (waiting at a barrier, ended) has none.
func hangOf(pod *corev1.Pod) (hang, bool) {
	h := hang{}
	var running bool
	if h.container, h.since, running = runningSince(pod); !running {
		return hang{}, false
	}
	fe, at, ok := attestedEvidence(pod, h.since)
	if !ok {
		return hang{}, false
	}
	h.cause, h.evidence, h.failsAt = fe.Cause, at, at
	switch fe.Cause {
	case v1alpha1.CauseGPUFault:
		if !fatalGPUEvidence(&fe) {
			return hang{}, false
		}
	case v1alpha1.CauseNodeShutdown:
		h.grace = terminationGrace(pod)
		h.failsAt = shutdownEndsBy(pod, at)
	default:
		return hang{}, false // the agent writes no other cause; nothing says it stops a worker
	}
	return h, true
}

// attestedEvidence reads the node agent's evidence on pod, attested as rule 1 attests it:
// the InfrastructureFault condition in the pod's status, and the evidence annotation of the
// same cause beside it naming the pod's node, recorded (at) not before since (an earlier
// incarnation's evidence is stale).
func attestedEvidence(pod *corev1.Pod, since time.Time) (fe v1alpha1.FaultEvidence, at time.Time, ok bool) {
	var cond *corev1.PodCondition
	for i := range pod.Status.Conditions {
		if c := &pod.Status.Conditions[i]; c.Type == v1alpha1.PodConditionInfrastructureFault && c.Status == corev1.ConditionTrue {
			cond = c
		}
	}
	ev := v1alpha1.EvidenceOf(pod.Annotations)
	if cond == nil || ev == nil || pod.Spec.NodeName == "" {
		return fe, at, false
	}
	if fe = *ev; fe.Node != pod.Spec.NodeName || string(fe.Cause) != cond.Reason {
		return fe, at, false
	}
	at, err := time.Parse(time.RFC3339Nano, fe.DetectedAt)
	if err != nil || at.IsZero() || at.Before(since.Add(-timestampSlack)) {
		return fe, at, false // unreadable, or an earlier incarnation's (stale)
	}
	return fe, at, true
}

// shutdownEndsBy is when a graceful node shutdown announced at at has ended pod, if its
// kubelet ends it: its termination grace period, and the kubelet's report of its kill.
func shutdownEndsBy(pod *corev1.Pod, at time.Time) time.Time {
	return at.Add(terminationGrace(pod) + shutdownReportSlack)
}

// ShutdownEndsBy is when the graceful shutdown that pod's node announced while it ran will
// have ended the pod (attested NodeShutdown evidence, recorded since the pod started): its
// kubelet stops it at the announcement and reports it ended by then (FailsAt's bound for a
// worker that outlives it). ok is false when no announced shutdown is ending the pod, or it
// has ended.
func ShutdownEndsBy(pod *corev1.Pod) (at time.Time, ok bool) {
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return time.Time{}, false
	}
	fe, at, ok := attestedEvidence(pod, attempt.PodStart(pod))
	if !ok || fe.Cause != v1alpha1.CauseNodeShutdown {
		return time.Time{}, false
	}
	return shutdownEndsBy(pod, at), true
}

// StoppedByShutdown reports whether the pod's node agent attests that the graceful shutdown
// its node announced while the pod ran has stopped it at the container runtime (the
// NodeShutdown evidence's PodStoppedAt, not before the announcement): its sandbox is down
// and none of its containers runs, though its status may not say so yet.
func StoppedByShutdown(pod *corev1.Pod) bool {
	fe, at, ok := attestedEvidence(pod, attempt.PodStart(pod))
	if !ok || fe.Cause != v1alpha1.CauseNodeShutdown || fe.PodStoppedAt == "" {
		return false
	}
	stopped, err := time.Parse(time.RFC3339Nano, fe.PodStoppedAt)
	return err == nil && !stopped.Before(at)
}

// fatalGPUEvidence: the evidence says the GPU needs a reset or a drain before it runs
// anything again. An XID decides through the shared table (a program's XID, a Secondary one,
// a non-fatal one never does); GPU evidence without an XID is the agent's for a fatal state
// only (pkg/gpu: a lost GPU, a double-bit ECC error, a failed retirement, uncontained
// poison, a recovery action the driver requires; the health poll marks pods only for a fatal
// one).
func fatalGPUEvidence(fe *v1alpha1.FaultEvidence) bool {
	if fe.GPU == nil {
		return false
	}
	if fe.GPU.XID == 0 {
		return true
	}
	info := LookupXID(fe.GPU.XID)
	return info.Fatal && !info.Secondary && info.Cause == v1alpha1.CauseGPUFault
}

// runningSince is the pod's running worker: the first of its containers that runs a worker,
// and when the earliest of them began its current attempt (attempt.RunningWorkers: a
// supervising barrier's container runs across attempts, and runs no worker while it waits).
func runningSince(pod *corev1.Pod) (container string, since time.Time, running bool) {
	for i, w := range attempt.RunningWorkers(pod) {
		if i == 0 {
			container, since = w.Container, w.Since
		} else if earlier(w.Since, since) {
			since = w.Since
		}
		running = true
	}
	return container, since, running
}

// shutdownReportSlack is how long past a pod's grace period a node shutdown's kill of its
// worker may take to show in the pod's status (the kubelet's shutdown manager starts on
// logind's signal, kills at the end of the grace period, then reports): a worker ended so
// is judged by its end, never taken for one that outlived the shutdown.
const shutdownReportSlack = 5 * time.Second

// terminationGrace is the pod's termination grace period (Kubernetes' default, 30 s, when
// unset): how long the kubelet gives its containers to stop, in a graceful node shutdown too
// (where the kubelet's shutdownGracePeriod may cut it shorter, never longer).
func terminationGrace(pod *corev1.Pod) time.Duration {
	s := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil && *g >= 0 {
		s = *g
	}
	return time.Duration(s) * time.Second
}

// tenths renders a duration in seconds to the tenth, as a short wait reads.
func tenths(d time.Duration) string {
	return strconv.FormatFloat(max(d, 0).Seconds(), 'f', 1, 64) + " s"
}

// hungPhrase is the basis of a verdict whose root still runs: what it ran on after, and how
// long ("was still running 2.0 s after XID 79 (GPU has fallen off the bus) on GPU 0").
func (f *podFailure) hungPhrase() string {
	h := f.hang
	ran := "was still running " + tenths(f.now.Sub(h.evidence)) + " after "
	switch {
	case h.cause == v1alpha1.CauseNodeShutdown:
		return ran + "its node announced a shutdown (" + f.fe.Source + " at " + clock(h.evidence) + "), past its " +
			seconds(h.grace) + " termination grace period: the kubelet did not end it"
	case f.xid != 0:
		s := ran + "XID " + strconv.FormatUint(f.xid, 10) + " (" + LookupXID(f.xid).Name + ")"
		if f.fe.GPU != nil {
			s += " on GPU " + strconv.Itoa(f.fe.GPU.Index)
		}
		return s
	}
	s := ran + "its GPU"
	if f.fe.GPU != nil {
		s += " " + strconv.Itoa(f.fe.GPU.Index)
	}
	return s + " failed (" + f.fe.Source + quote(f.fe.Detail) + ")"
}

// hungLine is the evidence line of a root that still runs.
func (f *podFailure) hungLine() string {
	h := f.hang
	return "pod " + f.pod.Name + ": container " + h.container + " still running at " + clock(f.now) + " (started " + clock(h.since) +
		"), " + tenths(f.now.Sub(h.evidence)) + " after its fatal " + string(h.cause) + " evidence: it hangs on the fault, and its attempt ends without its exit"
}
