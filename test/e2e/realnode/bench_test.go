package realnode

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
	"github.com/faultline-dev/faultline/test/hops"
)

// benchWorkers are the gang sizes of BenchmarkRealNodeShutdownRestart. After the shutdown
// one node runs the whole gang: this machine sustains about 100 real pods.
var benchWorkers = flag.String("real-bench-workers", "8,32", "comma-separated gang sizes of BenchmarkRealNodeShutdownRestart")

// BenchmarkRealNodeShutdownRestart: the time from a node shutdown's announcement (logind's
// PrepareForShutdown, as the node's kubelet and agent get it) to every worker of the next
// attempt Running, on the real nodes, restarting in place beside recreating, one after the
// other in one run. The gang spans both nodes; the node without the coordinator shuts down;
// its workers end by the kubelet's graceful shutdown, the others restart in place (same
// pods) or in new pods, and the shut-down node's indexes get new pods on the node left. Each
// size and mode is one run, created, measured and deleted, and the node comes back before
// the next.
//
//	go test -run '^$' -bench RealNodeShutdownRestart -benchtime 1x ./test/e2e/realnode/ -real-bench-workers 8,32
//
// Metrics: s/restart (the time to restart), pods-created (the new pods of the next attempt)
// and in-place (the workers that restarted in their own pods).
func BenchmarkRealNodeShutdownRestart(b *testing.B) {
	for _, w := range strings.Split(*benchWorkers, ",") {
		workers, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || workers < 2 {
			b.Fatalf("-real-bench-workers %q: want gang sizes of 2 or more", *benchWorkers)
		}
		for _, mode := range []v1alpha1.RestartMode{v1alpha1.RestartModeInPlace, v1alpha1.RestartModeRecreate} {
			b.Run(fmt.Sprintf("workers=%d/mode=%s", workers, mode), func(b *testing.B) {
				var took time.Duration
				var created, inPlace int
				for i := range b.N {
					r := shutdownRestart(b, fmt.Sprintf("bench-%d-%s-%d", workers, strings.ToLower(string(mode)), i), workers, mode)
					took += r.took
					created += r.created
					inPlace += r.inPlace
				}
				b.ReportMetric(took.Seconds()/float64(b.N), "s/restart")
				b.ReportMetric(float64(created)/float64(b.N), "pods-created")
				b.ReportMetric(float64(inPlace)/float64(b.N), "in-place")
			})
		}
	}
}

type restartResult struct {
	took             time.Duration
	created, inPlace int
}

// shutdownRestart runs one measurement of BenchmarkRealNodeShutdownRestart.
func shutdownRestart(b *testing.B, name string, workers int, mode v1alpha1.RestartMode) restartResult {
	b.StopTimer()
	defer b.StartTimer()
	ctx, c, ns := scenario(b, 5*time.Minute)
	ctrl := startController(b, c, ns)
	defer ctrl.Stop()

	// As in TestRealNodeShutdownRestartsTheGang: the workers notice a lost task by its
	// heartbeats, after 10 s, so that the kubelet's SIGTERM and the controller come first.
	run := createRun(ctx, b, c, ns, realRun(name, int32(workers), []string{"--heartbeats-only", "--heartbeat-timeout", "10s"}, withRestartMode(mode)))
	waitRun(ctx, b, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, b, c, ns, run.Name, 1, workers)
	up := c.Real.Node(first[0].Spec.NodeName) // the coordinator's node stays up
	var down *cluster.RealNode
	for _, n := range c.Real.Nodes {
		if n != up {
			down = n
		}
	}
	before := map[string]bool{}
	for _, p := range first {
		before[string(p.UID)] = true
	}
	defer bringBack(b, c, down)

	b.StartTimer()
	announced := time.Now()
	if err := down.Logind.PrepareForShutdown(true); err != nil {
		b.Fatal(err)
	}
	got := waitRun(ctx, b, c, ns, run.Name, "attempt 2 Running", attemptRunningOrOver(2))
	took := time.Since(announced)
	b.StopTimer()
	requireRunning(b, got, 2)
	var r restartResult
	r.took = took
	after := waitWorkers(ctx, b, c, ns, run.Name, 2, workers)
	for _, p := range after {
		if before[string(p.UID)] {
			r.inPlace++
		} else {
			r.created++
		}
	}
	b.Logf("%d workers, %s: announcement -> attempt 2 Running in %s; %d in place, %d new pods (attempt 2's record: %s); %s",
		workers, mode, took.Round(time.Millisecond), r.inPlace, r.created, got.Status.Attempts[len(got.Status.Attempts)-1].RestartMode, phases(got, announced))
	if mode == v1alpha1.RestartModeInPlace && traces != nil {
		// A pod's moment the spans lack (a worker that exited on its own before its stop:
		// the kubelet restarted it first) leaves its hop out of the table, not the run.
		ep, err := waitBreakdown(got, first, after)
		if err != nil {
			b.Logf("the breakdown lacks moments: %v", err)
		}
		b.Logf("%d workers in place, by hop (trace %s):\n%s", workers, ep.TraceID, hops.Table(ep))
	}

	// The next measurement gets both nodes to itself.
	if err := runClient(b, c).Delete(ctx, got); err != nil {
		b.Fatal(err)
	}
	if _, err := c.WaitPods(ctx, ns, labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run.Name}), func(pods []*corev1.Pod) (bool, error) {
		return len(pods) == 0, nil
	}); err != nil {
		b.Fatalf("the pods of %s are not gone: %v", run.Name, err)
	}
	return r
}

// phases says when the restart's steps were written, from the announcement, to the second
// (the API's precision): the decision, the barrier's opening (in place) or the new
// attempt's start, its workers all Running.
func phases(run *v1alpha1.TrainingRun, from time.Time) string {
	at := func(t *metav1.Time) string {
		if t == nil {
			return "-"
		}
		return fmt.Sprintf("+%.0fs", t.Sub(from.Truncate(time.Second)).Seconds())
	}
	var decided *metav1.Time
	if f := run.Status.LastFailure; f != nil {
		decided = f.DecidedAt
	}
	rec := run.Status.Attempts[len(run.Status.Attempts)-1]
	return fmt.Sprintf("decided %s, barrier opened %s, started %s, running %s", at(decided), at(rec.BarrierOpenedAt), at(rec.StartTime), at(rec.RunningTime))
}
