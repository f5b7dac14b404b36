package controller

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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/maintenance"
	"github.com/faultline-dev/faultline/pkg/nodemaintenance"
	"github.com/faultline-dev/faultline/pkg/policy"
)

// A planned maintenance moves a run off nodes before they go, as a restart that is no
// failure (CausePlannedMaintenance): its default rule spends no budget, and the nodes are
// kept off (status.maintenanceExcludedNodes) only until the maintenance is over. What a node
// is under is maintenance.Of's; a NodeMaintenance that holds the node also says whether the
// run may move (its plan: a gang with no placement left stays where it is, and says so).

// plannedMove is the planned restart that the current attempt's workers call for, if any.
type plannedMove struct {
	signals []maintenance.Signal
	nodes   []string // the nodes under maintenance that hold workers
	root    *corev1.Pod
	// blocked is the NodeMaintenance plan's reason the run may not move ("" if it may).
	blocked string
	// wait: a NodeMaintenance holds a node but has not planned the run yet.
	wait bool
	// next is when a scheduled maintenance becomes due (zero if none).
	next time.Time
}

// plannedMaintenance looks at the nodes of the current attempt's live workers.
func (r *Reconciler) plannedMaintenance(ctx context.Context, run *v1alpha1.TrainingRun, workers []*corev1.Pod) (plannedMove, error) {
	var mv plannedMove
	nms, err := r.nodeMaintenances(ctx)
	if err != nil {
		return mv, err
	}
	now := r.Clock.Now()
	seen := map[string]bool{}
	for _, p := range workers {
		name := p.Spec.NodeName
		if name == "" || seen[name] || !podLive(p) || p.DeletionTimestamp != nil {
			continue
		}
		seen[name] = true
		node := &corev1.Node{}
		if err := r.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			if apierrors.IsNotFound(err) {
				continue // a gone node is a failure's business, not a plan's
			}
			return mv, fmt.Errorf("get node %s: %w", name, err)
		}
		active, next := maintenance.Of(node, nms, r.Maintenance, now)
		if !next.IsZero() && (mv.next.IsZero() || next.Before(mv.next)) {
			mv.next = next
		}
		if len(active) == 0 {
			continue
		}
		if nm := maintenance.Governing(node, name, nms); nm != nil {
			entry := planOf(nm, run)
			switch {
			case entry == nil:
				mv.wait = true
				continue
			case !entry.Feasible:
				mv.blocked = fmt.Sprintf("NodeMaintenance %s drains node %s, but %s", nm.Name, name, entry.Message)
				continue
			}
		}
		mv.signals = append(mv.signals, active...)
		mv.nodes = append(mv.nodes, name)
		if mv.root == nil || attempt.IndexOrNone(p) < attempt.IndexOrNone(mv.root) {
			mv.root = p
		}
	}
	// The root is the lowest index on a node under maintenance: the coordinator when it is one.
	for _, p := range workers {
		if slices.Contains(mv.nodes, p.Spec.NodeName) && attempt.IndexOrNone(p) < attempt.IndexOrNone(mv.root) {
			mv.root = p
		}
	}
	return mv, nil
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

func (r *Reconciler) nodeMaintenances(ctx context.Context) ([]v1alpha1.NodeMaintenance, error) {
	list := &v1alpha1.NodeMaintenanceList{}
	if err := r.List(ctx, list); err != nil {
		return nil, fmt.Errorf("list nodemaintenances: %w", err)
	}
	return list.Items, nil
}

// plan acts on a plannedMove of a running attempt: a restart, a word that the run cannot
// move, or nothing yet. done is false when tracking goes on as usual.
func (r *Reconciler) plan(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (res ctrl.Result, done bool, err error) {
	mv, err := r.plannedMaintenance(ctx, run, obs.workers())
	if err != nil {
		return ctrl.Result{}, true, err
	}
	if !mv.next.IsZero() {
		res.RequeueAfter = mv.next.Sub(r.Clock.Now())
	}
	blocked := mv.blocked != "" && len(mv.nodes) == 0
	if changed := setMaintenanceBlocked(run, blocked, mv.blocked); changed {
		if blocked {
			r.event(run, corev1.EventTypeWarning, v1alpha1.ReasonMaintenanceBlocked, v1alpha1.ActionWait, "%s", mv.blocked)
		}
		return res, true, r.writeStatus(ctx, run)
	}
	if len(mv.nodes) == 0 {
		return res, false, nil
	}
	res, err = r.plannedRestart(ctx, run, obs, mv)
	return res, true, err
}

// setMaintenanceBlocked sets or clears the MaintenanceBlocked condition; it reports a change.
func setMaintenanceBlocked(run *v1alpha1.TrainingRun, blocked bool, why string) bool {
	if blocked {
		return meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionMaintenanceBlocked, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonNoPlacement, Message: why})
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionMaintenanceBlocked); c != nil && c.Status == metav1.ConditionTrue {
		return meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionMaintenanceBlocked, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonProgressing, Message: "no planned maintenance holds the run"})
	}
	return false
}

// plannedRestart decides on the move through the failure policy (a rule that names
// PlannedMaintenance may spend budget or fail the run), and acts on it as on a failure's.
func (r *Reconciler) plannedRestart(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed, mv plannedMove) (ctrl.Result, error) {
	now := r.now()
	index := int32(attempt.IndexOrNone(mv.root))
	d := policy.Decide(policy.Input{
		Policy:   run.Spec.FailurePolicy,
		Restarts: run.Status.Restarts,
		History:  run.Status.Attempts,
		Failure:  policy.Failure{Class: v1alpha1.ClassInfrastructure, Cause: v1alpha1.CausePlannedMaintenance, Node: mv.root.Spec.NodeName},
		FailedAt: now.Time,
	})
	var evidence []string
	for _, s := range mv.signals {
		if len(evidence) < 20 {
			evidence = append(evidence, s.String())
		}
	}
	v := &v1alpha1.FailureVerdict{
		Class: v1alpha1.ClassInfrastructure, Cause: v1alpha1.CausePlannedMaintenance,
		Rule: d.Rule, Action: d.Action,
		Pod: mv.root.Name, Index: &index, Node: mv.root.Spec.NodeName,
		FailedAt: &now, DecidedAt: &now,
		Evidence: evidence,
		Explanation: fmt.Sprintf("planned maintenance of %s (%s): attempt %d moves off %s; no worker failed, and the run's failure budget is %s",
			strings.Join(mv.nodes, ", "), why(mv.signals), run.Status.Attempt, plural(len(mv.nodes), "that node", "those nodes"),
			map[bool]string{true: "spent by rule " + d.Rule, false: "untouched"}[d.SpendsBudget]),
	}
	apply, ok := actions[d.Action]
	if !ok {
		return ctrl.Result{}, fmt.Errorf("run %s/%s: rule %s has unknown action %q", run.Namespace, run.Name, d.Rule, d.Action)
	}
	if d.Action != v1alpha1.ActionFailRun {
		for _, n := range mv.nodes {
			if !slices.Contains(run.Status.MaintenanceExcludedNodes, n) && len(run.Status.MaintenanceExcludedNodes) < v1alpha1.MaxExcludedNodes {
				run.Status.MaintenanceExcludedNodes = append(run.Status.MaintenanceExcludedNodes, n)
			}
		}
	}
	setMaintenanceBlocked(run, false, "")
	return apply(r, ctx, run, obs, v, d, nil)
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

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// liftMaintenance drops the maintenance exclusions of nodes whose maintenance is over, and
// says so in an event. It reports whether the status changed (the caller writes it).
func (r *Reconciler) liftMaintenance(ctx context.Context, run *v1alpha1.TrainingRun) (bool, error) {
	if len(run.Status.MaintenanceExcludedNodes) == 0 {
		return false, nil
	}
	nms, err := r.nodeMaintenances(ctx)
	if err != nil {
		return false, err
	}
	now := r.Clock.Now()
	kept, lifted := maintenance.Lift(run.Status.MaintenanceExcludedNodes, func(name string) bool {
		node := &corev1.Node{}
		if err := r.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return !apierrors.IsNotFound(err) // unknown: keep it
		}
		active, _ := maintenance.Of(node, nms, r.Maintenance, now)
		return len(active) > 0
	})
	if len(lifted) == 0 {
		return false, nil
	}
	run.Status.MaintenanceExcludedNodes = kept
	r.event(run, corev1.EventTypeNormal, v1alpha1.ReasonMaintenanceOver, v1alpha1.ActionLiftExclusion, "maintenance of %s is over (uncordoned, or its signal gone): later attempts may use %s again",
		strings.Join(lifted, ", "), plural(len(lifted), "it", "them"))
	return true, nil
}

// runsByMaintenanceExclusion indexes runs by the nodes they keep off for a maintenance
// (nodemaintenance.PodsByNode finds those with a worker on a node).
const runsByMaintenanceExclusion = "faultline-runs-by-maintenance-exclusion"

func maintenanceExclusionsOf(o client.Object) []string {
	if run, ok := o.(*v1alpha1.TrainingRun); ok {
		return run.Status.MaintenanceExcludedNodes
	}
	return nil
}

// runsOnNodes are the runs with a worker on one of nodes, or that keep one of them off for a
// maintenance.
func (r *Reconciler) runsOnNodes(ctx context.Context, nodes []string) []reconcile.Request {
	seen := map[client.ObjectKey]bool{}
	var reqs []reconcile.Request
	addKey := func(k client.ObjectKey) {
		if k.Name != "" && !seen[k] {
			seen[k] = true
			reqs = append(reqs, reconcile.Request{NamespacedName: k})
		}
	}
	for _, n := range nodes {
		pods := &corev1.PodList{}
		if err := r.List(ctx, pods, client.MatchingFields{nodemaintenance.PodsByNode: n}); err == nil {
			for i := range pods.Items {
				addKey(client.ObjectKey{Namespace: pods.Items[i].Namespace, Name: pods.Items[i].Labels[v1alpha1.LabelRun]})
			}
		}
		runs := &v1alpha1.TrainingRunList{}
		if err := r.List(ctx, runs, client.MatchingFields{runsByMaintenanceExclusion: n}); err == nil {
			for i := range runs.Items {
				addKey(client.ObjectKeyFromObject(&runs.Items[i]))
			}
		}
	}
	return reqs
}

// indexMaintenance registers the indexes that find the runs of a node.
func indexMaintenance(ctx context.Context, indexer client.FieldIndexer) error {
	if err := nodemaintenance.IndexPodsByNode(ctx, indexer); err != nil {
		return err
	}
	return indexer.IndexField(ctx, &v1alpha1.TrainingRun{}, runsByMaintenanceExclusion, maintenanceExclusionsOf)
}

// maintenanceFactsChanged passes a Node's events only when what a maintenance reads of it
// changed: not at every heartbeat of every node.
func maintenanceFactsChanged(cfg maintenance.Config) predicate.Funcs {
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
