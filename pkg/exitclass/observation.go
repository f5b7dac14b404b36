package exitclass

import (
	"fmt"
	"regexp"
	"slices"
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

// Heartbeat is the last renewal of a node agent's Lease.
type Heartbeat struct {
	RenewedAt time.Time
	// Duration is how long the renewal holds: the agent renews well within it.
	Duration time.Duration
}

// ExpiresAt is when the agent has gone silent unless it renews before.
func (h *Heartbeat) ExpiresAt() time.Time { return h.RenewedAt.Add(h.Duration) }

// FactsOfNode reads what Classify needs to know about a node from its Node object.
func FactsOfNode(node *corev1.Node) NodeFacts {
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
