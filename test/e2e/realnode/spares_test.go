package realnode

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/test/cluster"
)

// withSpares sets spec.spares.
func withSpares(n int32) runOption { return func(r *v1alpha1.TrainingRun) { r.Spec.Spares = n } }

// TestRealSparesTakeTheLostNodesIndexes: a 4-worker run with 4 warm spares across both real
// nodes (two workers and two spares on each, the barrier supervising every worker); logind
// announces a shutdown of the coordinator's node (index 0's). The attempt that follows runs
// the lost node's two indexes on the two spares of the node left, in place for the others:
// no pod is created before attempt 2 is Running; the spares keep their pods (same UIDs,
// same containers), now holding the lost indexes for attempt 2; the rendezvous completes with
// every index once at the coordinator that moved to a spare, reached at its index's address
// (<run>-0.<service>), which now names the spare; and new spares are made once attempt 2
// runs.
func TestRealSparesTakeTheLostNodesIndexes(t *testing.T) {
	ctx, c, ns := scenario(t, 4*time.Minute)
	startController(t, c, ns, "--barrier-in-worker")
	run := createRun(ctx, t, c, ns, realRun("spares", 4, []string{"--heartbeats-only", "--heartbeat-timeout", "10s",
		"--sigterm-delay", "5s", "--sigterm-delay-index", "0"},
		withRestartMode(v1alpha1.RestartModeInPlace), withCommand(cluster.WorkerProgram), withSpares(4)))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, t, c, ns, run.Name, 1, 4)
	down := c.Real.Node(first[0].Spec.NodeName) // the coordinator's node goes down
	var up *cluster.RealNode
	for _, n := range c.Real.Nodes {
		if n != down {
			up = n
		}
	}
	var moving []int
	for i, p := range first {
		if p.Spec.NodeName == down.Name {
			moving = append(moving, i)
		}
	}
	slices.Sort(moving)
	if len(moving) != 2 {
		t.Fatalf("attempt 1 has %d of 4 workers on %s: want two on each node", len(moving), down.Name)
	}
	// The spares, made once attempt 1 runs: two on each node.
	spares := waitSpares(ctx, t, c, ns, run.Name, 4)
	onUp := map[string]*corev1.Pod{}
	for _, p := range spares {
		if p.Spec.NodeName == up.Name {
			onUp[p.Name] = p
		}
	}
	if len(onUp) != 2 {
		t.Fatalf("%d spares on %s, want 2 (two per node)", len(onUp), up.Name)
	}
	t.Cleanup(func() { bringBack(t, c, down) })

	// Every creation of a pod of the run from the announcement on, with when it came.
	var mu sync.Mutex
	var created []string
	var createdAt []time.Time
	w, err := c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRun + "=" + run.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	known := map[string]bool{}
	for _, p := range append(slices.Collect(maps.Values(first)), spares...) {
		known[p.Name] = true
	}
	go func() {
		for e := range w.ResultChan() {
			if p, ok := e.Object.(*corev1.Pod); ok && e.Type == watch.Added && !known[p.Name] {
				mu.Lock()
				created, createdAt = append(created, p.Name), append(createdAt, time.Now())
				mu.Unlock()
			}
		}
	}()

	announced := time.Now()
	if err := down.Logind.PrepareForShutdown(true); err != nil {
		t.Fatal(err)
	}
	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, got, 2)
	running := time.Now()
	t.Logf("PrepareForShutdown(true) -> attempt 2 Running in %s", running.Sub(announced).Round(time.Millisecond))
	if f := got.Status.LastFailure; f == nil || f.Cause != v1alpha1.CauseNodeShutdown || f.Node != down.Name {
		t.Errorf("verdict: %s; want NodeShutdown on %s", describeRun(got), down.Name)
	}
	mu.Lock()
	before := slices.Clone(created)
	mu.Unlock()
	if len(before) > 0 {
		t.Errorf("pods created before attempt 2 was Running: %v; want the lost indexes on the spares, no new pod", before)
	}

	list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRun + "=" + run.Name})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		var holders []*corev1.Pod
		for k := range list.Items {
			p := &list.Items[k]
			if j, ok := attempt.Index(p); ok && j == i && p.DeletionTimestamp == nil && cluster.PodLive(p) {
				holders = append(holders, p)
			}
		}
		if len(holders) != 1 {
			t.Errorf("index %d has %d live pods, want 1", i, len(holders))
			continue
		}
		p := holders[0]
		if slices.Contains(moving, i) {
			sp := onUp[p.Name]
			if sp == nil || p.UID != sp.UID || p.Labels[v1alpha1.LabelAttempt] != "2" {
				t.Errorf("lost index %d: pod %s on %s (attempt label %s), want one of the spares on %s %v, joined for attempt 2", i, p.Name, p.Spec.NodeName, p.Labels[v1alpha1.LabelAttempt], up.Name, keys(onUp))
				continue
			}
			if ws, ws0 := workerStatus(p), workerStatus(sp); ws == nil || ws0 == nil || ws.ContainerID != ws0.ContainerID {
				t.Errorf("lost index %d on spare %s: container %+v, the spare's was %+v; want the same, its barrier opened", i, p.Name, ws, ws0)
			}
			continue
		}
		if p.UID != first[i].UID {
			t.Errorf("index %d on %s: pod %s, want attempt 1's %s restarted in place", i, up.Name, p.Name, first[i].Name)
		}
	}
	log, tasks := registeredTasks(ctx, t, c, ns, run.Name, 2, 4)
	if strings.Join(tasks, ",") != eachOnce(4) || strings.Contains(log, "REFUSED") {
		t.Errorf("attempt 2's coordinator (on a spare) registered tasks %v, want each of 0-3 once:\n%s", tasks, log)
	}
	// New spares once attempt 2 runs, on the node left.
	if _, err := c.WaitPods(ctx, ns, spareSelector(run.Name), func(ps []*corev1.Pod) (bool, error) {
		n := 0
		for _, p := range ps {
			if attempt.Spare(p) && p.Labels[v1alpha1.LabelAttempt] == "2" && p.Status.Phase == corev1.PodRunning {
				n++
			}
		}
		return n >= 2, nil
	}); err != nil {
		t.Errorf("no new spares made for attempt 2: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, name := range created {
		t.Logf("created after the announcement: %s, %s after attempt 2 Running", name, createdAt[k].Sub(running).Round(time.Millisecond))
	}
}

func keys(m map[string]*corev1.Pod) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// spareSelector selects run's pods made as warm spares.
func spareSelector(run string) labels.Selector {
	s, err := labels.Parse(fmt.Sprintf("%s=%s,%s", v1alpha1.LabelRun, run, v1alpha1.LabelSpare))
	if err != nil {
		panic(err)
	}
	return s
}

// waitSpares waits until run has n spares that hold no index, Running, their barrier waiting
// in their container, and returns them.
func waitSpares(ctx context.Context, t testing.TB, c *cluster.Cluster, ns, run string, n int) []*corev1.Pod {
	t.Helper()
	var spares []*corev1.Pod
	if _, err := c.WaitPods(ctx, ns, spareSelector(run), func(ps []*corev1.Pod) (bool, error) {
		spares = slices.DeleteFunc(ps, func(p *corev1.Pod) bool {
			return !attempt.Spare(p) || p.Status.Phase != corev1.PodRunning || !slices.ContainsFunc(p.Status.ContainerStatuses, func(s corev1.ContainerStatus) bool { return s.State.Running != nil })
		})
		return len(spares) == n, nil
	}); err != nil {
		t.Fatalf("run %s: %d of %d spares waiting: %v", run, len(spares), n, err)
	}
	return spares
}
