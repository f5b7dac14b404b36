// Package maintenance holds the pure decisions of a planned maintenance: which nodes are
// under one (an SRE's NodeMaintenance, or a platform's announcement), which runs and indexes
// a drain hits, whether a gang still has a placement off the drained nodes, and when a
// maintenance exclusion is lifted. It takes objects and returns answers; it never calls the
// API server.
package maintenance

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// Sources of a Signal.
const (
	// SourceNodeMaintenance: an SRE's NodeMaintenance names the node.
	SourceNodeMaintenance = "NodeMaintenance"
	// SourceCordon: the node is cordoned (spec.unschedulable, or the
	// node.kubernetes.io/unschedulable taint that the node lifecycle controller adds for it).
	// Every platform's maintenance we know of ends in a cordon and a drain (kubectl drain,
	// AKS node auto-drain, Karpenter's disruption, NVSentinel's quarantine): a run moved at
	// the cordon moves before the eviction, in a planned way.
	SourceCordon = "Cordon"
	// SourceDisruptionTaint: a platform that drains without a cordon has tainted the node
	// (v1alpha1.DisruptionTaints: Karpenter's disruption, the cluster autoscaler's
	// scale-down). It is acted on as a cordon is (Config.Cordon).
	SourceDisruptionTaint = "DisruptionTaint"
	// SourceGKEScheduled: GKE's cloud.google.com/scheduled-maintenance-time label.
	SourceGKEScheduled = "GKEScheduledMaintenance"
	// SourceCondition: a node condition that announces a maintenance (Config.Conditions).
	SourceCondition = "NodeCondition"
)

// DefaultLead is how long before a scheduled maintenance (GKE's label) runs are moved: what
// NVSentinel's CSP health monitor waits for by default before it quarantines a node
// (triggerQuarantineWorkflowTimeLimitMinutes: 30).
const DefaultLead = 30 * time.Minute

// Config says which platform signals the controller acts on.
type Config struct {
	// Cordon: a cordoned node, or one with a disruption taint (v1alpha1.DisruptionTaints), is
	// under maintenance.
	Cordon bool
	// Lead: a maintenance scheduled by GKE's label is acted on this long before it starts.
	Lead time.Duration
	// Conditions are node condition types that, status True, announce a maintenance.
	Conditions []string
}

// DefaultConfig acts on every signal.
func DefaultConfig() Config {
	return Config{Cordon: true, Lead: DefaultLead, Conditions: []string{v1alpha1.NodeConditionCSPMaintenance}}
}

// Signal is one reason a node is under maintenance.
type Signal struct {
	Node   string
	Source string
	// Name is the NodeMaintenance's name, or the label or condition type.
	Name string
	// Reason is for people: the SRE's reason, the condition's message, the scheduled time.
	Reason string
	// Starts is when the maintenance starts, if it is scheduled (GKE's label); else zero.
	Starts time.Time
}

// String is a Signal as events and evidence say it.
func (s Signal) String() string {
	what := s.Source
	if s.Name != "" && s.Name != s.Source {
		what += " " + s.Name
	}
	if s.Reason != "" {
		return fmt.Sprintf("node %s: %s (%s)", s.Node, what, s.Reason)
	}
	return fmt.Sprintf("node %s: %s", s.Node, what)
}

// Governing returns the NodeMaintenance that holds node: a drain for real (not a dry run)
// that names it and is not over for it. It is over once the node was cordoned for it and is
// schedulable again (the SRE uncordoned it), or once the whole maintenance is Completed.
// When several do, the oldest governs.
func Governing(node *corev1.Node, name string, nms []v1alpha1.NodeMaintenance) *v1alpha1.NodeMaintenance {
	var gov *v1alpha1.NodeMaintenance
	for i := range nms {
		nm := &nms[i]
		if nm.Spec.DryRun || nm.DeletionTimestamp != nil || nm.Status.Phase == v1alpha1.MaintenanceCompleted || !slices.Contains(nm.Spec.Nodes, name) {
			continue
		}
		if st := NodeStatus(nm, name); st != nil && (st.UncordonedAt != nil || st.CordonedAt != nil && node != nil && !Cordoned(node)) {
			continue
		}
		if gov == nil || nm.CreationTimestamp.Before(&gov.CreationTimestamp) {
			gov = nm
		}
	}
	return gov
}

// NodeStatus is nm's status entry for node, or nil.
func NodeStatus(nm *v1alpha1.NodeMaintenance, node string) *v1alpha1.MaintenanceNode {
	for i := range nm.Status.Nodes {
		if nm.Status.Nodes[i].Name == node {
			return &nm.Status.Nodes[i]
		}
	}
	return nil
}

// Cordoned reports whether the node is cordoned: spec.unschedulable, or the taint that
// stands for it.
func Cordoned(node *corev1.Node) bool {
	if node.Spec.Unschedulable {
		return true
	}
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeUnschedulable })
}

// Of returns the signals of a node under maintenance now, and when the next scheduled one
// becomes due (zero if none is pending). A NodeMaintenance that governs the node comes first.
func Of(node *corev1.Node, nms []v1alpha1.NodeMaintenance, cfg Config, now time.Time) (active []Signal, next time.Time) {
	if node == nil {
		return nil, time.Time{}
	}
	if nm := Governing(node, node.Name, nms); nm != nil {
		active = append(active, Signal{Node: node.Name, Source: SourceNodeMaintenance, Name: nm.Name, Reason: nm.Spec.Reason})
	}
	if cfg.Cordon && Cordoned(node) {
		active = append(active, Signal{Node: node.Name, Source: SourceCordon, Name: corev1.TaintNodeUnschedulable})
	}
	if cfg.Cordon {
		for _, t := range node.Spec.Taints {
			if slices.Contains(v1alpha1.DisruptionTaints, t.Key) {
				active = append(active, Signal{Node: node.Name, Source: SourceDisruptionTaint, Name: t.Key})
			}
		}
	}
	if v, ok := node.Labels[v1alpha1.LabelGKEScheduledMaintenanceTime]; ok {
		if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
			starts := time.Unix(secs, 0)
			if due := starts.Add(-cfg.Lead); !now.Before(due) {
				active = append(active, Signal{Node: node.Name, Source: SourceGKEScheduled, Name: v1alpha1.LabelGKEScheduledMaintenanceTime,
					Reason: "host maintenance scheduled at " + starts.UTC().Format(time.RFC3339), Starts: starts})
			} else {
				next = due
			}
		}
	}
	for _, c := range node.Status.Conditions {
		if c.Status == corev1.ConditionTrue && slices.Contains(cfg.Conditions, string(c.Type)) {
			active = append(active, Signal{Node: node.Name, Source: SourceCondition, Name: string(c.Type), Reason: c.Message})
		}
	}
	return active, next
}

// Facts is what Of reads of a Node: a change in it may start or end a maintenance. The
// controller wakes runs on a Node only when its Facts change, not at every heartbeat.
func Facts(node *corev1.Node, cfg Config) string {
	if node == nil {
		return ""
	}
	// A shutdown's announcement is a notice too: a run with spec.checkpoint asks its workers
	// to save on it.
	f := fmt.Sprintf("cordoned=%t scheduled=%s shutdown=%s", Cordoned(node), node.Labels[v1alpha1.LabelGKEScheduledMaintenanceTime],
		node.Annotations[v1alpha1.AnnotationShutdownDetectedAt])
	for _, t := range node.Spec.Taints {
		if slices.Contains(v1alpha1.DisruptionTaints, t.Key) {
			f += " " + t.Key
		}
	}
	for _, c := range node.Status.Conditions {
		if slices.Contains(cfg.Conditions, string(c.Type)) {
			f += fmt.Sprintf(" %s=%s", c.Type, c.Status)
		}
	}
	return f
}

// Lift splits a run's maintenance exclusions into those still under maintenance and those
// to lift. under reports whether a node is still under maintenance; a node that is gone
// is lifted too (no exclusion can matter for it).
func Lift(excluded []string, under func(node string) bool) (kept, lifted []string) {
	for _, n := range excluded {
		if under(n) {
			kept = append(kept, n)
		} else {
			lifted = append(lifted, n)
		}
	}
	return kept, lifted
}
