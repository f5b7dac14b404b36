package realnode

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/barrier"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestRealInPlaceBarrierSupervised (issues 41, 56): with the controller's
// --barrier-in-worker (the default), the barrier is the worker container's own entrypoint
// (faultline-barrier from an image volume of its image, `supervise -- /worker`) and stays
// there with the worker as its child, and a restart in place keeps every guarantee of the
// init container's.
//
// A 4-worker run across both real nodes, restartMode InPlace. Attempt 1: every pod has one
// container and no init container; each worker runs only once its node agent recorded the
// open (its record, on its node's heartbeat or on the pod, names the container the status
// shows, for attempt 1).
// The test SIGTERMs index 1's worker through its node's containerd (the barrier passes it
// on, and ends with the worker's exit): an Unknown exit 143, which the agent reports for
// attempt 1 from its record, and the run restarts in place (no index moves). The
// coordinator (index 0) outlives its stop by 3 s. The agents stop the other three workers
// through their barriers, which end them and wait again in the same containers. The test's
// watch of the pods sees every attempt-1 worker stopped before the first record of attempt
// 2: no agent opens a barrier of attempt 2 while an old worker runs; each agent records
// that it stopped its old workers (the record's stoppedFor), on which the gang's barrier
// may open. Attempt 2: the same pods, in the very containers of attempt 1 (restart count
// unchanged, recorded for attempt 2 after a record of the stop for it), except the
// victim's, whose worker ended on its own and whose container the kubelet restarted; its
// coordinator registers every index once and reads attempt 2 from the attempt file the
// barrier wrote. Then index 1's worker exits 1 on its own (SIGUSR1 tells it when): the run
// fails, AppExit, by the agent's report of that exit in attempt 2.
//
// (TestRealInPlaceBarrierInWorker ran the same with a barrier that became the worker,
// `faultline-barrier exec`, a mode removed by issue 56: docs/in-place-restart.md.)
func TestRealInPlaceBarrierSupervised(t *testing.T) {
	t.Parallel()
	barrierInWorkerRestart(t)
}

// barrierInWorkerRestart is TestRealInPlaceBarrierSupervised.
func barrierInWorkerRestart(t *testing.T) {
	ctx, c, ns := scenario(t, 4*time.Minute)
	name, mode := "supervised", barrier.CommandSupervise
	startController(t, c, ns, "--barrier-in-worker")

	run := realRun(name, 4, []string{"--heartbeats-only", "--heartbeat-timeout", "60s",
		"--sigterm-delay", "3s", "--sigterm-delay-index", "0",
		"--fail-index", "1", "--fail-attempt", "2", "--fail", "exit", "--fail-on-usr1"},
		withRestartMode(v1alpha1.RestartModeInPlace), withCommand(cluster.WorkerProgram))
	// The pods' changes with their records, wherever the agents keep them (on the pods, or
	// on their heartbeats: -real-agent-records-on-heartbeat), in the API server's order.
	seen, err := c.WatchPodsWithRecords(ctx, ns, labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run.Name}))
	if err != nil {
		t.Fatal(err)
	}

	run = createRun(ctx, t, c, ns, run)
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, t, c, ns, run.Name, 1, 4)
	for _, p := range first {
		if name, place := attempt.BarrierContainer(&p.Spec); place != attempt.BarrierInWorker || name != "worker" || len(p.Spec.InitContainers) != 0 {
			t.Fatalf("pod %s: barrier %q %v, init containers %v; want the barrier as the worker's entrypoint and no init container", p.Name, name, place, p.Spec.InitContainers)
		}
		requireRecord(t, p, 1, 0)
		if cmd := p.Spec.Containers[0].Command; !slices.Contains(cmd, cluster.WorkerProgram) || len(cmd) < 2 || cmd[1] != mode {
			t.Errorf("pod %s: command %q, want the barrier's %s of %s", p.Name, cmd, mode, cluster.WorkerProgram)
		}
	}
	victim := first[1]
	node := c.Real.Node(victim.Spec.NodeName)

	sigtermRestartsInPlace(ctx, t, c, node, run.Name, victim)

	second := waitWorkers(ctx, t, c, ns, run.Name, 2, 4)
	for i, p := range second {
		old := first[i]
		w, w0 := workerStatus(p), workerStatus(old)
		// A supervising barrier restarts its worker in the same container: only the
		// victim's, which ended on its own, is a new one.
		restarts := int32(1)
		if i != 1 {
			restarts = 0
		}
		if p.UID != old.UID || w == nil || w0 == nil || w.RestartCount != w0.RestartCount+restarts {
			t.Errorf("index %d: pod %s uid %s worker %+v; before: uid %s worker %+v; want the same pod, its worker's container restarted %d times", i, p.Name, p.UID, w, old.UID, w0, restarts)
			continue
		}
		requireRecord(t, p, 2, w.RestartCount)
		if i != 1 && w.ContainerID != w0.ContainerID {
			t.Errorf("index %d: attempt 2 runs in container %s, attempt 1 ran in %s; want the same", i, w.ContainerID, w0.ContainerID)
		}
	}
	log, tasks := registeredTasks(ctx, t, c, ns, run.Name, 2, 4)
	if strings.Join(tasks, ",") != eachOnce(4) || strings.Contains(log, "REFUSED") {
		t.Errorf("attempt 2's coordinator registered tasks %v, want each of 0-3 once:\n%s", tasks, log)
	}
	if !strings.Contains(log, "attempt=2") {
		t.Errorf("attempt 2's coordinator does not say attempt 2 (its attempt file):\n%s", log)
	}

	// The barrier, in the API server's order: every old worker stopped before any record
	// of attempt 2 (the agent records before it opens), the records read where the agents
	// keep them. A worker is stopped once the
	// kubelet's status shows it, or once its agent's record says it stopped it for attempt
	// 2, which the agent writes after its barrier answered that none of the worker's
	// processes is left (or the runtime's StopContainer returned): the controller
	// opens the gang's barrier on that record. The workers the agents stopped (all but the
	// victim's, which ended on its own) were recorded so.
	events, err := seen()
	if err != nil {
		t.Fatal(err)
	}
	stopped, recordedStop, lastStop, firstOpen := map[int]bool{}, map[int]bool{}, -1, -1
	for seq, p := range events {
		i := attempt.IndexOrNone(p)
		old := first[i]
		if old == nil || p.UID != old.UID {
			continue
		}
		rec := attempt.BarrierRecord(p)
		if rec != nil && rec.Attempt == 1 && rec.StoppedFor == 2 {
			recordedStop[i] = true
		}
		if s := workerStatus(p); !stopped[i] && s != nil && (s.State.Running == nil || s.RestartCount > workerStatus(old).RestartCount || recordedStop[i]) {
			stopped[i], lastStop = true, seq
		}
		if rec != nil && rec.Attempt >= 2 && firstOpen < 0 {
			firstOpen = seq
		}
	}
	if len(stopped) != 4 || firstOpen < 0 || firstOpen < lastStop {
		t.Errorf("the watch saw %d of 4 old workers stop (the last at event %d) and the first record of attempt 2 at event %d: want all stopped before it", len(stopped), lastStop, firstOpen)
	}
	for i := range 4 {
		if !recordedStop[i] && i != 1 {
			t.Errorf("index %d: its agent's record never said it stopped the worker for attempt 2 (records seen: %v)", i, recordedStop)
		}
	}

	restarted := second[1]
	killWorker(ctx, t, c, node, restarted, "SIGUSR1")
	failed := waitRun(ctx, t, c, ns, run.Name, "Failed", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Phase == v1alpha1.PhaseFailed || r.Status.Attempt > 2
	})
	if f := failed.Status.LastFailure; failed.Status.Phase != v1alpha1.PhaseFailed || f == nil || f.Cause != v1alpha1.CauseAppExit ||
		f.ExitCode == nil || *f.ExitCode != 1 || f.Index == nil || *f.Index != 1 {
		t.Fatalf("run: %s; want Failed, AppExit of index 1's exit 1", describeRun(failed))
	}
	requireExitReport(ctx, t, c, victim, 2, 1)
}

// requireRecord checks that pod's node agent recorded the open of the container its status
// shows (restart number restarts) for attempt n.
func requireRecord(t *testing.T, p *corev1.Pod, n, restarts int32) {
	t.Helper()
	rec, w := attempt.BarrierRecord(p), workerStatus(p)
	if rec == nil || w == nil || rec.Attempt != n || rec.Restart != restarts || rec.ContainerID != attempt.RuntimeID(w.ContainerID) {
		t.Errorf("pod %s: record %+v, worker %+v; want container %s (restart %d) recorded for attempt %d", p.Name, rec, w, w.ContainerID, restarts, n)
	}
}

// withCommand sets the worker container's command (the image's entrypoint otherwise): the
// barrier can be the entrypoint only of a container whose command is set.
func withCommand(cmd ...string) runOption {
	return func(r *v1alpha1.TrainingRun) { r.Spec.Template.Spec.Containers[0].Command = cmd }
}
