// Package plannedmove is the TrainingRun reconciler's reading of planned node maintenance:
// a maintenance moves a run off nodes before they go, as a restart that is no failure
// (CausePlannedMaintenance): its default rule spends no budget, and the nodes are kept off
// (status.maintenanceExcludedNodes) only until the maintenance is over. What a node is under
// is maintenance.Of's; a NodeMaintenance that holds the node also says whether the run may
// move (its plan: a gang with no placement left stays where it is, and says so).
//
// The Planner reads (nodes, NodeMaintenances) and decides; the reconciler decides the move
// through the failure policy, writes it and acts on it, as on a failure's.
package plannedmove

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/maintenance"
	"github.com/faultline-dev/faultline/pkg/nodemaintenance"
	"github.com/faultline-dev/faultline/pkg/policy"
)

// Planner reads the planned maintenances of a run's nodes.
type Planner struct {
	// Client reads Nodes and NodeMaintenances (the manager's cache).
	Client client.Reader
	// Maintenance says which platform signals of a planned maintenance the runs act on.
	Maintenance maintenance.Config
	Clock       clock.PassiveClock
}

// Move is the planned restart that an attempt's workers call for, if any.
type Move struct {
	Signals []maintenance.Signal
	Nodes   []string // the nodes under maintenance that hold workers
	Root    *corev1.Pod
	// Blocked is the NodeMaintenance plan's reason the run may not move ("" if it may).
	Blocked string
	// Wait: a NodeMaintenance holds a node but has not planned the run yet.
	Wait bool
	// Next is when a scheduled maintenance becomes due (zero if none).
	Next time.Time
}

// Plan looks at the nodes of the current attempt's live workers.
func (p *Planner) Plan(ctx context.Context, run *v1alpha1.TrainingRun, workers []*corev1.Pod) (Move, error) {
	var mv Move
	nms, err := p.nodeMaintenances(ctx)
	if err != nil {
		return mv, err
	}
	now := p.Clock.Now()
	seen := map[string]bool{}
	for _, w := range workers {
		name := w.Spec.NodeName
		if name == "" || seen[name] || w.Status.Phase == corev1.PodSucceeded || w.Status.Phase == corev1.PodFailed || w.DeletionTimestamp != nil {
			continue
		}
		seen[name] = true
		node := &corev1.Node{}
		if err := p.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			if apierrors.IsNotFound(err) {
				continue // a gone node is a failure's business, not a plan's
			}
			return mv, fmt.Errorf("get node %s: %w", name, err)
		}
		active, next := maintenance.Of(node, nms, p.Maintenance, now)
		if !next.IsZero() && (mv.Next.IsZero() || next.Before(mv.Next)) {
			mv.Next = next
		}
		if len(active) == 0 {
			continue
		}
		if nm := maintenance.Governing(node, name, nms); nm != nil {
			entry := planOf(nm, run)
			switch {
			case entry == nil:
				mv.Wait = true
				continue
			case !entry.Feasible:
				mv.Blocked = fmt.Sprintf("NodeMaintenance %s drains node %s, but %s", nm.Name, name, entry.Message)
				continue
			}
		}
		mv.Signals = append(mv.Signals, active...)
		mv.Nodes = append(mv.Nodes, name)
		if mv.Root == nil || attempt.IndexOrNone(w) < attempt.IndexOrNone(mv.Root) {
			mv.Root = w
		}
	}
	// The root is the lowest index on a node under maintenance: the coordinator when it is one.
	for _, w := range workers {
		if slices.Contains(mv.Nodes, w.Spec.NodeName) && attempt.IndexOrNone(w) < attempt.IndexOrNone(mv.Root) {
			mv.Root = w
		}
	}
	return mv, nil
}

// Failure is the move as the failure policy decides on it, at now.
func (m Move) Failure() policy.Failure {
	return policy.Failure{Class: v1alpha1.ClassInfrastructure, Cause: v1alpha1.CausePlannedMaintenance, Node: m.Root.Spec.NodeName}
}

// Verdict is the move, decided by d at now for run's current attempt, as status keeps it.
func (m Move) Verdict(run *v1alpha1.TrainingRun, d policy.Decision, now metav1.Time) *v1alpha1.FailureVerdict {
	var evidence []string
	for _, s := range m.Signals {
		if len(evidence) < 20 {
			evidence = append(evidence, s.String())
		}
	}
	return &v1alpha1.FailureVerdict{
		Class: v1alpha1.ClassInfrastructure, Cause: v1alpha1.CausePlannedMaintenance,
		Rule: d.Rule, Action: d.Action,
		Pod: m.Root.Name, Index: ptr.To(int32(attempt.IndexOrNone(m.Root))), Node: m.Root.Spec.NodeName,
		FailedAt: &now, DecidedAt: &now,
		Evidence: evidence,
		Explanation: fmt.Sprintf("planned maintenance of %s (%s): attempt %d moves off %s; no worker failed, and the run's failure budget is %s",
			strings.Join(m.Nodes, ", "), why(m.Signals), run.Status.Attempt, map[bool]string{true: "that node", false: "those nodes"}[len(m.Nodes) == 1],
			map[bool]string{true: "spent by rule " + d.Rule, false: "untouched"}[d.SpendsBudget]),
	}
}

// Why names the maintenances behind the move, for people.
func (m Move) Why() string { return why(m.Signals) }

// SetBlocked sets or clears the MaintenanceBlocked condition; it reports a change.
func SetBlocked(run *v1alpha1.TrainingRun, blocked bool, why string) bool {
	if blocked {
		return meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionMaintenanceBlocked, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonNoPlacement, Message: why})
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionMaintenanceBlocked); c != nil && c.Status == metav1.ConditionTrue {
		return meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionMaintenanceBlocked, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonProgressing, Message: "no planned maintenance holds the run"})
	}
	return false
}

// planOf is nm's plan for the run's current attempt, or nil if it has none yet.
func planOf(nm *v1alpha1.NodeMaintenance, run *v1alpha1.TrainingRun) *v1alpha1.MaintenanceRun {
	for i := range nm.Status.Runs {
		e := &nm.Status.Runs[i]
		if e.Namespace == run.Namespace && e.Name == run.Name && e.Attempt == run.Status.Attempt {
			return e
		}
	}
	return nil
}

func (p *Planner) nodeMaintenances(ctx context.Context) ([]v1alpha1.NodeMaintenance, error) {
	list := &v1alpha1.NodeMaintenanceList{}
	if err := p.Client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("list nodemaintenances: %w", err)
	}
	return list.Items, nil
}

// why names the maintenances behind signals, for people: the SRE's reason first.
func why(signals []maintenance.Signal) string {
	var parts []string
	for _, s := range signals {
		var p string
		switch s.Source {
		case maintenance.SourceNodeMaintenance:
			p = "NodeMaintenance " + s.Name
			if s.Reason != "" {
				p += ": " + s.Reason
			}
		case maintenance.SourceCordon:
			p = "cordoned"
		default:
			p = s.Source
			if s.Reason != "" {
				p += ": " + s.Reason
			}
		}
		if !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "; ")
}

// Lift sorts the nodes run keeps off for a maintenance: those whose maintenance is over
// (uncordoned, or its signal gone) are lifted, the others kept.
func (p *Planner) Lift(ctx context.Context, run *v1alpha1.TrainingRun) (kept, lifted []string, err error) {
	if len(run.Status.MaintenanceExcludedNodes) == 0 {
		return nil, nil, nil
	}
	nms, err := p.nodeMaintenances(ctx)
	if err != nil {
		return nil, nil, err
	}
	now := p.Clock.Now()
	kept, lifted = maintenance.Lift(run.Status.MaintenanceExcludedNodes, func(name string) bool {
		node := &corev1.Node{}
		if err := p.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return !apierrors.IsNotFound(err) // unknown: keep it
		}
		active, _ := maintenance.Of(node, nms, p.Maintenance, now)
		return len(active) > 0
	})
	return kept, lifted, nil
}

// RunsByExclusion indexes runs by the nodes they keep off for a maintenance
// (nodemaintenance.PodsByNode finds those with a worker on a node).
const RunsByExclusion = "faultline-runs-by-maintenance-exclusion"

func exclusionsOf(o client.Object) []string {
	if run, ok := o.(*v1alpha1.TrainingRun); ok {
		return run.Status.MaintenanceExcludedNodes
	}
	return nil
}

// Index registers the indexes that find the runs of a node: by their workers' node, and by
// the nodes they keep off.
func Index(ctx context.Context, indexer client.FieldIndexer) error {
	if err := nodemaintenance.IndexPodsByNode(ctx, indexer); err != nil {
		return err
	}
	return indexer.IndexField(ctx, &v1alpha1.TrainingRun{}, RunsByExclusion, exclusionsOf)
}

// FactsChanged passes a Node's events only when what a maintenance reads of it changed: not
// at every heartbeat of every node.
func FactsChanged(cfg maintenance.Config) predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldN, _ := e.ObjectOld.(*corev1.Node)
			newN, _ := e.ObjectNew.(*corev1.Node)
			return maintenance.Facts(oldN, cfg) != maintenance.Facts(newN, cfg)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// NodeMaintenanceSelector is which NodeMaintenances a controller acts on: those selector
// matches when it is given (set); otherwise every one for a controller of all namespaces,
// and none for one limited to a namespace, which would report a cluster's drain from the
// runs of its namespace alone (and two such controllers would write over each other).
func NodeMaintenanceSelector(namespace, selector string, set bool) (labels.Selector, error) {
	if !set {
		if namespace != "" {
			return nil, nil
		}
		return labels.Everything(), nil
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, fmt.Errorf("--node-maintenance-selector %q: %w", selector, err)
	}
	return sel, nil
}
