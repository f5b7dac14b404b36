package realnode

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

var (
	moveWorkers   = flag.Int("real-bench-move-workers", 8, "BenchmarkRealNodePlannedMoveWorkLost: the gang's size")
	moveSaveEvery = flag.Int("real-bench-save-every", 300, "BenchmarkRealNodePlannedMoveWorkLost: the periodic checkpoint's interval, in steps of 100 ms (300: every 30 s)")
	moveSeed      = flag.Uint64("real-bench-move-seed", 1, "BenchmarkRealNodePlannedMoveWorkLost: the seed of where in the interval each drain comes")
)

// The systems of BenchmarkRealNodePlannedMoveWorkLost.
const (
	moveCheckpoint = "faultline,checkpoint-on-notice"
	movePeriodic   = "faultline,periodic"
	moveJobSet     = "jobset,periodic"
)

// moveNames name each system's gangs.
var moveNames = map[string]string{moveCheckpoint: "notice", movePeriodic: "periodic", moveJobSet: "jobset"}

// stepEvery is the test worker's step in the benchmark (--log-every).
const stepEvery = 100 * time.Millisecond

// BenchmarkRealNodePlannedMoveWorkLost: the training work a planned move loses, on the real
// nodes: a gang of workers that each take a step every 100 ms and save every
// -real-bench-save-every steps (a periodic checkpoint, to a directory both nodes see), across
// both nodes; `kubectl drain` of the node without the coordinator, at a point of the interval
// drawn from -real-bench-move-seed (the same points for every system). The work lost is, for
// each index, the steps it had taken when its attempt ended minus the step it resumes from,
// read from its journal (test/worker --journal), which outlives its pods.
//
//   - faultline with spec.checkpoint: the drain's cordon asks every worker to save, and the
//     move waits for them (the evictions refused by the run's budget);
//
//   - faultline without it: the move at the cordon, from the last periodic save;
//
//   - JobSet (backoffLimit 0, maxRestarts 10): the eviction fails the Job, JobSet recreates
//     the gang, from the last periodic save.
//
//     go test -run '^$' -bench RealNodePlannedMoveWorkLost -benchtime 2x ./test/e2e/realnode/
//
// Metrics: steps-lost/move (the mean over the indexes), s-lost/move (steps × 100 ms).
func BenchmarkRealNodePlannedMoveWorkLost(b *testing.B) {
	if *moveWorkers < 2 || *moveSaveEvery < 10 {
		b.Fatalf("-real-bench-move-workers %d, -real-bench-save-every %d: want a gang of 2 or more and an interval of 10 steps or more", *moveWorkers, *moveSaveEvery)
	}
	lost := map[string]float64{}
	for _, system := range []string{moveCheckpoint, movePeriodic, moveJobSet} {
		b.Run("system="+system, func(b *testing.B) {
			phases := rand.New(rand.NewPCG(*moveSeed, 0))
			var sum float64
			for i := range b.N {
				// Into the second interval: the first periodic save is behind every system.
				phase := *moveSaveEvery + phases.IntN(*moveSaveEvery)
				steps := plannedMove(b, system, moveNames[system], *moveWorkers, phase)
				b.Logf("%s, move %d at step %d (%d into the interval of %d): %.1f steps lost per index", system, i+1, phase, phase-*moveSaveEvery, *moveSaveEvery, steps)
				sum += steps
			}
			lost[system] = sum / float64(b.N)
			b.ReportMetric(lost[system], "steps-lost/move")
			b.ReportMetric(lost[system]*stepEvery.Seconds(), "s-lost/move")
		})
	}
	b.Logf("work lost per planned move, %d workers, a save every %d steps (%s): checkpoint on notice %.1f steps, faultline periodic %.1f, JobSet periodic %.1f",
		*moveWorkers, *moveSaveEvery, time.Duration(*moveSaveEvery)*stepEvery, lost[moveCheckpoint], lost[movePeriodic], lost[moveJobSet])
}

// plannedMove runs one move of BenchmarkRealNodePlannedMoveWorkLost and returns the steps each
// index lost, on average.
func plannedMove(b *testing.B, system, name string, workers, atStep int) float64 {
	b.StopTimer()
	defer b.StartTimer()
	ctx, c, ns := scenario(b, 6*time.Minute)
	// A name of its own: a drain's pod selector spans every namespace.
	name = "move-" + name + "-" + strings.TrimPrefix(ns, "t-")
	dir := checkpointDir(b, ns)
	args := []string{"--heartbeats-only", "--heartbeat-timeout", "10s", "--log-every", stepEvery.String(), "--checkpoint-dir", "/ckpt",
		"--save-every", strconv.Itoa(*moveSaveEvery), "--journal"}
	selector := v1alpha1.LabelRun + "=" + name
	switch system {
	case moveJobSet:
		js := startJobSetOnce(b, c)
		tmpl := corev1.PodTemplateSpec{Spec: realPodSpec(map[string]string{jobSetNameLabel: name})}
		w := &tmpl.Spec.Containers[0]
		w.Args = args
		w.Env = []corev1.EnvVar{
			{Name: "JAX_COORDINATOR_ADDRESS", Value: fmt.Sprintf("%s-workers-0-0.%s:1234", name, name)},
			{Name: "JAX_NUM_PROCESSES", Value: strconv.Itoa(workers)},
			{Name: "JAX_PROCESS_ID", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
		}
		tmpl.Spec.Volumes = []corev1.Volume{{Name: "ckpt", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}}}
		w.VolumeMounts = []corev1.VolumeMount{{Name: "ckpt", MountPath: "/ckpt"}}
		obj := cluster.NewJobSet(cluster.JobSetSpec{Name: name, Namespace: ns, Workers: workers, PodTemplate: tmpl, MaxRestarts: 10})
		if _, err := js.Client.Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			b.Fatalf("create JobSet %s: %v", name, err)
		}
		defer js.Client.Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		selector = jobSetNameLabel + "=" + name
	default:
		ctrl := startController(b, c, ns)
		defer ctrl.Stop()
		opts := []runOption{withSharedDir(dir), withCommand(cluster.WorkerProgram)}
		if system == moveCheckpoint {
			args = append(args, "--save-on-usr1")
			opts[0] = withCheckpoint(v1alpha1.CheckpointPolicy{TimeoutSeconds: 60}, dir)
		}
		createRun(ctx, b, c, ns, realRun(name, int32(workers), args, opts...))
	}
	// Every index has taken atStep steps: the drain comes then.
	waitJournals(ctx, b, dir, workers, "the gang at step "+strconv.Itoa(atStep), func(j journal) bool { return j.last >= atStep })
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil || len(pods.Items) == 0 {
		b.Fatalf("the gang's pods (%s): %v", selector, err)
	}
	// The node without the coordinator (index 0) goes, as in the other real-node moves.
	var down string
	coordinator := map[string]bool{}
	for _, p := range pods.Items {
		if p.Annotations["batch.kubernetes.io/job-completion-index"] == "0" {
			coordinator[p.Spec.NodeName] = true
		}
	}
	for _, n := range c.Real.Nodes {
		if !coordinator[n.Name] {
			down = n.Name
		}
	}
	defer uncordonNode(b, c, down)
	if out, err := c.Kubectl(ctx, "drain", down, "--pod-selector", selector, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=4m"); err != nil {
		b.Fatalf("kubectl drain %s: %v\n%s", down, err, out)
	}
	// Every index resumed after the move and took a step.
	js := waitJournals(ctx, b, dir, workers, "the gang resumed", func(j journal) bool { return j.resumes >= 2 && j.afterResume > 0 })
	var sum float64
	for _, j := range js {
		sum += float64(j.lost)
	}
	return sum / float64(len(js))
}

// jobSetNameLabel is JobSet's label of its pods' JobSet.
const jobSetNameLabel = "jobset.sigs.k8s.io/jobset-name"

// startJobSetOnce starts JobSet's controller for the package's cluster, once: it stays for the
// benchmarks that follow.
func startJobSetOnce(b *testing.B, c *cluster.Cluster) *cluster.JobSet {
	if realJobSet == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		js, err := c.StartJobSet(ctx, filepath.Join(os.TempDir(), "faultline-realnode-jobset"))
		if err != nil {
			b.Fatalf("start JobSet: %v", err)
		}
		realJobSet = js
	}
	return realJobSet
}

// realJobSet is the JobSet controller startJobSetOnce started (stopped with the process).
var realJobSet *cluster.JobSet

// uncordonNode gives a node back to the benchmarks that follow.
func uncordonNode(b *testing.B, c *cluster.Cluster, name string) {
	if _, err := c.Kubectl(context.Background(), "uncordon", name); err != nil {
		b.Errorf("uncordon %s: %v", name, err)
	}
}

// journal is what an index's journal (test/worker --journal) says: its last step, how many
// times it resumed, the steps it took since it last resumed, and what its last move lost:
// the steps it had taken before it minus the step it resumed from.
type journal struct {
	last, resumes, afterResume, lost, resumedFrom int
}

func readJournal(path string) (journal, error) {
	f, err := os.Open(path)
	if err != nil {
		return journal{}, err
	}
	defer f.Close()
	var j journal
	reached := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		kind, n, ok := strings.Cut(sc.Text(), " ")
		v, err := strconv.Atoi(n)
		if !ok || err != nil {
			continue // a line cut by the pod's end
		}
		switch kind {
		case "step":
			j.last, reached = v, v
			j.afterResume++
		case "resume":
			j.resumes++
			j.lost, j.afterResume, j.resumedFrom = max(reached-v, 0), 0, v
		}
	}
	return j, sc.Err()
}

// waitJournals polls the journals of the gang's indexes (local files) until each satisfies
// cond, and returns them.
func waitJournals(ctx context.Context, b testing.TB, dir string, workers int, what string, cond func(journal) bool) []journal {
	b.Helper()
	for {
		out := make([]journal, 0, workers)
		for i := range workers {
			j, err := readJournal(filepath.Join(dir, fmt.Sprintf("journal-%d", i)))
			if err != nil || !cond(j) {
				break
			}
			out = append(out, j)
		}
		if len(out) == workers {
			return out
		}
		select {
		case <-ctx.Done():
			b.Fatalf("%s: not within the scenario's time (journals in %s)", what, dir)
		case <-time.After(stepEvery):
		}
	}
}
