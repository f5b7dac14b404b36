package main

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// Scenarios.
const (
	scenarioFloor    = "floor"
	scenarioFail     = "time-to-fail"
	scenarioShutdown = "node shutdown"
	scenarioXID      = "GPU XID 79"
	// scenarioHung: XID 79, and the worker on that GPU hangs instead of exiting (issue 42).
	scenarioHung = "hung worker after a fatal XID"
)

// restartPhases are the spans of a restart, in order (pkg/tracing).
var restartPhases = []string{"detect", "settle", "classify", "teardown", "backoff", "create", "schedule", "running"}

type sample struct {
	system   string
	workers  int
	scenario string
	d        time.Duration
	// extra: for time-to-fail, until the last pod of the gang was gone.
	extra time.Duration
	// wasted: generations started in vain; crashes: how often the bug crashed a worker.
	wasted, crashes int
	// gaveUp: the system failed the gang instead of restarting it.
	gaveUp bool
	// waited: the part of d that is a framework's timeout the system waits for before
	// anything ends (a hung worker), as configured: added to the measured restart, not
	// waited for.
	waited time.Duration
	phases map[string]time.Duration
	// firstPodCreated, podsCreated, podsBound: from the new attempt's Job created to its
	// first and its last pod created, and to its last pod bound (faultline's restarts; to
	// the second).
	firstPodCreated, podsCreated, podsBound time.Duration
	podTimes                                bool // whether they were measured
	// writes: the API server's writes over d (nil: not counted).
	writes writeCounts
	// work: faultline's controller's and the simulated node side's over d (nil: not read).
	work *work
}

// session is one control plane at one controller-manager rate limit.
type session struct {
	k8s   string
	qps   int
	nodes int
	// gpusPerNode each node offers; schedulerQPS is kube-scheduler's rate limit (0: upstream).
	gpusPerNode, schedulerQPS int
	samples                   []sample
	steady                    *steadyResult
	profile                   string // what the profiles of the controller and the API server showed, if taken
	// teardowns: faultline's teardowns in the audit log, when the session kept one.
	teardowns []teardownAudit
	// metricsAddr serves the session's controller's metrics.
	metricsAddr string
}

func (r *session) add(s sample) { r.samples = append(r.samples, s) }

// qpsLabel states the controller-manager's client rate limit, as every result must.
func qpsLabel(qps int) string {
	if qps > 0 {
		return fmt.Sprintf("QPS %d, burst %d", qps, 2*qps)
	}
	return "upstream default (QPS 20, burst 30)"
}

// phasesOf turns status.trace's phase boundaries into the restart's phase durations (nil
// when a boundary is missing, e.g. tracing state from an older controller). They are the
// restart's critical path, so that they add up to it: a phase counts from the later of its
// start and the end of the phases before it. That matters when the next attempt's Job is
// created during the teardown: create then lies within teardown and counts nothing, there
// is no backoff, and schedule counts from the teardown's end, when the pods were released.
func phasesOf(t *v1alpha1.TraceStatus) map[string]time.Duration {
	if t == nil {
		return nil
	}
	marks := []*metav1.MicroTime{t.DetectedAt, t.SeenAt, t.JudgedAt, t.DecidedAt, t.TornDownAt, t.CreatingAt, t.CreatedAt, t.ScheduledAt, t.RunningAt}
	if slices.Contains(marks, nil) {
		return nil
	}
	out := map[string]time.Duration{}
	reached := marks[0].Time
	for i, p := range restartPhases {
		start, end := marks[i].Time, marks[i+1].Time
		if start.Before(reached) {
			start = reached
		}
		out[p] = max(0, end.Sub(start))
		if end.After(reached) {
			reached = end
		}
	}
	return out
}

// stats are the median and the extremes of a scenario's samples.
type stats struct {
	n                int
	median, min, max time.Duration
}

func summarize(ds []time.Duration) stats {
	if len(ds) == 0 {
		return stats{}
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	return stats{n: len(sorted), median: midpoint(sorted), min: sorted[0], max: sorted[len(sorted)-1]}
}

// midpoint is the median of sorted values: the middle one, or the mean of the two middle ones
// (reports before session 11 took the upper of the two, so a median of two rounds was the
// slower round).
func midpoint[T ~int64 | ~float64](sorted []T) T {
	n := len(sorted)
	return (sorted[(n-1)/2] + sorted[n/2]) / 2
}

func (s stats) String() string {
	if s.n == 0 {
		return "–"
	}
	if s.n == 1 {
		return secs(s.median)
	}
	return fmt.Sprintf("%s (%s–%s)", secs(s.median), secs(s.min), secs(s.max))
}

func (r *session) pick(system, scenario string, workers int) []sample {
	var out []sample
	for _, s := range r.samples {
		if s.system == system && s.scenario == scenario && s.workers == workers {
			out = append(out, s)
		}
	}
	return out
}

func durations(ss []sample, f func(sample) time.Duration) []time.Duration {
	out := make([]time.Duration, 0, len(ss))
	for _, s := range ss {
		out = append(out, f(s))
	}
	return out
}

func (r *session) sizes() []int {
	var out []int
	for _, s := range r.samples {
		if !slices.Contains(out, s.workers) {
			out = append(out, s.workers)
		}
	}
	sort.Ints(out)
	return out
}

func (r *session) systems(scenario string) []string {
	var out []string
	for _, name := range []string{sysFaultline, sysFaultlineInPlace, sysFaultlineSpares, sysFaultlineKueue, sysJob, sysJobSet, sysJobSetDefault} {
		if slices.ContainsFunc(r.samples, func(s sample) bool { return s.system == name && s.scenario == scenario }) {
			out = append(out, name)
		}
	}
	return out
}

// cells are the cells of a markdown table's row, one per name: " a | b |".
func cells(names []string) string {
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, " %s |", n)
	}
	return b.String()
}

// wholeSecs writes a duration measured to the second.
func wholeSecs(d time.Duration) string { return fmt.Sprintf("%.0f s", d.Seconds()) }

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// ratio is ours / theirs, of medians.
func ratio(ours, theirs time.Duration) string {
	if ours <= 0 || theirs <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", ours.Seconds()/theirs.Seconds())
}

func median(ss []sample, f func(sample) time.Duration) time.Duration {
	return summarize(durations(ss, f)).median
}

// markdown renders one session's tables.
func (r *session) markdown(b *strings.Builder, plots map[string]string) {
	fmt.Fprintf(b, "## kube-controller-manager rate limit: %s\n\n", qpsLabel(r.qps))
	fmt.Fprintf(b, "Kubernetes %s, %d kwok nodes with %d GPUs each, one GPU per worker", r.k8s, r.nodes, r.gpusPerNode)
	if r.schedulerQPS > 0 {
		fmt.Fprintf(b, "; kube-scheduler's rate limit QPS %d, burst %d", r.schedulerQPS, 2*r.schedulerQPS)
	}
	b.WriteString(". Median (min–max) of the rounds.\n\n")
	d := func(s sample) time.Duration { return s.d }
	gone := func(s sample) time.Duration { return s.extra }

	if systems := r.systems(scenarioFail); len(systems) > 0 {
		b.WriteString("### a. Application error → gang failed\n\n")
		b.WriteString("Index 2 crashes with exit code 1 each time it runs. *Last pod gone*: when a queue (Kueue) could admit the next workload.\n\n")
		b.WriteString("| workers | system | time-to-fail | last pod gone | restarts wasted | faultline ÷ this (fail) |\n| ---: | --- | ---: | ---: | ---: | ---: |\n")
		for _, n := range r.sizes() {
			ours := median(r.pick(sysFaultline, scenarioFail, n), d)
			for _, sys := range systems {
				ss := r.pick(sys, scenarioFail, n)
				if len(ss) == 0 {
					continue
				}
				wasted := 0
				for _, s := range ss {
					wasted = max(wasted, s.wasted)
				}
				fmt.Fprintf(b, "| %d | %s | %s | %s | %d | %s |\n", n, sys, summarize(durations(ss, d)), summarize(durations(ss, gone)), wasted, ratio(ours, median(ss, d)))
			}
		}
		b.WriteString("\n")
	}
	for _, sc := range []string{scenarioShutdown, scenarioXID} {
		systems := r.systems(sc)
		if len(systems) == 0 {
			continue
		}
		fmt.Fprintf(b, "### %s → every worker Running again\n\n", map[string]string{scenarioShutdown: "b. Node shutdown on one node", scenarioXID: "c. Fatal GPU XID 79 on one GPU"}[sc])
		b.WriteString("| workers | floor | system | time-to-restart | ÷ floor | faultline ÷ this |\n| ---: | ---: | --- | ---: | ---: | ---: |\n")
		for _, n := range r.sizes() {
			floor := median(r.pick(scenarioFloor, scenarioFloor, n), d)
			ours := median(r.pick(sysFaultline, sc, n), d)
			for _, sys := range systems {
				ss := r.pick(sys, sc, n)
				if len(ss) == 0 {
					continue
				}
				if slices.ContainsFunc(ss, func(s sample) bool { return s.gaveUp }) {
					fmt.Fprintf(b, "| %d | %s | %s | no restart: failed the gang after %s | – | – |\n", n, secs(floor), sys, summarize(durations(ss, d)))
					continue
				}
				fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %s |\n", n, secs(floor), sys, summarize(durations(ss, d)), ratio(median(ss, d), floor), ratio(ours, median(ss, d)))
			}
		}
		b.WriteString("\n")
		r.writesTable(b, sc)
		r.phaseTable(b, sc)
		r.workTable(b, sc)
		if p := plots[sc]; p != "" {
			fmt.Fprintf(b, "![time-to-restart, %s](%s)\n\n", sc, p)
		}
		if p := plots[sc+" phases"]; p != "" {
			fmt.Fprintf(b, "![faultline's restart phases, %s](%s)\n\n", sc, p)
		}
	}
	r.hungTable(b)
	if r.steady != nil {
		r.steady.markdown(b)
	}
	auditTable(b, r.teardowns)
	if r.profile != "" {
		b.WriteString(r.profile + "\n\n")
	}
}

// phaseTable: where faultline's restart time goes, from its runs' status.trace: the median,
// and with more than one round each round too, so that a slow round shows which phase it
// lost its time in.
func (r *session) phaseTable(b *strings.Builder, scenario string) {
	b.WriteString("faultline's restart, phase by phase (from status.trace; the median, then each round). " +
		"The phases are the restart's critical path: when the next attempt's Job was created during the teardown, its pods held until the old ones were gone, " +
		"create counts nothing and schedule counts from the teardown's end. " +
		"From the Job's creation: its first and last pod created (the Job controller) and its last pod bound (the scheduler), to the second:\n\n" +
		"A restart in place maps its steps onto the same phases: teardown is until every old worker stopped and the barrier opened, create and backoff count nothing, schedule and running are the moved indexes' new pods and every worker running again.\n\n" +
		"| workers | system | round | time-to-restart |" + cells(restartPhases) + " pods created first / last, bound |\n" +
		"| ---: | --- | ---: | ---: |" + strings.Repeat(" ---: |", len(restartPhases)+1) + "\n")
	for _, n := range r.sizes() {
		for _, sys := range restartTraced {
			ss := r.pick(sys, scenario, n)
			if len(ss) == 0 {
				continue
			}
			phaseRow(b, n, sys, "median", medianSample(ss))
			if len(ss) == 1 {
				continue
			}
			for i, s := range ss {
				phaseRow(b, n, sys, strconv.Itoa(i+1), s)
			}
		}
	}
	b.WriteString("\n")
}

// restartTraced are the systems whose restarts have faultline's phases and controller: the
// phase and work tables' rows.
var restartTraced = []string{sysFaultline, sysFaultlineInPlace, sysFaultlineSpares}

// phaseRow writes one row of the phase table: s's time to restart, phases and pod times.
func phaseRow(b *strings.Builder, n int, sys, label string, s sample) {
	fmt.Fprintf(b, "| %d | %s | %s | %s |", n, sys, label, secs(s.d))
	for _, p := range restartPhases {
		if d, ok := s.phases[p]; ok {
			fmt.Fprintf(b, " %s |", ms(d))
		} else {
			b.WriteString(" n/a |")
		}
	}
	if s.podTimes {
		fmt.Fprintf(b, " %s / %s, %s |\n", wholeSecs(s.firstPodCreated), wholeSecs(s.podsCreated), wholeSecs(s.podsBound))
	} else {
		b.WriteString(" n/a |\n")
	}
}

// medianSample is the median of ss, figure by figure, over the samples that measured it.
func medianSample(ss []sample) sample {
	m := sample{d: median(ss, func(s sample) time.Duration { return s.d }), phases: map[string]time.Duration{}}
	for _, p := range restartPhases {
		if ds := phaseDurations(ss, p); len(ds) > 0 {
			m.phases[p] = summarize(ds).median
		}
	}
	if timed := slices.DeleteFunc(slices.Clone(ss), func(s sample) bool { return !s.podTimes }); len(timed) > 0 {
		m.podTimes = true
		m.firstPodCreated = median(timed, func(s sample) time.Duration { return s.firstPodCreated })
		m.podsCreated = median(timed, func(s sample) time.Duration { return s.podsCreated })
		m.podsBound = median(timed, func(s sample) time.Duration { return s.podsBound })
	}
	return m
}

func phaseDurations(ss []sample, phase string) []time.Duration {
	var ds []time.Duration
	for _, s := range ss {
		if d, ok := s.phases[phase]; ok {
			ds = append(ds, d)
		}
	}
	return ds
}

// hungTable: the hung worker after a fatal XID (issue 42). Only faultline acts on the node
// agent's evidence; the others wait for the framework's timeout to end a process, which the
// bench adds as configured rather than waits for, and says so.
func (r *session) hungTable(b *strings.Builder) {
	systems := r.systems(scenarioHung)
	if len(systems) == 0 {
		return
	}
	var timeout time.Duration
	for _, s := range r.samples {
		timeout = max(timeout, s.waited)
	}
	b.WriteString("### e. Hung worker after a fatal XID → every worker Running again\n\n")
	fmt.Fprintf(b, "XID 79 on GPU 0 of one node, and its worker hangs in a CUDA call instead of exiting (its peers with it, in the collective): nothing exits. "+
		"faultline ends the attempt on its node agent's evidence once the settle window is over, and stops the hung worker. "+
		"The other systems see nothing until the framework's own timeout ends a process: here %s, configured (`-hang-timeout`; PyTorch's NCCL watchdog defaults to 10 min, users raise it to 30-60; "+
		"JAX's coordination heartbeat to 100 s). The bench does not wait it out: it ends the hung worker at once as the watchdog would (SIGABRT, exit 134), "+
		"measures the restart from there, and adds the timeout (*of which waited*).\n\n", wholeSecs(timeout))
	b.WriteString("| workers | system | time-to-restart | of which waited (the framework's timeout, configured) | faultline ÷ this |\n| ---: | --- | ---: | ---: | ---: |\n")
	d := func(s sample) time.Duration { return s.d }
	for _, n := range r.sizes() {
		ours := median(r.pick(sysFaultline, scenarioHung, n), d)
		for _, sys := range systems {
			ss := r.pick(sys, scenarioHung, n)
			if len(ss) == 0 {
				continue
			}
			waited := median(ss, func(s sample) time.Duration { return s.waited })
			if slices.ContainsFunc(ss, func(s sample) bool { return s.gaveUp }) {
				fmt.Fprintf(b, "| %d | %s | no restart: failed the gang after %s | %s | – |\n", n, sys, summarize(durations(ss, d)), wholeSecs(waited))
				continue
			}
			fmt.Fprintf(b, "| %d | %s | %s | %s | %s |\n", n, sys, summarize(durations(ss, d)), wholeSecs(waited), smallRatio(ours, median(ss, d)))
		}
	}
	b.WriteString("\n")
	r.writesTable(b, scenarioHung)
	r.phaseTable(b, scenarioHung)
}

// smallRatio is ours / theirs to two significant digits: a few seconds against a framework's
// timeout of minutes is a ratio that ratio's two decimals would show as 0.00.
func smallRatio(ours, theirs time.Duration) string {
	if ours <= 0 || theirs <= 0 {
		return "–"
	}
	return strconv.FormatFloat(ours.Seconds()/theirs.Seconds(), 'g', 2, 64) + "×"
}
