package exitclass

import (
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// maxMessage caps quoted messages in evidence lines; the full text stays on the pod.
const maxMessage = 200

// clock renders times the way every faultline explanation does.
func clock(t time.Time) string {
	return t.UTC().Format("15:04:05.000")
}

// maxNamed bounds the items a message names.
const maxNamed = 5

// Named names items for a message: sorted, each once, at most maxNamed of them and how many
// more there are.
func Named(items []string) string {
	items = slices.Compact(slices.Sorted(slices.Values(items)))
	if len(items) > maxNamed {
		return strings.Join(items[:maxNamed], ", ") + " and " + strconv.Itoa(len(items)-maxNamed) + " more"
	}
	return strings.Join(items, ", ")
}

func quote(msg string) string {
	if msg == "" {
		return ""
	}
	if len(msg) > maxMessage {
		msg = msg[:maxMessage] + "…"
	}
	return ": " + msg
}

// describe renders every fact found about the pod, one per line, including the facts that
// did not decide (and why).
func (f *podFailure) describe() []string {
	var ev []string
	pod := "pod " + f.pod.Name + ": "
	t := &f.term
	switch {
	case f.hang != nil:
		ev = append(ev, f.hungLine())
	case t.statusUnknown:
		ev = append(ev, pod+"container "+t.container+" state unknown ("+containerReasonStatusUnknown+
			"); exit code "+strconv.Itoa(int(t.exitCode))+" is the kubelet's placeholder")
	case t.found:
		line := pod + "container " + t.container + " exited " + strconv.Itoa(int(t.exitCode))
		if sig := f.signal(); sig != 0 {
			line += " (" + signalName(sig) + ")"
		}
		if !t.finishedAt.IsZero() {
			line += " at " + clock(t.finishedAt)
		}
		if t.reason != "" && t.reason != "Error" && t.reason != "Completed" {
			line += ", reason " + t.reason
		}
		ev = append(ev, line)
	default:
		ev = append(ev, pod+"no container exit recorded (phase "+string(f.pod.Status.Phase)+")")
	}
	if r := f.pod.Status.Reason; r != "" {
		ev = append(ev, pod+"status reason "+r+quote(f.pod.Status.Message))
	}
	if c := f.infraCond; c != nil {
		line := pod + "condition " + v1alpha1.PodConditionInfrastructureFault + "=True, reason " + c.Reason + quote(c.Message)
		switch {
		case !isInfraCause(v1alpha1.Cause(c.Reason)):
			line += " (not an infrastructure cause; ignored)"
		case f.condWhy != "":
			line += " (not attested: " + f.condWhy + "; ignored)"
		}
		ev = append(ev, line)
	}
	if f.feErr != nil {
		ev = append(ev, pod+"annotation "+v1alpha1.AnnotationFaultEvidence+" unreadable: "+f.feErr.Error())
	}
	if f.fe != nil {
		ev = append(ev, pod+f.faultEvidenceLine())
	}
	if c := f.disruption; c != nil {
		line := pod + "condition " + string(corev1.DisruptionTarget) + "=True, reason " + c.Reason
		if !c.LastTransitionTime.IsZero() {
			line += " at " + clock(c.LastTransitionTime.Time)
		}
		line += quote(c.Message)
		if f.disruptionLate {
			line += " (set after the container had exited; not counted)"
		}
		ev = append(ev, line)
	}
	ev = f.describeNode(ev)
	if d := f.pod.DeletionTimestamp; d != nil {
		ev = append(ev, pod+"being deleted (deletionTimestamp "+clock(d.Time)+")")
	}
	if h := f.hint; h != nil {
		ev = append(ev, pod+"termination message matches the "+h.Source+" hint for "+string(h.Cause)+
			" (/"+h.Pattern.String()+"/)")
	}
	if h := f.infraHint; h != nil {
		ev = append(ev, pod+"termination message matches the "+h.Source+" hint for "+string(h.Cause)+
			" (/"+h.Pattern.String()+"/): the program's output, not node evidence; ignored")
	}
	return ev
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func (f *podFailure) faultEvidenceLine() string {
	fe := f.fe
	line := "fault evidence from " + fe.Source
	if fe.Node != "" {
		line += " on node " + fe.Node
	}
	switch {
	case f.feAtErr != nil:
		line += " at an unreadable time (" + strconv.Quote(fe.DetectedAt) + ")"
	case !f.feAt.IsZero():
		line += " at " + clock(f.feAt)
	}
	line += ": " + string(fe.Cause)
	if g := fe.GPU; g != nil {
		line += ", GPU " + strconv.Itoa(g.Index)
		if g.UUID != "" {
			line += " (" + g.UUID + ")"
		}
		if g.XID != 0 {
			info := LookupXID(g.XID)
			line += " XID " + strconv.FormatUint(g.XID, 10) + " (" + info.Name + ", " + string(info.Cause)
			switch {
			case info.Secondary:
				line += "; a consequence of another fault, not counted"
			case info.Fatal:
				line += "; fatal: the GPU needs a reset or drain"
			}
			line += ")"
		}
	}
	line += quote(fe.Detail)
	switch {
	case f.evidenceClaim() == "" && f.xid == 0 && fe.Cause == v1alpha1.CauseLimitExceeded:
		line += " (only the kubelet's eviction in the pod's status proves " + string(fe.Cause) + "; ignored)"
	case f.evidenceClaim() == "" && f.xid == 0:
		line += " (not a cause faultline knows; ignored)"
	case f.feWhy != "":
		line += " (not attested: it " + f.feWhy + "; ignored)"
	}
	return line
}

func (f *podFailure) describeNode(ev []string) []string {
	if f.node == "" {
		return append(ev, "pod "+f.pod.Name+": not scheduled to a node")
	}
	node := "node " + f.node + ": "
	if !f.known {
		return append(ev, node+"no facts observed")
	}
	if at := f.facts.ShutdownDetectedAt; at != nil {
		line := node + "logind PrepareForShutdown at " + clock(*at)
		if f.shutdownWhy != "" {
			line += " (" + f.shutdownWhy + "; not counted)"
		}
		ev = append(ev, line)
	}
	if r := f.facts.GPUUnhealthyReason; r != "" {
		line := node + v1alpha1.NodeConditionGPUHealthy + "=False, reason " + r
		if since := f.facts.GPUUnhealthySince; since != nil {
			line += " since " + clock(*since)
		}
		if f.gpuWhy != "" {
			line += " (" + f.gpuWhy + "; not counted)"
		}
		ev = append(ev, line)
	}
	for i, c := range f.facts.Conditions {
		line := node + c.Rule.Source + "'s " + string(c.Rule.Type) + "=" + string(c.Rule.badStatus()) + ", reason " + orNone(c.Reason) + quote(c.Message)
		if c.Since != nil {
			line += " since " + clock(*c.Since)
		}
		if i < len(f.conditionWhy) && f.conditionWhy[i] != "" {
			line += " (" + f.conditionWhy[i] + "; not counted)"
		}
		ev = append(ev, line)
	}
	switch {
	case f.facts.Gone:
		ev = append(ev, node+"the Node object is gone")
	case f.facts.Unreachable:
		ev = append(ev, node+f.unreachableLine())
	case f.facts.NotReady:
		ev = append(ev, node+"NotReady")
	}
	if f.facts.Unschedulable {
		ev = append(ev, node+"cordoned (unschedulable)")
	}
	if f.facts.DisruptionTaint != "" {
		ev = append(ev, node+"tainted "+f.facts.DisruptionTaint+" (drained by its platform)")
	}
	return ev
}

// unreachableLine says how long the node has been unreachable and why that counts (or not)
// as the pod's loss: its toleration, its agent's heartbeat.
func (f *podFailure) unreachableLine() string {
	line := "unreachable (" + corev1.TaintNodeUnreachable + ")"
	since := f.facts.UnreachableSince
	if since != nil {
		line += " since " + clock(*since)
		if !f.now.IsZero() && f.now.After(*since) {
			line += ", for " + seconds(f.now.Sub(*since))
		}
	}
	var why []string
	if d, forever := unreachableToleration(f.pod); forever {
		why = append(why, "the pod tolerates that for ever")
	} else {
		why = append(why, "the pod tolerates "+seconds(d))
	}
	if hb := f.facts.Agent; hb != nil {
		if exp := hb.ExpiresAt(); f.now.Before(exp) {
			why = append(why, "its node agent renewed its heartbeat at "+clock(hb.RenewedAt))
		} else {
			why = append(why, "its node agent silent since "+clock(hb.RenewedAt)+" (heartbeat expired at "+clock(exp)+")")
		}
	} else {
		why = append(why, "no node agent heartbeat")
	}
	line += "; " + strings.Join(why, ", ")
	if since != nil && f.pod.CreationTimestamp.Time.After(*since) {
		line += "; the pod was created after that (not counted)"
	}
	return line
}

// seconds renders a duration in whole seconds, as a person reads a wait.
func seconds(d time.Duration) string {
	return strconv.FormatInt(int64(d.Round(time.Second)/time.Second), 10) + " s"
}

// basisPhrase is the deciding fact as a phrase completing "exited 143 (SIGTERM) …".
func (f *podFailure) basisPhrase() string {
	const shuttingDown = "while the node was shutting down ("
	switch f.basis {
	case basisCondition, basisFaultEvidence:
		// Either way the agent's evidence is there, attested: its signal says it best.
		switch {
		case f.xid != 0:
			s := "after XID " + strconv.FormatUint(f.xid, 10) + " (" + LookupXID(f.xid).Name + ")"
			if f.fe.GPU != nil {
				s += " on GPU " + strconv.Itoa(f.fe.GPU.Index)
			}
			return s
		case f.cause == v1alpha1.CauseNodeShutdown:
			return shuttingDown + f.fe.Source + " at " + clock(f.feAt) + ")"
		case f.basis == basisCondition:
			return "with the node agent's InfrastructureFault condition (" + f.infraCond.Reason + quote(f.infraCond.Message) + ")"
		}
		return "with fault evidence from " + f.fe.Source + " (" + string(f.cause) + " at " + clock(f.feAt) + ")"
	case basisDisruption:
		if f.cause == v1alpha1.CauseNodeShutdown {
			return shuttingDown + "DisruptionTarget: " + f.disruption.Reason + ")"
		}
		return "after Kubernetes disrupted it (DisruptionTarget: " + f.disruption.Reason + ")"
	case basisStatusReason:
		if f.cause == v1alpha1.CauseNodeShutdown {
			return shuttingDown + "pod status reason " + f.pod.Status.Reason + ")"
		}
		return "with pod status reason " + f.pod.Status.Reason
	case basisNodeShutdown:
		return shuttingDown + "logind PrepareForShutdown at " + clock(*f.facts.ShutdownDetectedAt) + ")"
	case basisOOM:
		return "because it ran out of memory (" + containerReasonOOMKilled + ")"
	case basisNodeGPU:
		return "on a node with an unhealthy GPU (" + v1alpha1.NodeConditionGPUHealthy + "=False, reason " + f.facts.GPUUnhealthyReason + ")"
	case basisNodeCondition:
		c := f.condition
		return "on a node its health checker calls unhealthy (" + c.Rule.Source + ": " + string(c.Rule.Type) + "=" + string(c.Rule.badStatus()) + ", reason " + orNone(c.Reason) + ")"
	case basisNodeLost:
		switch {
		case f.facts.Gone:
			return "and its node is gone"
		case f.facts.Unreachable && f.facts.UnreachableSince != nil && f.now.After(*f.facts.UnreachableSince):
			return "and its node has been unreachable for " + seconds(f.now.Sub(*f.facts.UnreachableSince))
		}
		return "and its node is NotReady"
	case basisHint:
		return "with a termination message matching the " + f.hint.Source + " hint for " + string(f.cause)
	}
	var phrase string
	switch {
	case f.peerOnly():
		phrase = "with a termination message that only blames a peer (" + f.hint.Source + " hint) and no other failure to blame"
	case f.cause == v1alpha1.CauseAppExit:
		phrase = "with no infrastructure evidence"
	case f.term.found && !f.term.statusUnknown && isNonSpecificExit(f.term.exitCode):
		phrase = "with no evidence of who sent the signal"
	default:
		phrase = "with no evidence either way"
	}
	return phrase + f.ignoredPhrase()
}

// ignoredPhrase names the evidence that was there and did not count, so that an explanation
// never leaves a reader wondering why a fault they can see on the pod was not believed.
func (f *podFailure) ignoredPhrase() string {
	var ignored []string
	switch {
	case f.condWhy != "":
		ignored = append(ignored, "its "+v1alpha1.PodConditionInfrastructureFault+" condition is not attested ("+f.condWhy+")")
	case f.feWhy != "":
		ignored = append(ignored, "its fault evidence is not attested (it "+f.feWhy+")")
	}
	if h := f.infraHint; h != nil {
		ignored = append(ignored, "its output matches the "+h.Source+" hint for "+string(h.Cause)+", which only node evidence could prove")
	}
	if len(ignored) == 0 {
		return ""
	}
	return " (ignored: " + strings.Join(ignored, "; ") + ")"
}
