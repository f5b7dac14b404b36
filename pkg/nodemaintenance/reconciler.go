// Package nodemaintenance is the controller of NodeMaintenances, the drains an SRE asks for
// (`launcher drain`): it plans which runs and indexes a drain hits, cordons the nodes, and
// follows each run until it runs off them. The runs move themselves (pkg/controller reads
// the plan from the NodeMaintenance's status); what a plan is lives in pkg/maintenance.
package nodemaintenance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/maintenance"
)

// Reconciler acts on NodeMaintenances: it plans (which runs and indexes the
// drain hits, and whether each gang still fits elsewhere), cordons the nodes, and follows
// each run until it runs off them. The runs move themselves (Reconciler.plan), reading the
// plan from the NodeMaintenance's status: it is written before the cordon, so that no run
// moves unplanned. A dry run stops after the plan.
type Reconciler struct {
	client.Client
	// APIReader lists every Node and pod of the cluster for the plan (the cache holds only
	// the runs' workers, and Nodes without their capacity).
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Selector picks the NodeMaintenances this controller acts on (nil: every one).
	Selector labels.Selector
}

// maintenanceRecheck paces a drain that waits on nothing the watches bring (a pod stuck
// stopping on a node).
const maintenanceRecheck = 5 * time.Second

// Reconcile moves one NodeMaintenance a step further.
func (m *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	nm := &v1alpha1.NodeMaintenance{}
	if err := m.Get(ctx, req.NamespacedName, nm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if nm.DeletionTimestamp != nil || !m.selects(nm) || nm.Status.Phase == v1alpha1.MaintenanceCompleted ||
		nm.Spec.DryRun && nm.Status.Phase == v1alpha1.MaintenancePlanned {
		return ctrl.Result{}, nil
	}
	before := nm.Status.DeepCopy()
	now := metav1.NewTime(m.Clock.Now())
	if nm.Status.StartTime == nil {
		if err := m.planRuns(ctx, nm, now); err != nil {
			return ctrl.Result{}, err
		}
		if nm.Spec.DryRun {
			nm.Status.Phase = v1alpha1.MaintenancePlanned
			nm.Status.Message = summary(nm)
			return ctrl.Result{}, m.Status().Update(ctx, nm)
		}
		nm.Status.Phase = v1alpha1.MaintenanceDraining
		// The plan goes first: a run sees the cordon only after its plan.
		if err := m.Status().Update(ctx, nm); err != nil {
			return ctrl.Result{}, fmt.Errorf("write the plan of nodemaintenance %s: %w", nm.Name, err)
		}
		m.Recorder.Eventf(nm, nil, corev1.EventTypeNormal, "Planned", "Plan", "%s", summary(nm))
		before = nm.Status.DeepCopy()
	}
	if err := m.cordon(ctx, nm, now); err != nil {
		return ctrl.Result{}, err
	}
	left, err := m.follow(ctx, nm, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	m.phase(nm, left, now)
	if !equality.Semantic.DeepEqual(before, &nm.Status) {
		if err := m.Status().Update(ctx, nm); err != nil {
			return ctrl.Result{}, fmt.Errorf("update status of nodemaintenance %s: %w", nm.Name, err)
		}
		if before.Phase != nm.Status.Phase {
			m.Recorder.Eventf(nm, nil, corev1.EventTypeNormal, string(nm.Status.Phase), "Drain", "%s", nm.Status.Message)
		}
	}
	if nm.Status.Phase == v1alpha1.MaintenanceDraining && left > 0 {
		return ctrl.Result{RequeueAfter: maintenanceRecheck}, nil
	}
	return ctrl.Result{}, nil
}

func (m *Reconciler) selects(nm *v1alpha1.NodeMaintenance) bool {
	return m.Selector == nil || m.Selector.Matches(labels.Set(nm.Labels))
}

// planRuns records which runs the drain hits and whether each can move.
func (m *Reconciler) planRuns(ctx context.Context, nm *v1alpha1.NodeMaintenance, now metav1.Time) error {
	nm.Status.StartTime = &now
	nodes := &corev1.NodeList{}
	if err := m.APIReader.List(ctx, nodes); err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	var all []*corev1.Node
	for i := range nodes.Items {
		all = append(all, &nodes.Items[i])
	}
	for _, name := range nm.Spec.Nodes {
		missing := !slices.ContainsFunc(all, func(n *corev1.Node) bool { return n.Name == name })
		nm.Status.Nodes = append(nm.Status.Nodes, v1alpha1.MaintenanceNode{Name: name, Missing: missing})
	}
	// The runs' workers, from the cache (only theirs are cached), on the drained nodes.
	var workers []*corev1.Pod
	runs := map[string]*v1alpha1.TrainingRun{}
	for _, name := range nm.Spec.Nodes {
		pods := &corev1.PodList{}
		if err := m.List(ctx, pods, client.MatchingFields{PodsByNode: name}); err != nil {
			return fmt.Errorf("list workers on node %s: %w", name, err)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			workers = append(workers, p)
			key := p.Namespace + "/" + p.Labels[v1alpha1.LabelRun]
			if _, done := runs[key]; done {
				continue
			}
			run := &v1alpha1.TrainingRun{}
			if err := m.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Labels[v1alpha1.LabelRun]}, run); err != nil {
				if apierrors.IsNotFound(err) {
					runs[key] = nil
					continue
				}
				return err
			}
			runs[key] = run
		}
	}
	hits := maintenance.Hits(workers, runs, nm.Spec.Nodes)
	if len(hits) == 0 {
		nm.Status.Runs = nil
		return nil
	}
	// What every live pod of the cluster requests per node, for the runs' placements.
	pods := &corev1.PodList{}
	live := fields.AndSelectors(fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)))
	if err := m.APIReader.List(ctx, pods, client.MatchingFieldsSelector{Selector: live}); err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	for i := range hits {
		h := &hits[i]
		run := runs[h.Namespace+"/"+h.Name]
		used := maintenance.Used(pods.Items, func(p *corev1.Pod) bool {
			return p.Namespace == run.Namespace && p.Labels[v1alpha1.LabelRunUID] == string(run.UID)
		})
		h.Feasible, h.Message = maintenance.Feasible(maintenance.GangOf(run), all, used, nm.Spec.Nodes)
	}
	if len(hits) > v1alpha1.MaxExcludedNodes {
		hits = hits[:v1alpha1.MaxExcludedNodes]
	}
	nm.Status.Runs = hits
	return nil
}

// cordon cordons every node of nm not cordoned yet, and notes an uncordon after it.
func (m *Reconciler) cordon(ctx context.Context, nm *v1alpha1.NodeMaintenance, now metav1.Time) error {
	for i := range nm.Status.Nodes {
		st := &nm.Status.Nodes[i]
		if st.Missing || st.UncordonedAt != nil {
			continue
		}
		node := &corev1.Node{}
		if err := m.Get(ctx, client.ObjectKey{Name: st.Name}, node); err != nil {
			if apierrors.IsNotFound(err) {
				st.Missing = true
				continue
			}
			return fmt.Errorf("get node %s: %w", st.Name, err)
		}
		switch {
		case st.CordonedAt == nil && node.Spec.Unschedulable:
			st.CordonedAt = &now // cordoned already, by someone or by us before a crash
		case st.CordonedAt == nil:
			// Only spec.unschedulable, as kubectl cordon does: deploy/admission/controller.yaml
			// allows the controller nothing else on a Node.
			patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`))
			if err := m.Patch(ctx, node, patch); err != nil {
				return fmt.Errorf("cordon node %s for nodemaintenance %s: %w", st.Name, nm.Name, err)
			}
			st.CordonedAt = &now
		case !node.Spec.Unschedulable:
			// The cache may not have seen our own cordon yet: the write of the plan wakes
			// this reconcile again, and its event can arrive before the Node's. Only the API
			// server's copy says that the SRE is done with the node.
			uncordoned, err := m.uncordoned(ctx, st.Name)
			if err != nil {
				return err
			}
			if uncordoned {
				st.UncordonedAt = &now
			}
		}
	}
	return nil
}

// uncordoned reads node from the API server and reports whether it is schedulable (a node
// that is gone is not: the next reconcile finds it missing).
func (m *Reconciler) uncordoned(ctx context.Context, name string) (bool, error) {
	node := &corev1.Node{}
	if err := m.APIReader.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("get node %s: %w", name, err)
	}
	return !node.Spec.Unschedulable, nil
}

// PodsByNode indexes the cached workers by their node. The drain reads the workers of its
// nodes through it, and the run reconciler the runs on a node: IndexPodsByNode registers it
// whether or not this controller runs.
const PodsByNode = "faultline-pods-by-node"

// IndexPodsByNode registers PodsByNode on the cache's pods.
func IndexPodsByNode(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &corev1.Pod{}, PodsByNode, nodeOfPod)
}

func nodeOfPod(o client.Object) []string {
	if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		return []string{p.Spec.NodeName}
	}
	return nil
}

// live says whether a worker has not ended: it still holds its node.
func live(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// follow records what became of each run hit, and returns how many live workers of runs
// are still on the nodes.
func (m *Reconciler) follow(ctx context.Context, nm *v1alpha1.NodeMaintenance, now metav1.Time) (int, error) {
	for i := range nm.Status.Runs {
		e := &nm.Status.Runs[i]
		if e.Gone || e.RunningAt != nil {
			continue
		}
		run := &v1alpha1.TrainingRun{}
		if err := m.Get(ctx, types.NamespacedName{Namespace: e.Namespace, Name: e.Name}, run); err != nil {
			if apierrors.IsNotFound(err) {
				e.Gone, e.Message = true, "the run was deleted"
				continue
			}
			return 0, err
		}
		for _, rec := range run.Status.Attempts {
			switch {
			case rec.Attempt == e.Attempt && rec.EndTime != nil && e.MovedAt == nil:
				e.MovedAt = rec.EndTime
				if rec.Verdict != nil && rec.Verdict.Cause != v1alpha1.CausePlannedMaintenance {
					e.Message = fmt.Sprintf("attempt %d ended by %s before its planned move", e.Attempt, rec.Verdict.Cause)
				}
			case rec.Attempt > e.Attempt && e.MovedAt != nil:
				e.ToAttempt = rec.Attempt
				e.RunningAt = rec.RunningTime
			}
		}
		if e.MovedAt == nil && (run.Status.Phase == v1alpha1.PhaseSucceeded || run.Status.Phase == v1alpha1.PhaseFailed) {
			e.Gone, e.Message = true, fmt.Sprintf("the run %s before it was moved", strings.ToLower(string(run.Status.Phase)))
		}
	}
	left := 0
	for _, name := range nm.Spec.Nodes {
		pods := &corev1.PodList{}
		if err := m.List(ctx, pods, client.MatchingFields{PodsByNode: name}); err != nil {
			return 0, err
		}
		for i := range pods.Items {
			if live(&pods.Items[i]) {
				left++
			}
		}
	}
	return left, nil
}

// phase sums the maintenance up.
func (m *Reconciler) phase(nm *v1alpha1.NodeMaintenance, left int, now metav1.Time) {
	st := &nm.Status
	over := len(st.Nodes) > 0
	for _, n := range st.Nodes {
		over = over && (n.Missing || n.UncordonedAt != nil)
	}
	blocked := slices.ContainsFunc(st.Runs, func(e v1alpha1.MaintenanceRun) bool { return !e.Feasible && e.MovedAt == nil && !e.Gone })
	switch {
	case over:
		st.Phase = v1alpha1.MaintenanceCompleted
		st.Message = "every node is schedulable again: the maintenance is over"
	case left == 0:
		st.Phase = v1alpha1.MaintenanceDrained
		if st.DrainedTime == nil {
			st.DrainedTime = &now
		}
		st.Message = summary(nm)
	case blocked:
		st.Phase = v1alpha1.MaintenanceBlocked
		st.Message = summary(nm)
	default:
		st.Phase = v1alpha1.MaintenanceDraining
		st.Message = fmt.Sprintf("%d workers of training runs still on the nodes; %s", left, summary(nm))
	}
}

// summary says in a line what the drain hits and where it stands.
func summary(nm *v1alpha1.NodeMaintenance) string {
	moved, blocked, running := 0, 0, 0
	for _, e := range nm.Status.Runs {
		switch {
		case !e.Feasible && e.MovedAt == nil && !e.Gone:
			blocked++
		case e.MovedAt != nil:
			moved++
		}
		if e.RunningAt != nil {
			running++
		}
	}
	s := fmt.Sprintf("%d runs hit", len(nm.Status.Runs))
	if nm.Spec.DryRun {
		if blocked > 0 {
			s += fmt.Sprintf(", %d with no placement left off the nodes", blocked)
		}
		return s
	}
	s += fmt.Sprintf(", %d moved, %d running again", moved, running)
	if blocked > 0 {
		s += fmt.Sprintf(", %d blocked (no placement left off the nodes: see status.runs)", blocked)
	}
	return s
}

// SetupWithManager registers the reconciler: it wakes on its NodeMaintenances, on the
// workers on their nodes, on their nodes, and on the runs they hit.
func (m *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	// maintenances are the NodeMaintenances for which keep holds.
	maintenances := func(ctx context.Context, keep func(*v1alpha1.NodeMaintenance) bool) []reconcile.Request {
		list := &v1alpha1.NodeMaintenanceList{}
		if err := m.List(ctx, list); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		for i := range list.Items {
			if nm := &list.Items[i]; keep(nm) {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(nm)})
			}
		}
		return reqs
	}
	byNode := func(ctx context.Context, node string) []reconcile.Request {
		return maintenances(ctx, func(nm *v1alpha1.NodeMaintenance) bool {
			return nm.Status.Phase != v1alpha1.MaintenanceCompleted && slices.Contains(nm.Spec.Nodes, node)
		})
	}
	podToNM := func(ctx context.Context, o client.Object) []reconcile.Request {
		if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			return byNode(ctx, p.Spec.NodeName)
		}
		return nil
	}
	nodeToNM := func(ctx context.Context, o client.Object) []reconcile.Request { return byNode(ctx, o.GetName()) }
	runToNM := func(ctx context.Context, o client.Object) []reconcile.Request {
		return maintenances(ctx, func(nm *v1alpha1.NodeMaintenance) bool {
			return slices.ContainsFunc(nm.Status.Runs, func(e v1alpha1.MaintenanceRun) bool { return e.Namespace == o.GetNamespace() && e.Name == o.GetName() })
		})
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("nodemaintenance").
		For(&v1alpha1.NodeMaintenance{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToNM)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(nodeToNM)).
		Watches(&v1alpha1.TrainingRun{}, handler.EnqueueRequestsFromMapFunc(runToNM)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(m)
}
