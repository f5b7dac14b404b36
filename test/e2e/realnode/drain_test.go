package realnode

import (
	"context"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestRealDrainMovesTheGang: an SRE drains one of the two real nodes under a 4-worker run
// (a NodeMaintenance, as `launcher drain` creates it). The controller cordons the node and
// gives the run a planned restart: the real kubelet stops attempt 1's workers, attempt 2's
// four run on the other node and rendezvous there (the coordinator registers each index
// once), no restart budget is spent, and the NodeMaintenance is Drained with the run's move
// and the end of its interruption.
//
// The drained node is the one without the coordinator (index 0), as in
// TestRealNodeShutdownRestartsTheGang: the gang restart stops every worker either way.
// It runs alone: the node it cordons is every scenario's; it uncordons it before it ends.
func TestRealDrainMovesTheGang(t *testing.T) {
	ctx, c, ns := scenario(t, 3*time.Minute)
	// The controller acts on this test's NodeMaintenances only (it watches one namespace).
	const shard = "test.faultline.dev/ns"
	startController(t, c, ns, "--node-maintenance-selector", shard+"="+ns)

	run := createRun(ctx, t, c, ns, realRun("drained", 4, []string{"--heartbeats-only", "--heartbeat-timeout", "10s"}))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, t, c, ns, run.Name, 1, 4)
	up := c.Real.Node(first[0].Spec.NodeName)
	var down *cluster.RealNode
	for _, n := range c.Real.Nodes {
		if n != up {
			down = n
		}
	}
	var onDown []int32
	for i, p := range first {
		if p.Spec.NodeName == down.Name {
			onDown = append(onDown, int32(i))
		}
	}
	sort.Slice(onDown, func(i, j int) bool { return onDown[i] < onDown[j] })
	if len(onDown) == 0 {
		t.Fatalf("attempt 1 has no worker on %s: the gang must span both real nodes (%s)", down.Name, describePods(podList(first)))
	}
	t.Cleanup(func() { uncordon(t, c, down.Name) })

	nm := &v1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "drain-", Labels: map[string]string{shard: ns}},
		Spec:       v1alpha1.NodeMaintenanceSpec{Nodes: []string{down.Name}, Reason: "firmware FW-" + ns},
	}
	cl := runClient(t, c)
	start := time.Now()
	if err := cl.Create(ctx, nm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), nm) })

	moved := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	t.Logf("real nodes: NodeMaintenance created → attempt 2 Running in %s", time.Since(start).Round(time.Millisecond))
	if r := moved.Status.Restarts; r != (v1alpha1.RestartCounts{}) {
		t.Errorf("restarts %+v, want none spent by a planned move", r)
	}
	if lf := moved.Status.LastFailure; lf == nil || lf.Cause != v1alpha1.CausePlannedMaintenance {
		t.Errorf("lastFailure %+v, want PlannedMaintenance", lf)
	}
	for i, p := range waitWorkers(ctx, t, c, ns, run.Name, 2, 4) {
		if p.Spec.NodeName != up.Name {
			t.Errorf("attempt 2 worker %d on %s, want %s (off the drained node)", i, p.Spec.NodeName, up.Name)
		}
	}
	// The new gang rendezvoused on the node left: its coordinator registered each index once.
	if log, tasks := registeredTasks(ctx, t, c, ns, run.Name, 2, 4); strings.Join(tasks, ",") != eachOnce(4) {
		t.Errorf("attempt 2's coordinator registered tasks %v, want each of 0-3 once:\n%s", tasks, log)
	}

	done := waitNodeMaintenance(ctx, t, c, nm.Name, func(nm *v1alpha1.NodeMaintenance) bool {
		return nm.Status.Phase == v1alpha1.MaintenanceDrained && len(nm.Status.Runs) == 1 && nm.Status.Runs[0].RunningAt != nil
	})
	e := done.Status.Runs[0]
	if e.Name != run.Name || e.Attempt != 1 || e.ToAttempt != 2 || !slices.Equal(e.Indexes, onDown) || e.MovedAt == nil {
		t.Errorf("NodeMaintenance's record %+v, want %s moved from attempt 1 to 2, indexes %v", e, run.Name, onDown)
	}
	t.Logf("real nodes: %s interrupted %s (attempt 1 ended → attempt 2 Running, to the second)", run.Name, e.RunningAt.Sub(e.MovedAt.Time))
	node, err := c.Client.CoreV1().Nodes().Get(ctx, down.Name, metav1.GetOptions{})
	if err != nil || !node.Spec.Unschedulable {
		t.Errorf("node %s not cordoned (%v)", down.Name, err)
	}
}

func podList(m map[int]*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range len(m) {
		out = append(out, m[i])
	}
	return out
}

// waitNodeMaintenance watches a NodeMaintenance until cond holds.
func waitNodeMaintenance(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, cond func(*v1alpha1.NodeMaintenance) bool) *v1alpha1.NodeMaintenance {
	t.Helper()
	cfg := rest.CopyConfig(c.Config)
	cfg.GroupVersion = &v1alpha1.GroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(testScheme).WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lw := cache.NewListWatchFromClient(rc, v1alpha1.ResourceNodeMaintenance, "", fields.OneTermEqualSelector("metadata.name", name))
	var last *v1alpha1.NodeMaintenance
	_, err = watchtools.UntilWithSync(ctx, lw, &v1alpha1.NodeMaintenance{}, nil, func(e watch.Event) (bool, error) {
		nm, ok := e.Object.(*v1alpha1.NodeMaintenance)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		last = nm
		return cond(nm), nil
	})
	if err != nil {
		t.Fatalf("NodeMaintenance %s: not Drained with the run running again (%v); last seen: %+v", name, err, last)
	}
	return last
}

// uncordon gives the node back to every scenario, and waits until the node lifecycle
// controller has taken its unschedulable taint off (what the scheduler reads).
func uncordon(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("uncordon %s: %v", name, err)
		return
	}
	lw := cache.NewListWatchFromClient(c.Client.CoreV1().RESTClient(), "nodes", "", fields.OneTermEqualSelector("metadata.name", name))
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Node{}, nil, func(e watch.Event) (bool, error) {
		n, ok := e.Object.(*corev1.Node)
		return ok && !n.Spec.Unschedulable && !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeUnschedulable }), nil
	})
	if err != nil {
		t.Errorf("node %s still cordoned or tainted %s: %v", name, corev1.TaintNodeUnschedulable, err)
	}
}
