// Command bench measures faultline on the local control plane (make bench), side by side with
// what a user would run instead — a bare Indexed Job configured as the Kubernetes docs
// suggest, and JobSet v0.12.0 (built from hack/tools, run as a local process) — and against
// the floor: the time the same control plane takes to create and schedule the same pods
// from scratch. Scenarios:
//
//	a. application error → the gang failed: time, last pod gone, restarts wasted;
//	b. node shutdown on one node (through the node agent) → every worker Running again;
//	c. fatal GPU XID 79 on one GPU → the same;
//	e. fatal GPU XID 79, its worker hung instead of exiting → the same (the systems that wait
//	   for the framework's timeout get it added, as configured by -hang-timeout);
//	d. steady state, runs × workers: the controller's CPU, RSS, API rate and decision
//	   latency; the agents' XID-to-mark latency and RSS;
//	fleet. Llama 3's 54 days of interruptions at 16,384 GPUs replayed (pkg/fleet) with each
//	   system's recovery as measured (this run's, at its largest gang, else the -fleet-*
//	   defaults from a cited report): each system's goodput. No control plane of its own.
//
// Every result states the kube-controller-manager's client rate limit; each rate limit gets
// its own control plane. The report (tables, ratios and PNG plots) goes to
// _output/bench/<time>/report.md unless -out names another file: bench/results/ keeps only
// the reports that the docs cite (bench/results/README.md), so a run leaves the tree clean.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/faultline-dev/faultline/pkg/controller"
)

// Scenarios by flag name.
const (
	scenarioFailFlag     = "fail"
	scenarioShutdownFlag = "shutdown"
	scenarioXIDFlag      = "xid"
	scenarioHungFlag     = "hung"
	scenarioSteadyFlag   = "steady"
)

// allScenarios are the scenarios by flag name, in the order they run.
var allScenarios = []string{scenarioFailFlag, scenarioShutdownFlag, scenarioXIDFlag, scenarioHungFlag, scenarioSteadyFlag, scenarioFleetFlag}

func main() {
	workers := flag.String("workers", "8,256,2048", "comma-separated gang sizes")
	qps := flag.String("controller-manager-qps", "0,200", "comma-separated kube-controller-manager client QPS settings, one control plane each (0: the upstream default, 20/30)")
	rounds := flag.Int("rounds", 2, "measurements per scenario, system and size")
	systems := flag.String("systems", strings.Join([]string{flagFaultline, flagJob, flagJobSet, flagJobSetDefault}, ","), "systems to compare")
	scenarios := flag.String("scenarios", strings.Join(allScenarios, ","), "scenarios to run")
	hangTimeout := flag.Duration("hang-timeout", 10*time.Minute, "scenario hung: the framework's timeout that ends a hung worker for the systems that wait for it (PyTorch's NCCL watchdog default); added to their measured restart, not waited")
	failMax := flag.Int("fail-max-workers", 256, "run scenario a (application error) only up to this gang size")
	steadyRuns := flag.Int("steady-runs", 100, "scenario d: runs")
	steadyWorkers := flag.Int("steady-workers", 100, "scenario d: workers per run")
	steadyQPS := flag.Int("steady-qps", 200, "scenario d: kube-controller-manager QPS (creating 10k pods at the default takes ~10 min)")
	steadyFaults := flag.Int("steady-faults", 20, "scenario d: GPU faults injected during the window")
	steadyWindow := flag.Duration("steady-window", 60*time.Second, "scenario d: measurement window")
	steadyGPUs := flag.Int("steady-gpus-per-node", gpusPerNode, "scenario d: GPUs per node (one worker each); more GPUs make fewer nodes")
	steadySchedulerQPS := flag.Int("steady-scheduler-qps", 0, "scenario d: kube-scheduler client QPS (0: upstream 50; binding 50k pods at 50 takes ~17 min)")
	profileWorkers := flag.Int("profile-workers", 256, "profile the controller and the API server during faultline's first node-shutdown restarts (recreate, in place) of this gang size (0: never)")
	flag.IntVar(&profileSeconds, "profile-seconds", profileSeconds, "length of that CPU profile")
	out := flag.String("out", "", "report file; its plots and profiles go beside it, named after it (default "+defaultOut(time.Time{})+" with the time the run starts; to keep a report in the tree, name a file in bench/results/)")
	timeout := flag.Duration("timeout", 3*time.Hour, "give up after this long")
	gpuQuota := flag.Bool("gpu-quota", false, "give the bench namespace a ResourceQuota of as many GPUs as the largest gang has workers, as a team's quota would: one gang fits, not two")
	ctrlQPS := flag.Int("controller-qps", controller.DefaultKubeAPIQPS, "faultline controller's client QPS (--kube-api-qps; its burst is twice that)")
	supervise := flag.Bool("inplace-supervise", true, "faultline (in place): workers with a command, whose barrier is their container's entrypoint and supervises them (launcher controller --barrier-in-worker), and the simulated agents' records on their nodes' heartbeats (nodeagent --barrier-records-on-heartbeat): the defaults; false: workers without a command, whose barrier is an init container, the simulated kubelets writing each step")
	var fc fleetConfig
	flag.IntVar(&fc.replays, "fleet-replays", 50, "fleet: replays of the 54 days, seeds 1..n")
	flag.DurationVar(&fc.assumptions.CheckpointInterval, "fleet-checkpoint-interval", 30*time.Minute, "fleet: how often the run checkpoints (Llama 3 does not say; an interruption loses the work since the last)")
	flag.DurationVar(&fc.assumptions.Resume, "fleet-resume", 5*time.Minute, "fleet: from every worker running to training again after a restart (the checkpoint's load, the first steps; an assumption)")
	flag.Float64Var(&fc.assumptions.HangShare, "fleet-hang-share", 0.5, "fleet: the share of GPU faults whose worker hangs instead of exiting (no published figure: an assumption)")
	flag.DurationVar(&fc.assumptions.CrashAfter, "fleet-crash-after", 5*time.Minute, "fleet: how long a restart of a program that fails on its own runs before failing again")
	flag.DurationVar(&fc.assumptions.Fix, "fleet-fix", time.Hour, "fleet: the operator's time to fix the program after an application failure and start it again (the same for every system)")
	fleetHangs := flag.String("fleet-hang-timeouts", "10m,30m", "fleet: the framework's timeouts on a stalled collective, one goodput column each (PyTorch's NCCL watchdog default, and a common 30 min)")
	flag.DurationVar(&fc.recreate, "fleet-recreate", 110160*time.Millisecond, "fleet: faultline's restart, recreating, at 2,048 workers where this run measured none ("+fleetDefaultsSource+")")
	flag.DurationVar(&fc.inPlace, "fleet-in-place", 96330*time.Millisecond, "fleet: faultline's restart in place, the same")
	flag.DurationVar(&fc.jobSet, "fleet-jobset", 310*time.Second, "fleet: JobSet's restart with its default policy, the same")
	flag.DurationVar(&fc.floor, "fleet-floor", 102420*time.Millisecond, "fleet: the floor (the gang's pods made and scheduled), a bare Indexed Job's recovery once its survivors' timeout ends them, the same")
	flag.DurationVar(&fc.nodeLost, "fleet-node-lost", 40*time.Second, "fleet: from a host's death to faultline's judging its pods lost: its node unreachable (kube-controller-manager's node-monitor-grace-period) and its agent's heartbeat expired (pkg/agentlease.Duration), 40 s each")
	flag.DurationVar(&fc.podEviction, "fleet-pod-eviction", 300*time.Second, "fleet: then until a Job's pods on it fail (the taint manager's default toleration of not-ready and unreachable)")
	flag.IntVar(&fc.jobSetRestarts, "fleet-jobset-max-restarts", 3, "fleet: JobSet's maxRestarts, the restarts an application failure spends (the bench's JobSet)")
	flag.IntVar(&fc.jobRestarts, "fleet-job-backoff", 3, "fleet: the Indexed Job's backoffLimitPerIndex (the bench's Job)")
	audit := flag.String("audit-policy", "", "kube-apiserver audit policy file; each session's audit log and component logs are kept in _output/bench-logs/<cluster>/ (to see which client sends what during a restart)")
	flag.Parse()
	sizes, err := ints(*workers, 1)
	if err != nil {
		fail(2, fmt.Errorf("-workers: %w", err))
	}
	qpss, err := ints(*qps, 0)
	if err != nil {
		fail(2, fmt.Errorf("-controller-manager-qps: %w", err))
	}
	cfg := config{sizes: sizes, qps: qpss, rounds: *rounds, failMax: *failMax, profileWorkers: *profileWorkers, auditPolicy: *audit, gpuQuota: *gpuQuota, controllerQPS: *ctrlQPS, hangTimeout: *hangTimeout, inPlaceSupervise: *supervise,
		systems: strings.Split(*systems, ","), scenarios: strings.Split(*scenarios, ","), fleet: fc,
		steady: steadyConfig{runs: *steadyRuns, workers: *steadyWorkers, qps: *steadyQPS, faults: *steadyFaults, window: *steadyWindow,
			gpusPerNode: *steadyGPUs, schedulerQPS: *steadySchedulerQPS}}
	for _, s := range cfg.systems {
		if _, ok := systemDescriptions[s]; !ok {
			fail(2, fmt.Errorf("-systems: unknown system %q (want %s, %s, %s, %s, %s, %s or %s)", s, flagFaultline, flagFaultlineInPlace, flagFaultlineSpares, flagFaultlineKueue, flagJob, flagJobSet, flagJobSetDefault))
		}
	}
	for _, h := range strings.Split(*fleetHangs, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(h))
		if err != nil || d <= 0 {
			fail(2, fmt.Errorf("-fleet-hang-timeouts: %q is not a duration", h))
		}
		cfg.fleet.hangTimeouts = append(cfg.fleet.hangTimeouts, d)
	}
	for _, s := range cfg.scenarios {
		if !slices.Contains(allScenarios, s) {
			fail(2, fmt.Errorf("-scenarios: unknown scenario %q (want one of %s)", s, strings.Join(allScenarios, ", ")))
		}
	}
	path := *out
	if path == "" {
		path = defaultOut(time.Now())
	}
	cfg.stem = strings.TrimSuffix(path, filepath.Ext(path))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		fail(1, err)
	}
	// An interrupted bench stops what it started (its clusters, agents, controller) and
	// reports what it measured, as one that failed does.
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(sigCtx, *timeout)
	defer cancel()
	started := time.Now()
	sessions, runErr := run(ctx, cfg)
	// What was measured is reported even when a later scenario failed.
	report, err := render(sessions, cfg, path, time.Since(started))
	if err != nil {
		fail(1, err)
	}
	fmt.Print(report)
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		fail(1, err)
	}
	fmt.Fprintln(os.Stderr, "results written to", path)
	if runErr != nil {
		fail(1, runErr)
	}
}

// defaultOut is where a run's report goes unless -out says otherwise: under _output/, which
// git ignores, so that `make bench` never dirties the tree; one directory a run, named for
// its start time, so that a run never overwrites another's report, plots or profiles.
func defaultOut(start time.Time) string {
	stamp := "<YYYYMMDD-HHMMSS>"
	if !start.IsZero() {
		stamp = start.Format("20060102-150405")
	}
	return filepath.Join("_output", "bench", stamp, "report.md")
}

func ints(list string, least int) ([]int, error) {
	var out []int
	for _, w := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < least {
			return nil, fmt.Errorf("%q is not a whole number ≥ %d", w, least)
		}
		out = append(out, n)
	}
	return out, nil
}

func fail(code int, err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(code)
}

// systemDescriptions say how each system is configured, for the report's header.
var systemDescriptions = map[string]string{
	flagFaultline:        "faultline (TrainingRun, default failure policy, restartMode Recreate, node agent with simulated hardware)",
	flagFaultlineInPlace: "faultline (in place): the same TrainingRun with restartMode InPlace on nodes that can; the bench plays each node's agent (its own decisions) and kubelet: the agent's two container-runtime calls become the pod status the kubelet writes after each, one write per step, 2 per restarted pod (a real kubelet writes at least as many); kwok starts new pods, as for every system",
	flagFaultlineSpares:  "faultline (spares): faultline (in place) with the barrier supervising each worker and spec.spares as many as a node holds workers (8): the spares wait on the one node the gang leaves free, and the lost node's indexes go to them (no new pod)",
	flagFaultlineKueue:   "the same TrainingRun in a Kueue v0.19.2 LocalQueue whose ClusterQueue holds every GPU of the cluster (Kueue a local process, default WaitForPodsReady)",
	flagJob:              "a bare Indexed Job (podReplacementPolicy Failed, backoffLimitPerIndex 3, podFailurePolicy: Ignore DisruptionTarget, FailJob on exit code 1)",
	flagJobSet:           "JobSet v0.12.0 at its best for application errors (maxRestarts 3, backoffLimit 0, a Job FailJob rule on exit code 1 and a FailJobSet rule on PodFailurePolicy)",
	flagJobSetDefault:    "JobSet v0.12.0 with its default policy (maxRestarts 3, backoffLimit 0)",
}

// inPlaceSupervisedDescription is faultline (in place)'s with -inplace-supervise.
const inPlaceSupervisedDescription = "faultline (in place): the same TrainingRun with restartMode InPlace on nodes that can, its workers with a command, their barrier their container's entrypoint supervising them (launcher controller --barrier-in-worker); the bench plays each node's agent (its own decisions, its records on its node's heartbeat as nodeagent --barrier-records-on-heartbeat keeps them) and kubelet, which writes nothing for a pod restarted in place (its container goes on); kwok starts new pods, as for every system"

// render writes the plots next to the report and returns the report.
func render(sessions []*session, cfg config, path string, took time.Duration) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# faultline benchmarks, %s\n\n", time.Now().Format("2006-01-02"))
	// Rounds, alternatives and the floor belong to the restart scenarios; the steady state
	// is faultline's alone, one window.
	measured := "the steady state's one window"
	if !cfg.restartScenarios() && !slices.Contains(cfg.scenarios, scenarioSteadyFlag) {
		measured = "no control plane (the fleet replay alone)"
	}
	if cfg.restartScenarios() {
		measured = fmt.Sprintf("%d round(s) per scenario, system and size", cfg.rounds)
	}
	fmt.Fprintf(&b, "`go run ./bench %s` — %s, on this 2-core machine; took %s.\n",
		strings.Join(os.Args[1:], " "), measured, took.Round(time.Second))
	if !cfg.restartScenarios() && !slices.Contains(cfg.scenarios, scenarioSteadyFlag) {
		b.WriteString("\n")
		fleetMarkdown(&b, cfg.fleet, sessions)
		return b.String(), nil
	}
	var described []string
	for _, sys := range cfg.systems {
		d := systemDescriptions[sys]
		if sys == flagFaultlineInPlace && cfg.inPlaceSupervise {
			d = inPlaceSupervisedDescription
		}
		described = append(described, d)
	}
	fmt.Fprintf(&b, "Systems: %s.", strings.Join(described, "; "))
	if cfg.measuresFloor() {
		b.WriteString(" The floor: a bare Indexed Job of the same pods, from create to all Running.")
	}
	if slices.Contains(cfg.systems, flagFaultline) || cfg.inPlace() {
		fmt.Fprintf(&b, " faultline's controller: client rate limit QPS %d, burst %d.", cfg.controllerQPS, cfg.controllerBurst())
	}
	if cfg.gpuQuota {
		fmt.Fprintf(&b, " The namespace has a ResourceQuota of %d GPUs (`%s`): the largest gang fits, two do not.", slices.Max(cfg.sizes), gpuQuotaKey)
	}
	b.WriteString("\n\n")
	stem := cfg.stem
	for _, s := range sessions {
		plots := map[string]string{}
		for _, sc := range []string{scenarioShutdown, scenarioXID} {
			slug := map[string]string{scenarioShutdown: "shutdown", scenarioXID: "xid"}[sc]
			file := fmt.Sprintf("%s-%s-qps%d.png", stem, slug, s.qps)
			if ok, err := s.plotRestarts(sc, file); err != nil {
				return "", err
			} else if ok {
				plots[sc] = filepath.Base(file)
			}
			file = fmt.Sprintf("%s-%s-phases-qps%d.png", stem, slug, s.qps)
			if ok, err := s.plotPhases(sc, file); err != nil {
				return "", err
			} else if ok {
				plots[sc+" phases"] = filepath.Base(file)
			}
		}
		s.markdown(&b, plots)
	}
	if slices.Contains(cfg.scenarios, scenarioFleetFlag) {
		fleetMarkdown(&b, cfg.fleet, sessions)
	}
	return b.String(), nil
}
