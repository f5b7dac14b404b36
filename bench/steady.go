package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/controller"
	"github.com/faultline-dev/faultline/test/cluster"
	"github.com/faultline-dev/faultline/test/procstat"
)

type steadyConfig struct {
	runs, workers int
	qps           int
	// faults: fatal GPU faults injected during the window, each on its own node and run.
	faults int
	window time.Duration
	// gpusPerNode each node offers (8 as a DGX-class machine; more makes fewer nodes, which
	// this 2-core machine creates and heartbeats faster), schedulerQPS kube-scheduler's rate
	// limit (0: upstream 50, a quarter of an hour to bind 50,000 pods).
	gpusPerNode, schedulerQPS int
}

type steadyResult struct {
	cfg steadyConfig
	// up: from creating the runs to every worker Running.
	up time.Duration
	// Controller: CPU in cores over the window, RSS at rest with every pod Running and at
	// the end of the window, API requests per second over the window.
	cpu             float64
	rssIdle, rssEnd int64
	// heapEnd: the Go heap in use at the end of the window (go_memstats_heap_inuse_bytes):
	// what the cache holds, without the garbage the collector leaves room for (RSS is up to
	// twice it at GOGC 100, less under a soft memory limit).
	heapEnd            float64
	apiRPS             float64
	decisions, markeds []time.Duration
	// inside is the controller's own decision latency (faultline_decision_seconds) at the
	// end of the window: only the window's faults were decided by then.
	inside histogram
	// queueWait and reconcile: the controller's work queue wait and reconcile time over the
	// window (controller-runtime's histograms, every reconcile, not only decisions): where
	// a decision's time goes.
	queueWait, reconcile histogram
	// reads: the controller's reads of a run at the start of a reconcile over the window, by
	// source (faultline_run_reads_total): how often a reconcile had to ask the API server.
	reads    map[string]float64
	agentRSS int64
	// sched: how the controller's threads spent the window with the scheduler (on a CPU,
	// waiting for one); pressure: the share of the window in which some task of the machine
	// waited for a CPU (PSI; -1 without it). Together: whether a slow decision waited for
	// the machine rather than for the controller.
	sched    procstat.Sched
	pressure float64
	// profile: the controller's CPU profile over the window, its top entries; heap: its heap
	// profile at the end of the window, by space in use.
	profile, heap string
	// windowDone: the window ran to its end, so its rates and end figures are measured.
	windowDone bool
}

// steadyState (scenario d): runs × workers Running at once; over a window, fatal GPU
// faults hit runs one after another. Measured: the controller's CPU, RSS and API request
// rate; its decision latency (from the failed pod's status reaching a watcher to the run's
// status naming the decision, both seen by this process); the agents' XID-to-mark latency
// and RSS.
func (b *bench) steadyState(ctx context.Context) error {
	st := b.cfg.steady
	res := &steadyResult{cfg: st}
	b.results.steady = res
	fl := faultline{runs: b.runs}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, st.runs)
	for i := range st.runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fl.create(ctx, steadyName(i), st.workers); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	total := st.runs * st.workers
	sel := labels.SelectorFromSet(labels.Set{v1alpha1.LabelAttempt: "1"})
	pods, err := b.c.WaitPods(ctx, namespace, sel, func(p []*corev1.Pod) (bool, error) {
		return cluster.CountRunning(p) == total, nil
	})
	if err != nil {
		return err
	}
	res.up = time.Since(start)
	fmt.Fprintf(os.Stderr, "steady state: %d runs × %d workers Running after %s\n", st.runs, st.workers, res.up.Round(time.Second))
	pid := b.ctrl.Process.Pid
	if res.rssIdle, err = rss(pid); err != nil {
		return err
	}

	// One victim per fault: a run not hit yet, on a node not hit yet; an agent on its node.
	victims := pickVictims(pods, st.faults)
	for _, v := range victims {
		if _, err := b.agentOn(ctx, v.Spec.NodeName); err != nil {
			return err
		}
	}
	work0, err := b.readWork(ctx)
	if err != nil {
		return err
	}
	req0 := sumSamples(work0.metrics, "rest_client_requests_total{")
	reads0 := runReads(work0.metrics)
	sched0, err := procstat.ReadSched(pid)
	if err != nil {
		return err
	}
	pressure0, pressureErr := procstat.CPUPressure()
	windowStart := time.Now()
	profile := b.startProfile(ctx, st.window)
	every := st.window / time.Duration(max(1, len(victims)))
	var mu sync.Mutex
	errs = make(chan error, len(victims))
	for i, v := range victims {
		select {
		case <-time.After(time.Until(windowStart.Add(time.Duration(i) * every))):
		case <-ctx.Done():
			return ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			mark, decide, err := b.gpuFault(ctx, v)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			res.markeds = append(res.markeds, mark)
			res.decisions = append(res.decisions, decide)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	if rest := time.Until(windowStart.Add(st.window)); rest > 0 {
		time.Sleep(rest) // the window is a fixed length, so that rates compare across runs
	}
	elapsed := time.Since(windowStart)
	work1, err := b.readWork(ctx)
	if err != nil {
		return err
	}
	w := work1.since(work0)
	sched1, err := procstat.ReadSched(pid)
	if err != nil {
		return err
	}
	res.sched = procstat.Sched{Run: sched1.Run - sched0.Run, Wait: sched1.Wait - sched0.Wait}
	res.pressure = -1
	if pressure1, err := procstat.CPUPressure(); err == nil && pressureErr == nil {
		res.pressure = (pressure1 - pressure0).Seconds() / elapsed.Seconds()
	}
	if res.profile, err = profile.save(ctx, b.cfg.stem+"-controller-steady.pprof"); err != nil {
		return err
	}
	metrics, err := b.controllerMetrics(ctx)
	if err != nil {
		return err
	}
	req1 := sumSamples(metrics, "rest_client_requests_total{")
	res.heapEnd = sumSamples(metrics, heapInUseMetric+" ")
	if res.heap, err = b.heapProfile(ctx, b.cfg.stem+"-controller-steady-heap.pprof"); err != nil {
		return err
	}
	res.inside = parseHistogram(metrics, controller.MetricDecisionSeconds)
	res.queueWait, res.reconcile = w.queueWait, w.reconcile
	res.reads = runReads(metrics)
	for source, n := range reads0 {
		res.reads[source] -= n
	}
	res.cpu = w.controllerCPU.Seconds() / elapsed.Seconds()
	res.apiRPS = (req1 - req0) / elapsed.Seconds()
	if res.rssEnd, err = rss(pid); err != nil {
		return err
	}
	for _, a := range b.agents {
		if r, err := rss(a.Pid()); err == nil {
			res.agentRSS = max(res.agentRSS, r)
		}
	}
	res.windowDone = true
	return nil
}

// heapInUseMetric is the Go runtime's heap in use, which controller-runtime's registry
// exports with every controller's metrics.
const heapInUseMetric = "go_memstats_heap_inuse_bytes"

// runReads is the controller's reads of a run by source.
func runReads(metrics string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range []string{controller.ReadFromCache, controller.ReadFromAPIServer, controller.ReadDeferred} {
		out[s] = sumSamples(metrics, controller.MetricRunReads+`{source="`+s+`"}`)
	}
	return out
}

// controller-runtime's histograms of the TrainingRun controller.
const (
	queueWaitMetric       = "workqueue_queue_duration_seconds"
	reconcileTimeMetric   = "controller_runtime_reconcile_time_seconds"
	trainingRunController = `controller="trainingrun"`
)

func steadyName(i int) string { return fmt.Sprintf("steady-%03d", i) }

// pickVictims picks up to n pods that will each take an XID on GPU 0 of their node: the
// node's oldest pod, which the agent's simulated allocation hands GPU 0 to (as a device
// plugin would, in order of creation). Each is of a different run: a run restarted by one
// fault must not lose the pod another fault is waiting for.
func pickVictims(pods []*corev1.Pod, n int) []*corev1.Pod {
	holder := map[string]*corev1.Pod{} // node → its GPU 0's pod
	for _, p := range pods {
		h, ok := holder[p.Spec.NodeName]
		if !ok || p.CreationTimestamp.Before(&h.CreationTimestamp) ||
			(p.CreationTimestamp.Equal(&h.CreationTimestamp) && p.Name < h.Name) {
			holder[p.Spec.NodeName] = p
		}
	}
	nodes := slices.Sorted(maps.Keys(holder))
	runs := map[string]bool{}
	var out []*corev1.Pod
	for _, node := range nodes {
		p := holder[node]
		run := p.Labels[v1alpha1.LabelRun]
		if len(out) == n || runs[run] || !cluster.PodRunning(p) {
			continue
		}
		runs[run] = true
		out = append(out, p)
	}
	return out
}

// gpuFault: XID 79 on GPU 0 of the victim's node. It returns how long the agent took to
// mark the GPU's worker (XID to condition visible here), and the controller's decision
// latency (the worker's failure seen here to the run's status recording the restart).
func (b *bench) gpuFault(ctx context.Context, v *corev1.Pod) (mark, decide time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, faultTimeout)
	defer cancel()
	node, run := v.Spec.NodeName, v.Labels[v1alpha1.LabelRun]
	a := b.agents[node]
	// The victim holds GPU 0 (pickVictims): watch its run's pods only, not all 10k.
	attempt1 := labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run, v1alpha1.LabelAttempt: "1"})
	t0 := time.Now()
	if err := a.InjectXID(0, 79); err != nil {
		return 0, 0, err
	}
	if _, err := b.c.WaitPods(ctx, namespace, attempt1, func(p []*corev1.Pod) (bool, error) {
		return slices.ContainsFunc(p, func(p *corev1.Pod) bool { return p.UID == v.UID && infraMarked(p) }), nil
	}); err != nil {
		return 0, 0, fmt.Errorf("XID on GPU 0 of %s: pod %s never marked: %w", node, v.Name, err)
	}
	mark = time.Since(t0)
	victim := v
	// Watching before the failure: the restart deletes the pod moments after it fails.
	seen := make(chan time.Time, 1)
	synced := make(chan struct{})
	go func() {
		first := true
		_, _ = b.c.WaitPods(ctx, namespace, attempt1, func(p []*corev1.Pod) (bool, error) {
			if first {
				first = false
				close(synced)
			}
			if slices.ContainsFunc(p, func(p *corev1.Pod) bool { return p.UID == victim.UID && p.Status.Phase == corev1.PodFailed }) {
				seen <- time.Now()
				return true, nil
			}
			return false, nil
		})
	}()
	select {
	case <-synced:
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	if err := b.c.FailPod(ctx, namespace, victim.Name, cudaError); err != nil {
		return 0, 0, err
	}
	if _, err := waitOwner(ctx, faultline{runs: b.runs}, run, func(o runtime.Object) bool {
		r, ok := o.(*v1alpha1.TrainingRun)
		return ok && r.Status.Attempt >= 2
	}); err != nil {
		return 0, 0, err
	}
	decided := time.Now()
	select {
	case failedSeen := <-seen:
		return mark, decided.Sub(failedSeen), nil
	case <-ctx.Done():
		return 0, 0, fmt.Errorf("XID on %s: the failure of pod %s never seen: %w", node, victim.Name, ctx.Err())
	}
}

// faultTimeout bounds one fault of the steady state, from the XID to the decision.
const faultTimeout = 5 * time.Minute

// rss is a process's resident set in bytes.
func rss(pid int) (int64, error) {
	m, err := procstat.ReadMemory(pid)
	return m.RSS, err
}

// controllerMetrics is the controller's metrics page.
func (b *bench) controllerMetrics(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.results.metricsAddr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// sumSamples adds up the samples of the lines that start with prefix (e.g. every label set
// of client-go's rest_client_requests_total).
func sumSamples(metrics, prefix string) float64 {
	total := 0.0
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, prefix) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			total += v
		}
	}
	return total
}

// histogram is a Prometheus histogram's cumulative buckets.
type histogram struct {
	les, counts []float64 // upper bounds (seconds) and cumulative counts, +Inf last
	count, sum  float64
}

// parseHistogram reads the histogram name from a metrics page. With labels (e.g.
// `controller="trainingrun"`), it reads the series whose label set has each of them.
func parseHistogram(metrics, name string, labels ...string) histogram {
	var h histogram
	for _, line := range strings.Split(metrics, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		suffix, set, _ := strings.Cut(strings.TrimPrefix(f[0], name), "{")
		if !strings.HasPrefix(f[0], name) || !hasLabels(strings.TrimSuffix(set, "}"), labels) {
			continue
		}
		switch suffix {
		case "_bucket":
			le, ok := label(strings.TrimSuffix(set, "}"), "le")
			bound, err := strconv.ParseFloat(le, 64)
			if !ok || err != nil {
				continue
			}
			h.les, h.counts = append(h.les, bound), append(h.counts, v)
		case "_count":
			h.count = v
		case "_sum":
			h.sum = v
		}
	}
	return h
}

// hasLabels reports whether a series' label set (`a="x",b="y"`) has each of labels.
func hasLabels(set string, labels []string) bool {
	pairs := strings.Split(set, ",")
	for _, l := range labels {
		if !slices.Contains(pairs, l) {
			return false
		}
	}
	return true
}

// label is the value of the label key in a series' label set.
func label(set, key string) (string, bool) {
	for _, pair := range strings.Split(set, ",") {
		if v, ok := strings.CutPrefix(pair, key+"="); ok {
			return strings.Trim(v, `"`), true
		}
	}
	return "", false
}

// since is h less the observations of before, an earlier reading of the same histogram.
func (h histogram) since(before histogram) histogram {
	if len(before.les) != len(h.les) {
		return h
	}
	out := histogram{les: h.les, counts: make([]float64, len(h.counts)), count: h.count - before.count, sum: h.sum - before.sum}
	for i := range h.counts {
		out.counts[i] = h.counts[i] - before.counts[i]
	}
	return out
}

// atMost is how many observations were at most le seconds (le must be a bucket's bound).
func (h histogram) atMost(le float64) float64 {
	for i, b := range h.les {
		if b >= le {
			return h.counts[i]
		}
	}
	return h.count
}

// quantile is the upper bound of the bucket that holds the q-quantile.
func (h histogram) quantile(q float64) string {
	if h.count == 0 {
		return "–"
	}
	for i, c := range h.counts {
		if c >= q*h.count {
			if math.IsInf(h.les[i], 1) {
				return "> " + msBound(h.les[i-1])
			}
			return "≤ " + msBound(h.les[i])
		}
	}
	return "–"
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// msBound writes a bucket's bound (seconds) in milliseconds; work queue buckets go down to
// 10 ns.
func msBound(sec float64) string {
	if sec < 0.001 {
		return strconv.FormatFloat(sec*1000, 'g', 2, 64) + " ms"
	}
	return ms(time.Duration(sec * float64(time.Second)))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000) }

func (r *steadyResult) markdown(b *strings.Builder) {
	c := r.cfg
	fmt.Fprintf(b, "### d. Steady state: %d runs × %d workers (%d pods)\n\n", c.runs, c.workers, c.runs*c.workers)
	if r.up == 0 {
		b.WriteString("The runs never were all Running at once, so there was no steady state to measure (the session's error says why).\n\n")
		return
	}
	fmt.Fprintf(b, "Every worker Running %s after the runs were created. Then a %s window in which %d fatal GPU faults (XID 79, through the node agents) hit %d runs, one after another.\n\n",
		secs(r.up), c.window, len(r.decisions), len(r.decisions))
	b.WriteString("| measure | value | target |\n| --- | ---: | ---: |\n")
	fmt.Fprintf(b, "| controller decision latency p50 / p99, seen from outside | %s / %s | p99 ≤ 100 ms |\n", ms(quantile(r.decisions, 0.5)), ms(quantile(r.decisions, 0.99)))
	if !r.windowDone {
		fmt.Fprintf(b, "| controller RSS at rest | %s | ≤ 300 MiB |\n", mib(r.rssIdle))
		fmt.Fprintf(b, "| agent XID → condition visible p50 / p99 | %s / %s | |\n\n", ms(quantile(r.markeds, 0.5)), ms(quantile(r.markeds, 0.99)))
		fmt.Fprintf(b, "The window did not complete (%d of %d faults decided): its CPU, API rate and end figures were not measured.\n\n", len(r.decisions), c.faults)
		return
	}
	fmt.Fprintf(b, "| controller decision latency p50 / p99, its own (`faultline_decision_seconds`) | %s / %s (%d of %d ≤ 100 ms) | p99 ≤ 100 ms |\n",
		r.inside.quantile(0.5), r.inside.quantile(0.99), int(r.inside.atMost(0.1)), int(r.inside.count))
	fmt.Fprintf(b, "| its work queue wait p50 / p99 over the window, every reconcile (`%s`) | %s / %s (%d reconciles) | |\n",
		queueWaitMetric, r.queueWait.quantile(0.5), r.queueWait.quantile(0.99), int(r.queueWait.count))
	fmt.Fprintf(b, "| its reconcile time p50 / p99 over the window (`%s`) | %s / %s | |\n",
		reconcileTimeMetric, r.reconcile.quantile(0.5), r.reconcile.quantile(0.99))
	fmt.Fprintf(b, "| its reads of a run over the window: from the cache / the API server / deferred to its own write's event (`%s`) | %.0f / %.0f / %.0f | |\n",
		controller.MetricRunReads, r.reads[controller.ReadFromCache], r.reads[controller.ReadFromAPIServer], r.reads[controller.ReadDeferred])
	fmt.Fprintf(b, "| controller RSS at rest / end of window | %s / %s | ≤ 300 MiB |\n", mib(r.rssIdle), mib(r.rssEnd))
	fmt.Fprintf(b, "| controller Go heap in use at the end of the window (`%s`) | %s | |\n", heapInUseMetric, mib(int64(r.heapEnd)))
	fmt.Fprintf(b, "| controller CPU over the window | %.2f cores | |\n", r.cpu)
	fmt.Fprintf(b, "| its threads over the window: on a CPU / runnable, waiting for one (`/proc/<pid>/task/*/schedstat`) | %.1f s / %.1f s (%.0f ms waited per 100 ms run) | |\n",
		r.sched.Run.Seconds(), r.sched.Wait.Seconds(), 100*r.sched.Wait.Seconds()/max(r.sched.Run.Seconds(), 1e-9))
	if r.pressure >= 0 {
		fmt.Fprintf(b, "| the machine over the window: time in which some task waited for a CPU (`/proc/pressure/cpu`) | %.0f %% | |\n", 100*r.pressure)
	}
	fmt.Fprintf(b, "| controller API requests | %.1f /s | |\n", r.apiRPS)
	fmt.Fprintf(b, "| agent XID → condition visible p50 / p99 | %s / %s | |\n", ms(quantile(r.markeds, 0.5)), ms(quantile(r.markeds, 0.99)))
	fmt.Fprintf(b, "| agent RSS (largest of %d) | %s | ≤ 30 MiB |\n\n", len(r.markeds), mib(r.agentRSS))
	b.WriteString("Decision latency seen from outside: from this process's watch seeing the worker Failed to its watch seeing the run's status record the restart " +
		"(two API round trips and a status write included). Its own: from the controller's informer delivering the failed worker to the decision taken, " +
		"read from its histogram (so a quantile is the upper bound of a bucket).\n\n")
	if r.heap != "" {
		fmt.Fprintf(b, "Controller heap in use at the end of the window, %s\n\n", r.heap)
	}
	if r.profile != "" {
		fmt.Fprintf(b, "Controller CPU profile over the window (%s), %s\n\n", c.window, r.profile)
	}
}
