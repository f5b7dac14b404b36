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
// the next. Beside the two modes, the floor: the same shutdown under bare pods of which only
// the lost node's are replaced (replaceLostPods), what the moved indexes alone cost.
//
//	go test -run '^$' -bench RealNodeShutdownRestart -benchtime 1x ./test/e2e/realnode/ -real-bench-workers 8,32
//
// Metrics: s/restart (the time to restart), pods-created (the new pods of the next attempt),
// in-place (the workers that restarted in their own pods; the floor: those left alone) and,
// with warm spares, spares-used (the indexes spares took).
// Each size ends with the ratios to recreating.
func BenchmarkRealNodeShutdownRestart(b *testing.B) {
	for _, w := range strings.Split(*benchWorkers, ",") {
		workers, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || workers < 2 {
			b.Fatalf("-real-bench-workers %q: want gang sizes of 2 or more", *benchWorkers)
		}
		took := map[string]time.Duration{}
		for _, mode := range []string{string(v1alpha1.RestartModeInPlace), inPlaceSupervised, inPlaceSpares, string(v1alpha1.RestartModeRecreate), floor} {
			name := "mode=" + mode
			if mode == floor {
				name = floor
			}
			b.Run(fmt.Sprintf("workers=%d/%s", workers, name), func(b *testing.B) {
				var r restartResult
				for i := range b.N {
					short := strings.ToLower(mode)
					switch mode {
					case inPlaceSupervised:
						short = "supervised"
					case inPlaceSpares:
						short = "spares"
					}
					gang := fmt.Sprintf("bench-%d-%s-%d", workers, short, i)
					var one restartResult
					switch mode {
					case floor:
						one = replaceLostPods(b, gang, workers)
					case inPlaceSupervised, inPlaceSpares:
						one = shutdownRestart(b, gang, workers, v1alpha1.RestartModeInPlace, mode)
					default:
						one = shutdownRestart(b, gang, workers, v1alpha1.RestartMode(mode), "")
					}
					r.took += one.took
					r.created += one.created
					r.inPlace += one.inPlace
					r.spares += one.spares
				}
				took[mode] = r.took / time.Duration(b.N)
				b.ReportMetric(r.took.Seconds()/float64(b.N), "s/restart")
				b.ReportMetric(float64(r.created)/float64(b.N), "pods-created")
				b.ReportMetric(float64(r.inPlace)/float64(b.N), "in-place")
				if mode == inPlaceSpares {
					b.ReportMetric(float64(r.spares)/float64(b.N), "spares-used")
				}
			})
		}
		if re, fl := took[string(v1alpha1.RestartModeRecreate)], took[floor]; re > 0 && fl > 0 {
			b.Logf("%d workers: in place %.2f× recreate, with the barrier in the worker supervising it %.2f× (%.2f× the floor), with warm spares %.2f× (%.2f× the floor); the floor (only the lost node's pods replaced) %.2f× recreate",
				workers, took[string(v1alpha1.RestartModeInPlace)].Seconds()/re.Seconds(),
				took[inPlaceSupervised].Seconds()/re.Seconds(), took[inPlaceSupervised].Seconds()/fl.Seconds(),
				took[inPlaceSpares].Seconds()/re.Seconds(), took[inPlaceSpares].Seconds()/fl.Seconds(), fl.Seconds()/re.Seconds())
		}
	}
}

// floor is BenchmarkRealNodeShutdownRestart's third measurement beside the two restart modes:
// no gang restart at all, only the lost node's pods replaced (replaceLostPods). It is what
// any restart pays that keeps at most one pod per index: in place, a moved index's new pod
// can be made only once its old pod has ended, and on these two nodes it runs on the one
// kubelet left, beside the workers restarting in place.
const floor = "floor"

// inPlaceSupervised is restartMode InPlace under a controller with --barrier-in-worker (the
// default) and workers with a command (the test worker's): the barrier is the worker
// container's entrypoint and stays, the worker its child, and a restart in place restarts
// no container. Plain InPlace runs workers without a command: their barrier is an init
// container.
const inPlaceSupervised = "InPlace,barrier=supervise"

// inPlaceSpares is inPlaceSupervised with as many warm spares as workers (spec.spares): spread
// over both nodes as the workers are, the node left holds as many spares as the lost node
// held workers, and the lost indexes go to them rather than to new pods.
const inPlaceSpares = "InPlace,spares"

type restartResult struct {
	took time.Duration
	// created: the next attempt's pods made for it; inPlace: its workers that restarted in
	// their own pods; spares: its indexes that warm spares took.
	created, inPlace, spares int
}

// shutdownRestart runs one measurement of BenchmarkRealNodeShutdownRestart.
func shutdownRestart(b *testing.B, name string, workers int, mode v1alpha1.RestartMode, barrier string) restartResult {
	b.StopTimer()
	defer b.StartTimer()
	ctx, c, ns := scenario(b, 5*time.Minute)
	var args []string
	opts := []runOption{withRestartMode(mode)}
	if barrier == inPlaceSupervised || barrier == inPlaceSpares {
		args = append(args, "--barrier-in-worker")
		opts = append(opts, withCommand(cluster.WorkerProgram))
	}
	spares := 0
	if barrier == inPlaceSpares {
		spares = workers
		opts = append(opts, withSpares(int32(spares)))
	}
	ctrl := startController(b, c, ns, args...)
	defer ctrl.Stop()

	// As in TestRealNodeShutdownRestartsTheGang: the workers notice a lost task by its
	// heartbeats, after 10 s, so that the kubelet's SIGTERM and the controller come first.
	run := createRun(ctx, b, c, ns, realRun(name, int32(workers), []string{"--heartbeats-only", "--heartbeat-timeout", "10s"}, opts...))
	waitRun(ctx, b, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, b, c, ns, run.Name, 1, workers)
	// The gang registered, its rendezvous over: a worker counts as Running once its agent
	// opened it, and a task that dies during the rendezvous fails the others (their
	// coordination service's error, exit 1), which would restart their containers.
	registeredTasks(ctx, b, c, ns, run.Name, 1, workers)
	wasSpare := map[string]bool{}
	if spares > 0 {
		for _, p := range waitSpares(ctx, b, c, ns, run.Name, spares) {
			wasSpare[string(p.UID)] = true
		}
	}
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
	w, err := watchAPIMoments(ctx, c, ns, run.Name)
	if err != nil {
		b.Fatal(err)
	}
	defer w.stop()

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
		switch {
		case before[string(p.UID)]:
			r.inPlace++
		case wasSpare[string(p.UID)]:
			r.spares++
		default:
			r.created++
		}
	}
	b.Logf("%d workers, %s: announcement -> attempt 2 Running in %s; %d in place, %d on spares, %d new pods (attempt 2's record: %s); %s",
		workers, mode, took.Round(time.Millisecond), r.inPlace, r.spares, r.created, got.Status.Attempts[len(got.Status.Attempts)-1].RestartMode, phases(got, announced))
	if mode == v1alpha1.RestartModeInPlace && traces != nil {
		// A pod's moment the spans lack (a worker that exited on its own before its stop:
		// the kubelet restarted it first) leaves its hop out of the table, not the run.
		ep, err := waitBreakdown(got, first, after, w)
		if err != nil {
			b.Logf("the breakdown lacks moments: %v", err)
		}
		b.Logf("%d workers in place, by hop (trace %s; the announcement at %s, %s before the decision):\n%s", workers, ep.TraceID, announced.Format("15:04:05.000"), ep.Decided.Sub(announced).Round(10*time.Millisecond), hops.Table(ep))
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

// replaceLostPods measures the floor: workers bare pods, spread over both nodes as a run's
// are, and nothing to replace them but the benchmark itself, which makes a lost pod's new
// pod, kept off the node down, the moment its watch sees the old one Failed: the earliest a
// new pod may be made while at most one pod per index is bound, faultline's rule for a moved
// index. Not a Job: the Job controller holds a failed index's new pod for its pod failure
// backoff, 10 s, even for a failure its podFailurePolicy ignores (here: Failed 3 s after the
// announcement, the new pods made at 12 s). The time is from the same announcement to a
// Ready pod for every index again. No controller, no gang, no barrier: each pod is the runs'
// test worker as a gang of one, which exits 143 on the kubelet's SIGTERM as theirs do.
func replaceLostPods(b *testing.B, name string, workers int) restartResult {
	b.StopTimer()
	defer b.StartTimer()
	ctx, c, ns := scenario(b, 5*time.Minute)
	const labelFloor, labelIndex = "test.faultline.dev/floor", "test.faultline.dev/floor-index"
	pod := func(index, off string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-" + index + "-", Namespace: ns, Labels: map[string]string{labelFloor: name, labelIndex: index}},
			Spec:       realPodSpec(map[string]string{labelFloor: name}),
		}
		p.Spec.Containers[0].Env = gangOfOne()
		if off != "" { // as an attempt keeps off the nodes it excludes
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{off}}}}},
			}}}
		}
		return p
	}
	create := func(p *corev1.Pod) error {
		_, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		return err
	}
	for i := range workers {
		if err := create(pod(strconv.Itoa(i), "")); err != nil {
			b.Fatal(err)
		}
	}
	selector := labels.SelectorFromSet(labels.Set{labelFloor: name})
	// ready holds once every index has a Ready pod off the node down. On the way it makes
	// the new pod of each pod it sees Failed there, and records when none is left but
	// Failed ones (failed).
	var failed time.Time
	replaced := map[string]bool{}
	ready := func(down string) func([]*corev1.Pod) (bool, error) {
		return func(pods []*corev1.Pod) (bool, error) {
			k, left := 0, 0
			for _, p := range pods {
				lost := down != "" && p.Spec.NodeName == down
				switch {
				case lost && p.Status.Phase == corev1.PodFailed:
					if i := p.Labels[labelIndex]; !replaced[i] {
						replaced[i] = true
						if err := create(pod(i, down)); err != nil {
							return false, err
						}
					}
				case lost:
					left++
				case p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil:
					if cond := podCondition(p, corev1.PodReady); cond != nil && cond.Status == corev1.ConditionTrue {
						k++
					}
				}
			}
			if down != "" && left == 0 && failed.IsZero() {
				failed = time.Now()
			}
			return k == workers, nil
		}
	}
	first, err := c.WaitPods(ctx, ns, selector, ready(""))
	if err != nil {
		b.Fatalf("the floor's pods in %s are not all Ready: %v", ns, err)
	}
	var down *cluster.RealNode
	before := map[string]bool{}
	for _, p := range first {
		before[string(p.UID)] = true
		if down == nil {
			down = c.Real.Node(p.Spec.NodeName)
		}
	}
	defer bringBack(b, c, down)

	b.StartTimer()
	announced := time.Now()
	if err := down.Logind.PrepareForShutdown(true); err != nil {
		b.Fatal(err)
	}
	after, err := c.WaitPods(ctx, ns, selector, ready(down.Name))
	took := time.Since(announced)
	b.StopTimer()
	if err != nil {
		b.Fatalf("after %s shut down, the floor's pods in %s are not all Ready again: %v", down.Name, ns, err)
	}
	r := restartResult{took: took}
	var lost, made []*corev1.Pod
	for _, p := range after {
		switch {
		case p.Status.Phase == corev1.PodFailed:
			lost = append(lost, p)
		case before[string(p.UID)]:
			r.inPlace++
		default:
			r.created++
			made = append(made, p)
		}
	}
	b.Logf("%d workers, floor: announcement -> every index Ready again in %s; %d pods untouched, %d new on the node left; %s",
		workers, took.Round(time.Millisecond), r.inPlace, r.created, floorPhases(lost, made, failed, announced))

	deletePods(ctx, b, c, ns, selector)
	return r
}

// floorPhases says when, from the announcement, the last of the lost pods ended (its
// container's finish, the kubelet's clock) and was seen Failed (failed, the watch's), and
// the last of their new pods was created, scheduled and Ready (the API's clock, to the
// second).
func floorPhases(lost, made []*corev1.Pod, failed, from time.Time) string {
	var ended, created, scheduled, ready time.Time
	latest := func(t *time.Time, at time.Time) {
		if at.After(*t) {
			*t = at
		}
	}
	for _, p := range lost {
		for _, cs := range p.Status.ContainerStatuses {
			if term := cs.State.Terminated; term != nil {
				latest(&ended, term.FinishedAt.Time)
			}
		}
	}
	for _, p := range made {
		latest(&created, p.CreationTimestamp.Time)
		if c := podCondition(p, corev1.PodScheduled); c != nil {
			latest(&scheduled, c.LastTransitionTime.Time)
		}
		if c := podCondition(p, corev1.PodReady); c != nil {
			latest(&ready, c.LastTransitionTime.Time)
		}
	}
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("+%.0fs", t.Sub(from.Truncate(time.Second)).Seconds())
	}
	return fmt.Sprintf("lost pods ended %s, Failed %s; new pods created %s, scheduled %s, Ready %s", at(ended), at(failed), at(created), at(scheduled), at(ready))
}
