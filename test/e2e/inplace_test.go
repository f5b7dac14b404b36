package e2e

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/test/cluster"
)

// kwokBarrierImage is the barrier image the in-place runs on kwok name; no container runs it.
const kwokBarrierImage = "localhost/faultline/barrier:kwok"

// TestE2EInPlaceRestartOnKwok is the controller's half of a gang restart in place, on kwok
// nodes that can restart in place (kwok plays the kubelet's part, the node agent's own code
// its decisions: cluster.SimulateInPlace; the real kubelets' part is test/e2e/realnode's).
// One worker's pod ends (exit 143, no node evidence: Unknown, a restart). The controller keeps
// the Job and the other three pods (same UIDs and nodes), which their agents stop and hold at
// their barriers; the ended index gets a new pod made for attempt 2; the gang's barrier stays
// shut while one agent has not stopped its old worker, and opens once it has; attempt 2 runs
// with restartMode InPlace, jobAttempt 1 and the moved index recorded.
func TestE2EInPlaceRestartOnKwok(t *testing.T) {
	t.Parallel()
	inPlaceRestartOnKwok(t, inPlaceKwok{})
}

// TestE2EInPlaceRestartOnKwokRecordsOnHeartbeat is the same restart with the controller's
// --barrier-in-worker (its default; the test above turns it off): barriers in the worker
// containers that supervise their workers, and the agents' records on their nodes'
// heartbeats (the agent's --barrier-records-on-heartbeat): a restart in place writes no pod
// of the nodes it keeps, neither the kubelet (the barrier stops its worker and waits again in
// the same container) nor the agent (a node's stops, then its opens, are one write of its
// heartbeat); the controller reads the records there.
func TestE2EInPlaceRestartOnKwokRecordsOnHeartbeat(t *testing.T) {
	t.Parallel()
	inPlaceRestartOnKwok(t, inPlaceKwok{inWorker: true, onHeartbeat: true})
}

// TestE2EInPlaceRestartOnKwokSupervisedRecordsOnPods is the same restart with barriers in
// the worker containers that supervise their workers and the agents' records on the pods
// (nodeagent --barrier-records-on-heartbeat=false): a pod waiting at its barrier shows its one
// container running (and Ready), the node agent's record of each open
// (faultline.dev/barrier-record) is what says which attempt a pod's worker runs, and the
// kept workers' containers are not restarted.
func TestE2EInPlaceRestartOnKwokSupervisedRecordsOnPods(t *testing.T) {
	t.Parallel()
	inPlaceRestartOnKwok(t, inPlaceKwok{inWorker: true})
}

// inPlaceKwok is how inPlaceRestartOnKwok's barriers and records are: the barrier the
// worker's entrypoint (supervising it), the records on the nodes' heartbeats.
type inPlaceKwok struct{ inWorker, onHeartbeat bool }

func inPlaceRestartOnKwok(t *testing.T, how inPlaceKwok) {
	inWorker, onHeartbeat := how.inWorker, how.onHeartbeat
	args := []string{"--barrier-image", kwokBarrierImage, fmt.Sprintf("--barrier-in-worker=%v", inWorker)}
	ctx, c, ns, _ := scenario(t, args...)
	// The pods as the controller reads them: with their nodes' records.
	recorded := func(ps []*corev1.Pod) []*corev1.Pod {
		t.Helper()
		out, err := c.WithNodeRecords(ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	nodes, onPool := nodePool(ctx, t, c, ns, 2)
	for _, n := range nodes {
		if err := c.MakeInPlaceCapable(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	var held atomic.Value // the name of a pod whose agent does not act
	held.Store("")
	if err := c.SimulateInPlaceWith(ctx, ns, cluster.InPlaceSim{
		Hold:               func(p *corev1.Pod) bool { return p.Name == held.Load().(string) },
		RecordsOnHeartbeat: onHeartbeat,
	}); err != nil {
		t.Fatal(err)
	}
	run, pods := runningRun(ctx, t, c, ns, newRun("inplace", 4, withoutGPUs(), onPool, func(r *v1alpha1.TrainingRun) {
		r.Spec.FailurePolicy.RestartMode = v1alpha1.RestartModeInPlace
		r.Spec.Template.Spec.Containers[0].Command = []string{"/train"}
	}))
	job, err := c.Client.BatchV1().Jobs(ns).Get(ctx, run.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[bool]attempt.BarrierPlace{false: attempt.BarrierInit, true: attempt.BarrierInWorker}[inWorker]
	if _, place := attempt.BarrierContainer(&job.Spec.Template.Spec); place != want {
		t.Fatalf("attempt 1's Job has its barrier at %v, want %v: the run does not restart in place as asked", place, want)
	}
	for _, p := range recorded(slices.Collect(maps.Values(pods))) {
		if onHeartbeat && p.Annotations[v1alpha1.AnnotationBarrierRecord] == "" {
			t.Errorf("pod %s has no record on its node's heartbeat", p.Name)
		}
		if n, _ := attempt.Running(p); n != 1 || inWorker && !attempt.BarrierOf(p).OpenedFor(1) {
			t.Errorf("pod %s runs attempt %d (opened for 1: %v), want 1, opened", p.Name, n, attempt.BarrierOf(p).OpenedFor(1))
		}
	}

	held.Store(pods[3].Name)
	failWorker(ctx, t, c, pods[1], cluster.Failure{ExitCode: 143, Reason: "Error", Message: "terminated"})
	decided := waitRun(ctx, t, c, ns, run.Name, "attempt 2 decided in place", func(r *v1alpha1.TrainingRun) bool {
		rec := attempt.Record(r)
		return r.Status.Attempt == 2 && rec != nil && rec.RestartMode == v1alpha1.RestartModeInPlace
	})
	rec := attempt.Record(decided)
	if rec.JobAttempt != 1 || !cmp.Equal(rec.MovedIndexes, []int32{1}) {
		t.Errorf("attempt 2's record: jobAttempt %d movedIndexes %v, want 1 and [1]", rec.JobAttempt, rec.MovedIndexes)
	}
	// Indexes 0 and 2 wait at their barriers, and index 1's new pod at its own; index 3's
	// agent has not acted: the barrier stays shut.
	held1, err := c.WaitPods(ctx, ns, attemptSelector(run.Name, 1), func(ps []*corev1.Pod) (bool, error) {
		waiting := 0
		for _, p := range recorded(ps) {
			if (p.UID == pods[0].UID || p.UID == pods[2].UID) && barrierWaits(p) {
				waiting++
			}
		}
		return waiting == 2, nil
	})
	if err != nil {
		t.Fatalf("indexes 0 and 2 not held at their barriers: %v", err)
	}
	if inWorker {
		// Their agents recorded the stops of their attempt-1 workers, as the agent does
		// before the kubelet restarts the pod (Writer.RecordStopped).
		for _, p := range recorded(held1) {
			if rec := attempt.BarrierRecord(p); (p.UID == pods[0].UID || p.UID == pods[2].UID) && (rec == nil || rec.Attempt != 1 || rec.StoppedFor != 2) {
				t.Errorf("pod %s waits at its barrier with the record %+v, want its attempt-1 worker's, stopped for 2", p.Name, rec)
			}
		}
	}
	requireRunStays(ctx, t, c, ns, run.Name, 2*time.Second, "the barrier shut while index 3 runs its old worker", func(r *v1alpha1.TrainingRun) bool {
		rec := attempt.Record(r)
		return rec == nil || rec.BarrierOpenedAt != nil
	})

	released := time.Now()
	held.Store("")
	touch := fmt.Sprintf(`{"metadata":{"annotations":{"test.faultline.dev/touched":%q}}}`, released.Format(time.RFC3339Nano))
	if _, err := c.Client.CoreV1().Pods(ns).Patch(ctx, pods[3].Name, types.MergePatchType, []byte(touch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	running := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	t.Logf("index 3's agent let go → attempt 2 Running in %s", time.Since(released).Round(time.Millisecond))
	rec = attempt.Record(running)
	if rec.BarrierOpenedAt == nil || rec.RestartMode != v1alpha1.RestartModeInPlace {
		t.Errorf("attempt 2's record: barrierOpenedAt %v restartMode %q, want set and InPlace", rec.BarrierOpenedAt, rec.RestartMode)
	}
	requireRestarts(t, running, v1alpha1.RestartCounts{Unknown: 1})
	if j, err := c.Client.BatchV1().Jobs(ns).Get(ctx, run.Name, metav1.GetOptions{}); err != nil || j.UID != job.UID {
		t.Errorf("attempt 2's Job: %v (UID %v), want attempt 1's Job %s kept", err, j.UID, job.UID)
	}
	list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRun + "=" + run.Name})
	if err != nil {
		t.Fatal(err)
	}
	byIndex := map[int][]corev1.Pod{}
	for _, p := range list.Items {
		if i, ok := attempt.Index(&p); ok && p.DeletionTimestamp == nil {
			byIndex[i] = append(byIndex[i], p)
		}
	}
	for i := range 4 {
		if len(byIndex[i]) != 1 {
			t.Errorf("index %d has %d pods, want 1", i, len(byIndex[i]))
			continue
		}
		p := byIndex[i][0]
		n, _ := attempt.Running(recorded([]*corev1.Pod{&p})[0])
		if n != 2 {
			t.Errorf("index %d pod %s runs attempt %d, want 2", i, p.Name, n)
		}
		if i == 1 {
			if p.UID == pods[1].UID || !strings.HasSuffix(p.Name, "-2") || p.Labels[v1alpha1.LabelAttempt] != "2" {
				t.Errorf("index 1: pod %s (attempt label %s), want a new pod made for attempt 2", p.Name, p.Labels[v1alpha1.LabelAttempt])
			}
			continue
		}
		if p.UID != pods[i].UID || p.Spec.NodeName != pods[i].Spec.NodeName {
			t.Errorf("index %d: pod %s on %s, want attempt 1's %s on %s, restarted in place", i, p.Name, p.Spec.NodeName, pods[i].Name, pods[i].Spec.NodeName)
		}
		if was, is := workerRestarts(pods[i]), workerRestarts(&p); inWorker && is != was {
			t.Errorf("index %d: pod %s's worker container restarted %d times, then %d: want it kept (its barrier supervises it)", i, p.Name, was, is)
		}
		if onHeartbeat && i != 3 && p.ResourceVersion != pods[i].ResourceVersion {
			t.Errorf("index %d: pod %s written during its restart in place (resourceVersion %s, then %s): want its stop and open on its node's heartbeat alone",
				i, p.Name, pods[i].ResourceVersion, p.ResourceVersion)
		}
	}
}

// workerRestarts is the restart count of p's worker container as its status shows it.
func workerRestarts(p *corev1.Pod) int32 {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == p.Spec.Containers[0].Name {
			return cs.RestartCount
		}
	}
	return 0
}

// barrierWaits reports whether p is held at its barrier: the kubelet restarted its containers
// and the barrier runs, waiting for its agent's go signal.
func barrierWaits(p *corev1.Pod) bool {
	_, waiting := attempt.BarrierOf(p).Waiting()
	return waiting
}
