package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// labelMaintenanceShard labels a test's NodeMaintenances with its namespace: its controller
// acts only on those (--node-maintenance-selector), so parallel scenarios, each with a
// controller of its own, never write over each other's drains.
const labelMaintenanceShard = "test.faultline.dev/ns"

// maintenanceScenario is scenario with a controller that acts on the test's own
// NodeMaintenances.
func maintenanceScenario(t *testing.T) (context.Context, *cluster.Cluster, string) {
	t.Helper()
	ctx, c, ns, _ := scenarioWith(t, func(ns string) []string {
		return []string{"--node-maintenance-selector", labelMaintenanceShard + "=" + ns}
	})
	return ctx, c, ns
}

// scenarioWith is scenario with controller arguments that name the namespace.
func scenarioWith(t *testing.T, args func(ns string) []string) (context.Context, *cluster.Cluster, string, *cluster.Process) {
	t.Helper()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	t.Cleanup(cancel)
	p := startController(t, ns, args(ns)...)
	dumpOnFailure(t, c, ns)
	return ctx, c, ns, p
}

// nodePool adds n fake nodes that only this test's runs use (a taint they alone tolerate,
// a label they select), and returns their names and the run option that puts a run there,
// preferring the first node.
func nodePool(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string, n int) ([]string, runOption) {
	t.Helper()
	pool := "pool-" + ns
	taint := corev1.Taint{Key: "test.faultline.dev/dedicated", Value: pool, Effect: corev1.TaintEffectNoSchedule}
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s-%d", pool, i)
		if err := c.AddNode(ctx, name, cluster.DefaultNode, taint); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		patch := fmt.Sprintf(`{"metadata":{"labels":{"test.faultline.dev/pool":%q}}}`, pool)
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	return names, func(r *v1alpha1.TrainingRun) {
		withPreferredNode(names[0])(r)
		r.Spec.Template.Spec.NodeSelector = map[string]string{"test.faultline.dev/pool": pool}
		r.Spec.Template.Spec.Tolerations = append(r.Spec.Template.Spec.Tolerations,
			corev1.Toleration{Key: taint.Key, Operator: corev1.TolerationOpEqual, Value: taint.Value, Effect: taint.Effect})
	}
}

// drainNodes creates a NodeMaintenance of the nodes for the test's controller.
func drainNodes(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string, dryRun bool, nodes ...string) *v1alpha1.NodeMaintenance {
	t.Helper()
	nm := &v1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "drain-", Labels: map[string]string{labelMaintenanceShard: ns}},
		Spec:       v1alpha1.NodeMaintenanceSpec{Nodes: nodes, Reason: "firmware update FW-" + ns, DryRun: dryRun},
	}
	if err := runClient(t, c).Create(ctx, nm); err != nil {
		t.Fatalf("create NodeMaintenance: %v", err)
	}
	t.Cleanup(func() { _ = runClient(t, c).Delete(context.Background(), nm) })
	return nm
}

// waitMaintenance watches a NodeMaintenance until cond holds.
func waitMaintenance(ctx context.Context, t *testing.T, c *cluster.Cluster, name, what string, cond func(*v1alpha1.NodeMaintenance) bool) *v1alpha1.NodeMaintenance {
	t.Helper()
	lw := cache.NewListWatchFromClient(clientsFor(t, c).rest, v1alpha1.ResourceNodeMaintenance, "", fields.OneTermEqualSelector("metadata.name", name))
	var last *v1alpha1.NodeMaintenance
	_, err := watchtools.UntilWithSync(ctx, lw, &v1alpha1.NodeMaintenance{}, nil, func(e watch.Event) (bool, error) {
		nm, ok := e.Object.(*v1alpha1.NodeMaintenance)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		last = nm
		return cond(nm), nil
	})
	if err != nil {
		t.Fatalf("NodeMaintenance %s: %s: not observed (%v); last seen: %+v", name, what, err, last)
	}
	return last
}

func setCordon(ctx context.Context, t *testing.T, c *cluster.Cluster, node string, cordoned bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, cordoned)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func onNodes(pods map[int]*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		if !slices.Contains(out, p.Spec.NodeName) {
			out = append(out, p.Spec.NodeName)
		}
	}
	slices.Sort(out)
	return out
}

// TestE2EDrainDryRunListsTheRuns: a dry run's NodeMaintenance lists the run and the indexes
// on the node, the coordinator among them, and cordons and moves nothing; a gang that would
// have no placement left off the node is said to be so.
func TestE2EDrainDryRunListsTheRuns(t *testing.T) {
	t.Parallel()
	ctx, c, ns := maintenanceScenario(t)
	nodes, onPool := nodePool(ctx, t, c, ns, 2)
	run, pods := runningRun(ctx, t, c, ns, newRun("dry", 2, onPool))
	// A gang of 8-GPU workers: one fits on each node, and none is left once one is drained.
	big, _ := runningRun(ctx, t, c, ns, newRun("big", 1, onPool, func(r *v1alpha1.TrainingRun) {
		r.Spec.Template.Spec.Containers[0].Resources.Limits[v1alpha1.ResourceGPU] = resource.MustParse("8")
	}))
	if got := onNodes(pods); !slices.Equal(got, []string{nodes[0]}) {
		t.Fatalf("the run's workers are on %v, want all on %s", got, nodes[0])
	}
	bigPods := waitWorkers(ctx, t, c, ns, big.Name, 1, 1)
	drained := bigPods[0].Spec.NodeName
	nm := drainNodes(ctx, t, c, ns, true, nodes[0], drained)
	planned := waitMaintenance(ctx, t, c, nm.Name, "phase Planned", func(nm *v1alpha1.NodeMaintenance) bool {
		return nm.Status.Phase == v1alpha1.MaintenancePlanned
	})
	byName := map[string]v1alpha1.MaintenanceRun{}
	for _, e := range planned.Status.Runs {
		byName[e.Name] = e
	}
	if e := byName[run.Name]; !slices.Equal(e.Indexes, []int32{0, 1}) || !e.Coordinator || e.Attempt != 1 {
		t.Errorf("plan of %s = %+v, want attempt 1, indexes [0 1], the coordinator", run.Name, e)
	}
	if e, ok := byName[big.Name]; !ok || e.Feasible || e.Message == "" {
		t.Errorf("plan of %s = %+v, want it infeasible with a reason (both pool nodes drained)", big.Name, e)
	}
	for _, n := range nodes {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node.Spec.Unschedulable {
			t.Errorf("node %s cordoned by a dry run", n)
		}
	}
	requireRunStays(ctx, t, c, ns, run.Name, 2*time.Second, "a restart after a dry run", func(r *v1alpha1.TrainingRun) bool { return r.Status.Attempt != 1 })
}

// TestE2EDrainMovesRunsWithoutSpendingBudget: an SRE drains the node that holds a run's
// whole gang. The node is cordoned, the run gets a planned restart (PlannedMaintenance) and
// runs on the other node, with no restart budget spent, a Normal event naming the SRE's
// reason, and the NodeMaintenance's history records the move and the interruption.
func TestE2EDrainMovesRunsWithoutSpendingBudget(t *testing.T) {
	t.Parallel()
	ctx, c, ns := maintenanceScenario(t)
	nodes, onPool := nodePool(ctx, t, c, ns, 2)
	run, pods := runningRun(ctx, t, c, ns, newRun("drained", 2, onPool, withMaxRestarts(v1alpha1.RestartBudgets{Infrastructure: ptr.To[int32](0)})))
	if got := onNodes(pods); !slices.Equal(got, []string{nodes[0]}) {
		t.Fatalf("the run's workers are on %v, want all on %s", got, nodes[0])
	}
	start := time.Now()
	nm := drainNodes(ctx, t, c, ns, false, nodes[0])
	moved := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	t.Logf("kwok: drain created → attempt 2 Running off the node in %s", time.Since(start).Round(time.Millisecond))
	if got := onNodes(waitWorkers(ctx, t, c, ns, run.Name, 2, 2)); !slices.Equal(got, []string{nodes[1]}) {
		t.Errorf("attempt 2 runs on %v, want %s", got, nodes[1])
	}
	requireRestarts(t, moved, v1alpha1.RestartCounts{})
	if lf := moved.Status.LastFailure; lf == nil || lf.Cause != v1alpha1.CausePlannedMaintenance || lf.Rule != "default-planned-maintenance" {
		t.Errorf("lastFailure = %+v, want PlannedMaintenance by default-planned-maintenance", lf)
	}
	if !slices.Equal(moved.Status.MaintenanceExcludedNodes, []string{nodes[0]}) || len(moved.Status.ExcludedNodes) > 0 {
		t.Errorf("exclusions: maintenance %v, lifetime %v; want maintenance [%s] only", moved.Status.MaintenanceExcludedNodes, moved.Status.ExcludedNodes, nodes[0])
	}
	node, err := c.Client.CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{})
	if err != nil || !node.Spec.Unschedulable {
		t.Errorf("node %s not cordoned (%v)", nodes[0], err)
	}
	done := waitMaintenance(ctx, t, c, nm.Name, "Drained with the run running again", func(nm *v1alpha1.NodeMaintenance) bool {
		return nm.Status.Phase == v1alpha1.MaintenanceDrained && len(nm.Status.Runs) == 1 && nm.Status.Runs[0].RunningAt != nil
	})
	e := done.Status.Runs[0]
	if e.Name != run.Name || e.Attempt != 1 || e.ToAttempt != 2 || e.MovedAt == nil {
		t.Errorf("history %+v, want %s moved from attempt 1 to 2", e, run.Name)
	}
	t.Logf("kwok: %s interrupted %s (attempt 1 ended → attempt 2 Running)", run.Name, e.RunningAt.Sub(e.MovedAt.Time))
	events, err := c.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + run.Name + ",reason=" + string(v1alpha1.CausePlannedMaintenance)})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) == 0 || events.Items[0].Type != corev1.EventTypeNormal || !strings.Contains(events.Items[0].Note, nm.Spec.Reason) {
		t.Errorf("events %+v: want a Normal PlannedMaintenance event naming %q", events.Items, nm.Spec.Reason)
	}
}

// TestE2EUncordonLiftsTheExclusion: after a drain, the SRE uncordons the node; the run's
// exclusion of it is lifted, and a drain of the other node moves the run back onto it
// (which a lifetime exclusion would forbid: the run would wait Pending).
func TestE2EUncordonLiftsTheExclusion(t *testing.T) {
	t.Parallel()
	ctx, c, ns := maintenanceScenario(t)
	nodes, onPool := nodePool(ctx, t, c, ns, 2)
	run, _ := runningRun(ctx, t, c, ns, newRun("lifted", 2, onPool))
	drainNodes(ctx, t, c, ns, false, nodes[0])
	waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	setCordon(ctx, t, c, nodes[0], false)
	waitRun(ctx, t, c, ns, run.Name, "the exclusion lifted", func(r *v1alpha1.TrainingRun) bool {
		return len(r.Status.MaintenanceExcludedNodes) == 0
	})
	drainNodes(ctx, t, c, ns, false, nodes[1])
	back := waitRun(ctx, t, c, ns, run.Name, "attempt 3 Running", runningAttempt(3))
	if got := onNodes(waitWorkers(ctx, t, c, ns, run.Name, 3, 2)); !slices.Equal(got, []string{nodes[0]}) {
		t.Errorf("attempt 3 runs on %v, want %s (uncordoned)", got, nodes[0])
	}
	requireRestarts(t, back, v1alpha1.RestartCounts{})
}

// TestE2EPlatformMaintenanceSignalPlansARestart: GKE announces a host maintenance of the
// node (cloud.google.com/scheduled-maintenance-time, within the lead): the run moves off it
// before it starts, without a NodeMaintenance and without spending budget.
func TestE2EPlatformMaintenanceSignalPlansARestart(t *testing.T) {
	t.Parallel()
	ctx, c, ns := maintenanceScenario(t)
	nodes, onPool := nodePool(ctx, t, c, ns, 2)
	run, _ := runningRun(ctx, t, c, ns, newRun("announced", 2, onPool))
	at := strconv.FormatInt(time.Now().Add(10*time.Minute).Unix(), 10)
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, v1alpha1.LabelGKEScheduledMaintenanceTime, at)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, nodes[0], types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	moved := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	if got := onNodes(waitWorkers(ctx, t, c, ns, run.Name, 2, 2)); !slices.Equal(got, []string{nodes[1]}) {
		t.Errorf("attempt 2 runs on %v, want %s", got, nodes[1])
	}
	requireRestarts(t, moved, v1alpha1.RestartCounts{})
	if lf := moved.Status.LastFailure; lf == nil || lf.Cause != v1alpha1.CausePlannedMaintenance || !slices.ContainsFunc(lf.Evidence, func(s string) bool { return strings.Contains(s, v1alpha1.LabelGKEScheduledMaintenanceTime) }) {
		t.Errorf("lastFailure = %+v, want PlannedMaintenance with the GKE label as evidence", lf)
	}
}
