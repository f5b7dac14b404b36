package exitclass

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// Observation is everything Classify may look at for one attempt. The caller (the controller)
// reads it from the API server; Classify itself reads nothing and no clock.
type Observation struct {
	// Pods are every pod of the attempt, in any phase. The completion index comes from the
	// batch.kubernetes.io/job-completion-index annotation (or label).
	Pods []*corev1.Pod
	// Nodes is keyed by node name. A pod whose node is missing from the map has unknown node
	// facts: that is not the same as a node that is gone.
	Nodes map[string]NodeFacts
	// Hints are framework failure hints (from plugins), matched against container
	// termination messages. See CompileHints.
	Hints []Hint
	// Now is the time of the observation.
	Now time.Time
	// SettleDeadline is when waiting for node evidence ends: until then a failure without
	// conclusive evidence is not Final. A zero deadline means "do not wait".
	SettleDeadline time.Time
}

// NodeFacts is what the controller knows about one node.
type NodeFacts struct {
	// Gone: the Node object no longer exists.
	Gone bool
	// NotReady: the Ready condition is False or Unknown.
	NotReady bool
	// GPUUnhealthyReason is the reason of faultline.dev/GPUHealthy=False (e.g. "Xid79"); ""
	// while the GPUs are healthy.
	GPUUnhealthyReason string
	// GPUUnhealthySince is that condition's lastTransitionTime (nil: unknown).
	GPUUnhealthySince *time.Time
	// Conditions are the node conditions of a cluster's own health checkers that say the
	// node is unhealthy now (NodeConditionRule), in the rules' order.
	Conditions []NodeConditionFact
	// ShutdownDetectedAt is the faultline.dev/shutdown-detected-at annotation, if set.
	ShutdownDetectedAt *time.Time
	// Unschedulable is node.Spec.Unschedulable: the node is cordoned, which is what
	// `kubectl drain` and a node-pool upgrade do before they evict. It turns an eviction
	// through the Eviction API into PlannedMaintenance; leave it false if unknown.
	Unschedulable bool
	// DisruptionTaint is the first of v1alpha1.DisruptionTaints the node carries (Karpenter's
	// disruption, the cluster autoscaler's scale-down: drains without a cordon); "" if none.
	// It counts as Unschedulable does.
	DisruptionTaint string
	// Unreachable: the node lifecycle controller has heard nothing from the node's kubelet
	// for its grace period (the node.kubernetes.io/unreachable taint), since
	// UnreachableSince (nil: unknown). Its pods are lost: nothing will report their end.
	Unreachable      bool
	UnreachableSince *time.Time
	// OutOfService: an operator tainted the node node.kubernetes.io/out-of-service, saying
	// it is down: its pods' processes are gone, and the pod garbage collector deletes them.
	OutOfService bool
	// Agent is the heartbeat of the node's faultline agent (its Lease), nil when the node has
	// none: no agent has run there. An agent is a process apart from the kubelet: while it
	// renews its heartbeat, an unreachable node is a kubelet that restarts or a heartbeat
	// that comes late, not a lost machine.
	Agent *Heartbeat
}

// NodeConditionRule names a node condition that a cluster's own GPU health checker writes
// (NVSentinel, node-problem-detector with a GPU plugin, a platform's), which the controller
// takes as infrastructure evidence for the workers of that node (rule 7b of the package doc).
// The checker's service account writes the Node's status, which no tenant can.
type NodeConditionRule struct {
	// Type is the condition's type; Status the status that says the node is unhealthy
	// (True where it is empty).
	Type   corev1.NodeConditionType
	Status corev1.ConditionStatus
	// Cause is what a worker that failed under it failed of (GPUFault where it is empty).
	Cause v1alpha1.Cause
	// Source names who writes it, for the explanation.
	Source string
}

// DefaultNodeConditionRules are the conditions NVIDIA's NVSentinel sets on a node for its
// fatal GPU checks (its platform connector names each condition after the check, True with
// reason <Check>IsNotHealthy; non-fatal checks only raise events): the syslog monitor's XID,
// SXID and fallen-off-the-bus checks, and the DCGM health watches that can be fatal.
var DefaultNodeConditionRules = []NodeConditionRule{
	{Type: "SysLogsXIDError", Source: "NVSentinel"},
	{Type: "SysLogsSXIDError", Source: "NVSentinel"},
	{Type: "SysLogsGPUFallenOff", Source: "NVSentinel"},
	{Type: "GpuXidError", Source: "NVSentinel"},
	{Type: "GpuAllWatch", Source: "NVSentinel"},
	{Type: "GpuMemWatch", Source: "NVSentinel"},
	{Type: "GpuInforomWatch", Source: "NVSentinel"},
	{Type: "GpuNvlinkWatch", Source: "NVSentinel"},
	{Type: "GpuPcieWatch", Source: "NVSentinel"},
	{Type: "GpuDriverWatch", Source: "NVSentinel"},
	{Type: "GpuNvswitchFatalWatch", Source: "NVSentinel"},
}

// ParseNodeConditionRule reads a rule as written TYPE[=STATUS][:CAUSE] (launcher controller
// --node-condition-evidence): GpuMemWatch, GPUHealth=False, GpuProblem=True:GPUFault. Its
// cause must be an infrastructure cause: a node condition never proves the program's fault.
func ParseNodeConditionRule(s string) (NodeConditionRule, error) {
	rest, cause, hasCause := strings.Cut(s, ":")
	typ, status, hasStatus := strings.Cut(rest, "=")
	r := NodeConditionRule{Type: corev1.NodeConditionType(typ), Status: corev1.ConditionStatus(status), Cause: v1alpha1.Cause(cause), Source: "node condition"}
	for _, d := range DefaultNodeConditionRules {
		if d.Type == r.Type {
			r.Source = d.Source
		}
	}
	switch {
	case typ == "":
		return r, fmt.Errorf("node condition rule %q: no condition type (want TYPE[=STATUS][:CAUSE], e.g. GpuMemWatch or GPUHealth=False)", s)
	case hasStatus && !slices.Contains([]corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown}, r.Status):
		return r, fmt.Errorf("node condition rule %q: status %q is not True, False or Unknown", s, status)
	case hasCause && r.Cause.Class() != v1alpha1.ClassInfrastructure:
		return r, fmt.Errorf("node condition rule %q: cause %q is not an infrastructure cause (GPUFault, NodeMaintenance, ...): a node condition never proves the program's fault", s, cause)
	}
	return r, nil
}

// String is the rule as ParseNodeConditionRule reads it.
func (r NodeConditionRule) String() string {
	s := string(r.Type)
	if r.Status != "" {
		s += "=" + string(r.Status)
	}
	if r.Cause != "" {
		s += ":" + string(r.Cause)
	}
	return s
}

// badStatus is the status that says the node is unhealthy; cause what a failure under it is.
func (r NodeConditionRule) badStatus() corev1.ConditionStatus {
	if r.Status == "" {
		return corev1.ConditionTrue
	}
	return r.Status
}

func (r NodeConditionRule) cause() v1alpha1.Cause {
	if r.Cause == "" {
		return v1alpha1.CauseGPUFault
	}
	return r.Cause
}

// NodeConditionFact is a rule's condition found unhealthy on a node.
type NodeConditionFact struct {
	Rule            NodeConditionRule
	Reason, Message string
	// Since is the condition's lastTransitionTime (nil: unknown).
	Since *time.Time
}

// Heartbeat is the last renewal of a node agent's Lease.
type Heartbeat struct {
	RenewedAt time.Time
	// Duration is how long the renewal holds: the agent renews well within it.
	Duration time.Duration
	// NoGPUMonitoring is why the agent does not watch its node's GPUs ("" when it does, or
	// does not say): a fault of them is no evidence the agent can give.
	NoGPUMonitoring string
}

// ExpiresAt is when the agent has gone silent unless it renews before.
func (h *Heartbeat) ExpiresAt() time.Time { return h.RenewedAt.Add(h.Duration) }

// FactsOfNode reads what Classify needs to know about a node from its Node object, the
// conditions of rules among it.
func FactsOfNode(node *corev1.Node, rules []NodeConditionRule) NodeFacts {
	f := NodeFacts{Unschedulable: node.Spec.Unschedulable}
	for _, t := range node.Spec.Taints {
		switch t.Key {
		case corev1.TaintNodeUnreachable:
			f.Unreachable = true
			if t.TimeAdded != nil && (f.UnreachableSince == nil || t.TimeAdded.Time.Before(*f.UnreachableSince)) {
				f.UnreachableSince = &t.TimeAdded.Time
			}
		case corev1.TaintNodeOutOfService:
			f.OutOfService = true
		case v1alpha1.TaintKarpenterDisrupted, v1alpha1.TaintClusterAutoscalerToBeDeleted:
			if f.DisruptionTaint == "" {
				f.DisruptionTaint = t.Key
			}
		}
	}
	for _, c := range node.Status.Conditions {
		switch c.Type {
		case corev1.NodeReady:
			f.NotReady = c.Status != corev1.ConditionTrue
			if f.Unreachable && f.UnreachableSince == nil && c.Status == corev1.ConditionUnknown && !c.LastTransitionTime.IsZero() {
				f.UnreachableSince = &c.LastTransitionTime.Time
			}
		case v1alpha1.NodeConditionGPUHealthy:
			if c.Status == corev1.ConditionFalse {
				f.GPUUnhealthyReason = c.Reason
				if !c.LastTransitionTime.IsZero() {
					f.GPUUnhealthySince = &c.LastTransitionTime.Time
				}
			}
		}
	}
	for _, r := range rules {
		for _, c := range node.Status.Conditions {
			if c.Type != r.Type || c.Status != r.badStatus() {
				continue
			}
			fact := NodeConditionFact{Rule: r, Reason: c.Reason, Message: c.Message}
			if !c.LastTransitionTime.IsZero() {
				fact.Since = &c.LastTransitionTime.Time
			}
			f.Conditions = append(f.Conditions, fact)
		}
	}
	if v, ok := node.Annotations[v1alpha1.AnnotationShutdownDetectedAt]; ok {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			f.ShutdownDetectedAt = &t
		}
	}
	return f
}

// Hint is a compiled framework failure hint.
type Hint struct {
	Pattern *regexp.Regexp
	// Cause is PeerFailure, an infrastructure cause or an application cause.
	Cause v1alpha1.Cause
	// Source names the hint's origin for the evidence line, e.g. "jax".
	Source string
}

// HintPattern is a hint as a plugin sends it, before compilation.
type HintPattern struct {
	Pattern string
	Cause   v1alpha1.Cause
	Source  string
}

// CompileHints compiles plugin hints, keeping their order: Classify uses the first hint that
// matches. Unknown is refused as a hint's cause because a hint that concludes nothing would
// only hide the hints after it, and NoProgress because a hint reads the message of a worker
// that ended, which is no gang that hangs.
func CompileHints(patterns []HintPattern) ([]Hint, error) {
	hints := make([]Hint, 0, len(patterns))
	for i, p := range patterns {
		if p.Pattern == "" {
			return nil, fmt.Errorf("hint %d from %q: empty pattern would match every message", i, p.Source)
		}
		if p.Cause == v1alpha1.CauseUnknown || p.Cause == v1alpha1.CauseNoProgress || !slices.Contains(v1alpha1.AllCauses, p.Cause) {
			return nil, fmt.Errorf("hint %d from %q, pattern %q: cause %q is not a hint cause", i, p.Source, p.Pattern, p.Cause)
		}
		if p.Cause != v1alpha1.CausePeerFailure && !claimable(p.Cause) {
			return nil, fmt.Errorf("hint %d from %q, pattern %q: cause %q is the kubelet's eviction, which only the pod's status proves; use %s for the program's own account", i, p.Source, p.Pattern, p.Cause, v1alpha1.CauseAppExit)
		}
		re, err := regexp.Compile(p.Pattern)
		if err != nil {
			return nil, fmt.Errorf("hint %d from %q, pattern %q: %w", i, p.Source, p.Pattern, err)
		}
		hints = append(hints, Hint{Pattern: re, Cause: p.Cause, Source: p.Source})
	}
	return hints, nil
}
