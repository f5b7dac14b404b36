package realnode

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestRealInPlaceRestartKeepsHealthyPods (issue 27): a 4-worker run with restartMode InPlace
// across both real nodes; logind announces a shutdown of the node without the coordinator.
// The controller keeps the attempt's Job and the pods of the node that stays up: the node
// agent there stops their workers through the CRI, the kubelet restarts each pod in place
// (same UID, node, restartCount of the worker up by exactly one) and holds it at its barrier;
// the shut-down node's indexes get new pods, made for attempt 2, on the node that stays up.
// Once no old worker runs the barrier opens, and attempt 2's coordinator (index 0, restarted
// in place) registers every index exactly once.
//
// It runs alone: the node it shuts down is every scenario's. It brings the node back.
func TestRealInPlaceRestartKeepsHealthyPods(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	dumpOnFailure(t, c, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	startController(t, c, ns, "--barrier-image", cluster.BarrierImage)

	// The workers notice a lost task by its heartbeats only, after 10 s: the controller's
	// decision and the agents' stops come first, so that each healthy pod restarts once.
	run := createRun(ctx, t, c, ns, realRun("inplace", 4, []string{"--heartbeats-only", "--heartbeat-timeout", "10s"}, func(r *v1alpha1.TrainingRun) {
		r.Spec.FailurePolicy.RestartMode = v1alpha1.RestartModeInPlace
	}))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, t, c, ns, run.Name, 1, 4)
	up := c.Real.Node(first[0].Spec.NodeName) // the coordinator's node stays up
	var down *cluster.RealNode
	for _, n := range c.Real.Nodes {
		if n != up {
			down = n
		}
	}
	before := map[int]*corev1.Pod{}
	var moving []int32
	for _, p := range first {
		if !slices.ContainsFunc(p.Spec.InitContainers, func(ic corev1.Container) bool { return ic.Name == v1alpha1.BarrierContainer }) {
			t.Fatalf("pod %s has no %s init container: the run's pods do not restart in place", p.Name, v1alpha1.BarrierContainer)
		}
		i := attempt.IndexOrNone(p)
		before[i] = p
		if p.Spec.NodeName == down.Name {
			moving = append(moving, int32(i))
		}
	}
	if len(moving) == 0 || len(moving) == 4 {
		t.Fatalf("attempt 1 has %d of 4 workers on %s: the gang must span both real nodes", len(moving), down.Name)
	}
	slices.Sort(moving)
	t.Cleanup(func() { bringBack(t, c, down) })

	announced := time.Now()
	if err := down.Logind.PrepareForShutdown(true); err != nil {
		t.Fatal(err)
	}
	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, got, 2)
	t.Logf("PrepareForShutdown(true) -> attempt 2 Running in %s", time.Since(announced).Round(time.Millisecond))
	if f := got.Status.LastFailure; f == nil || f.Cause != v1alpha1.CauseNodeShutdown || f.Node != down.Name {
		t.Errorf("verdict: %s; want NodeShutdown on %s", describeRun(got), down.Name)
	}
	rec := got.Status.Attempts[len(got.Status.Attempts)-1]
	if rec.RestartMode != v1alpha1.RestartModeInPlace || rec.JobAttempt != 1 || !slices.Equal(rec.MovedIndexes, moving) || rec.BarrierOpenedAt == nil {
		t.Errorf("attempt 2's record: restartMode %q jobAttempt %d movedIndexes %v barrierOpenedAt %v; want InPlace, 1, %v, set",
			rec.RestartMode, rec.JobAttempt, rec.MovedIndexes, rec.BarrierOpenedAt, moving)
	} else {
		t.Logf("decision -> barrier open: %s", rec.BarrierOpenedAt.Sub(got.Status.Attempts[len(got.Status.Attempts)-2].EndTime.Time).Round(time.Millisecond))
	}

	list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRun + "=" + run.Name})
	if err != nil {
		t.Fatal(err)
	}
	now := map[int]*corev1.Pod{}
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp == nil && cluster.PodLive(p) {
			now[attempt.IndexOrNone(p)] = p
		}
	}
	for i := range 4 {
		p, old := now[i], before[i]
		switch {
		case p == nil:
			t.Errorf("index %d has no live pod", i)
		case slices.Contains(moving, int32(i)):
			if p.UID == old.UID || p.Spec.NodeName != up.Name || p.Labels[v1alpha1.LabelAttempt] != "2" {
				t.Errorf("moved index %d: pod %s (uid %s) on %s, attempt label %s; want a new pod for attempt 2 on %s", i, p.Name, p.UID, p.Spec.NodeName, p.Labels[v1alpha1.LabelAttempt], up.Name)
			}
		default:
			w, w0 := workerStatus(p), workerStatus(old)
			if p.UID != old.UID || p.Spec.NodeName != old.Spec.NodeName || w == nil || w0 == nil || w.RestartCount != w0.RestartCount+1 {
				t.Errorf("index %d on the healthy node: pod %s uid %s node %s worker %+v; before: uid %s node %s restartCount %d; want the same pod, its worker restarted once",
					i, p.Name, p.UID, p.Spec.NodeName, w, old.UID, old.Spec.NodeName, w0.RestartCount)
			}
		}
	}
	// The gang rendezvoused once: attempt 2's coordinator registered each index once.
	log, tasks := registeredTasks(ctx, t, c, ns, run.Name, 2, 4)
	if strings.Join(tasks, ",") != eachOnce(4) || strings.Contains(log, "REFUSED") {
		t.Errorf("attempt 2's coordinator registered tasks %v, want each of 0-3 once:\n%s", tasks, log)
	}
	if !strings.Contains(log, "attempt=2") {
		t.Errorf("attempt 2's coordinator does not say attempt 2 (its attempt file):\n%s", log)
	}
}

func workerStatus(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == "worker" {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}
