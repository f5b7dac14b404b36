package realnode

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// resumedFrom matches the test worker's line for the step it resumes from.
var resumedFrom = regexp.MustCompile(`worker (\d+): resumes from step (\d+) `)

// withCheckpoint gives the run spec.checkpoint and a directory both real nodes see
// (withSharedDir), where each index saves its step. The run's command must be set
// (withCommand): its barrier then supervises it, and can ask it.
func withCheckpoint(policy v1alpha1.CheckpointPolicy, hostDir string) runOption {
	return func(r *v1alpha1.TrainingRun) {
		r.Spec.Checkpoint = &policy
		withSharedDir(hostDir)(r)
	}
}

// withSharedDir mounts hostDir, which both real nodes see (they are one machine), at /ckpt.
func withSharedDir(hostDir string) runOption {
	return func(r *v1alpha1.TrainingRun) {
		spec := &r.Spec.Template.Spec
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "ckpt", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: hostDir}}})
		spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "ckpt", MountPath: "/ckpt"})
	}
}

// checkpointDir is a directory for the test's checkpoints on this machine, removed after it.
func checkpointDir(t testing.TB, ns string) string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "faultline-ckpt-"+ns)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil { // the workers may run as any user
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestE2EKubectlDrainWaitsForTheCheckpoint: `kubectl drain` of one of the two real nodes
// under a 4-worker run with spec.checkpoint. The drain's cordon is the notice: the controller
// asks every worker to save (status.checkpoint); each node agent asks its node's workers
// through their supervising barriers (SIGUSR1), each saves its step (2 s) and says so in its
// done file. Meanwhile the drain's evictions are refused (the run's PodDisruptionBudget) and
// kubectl retries them. Once every worker answered, faultline moves the drained node's workers
// itself, a planned move that spends no budget; the drain then completes, no pod was ever
// evicted, the attempt's record holds the four answers with their steps, and every index of
// attempt 2 resumes from exactly the step it saved.
//
// It runs alone: the node it drains is every scenario's; it uncordons it before it ends.
func TestE2EKubectlDrainWaitsForTheCheckpoint(t *testing.T) {
	ctx, c, ns := scenario(t, 4*time.Minute)
	startController(t, c, ns)
	dir := checkpointDir(t, ns)

	const saveDelay = 2 * time.Second
	run := createRun(ctx, t, c, ns, realRun("saved", 4, []string{"--heartbeats-only", "--heartbeat-timeout", "10s",
		"--log-every", "100ms", "--checkpoint-dir", "/ckpt", "--save-on-usr1", "--save-delay", saveDelay.String()},
		withCheckpoint(v1alpha1.CheckpointPolicy{Signal: "SIGUSR1", TimeoutSeconds: 60}, dir), withCommand(cluster.WorkerProgram)))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, t, c, ns, run.Name, 1, 4)
	up := c.Real.Node(first[0].Spec.NodeName)
	var down *cluster.RealNode
	for _, n := range c.Real.Nodes {
		if n != up {
			down = n
		}
	}
	var onDown []*corev1.Pod
	for _, p := range first {
		if p.Spec.NodeName == down.Name {
			onDown = append(onDown, p)
		}
	}
	if len(onDown) == 0 {
		t.Fatalf("attempt 1 has no worker on %s: the gang must span both real nodes (%s)", down.Name, describePods(podList(first)))
	}
	t.Cleanup(func() { uncordon(t, c, down.Name) })

	// Every change of the drained node's pods, to see that none was evicted.
	var (
		mu      sync.Mutex
		evicted []string
	)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		lw := cache.NewListWatchFromClient(c.Client.CoreV1().RESTClient(), "pods", ns, fields.OneTermEqualSelector("spec.nodeName", down.Name))
		_, _ = watchtools.UntilWithSync(wctx, lw, &corev1.Pod{}, nil, func(e watch.Event) (bool, error) {
			if p, ok := e.Object.(*corev1.Pod); ok {
				for _, cond := range p.Status.Conditions {
					if cond.Type == corev1.DisruptionTarget && cond.Reason == "EvictionByEvictionAPI" {
						mu.Lock()
						evicted = append(evicted, p.Name)
						mu.Unlock()
					}
				}
			}
			return false, nil
		})
	}()

	type drained struct {
		out []byte
		err error
		at  time.Time
	}
	// The run is protected once the disruption controller has counted its workers under its
	// budget: none may go.
	pdbs := cache.NewListWatchFromClient(c.Client.PolicyV1().RESTClient(), "poddisruptionbudgets", ns, fields.OneTermEqualSelector("metadata.name", run.Name))
	if _, err := watchtools.UntilWithSync(ctx, pdbs, &policyv1.PodDisruptionBudget{}, nil, func(e watch.Event) (bool, error) {
		pdb, ok := e.Object.(*policyv1.PodDisruptionBudget)
		return ok && pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.CurrentHealthy == 4 && pdb.Status.DisruptionsAllowed == 0, nil
	}); err != nil {
		t.Fatalf("the run's PodDisruptionBudget %s does not protect its 4 workers: %v", run.Name, err)
	}
	done := make(chan drained, 1)
	start := time.Now()
	go func() {
		out, err := c.Kubectl(ctx, "drain", down.Name, "--pod-selector", v1alpha1.LabelRunUID+"="+string(run.UID),
			"--ignore-daemonsets", "--delete-emptydir-data", "--timeout=150s")
		done <- drained{out, err, time.Now()}
	}()

	asked := waitRun(ctx, t, c, ns, run.Name, "the checkpoint requested", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Checkpoint != nil
	})
	t.Logf("real nodes: cordon → checkpoint requested in %s: %s", asked.Status.Checkpoint.RequestedAt.Sub(start).Round(time.Millisecond), asked.Status.Checkpoint.Notice)
	moved := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	var d drained
	select {
	case d = <-done:
	case <-ctx.Done():
		t.Fatalf("kubectl drain did not end after the move")
	}
	if d.err != nil {
		t.Fatalf("kubectl drain: %v\n%s", d.err, d.out)
	}
	t.Logf("real nodes: kubectl drain took %s", d.at.Sub(start).Round(time.Millisecond))
	if !strings.Contains(string(d.out), "disruption budget") {
		t.Errorf("kubectl drain never had an eviction refused while the workers saved:\n%s", d.out)
	}
	stopWatch()
	mu.Lock()
	if len(evicted) > 0 {
		t.Errorf("pods %v were evicted: the drain must wait for the checkpoint, and faultline move them", evicted)
	}
	mu.Unlock()

	if r := moved.Status.Restarts; r != (v1alpha1.RestartCounts{}) {
		t.Errorf("restarts %+v, want none spent by a planned move", r)
	}
	if lf := moved.Status.LastFailure; lf == nil || lf.Cause != v1alpha1.CausePlannedMaintenance {
		t.Errorf("lastFailure %+v, want PlannedMaintenance", lf)
	}
	if moved.Status.Checkpoint != nil {
		t.Errorf("status.checkpoint %+v after the move: it belongs to attempt 1's record", moved.Status.Checkpoint)
	}
	ck := moved.Status.Attempts[0].Checkpoint
	if ck == nil || ck.EndedAt == nil {
		t.Fatalf("attempt 1's record holds no closed checkpoint: %+v", moved.Status.Attempts[0])
	}
	if len(ck.Missing) > 0 || len(ck.Acks) != 4 {
		t.Fatalf("attempt 1's checkpoint: acks %+v, missing %v; want every index's answer", ck.Acks, ck.Missing)
	}
	saved := map[int32]int64{}
	for _, a := range ck.Acks {
		if a.Step == nil {
			t.Errorf("index %d answered without its step: %+v", a.Index, a)
			continue
		}
		saved[a.Index] = *a.Step
		if a.At.Time.Before(ck.RequestedAt.Time.Add(saveDelay)) || a.At.Time.After(ck.EndedAt.Time) {
			t.Errorf("index %d answered at %s: want after its %s save following the request at %s, before the move at %s",
				a.Index, a.At.Format(time.RFC3339Nano), saveDelay, ck.RequestedAt.Format(time.RFC3339Nano), ck.EndedAt.Format(time.RFC3339Nano))
		}
	}
	t.Logf("real nodes: request → every worker saved → move in %s; steps saved %v", ck.EndedAt.Sub(ck.RequestedAt.Time).Round(time.Millisecond), saved)

	// Every index of attempt 2 resumes from the step it saved on the request, not earlier.
	for i := range 4 {
		log := workerLog(ctx, t, c, ns, run.Name, 2, i)
		m := resumedFrom.FindStringSubmatch(log)
		if m == nil || m[1] != strconv.Itoa(i) {
			t.Errorf("attempt 2's index %d does not say what it resumed from:\n%s", i, log)
			continue
		}
		if got, _ := strconv.ParseInt(m[2], 10, 64); got != saved[int32(i)] {
			t.Errorf("attempt 2's index %d resumes from step %d, want %d, the step it saved on the request", i, got, saved[int32(i)])
		}
	}
	for i, p := range waitWorkers(ctx, t, c, ns, run.Name, 2, 4) {
		if p.Spec.NodeName != up.Name {
			t.Errorf("attempt 2 worker %d on %s, want %s (off the drained node)", i, p.Spec.NodeName, up.Name)
		}
	}
}

// TestRealShutdownCheckpointsBeforeTheGangMoves: two 4-worker runs across both real nodes,
// each training a step every 100 ms and saving every 20 steps; one with spec.checkpoint, one
// without. logind (its stand-in) announces a shutdown of one node. The kubelet stops that
// node's pods at once; the barrier of each worker of the checkpointed run turns the SIGTERM
// into a save first (SIGUSR1, then SIGTERM once it saved); the agent's annotation is the
// controller's notice, and it asks every worker of that gang (the other node's by their
// agent); the node's agent holds the shutdown until its workers answered. Attempt 2 of the
// checkpointed run resumes, index by index, from the step each saved on the notice or a
// later one (the other node's workers train on until the restart stops them); the other
// run's resumes from its last periodic save, the steps since lost.
//
// It runs alone: the node it shuts down is every scenario's. It brings the node back
// (PrepareForShutdown(false)) before it ends.
func TestRealShutdownCheckpointsBeforeTheGangMoves(t *testing.T) {
	ctx, c, ns := scenario(t, 4*time.Minute)
	startController(t, c, ns)
	args := []string{"--heartbeats-only", "--heartbeat-timeout", "10s", "--log-every", "100ms", "--checkpoint-dir", "/ckpt", "--save-every", "20", "--journal"}
	savedDir, periodicDir := checkpointDir(t, ns+"-saved"), checkpointDir(t, ns+"-periodic")
	saved := createRun(ctx, t, c, ns, realRun("saved", 4, append(slices.Clone(args), "--save-on-usr1", "--save-delay", "1s"),
		withCheckpoint(v1alpha1.CheckpointPolicy{Signal: "SIGUSR1", TimeoutSeconds: 60}, savedDir), withCommand(cluster.WorkerProgram)))
	periodic := createRun(ctx, t, c, ns, realRun("periodic", 4, args, withSharedDir(periodicDir), withCommand(cluster.WorkerProgram)))
	waitRun(ctx, t, c, ns, saved.Name, "attempt 1 Running", runningAttempt(1))
	waitRun(ctx, t, c, ns, periodic.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, t, c, ns, saved.Name, 1, 4)
	up := c.Real.Node(first[0].Spec.NodeName) // the checkpointed run's coordinator stays up
	var down *cluster.RealNode
	for _, n := range c.Real.Nodes {
		if n != up {
			down = n
		}
	}
	// Past a periodic save: the periodic run has steps since its last save to lose.
	waitJournals(ctx, t, periodicDir, 4, "the periodic run at step 30", func(j journal) bool { return j.last >= 30 })
	t.Cleanup(func() { bringBack(t, c, down) })

	agentReleased := make(chan time.Time, 1)
	go func() {
		if agents[down.Name].Lock.Released(30 * time.Second) {
			agentReleased <- time.Now()
		}
		close(agentReleased)
	}()
	announced := time.Now()
	if err := down.Logind.PrepareForShutdown(true); err != nil {
		t.Fatal(err)
	}
	moved := waitRun(ctx, t, c, ns, saved.Name, "attempt 2 Running", runningAttempt(2))
	t.Logf("PrepareForShutdown(true) -> the checkpointed run's attempt 2 Running in %s", time.Since(announced).Round(time.Millisecond))
	if lf := moved.Status.LastFailure; lf == nil || lf.Cause != v1alpha1.CauseNodeShutdown {
		t.Errorf("lastFailure %+v, want NodeShutdown", lf)
	}
	ck := moved.Status.Attempts[0].Checkpoint
	if ck == nil || ck.EndedAt == nil || len(ck.Acks) != 4 || len(ck.Missing) > 0 {
		t.Fatalf("attempt 1's record: checkpoint %+v; want every index's answer", ck)
	}
	// What the notice allows bounds the deadline: the workers' grace period (30 s, the
	// default) from the announcement, sooner than the policy's 60 s.
	if d := ck.Deadline.Sub(ck.RequestedAt.Time); d > 30*time.Second {
		t.Errorf("the request's deadline is %s after it, want at most the workers' 30 s grace period from the announcement", d)
	}
	t.Logf("announcement → request %s (%s), → every worker saved %s",
		ck.RequestedAt.Sub(announced).Round(time.Millisecond), ck.Notice, ck.EndedAt.Sub(announced).Round(time.Millisecond))
	var lastDown time.Time
	// Every index resumed after the move (a moved index's new pod a moment after the gang
	// counts as Running: its barrier open, its worker starting).
	journals := waitJournals(ctx, t, savedDir, 4, "the checkpointed run resumed", func(j journal) bool { return j.resumes >= 2 })
	for _, a := range ck.Acks {
		if a.Step == nil {
			t.Fatalf("index %d answered without its step: %+v", a.Index, a)
		}
		if first[int(a.Index)].Spec.NodeName == down.Name && a.At.After(lastDown) {
			lastDown = a.At.Time
		}
		// Not earlier than the step it saved on the notice: a worker of the node left trains
		// on until the gang's restart stops it, and may save again meanwhile (its periodic
		// save), which it then resumes from.
		if got := int64(journals[a.Index].resumedFrom); got < *a.Step {
			t.Errorf("the checkpointed run's index %d resumes from step %d, before %d, the step it saved on the notice", a.Index, got, *a.Step)
		} else {
			t.Logf("the checkpointed run's index %d saved step %d on the notice and resumes from %d", a.Index, *a.Step, got)
		}
	}
	if at, ok := <-agentReleased; !ok {
		t.Errorf("the agent of %s kept its inhibitor lock for 30 s", down.Name)
	} else if at.Before(lastDown) {
		t.Errorf("the agent of %s let the shutdown go on at %s, before its workers' last answer at %s", down.Name, at.Format(time.RFC3339Nano), lastDown.Format(time.RFC3339Nano))
	} else {
		t.Logf("the agent held the shutdown %s, its node's workers' answers in after %s", at.Sub(announced).Round(time.Millisecond), lastDown.Sub(announced).Round(time.Millisecond))
	}

	waitRun(ctx, t, c, ns, periodic.Name, "attempt 2 Running", runningAttempt(2))
	if p := getRun(ctx, t, c, ns, periodic.Name); len(p.Status.Attempts) > 0 && p.Status.Attempts[0].Checkpoint != nil {
		t.Errorf("the run without spec.checkpoint was asked to save: %+v", p.Status.Attempts[0].Checkpoint)
	}
	for i, j := range waitJournals(ctx, t, periodicDir, 4, "the periodic run resumed", func(j journal) bool { return j.resumes >= 2 }) {
		if j.resumedFrom%20 != 0 || j.lost <= 0 {
			t.Errorf("the periodic run's index %d resumes from step %d, %d steps lost: want its last periodic save, before the step it reached", i, j.resumedFrom, j.lost)
		}
		t.Logf("without spec.checkpoint, index %d lost %d steps (resumes from its save at %d)", i, j.lost, j.resumedFrom)
	}
}

// TestRealCheckpointThatNeverAcksStillMoves: a 4-worker run with spec.checkpoint (a 5 s
// timeout) whose index 1 never says it saved; one real node is cordoned under it. Every worker
// is asked; the others save and answer at once, index 1 never does: the move goes on at the
// deadline, not before and not much after, spends no budget, and attempt 1's record names
// index 1 as missing.
//
// It runs alone: the node it cordons is every scenario's; it uncordons it before it ends.
func TestRealCheckpointThatNeverAcksStillMoves(t *testing.T) {
	ctx, c, ns := scenario(t, 3*time.Minute)
	startController(t, c, ns)
	const timeout = 5 * time.Second
	run := createRun(ctx, t, c, ns, realRun("silent", 4, []string{"--heartbeats-only", "--heartbeat-timeout", "10s",
		"--log-every", "100ms", "--checkpoint-dir", "/ckpt", "--save-on-usr1", "--save-never-index", "1"},
		withCheckpoint(v1alpha1.CheckpointPolicy{TimeoutSeconds: int32(timeout / time.Second)}, checkpointDir(t, ns)), withCommand(cluster.WorkerProgram)))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, t, c, ns, run.Name, 1, 4)
	var down string
	for _, n := range c.Real.Nodes {
		if n.Name != first[0].Spec.NodeName {
			down = n.Name
		}
	}
	t.Cleanup(func() { uncordon(t, c, down) })
	if out, err := c.Kubectl(ctx, "cordon", down); err != nil {
		t.Fatalf("kubectl cordon %s: %v\n%s", down, err, out)
	}
	moved := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	if r := moved.Status.Restarts; r != (v1alpha1.RestartCounts{}) {
		t.Errorf("restarts %+v, want none spent by a planned move", r)
	}
	ck := moved.Status.Attempts[0].Checkpoint
	if ck == nil || ck.EndedAt == nil {
		t.Fatalf("attempt 1's record holds no closed checkpoint: %+v", moved.Status.Attempts[0])
	}
	if !slices.Equal(ck.Missing, []int32{1}) || len(ck.Acks) != 3 || slices.ContainsFunc(ck.Acks, func(a v1alpha1.CheckpointAck) bool { return a.Index == 1 }) {
		t.Errorf("attempt 1's checkpoint: acks %+v, missing %v; want 0, 2 and 3 saved, 1 missing", ck.Acks, ck.Missing)
	}
	// At the deadline: not before it, and within the controller's look at it.
	if waited := ck.EndedAt.Sub(ck.RequestedAt.Time); waited < timeout || waited > timeout+3*time.Second {
		t.Errorf("the move went on %s after the request, want at its %s deadline", waited, timeout)
	} else {
		t.Logf("real nodes: index 1 never answered; the move went on %s after the request (deadline %s)", waited.Round(time.Millisecond), timeout)
	}
}

// secondWorkersGPU waits for attempt 1 of run's two workers to run and returns index 1's node
// and its GPU's UUID, as its kubelet's PodResources has it.
func secondWorkersGPU(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, run string) (*cluster.RealNode, string) {
	t.Helper()
	waitRun(ctx, t, c, ns, run, "attempt 1 Running", runningAttempt(1))
	faulty := waitWorkers(ctx, t, c, ns, run, 1, 2)[1]
	node := c.Real.Node(faulty.Spec.NodeName)
	uuid := gpusOf(ctx, t, node, ns)[faulty.Name]
	if uuid == "" {
		t.Fatalf("PodResources gives %s no GPU", faulty.Name)
	}
	return node, uuid
}

// TestRealUnplannedFaultAsksForNoCheckpoint: a 2-worker run with spec.checkpoint, one worker
// on each real node, each with a GPU; a fatal XID (79, fallen off the bus) on one worker's
// GPU. An unplanned fault gives no notice to use: the gang restarts at once on the node
// agent's evidence, no worker is asked to save, and attempt 1's record holds no request.
func TestRealUnplannedFaultAsksForNoCheckpoint(t *testing.T) {
	ctx, c, ns := scenario(t, 3*time.Minute)
	startController(t, c, ns)
	run := createRun(ctx, t, c, ns, realRun("unplanned", 2, []string{"--heartbeats-only", "--heartbeat-timeout", "10s",
		"--log-every", "100ms", "--checkpoint-dir", "/ckpt", "--save-on-usr1"},
		withGPUs(1), withCheckpoint(v1alpha1.CheckpointPolicy{TimeoutSeconds: 60}, checkpointDir(t, ns)), withCommand(cluster.WorkerProgram)))
	node, uuid := secondWorkersGPU(ctx, t, c, ns, run.Name)
	start := time.Now()
	injectFatalXID(t, c, node.Name, uuid)
	got := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, got, 2)
	t.Logf("real nodes: XID 79 → attempt 2 Running in %s", time.Since(start).Round(time.Millisecond))
	if lf := got.Status.LastFailure; lf == nil || lf.Cause != v1alpha1.CauseGPUFault {
		t.Errorf("lastFailure %+v, want GPUFault", lf)
	}
	if ck := got.Status.Attempts[0].Checkpoint; ck != nil || got.Status.Checkpoint != nil {
		t.Errorf("an unplanned fault asked the workers to save: attempt 1's %+v, the run's %+v", ck, got.Status.Checkpoint)
	}
	// The healthy worker restarted in place: its container's log holds attempt 1.
	if log := workerLog(ctx, t, c, ns, run.Name, 1, 0); strings.Contains(log, "asked to save") || !strings.Contains(log, "step 1 ") {
		t.Errorf("attempt 1's index 0 trained and was asked to save, or never trained:\n%s", log)
	}
}
