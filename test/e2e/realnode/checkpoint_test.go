package realnode

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
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

// withCheckpoint gives the run spec.checkpoint and a directory both real nodes see (a
// hostPath: they are one machine) at /ckpt, where each index saves its step. The run's
// command must be set (withCommand): its barrier then supervises it, and can ask it.
func withCheckpoint(policy v1alpha1.CheckpointPolicy, hostDir string) runOption {
	return func(r *v1alpha1.TrainingRun) {
		r.Spec.Checkpoint = &policy
		spec := &r.Spec.Template.Spec
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "ckpt", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: hostDir}}})
		spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "ckpt", MountPath: "/ckpt"})
	}
}

// checkpointDir is a directory for the test's checkpoints on this machine, removed after it.
func checkpointDir(t *testing.T, ns string) string {
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
		out, err := c.Kubectl(ctx, "drain", down.Name, "--pod-selector", v1alpha1.LabelRun+"="+run.Name,
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
