package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/cli"
	"github.com/faultline-dev/faultline/test/cluster"
)

const (
	namespace = "demo"
	runName   = "llm"
	// gpusPerWorker leaves room on the other nodes once a node is excluded.
	gpusPerWorker = 2
)

type demo struct {
	opts options
	out  *syncWriter
	step int

	start   time.Time
	bin     string
	workdir string
	c       *cluster.Cluster
	runs    *cli.Runs
	agents  map[string]*cluster.Agent
	ctrlLog string

	timeToRestart, timeToFail time.Duration
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, format+"\n", args...)
}

// stepf starts a numbered step of the narration.
func (d *demo) stepf(format string, args ...any) {
	d.step++
	d.say("")
	d.say("[%d/8] "+format, append([]any{d.step}, args...)...)
}

func (d *demo) run(ctx context.Context) (err error) {
	d.start = time.Now()
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	var cleanups []func()
	defer func() {
		d.step = 7
		d.stepf("Cleaning up: the watch, the node agents, the controller and the control plane.")
		if err != nil && d.ctrlLog != "" {
			d.say("      controller log (last lines):\n%s", indent(tail(d.ctrlLog, 30), "        "))
		}
		if err != nil && d.c != nil {
			d.dumpState()
		}
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		if d.workdir != "" {
			_ = os.RemoveAll(d.workdir)
		}
		d.say("      done.")
	}()
	tools, err := cluster.FindTools()
	if err != nil {
		return err
	}
	d.bin = d.opts.Bin
	if !filepath.IsAbs(d.bin) {
		d.bin = filepath.Join(tools.Root, d.bin)
	}
	for _, b := range []string{"launcher", "nodeagent", "faultline-plugin-jax"} {
		if _, err := os.Stat(filepath.Join(d.bin, b)); err != nil {
			return fmt.Errorf("%s missing in %s: run `make build` first (make demo does)", b, d.bin)
		}
	}
	if d.workdir, err = os.MkdirTemp("", "faultline-demo-"); err != nil {
		return err
	}

	if d.opts.RealNodes {
		d.say("faultline demo: a %d-worker JAX run on %d real nodes (kubelet, containerd, runc) survives a node", d.opts.Workers, realNodes)
		d.say("shutdown, then fails fast when the program has a bug. Everything runs on this machine; nothing is left behind.")
	} else {
		d.say("faultline demo: a %d-worker JAX run on %d simulated GPU nodes survives a node shutdown,", d.opts.Workers, d.opts.Nodes)
		d.say("then fails fast when the program has a bug. Everything runs on this machine; nothing is left behind.")
	}

	// 1. The control plane.
	stopCluster := func() {
		if d.c == nil {
			return
		}
		if err := d.c.Stop(); err != nil {
			d.say("      stop the control plane: %v", err)
		}
	}
	if d.opts.RealNodes {
		err = d.startRealCluster(ctx)
		cleanups = append(cleanups, stopCluster)
		if err != nil {
			return err
		}
	} else {
		d.stepf("Starting a local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,\n"+
			"      kube-scheduler, all real) with %d fake GPU nodes simulated by kwok...", d.opts.Nodes)
		t := time.Now()
		d.c, err = cluster.Start(ctx, cluster.Options{Name: "demo", Nodes: d.opts.Nodes})
		if err != nil {
			return err
		}
		cleanups = append(cleanups, stopCluster)
		v, err := d.c.Client.Discovery().ServerVersion()
		if err != nil {
			return err
		}
		d.say("      up in %s: Kubernetes %s, nodes %s ... %s with %d GPUs each.", since(t), v.GitVersion,
			cluster.NodeName(0), cluster.NodeName(d.opts.Nodes-1), cluster.DefaultNode.GPUs)
	}
	if d.runs, err = cli.NewRuns(d.c.Config, namespace); err != nil {
		return err
	}

	// 2. Install.
	d.stepf("Installing faultline's CRD, admission policies and node-agent DaemonSet with the launcher:")
	// --wait=false: the agent's image is in no registry here; the demo runs each node's agent
	// as a process, with a token bound to the DaemonSet's pod (which need not run for that).
	if _, err := d.launcher(ctx, true, "install", "--components", "crd,admission,agent", "--wait=false"); err != nil {
		return err
	}
	var dsPods map[string]*corev1.Pod
	if !d.opts.RealNodes {
		if dsPods, err = d.c.AgentPods(ctx, d.opts.Nodes); err != nil {
			return err
		}
	}

	// 3. Controller and agents.
	if d.opts.RealNodes {
		d.stepf("Starting the controller (`launcher controller`) and a node agent for each node. Each agent\n" +
			"      shares its node's system bus with the kubelet (both hold a logind delay inhibitor lock), reads\n" +
			"      GPU assignments from the kubelet's PodResources API, and has a token bound to its DaemonSet pod.")
	} else {
		d.stepf("Starting the controller (`launcher controller`) and a node agent for each node. Each agent has\n" +
			"      a system bus of its own with a logind stand-in, simulated GPUs, and a token bound to its\n" +
			"      DaemonSet pod, so it may only touch its own node's pods.")
	}
	if _, err := d.c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	stopCtrl, err := d.startController()
	if err != nil {
		return err
	}
	cleanups = append(cleanups, stopCtrl)
	t := time.Now()
	if d.opts.RealNodes {
		d.agents, err = d.startRealAgents(ctx)
	} else {
		d.agents, err = d.startAgents(ctx, dsPods)
	}
	cleanups = append(cleanups, func() {
		for _, a := range d.agents {
			a.Stop()
		}
	})
	if err != nil {
		return err
	}
	d.say("      controller running; %d agents up in %s, each holding a logind delay inhibitor lock.", len(d.agents), since(t))

	// 4. Submit and watch.
	d.stepf("Submitting a %d-worker JAX run and following it with `launcher watch`:", d.opts.Workers)
	t = time.Now()
	if d.opts.RealNodes {
		if err := d.submitReal(ctx); err != nil {
			return err
		}
	} else if _, err := d.launcher(ctx, true, "run", "--name", runName, "--framework", "jax",
		"--workers", strconv.Itoa(d.opts.Workers), "--gpus-per-worker", strconv.Itoa(gpusPerWorker),
		"--image", "ghcr.io/example/jax-train:1.0", "--exclude-faulty-nodes",
		"--", "python", "train.py", "--model", "llm-7b"); err != nil {
		return err
	}
	watcher, err := d.startWatch()
	if err != nil {
		return err
	}
	cleanups = append(cleanups, watcher.kill)
	if _, err := d.waitRun(ctx, "attempt 1 Running", running(1, d.opts.Workers)); err != nil {
		return err
	}
	d.say("      all %d workers of attempt 1 Running %s after the submit.", d.opts.Workers, since(t))
	pods, err := d.attemptPods(ctx, 1)
	if err != nil {
		return err
	}

	// 5. Node shutdown.
	node := pods[0].Spec.NodeName
	var onNode []*corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName == node {
			onNode = append(onNode, p)
		}
	}
	var fault, killed time.Time
	if d.opts.RealNodes {
		d.stepf("Node %s, which runs the JAX coordinator (index 0), is being shut down for maintenance:\n"+
			"      logind announces PrepareForShutdown(true) to the node's kubelet and agent.", node)
		if fault, err = d.shutdownReal(ctx, node, onNode); err != nil {
			return err
		}
		killed = time.Now()
	} else {
		d.stepf("Node %s, which runs the JAX coordinator (index 0), is being shut down for maintenance:\n"+
			"      logind announces PrepareForShutdown(true) to the node's agent.", node)
		fault = time.Now()
		if err := d.agents[node].Logind.PrepareForShutdown(true); err != nil {
			return err
		}
		marked, err := d.waitMarked(ctx, onNode)
		if err != nil {
			return err
		}
		d.say("      the agent marked the %d workers on %s (indexes %s) with InfrastructureFault=NodeShutdown",
			len(onNode), node, indexes(onNode))
		d.say("      %s after the announcement, while they were still running, then let logind go on.", marked.Sub(fault).Round(time.Millisecond))
		d.say("      The kubelet's graceful shutdown stops them: exit 143 (SIGTERM).")
		for _, p := range onNode {
			if err := d.c.FailPod(ctx, namespace, p.Name, cluster.Failure{ExitCode: 143, Message: "terminated by SIGTERM (node shutdown)"}); err != nil {
				return err
			}
		}
		killed = time.Now()
	}
	if _, err := d.waitRun(ctx, "attempt 2 Running", running(2, d.opts.Workers)); err != nil {
		return err
	}
	restarted := time.Now()
	next, err := d.attemptPods(ctx, 2)
	if err != nil {
		return err
	}
	for _, p := range next {
		if p.Spec.NodeName == node {
			return fmt.Errorf("pod %s of attempt 2 runs on %s, which the run excludes", p.Name, node)
		}
	}
	timeToRestart := restarted.Sub(fault)
	d.say("      attempt 2: all %d workers Running again %s after the announcement (%s after the kill),",
		d.opts.Workers, span(timeToRestart), span(restarted.Sub(killed)))
	d.say("      none on %s: --exclude-faulty-nodes keeps later attempts off a node that failed them.", node)
	if inPlace, moved := splitInPlace(pods, next); len(inPlace) > 0 {
		d.say("      Restarted in place: indexes %s in their own pods (same UID, node and GPU, the worker's", indexes(inPlace))
		d.say("      restartCount up by one); indexes %s, whose node shut down, in new pods.", indexes(moved))
	}
	if d.opts.RealNodes {
		d.say("      Attempt 2's coordinator saw the whole gang register, each index once:")
		logs, err := d.registrations(ctx)
		if err != nil {
			return err
		}
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, "coordinator: registered task") || strings.Contains(l, "coordinator: all") {
				d.say("        %s", l)
			}
		}
	}
	if _, err := d.launcher(ctx, true, "get", runName, "-o", "wide"); err != nil {
		return err
	}

	// 6. Timeline.
	d.stepf("The run so far, as `launcher timeline %s` draws it:", runName)
	if _, err := d.launcher(ctx, true, "timeline", runName); err != nil {
		return err
	}
	if d.opts.HTML != "" {
		if _, err := d.launcher(ctx, true, "timeline", runName, "--html", d.opts.HTML); err != nil {
			return err
		}
	}

	// 7. A bug.
	var timeToFail time.Duration
	if d.opts.RealNodes {
		if timeToFail, err = d.bugReal(ctx, next); err != nil {
			return err
		}
	} else {
		victim := next[min(5, len(next)-1)]
		d.stepf("A bug: worker index %d exits 1 (\"ValueError: loss is NaN\"). No node signal comes within the\n"+
			"      settle window (1s after the exit), so the application is to blame.", attempt.IndexOrNone(victim))
		bug := time.Now()
		if err := d.c.FailPod(ctx, namespace, victim.Name, cluster.Failure{ExitCode: 1, Message: "ValueError: loss is NaN"}); err != nil {
			return err
		}
		if _, err := d.waitRun(ctx, "phase Failed", func(r *v1alpha1.TrainingRun) bool { return r.Status.Phase == v1alpha1.PhaseFailed }); err != nil {
			return err
		}
		timeToFail = time.Since(bug)
	}
	code, err := watcher.wait(ctx)
	if err != nil {
		return err
	}
	d.say("      the run Failed %s after the exit, without a restart; `launcher watch` exited %d.", span(timeToFail), code)
	if code != cli.ExitRunFailed {
		return fmt.Errorf("launcher watch exited %d, want %d for a failed run", code, cli.ExitRunFailed)
	}
	d.say("      Why, as `launcher explain %s` tells it:", runName)
	if _, err := d.launcher(ctx, true, "explain", runName); err != nil {
		return err
	}

	d.timeToRestart, d.timeToFail = timeToRestart, timeToFail
	return nil
}

// summary prints the measured times, once everything has been cleaned up.
func (d *demo) summary() {
	d.say("")
	d.say("Summary")
	d.say("  time to restart: %-7s (node shutdown announced → all %d workers of attempt 2 Running)", span(d.timeToRestart), d.opts.Workers)
	d.say("  time to fail:    %-7s (worker exit 1 → phase Failed)", span(d.timeToFail))
	if d.opts.RealNodes {
		d.say("  (real nodes: the exits above are the kubelet's and the program's own; the time to fail counts from")
		d.say("   the moment the worker logged its failure)")
	}
	d.say("  total wall time: %-7s (control plane start to cleanup done)", since(d.start))
}

// launcher runs bin/launcher against the demo cluster and namespace; show prints its
// output (indented) as part of the narration.
func (d *demo) launcher(ctx context.Context, show bool, args ...string) (string, error) {
	// The cluster flags go first: whatever follows -- is the workers' command.
	full := append([]string{"--kubeconfig", d.c.Kubeconfig, "-n", namespace}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(d.bin, "launcher"), full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if show {
		d.say("      $ launcher %s", strings.Join(args, " "))
	}
	err := cmd.Run()
	if show && stdout.Len() > 0 {
		d.say("%s", indent(stdout.String(), "      "))
	}
	if err != nil {
		return stdout.String(), fmt.Errorf("launcher %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func (d *demo) startController() (func(), error) {
	d.ctrlLog = filepath.Join(d.workdir, "controller.log")
	f, err := os.Create(d.ctrlLog)
	if err != nil {
		return nil, err
	}
	args := []string{"controller", "--kubeconfig", d.c.Kubeconfig,
		"--namespace", namespace, "--leader-elect=false", "--metrics-bind-address", "0", "--health-probe-bind-address", "0"}
	if d.opts.RealNodes {
		// The nodes restart pods in place (restartMode Auto's default there), with the
		// barrier image imported into their containerd in place of the release's.
		args = append(args, "--barrier-image", cluster.BarrierImage)
	}
	cmd := exec.Command(filepath.Join(d.bin, "launcher"), args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	return func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}, nil
}

func (d *demo) startAgents(ctx context.Context, dsPods map[string]*corev1.Pod) (map[string]*cluster.Agent, error) {
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		errs   []error
		agents = map[string]*cluster.Agent{}
	)
	for i := range d.opts.Nodes {
		node := cluster.NodeName(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := d.c.StartAgent(ctx, cluster.AgentOptions{
				Bin: filepath.Join(d.bin, "nodeagent"), Node: node, DaemonSetPod: dsPods[node],
				Dir: filepath.Join(d.workdir, node), Args: []string{"--release-timeout", "5s"},
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			agents[node] = a
		}()
	}
	wg.Wait()
	return agents, errors.Join(errs...)
}

// watchProc is `launcher watch` running in the background, its output in the narration.
type watchProc struct {
	cmd  *exec.Cmd
	out  *prefixWriter
	done chan struct{}
}

func (d *demo) startWatch() (*watchProc, error) {
	w := &watchProc{out: &prefixWriter{prefix: "      watch │ ", w: d.out}, done: make(chan struct{})}
	d.say("      $ launcher watch %s &", runName)
	w.cmd = exec.Command(filepath.Join(d.bin, "launcher"), "--kubeconfig", d.c.Kubeconfig, "-n", namespace, "watch", runName)
	w.cmd.Stdout, w.cmd.Stderr = w.out, w.out
	if err := w.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = w.cmd.Wait(); w.out.Flush(); close(w.done) }()
	return w, nil
}

// wait waits for the watch to end and returns its exit code.
func (w *watchProc) wait(ctx context.Context) (int, error) {
	select {
	case <-w.done:
		return w.cmd.ProcessState.ExitCode(), nil
	case <-ctx.Done():
		return -1, fmt.Errorf("launcher watch did not end: %w", ctx.Err())
	}
}

func (w *watchProc) kill() {
	select {
	case <-w.done:
	default:
		_ = w.cmd.Process.Kill()
		<-w.done
	}
}

// waitRun watches the run until cond holds.
func (d *demo) waitRun(ctx context.Context, what string, cond func(*v1alpha1.TrainingRun) bool) (*v1alpha1.TrainingRun, error) {
	var last *v1alpha1.TrainingRun
	_, err := watchtools.UntilWithSync(ctx, d.runs.ListWatch(runName), &v1alpha1.TrainingRun{}, nil, func(e watch.Event) (bool, error) {
		r, ok := e.Object.(*v1alpha1.TrainingRun)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		last = r
		return cond(r), nil
	})
	if err != nil {
		state := "never seen"
		if last != nil {
			state = fmt.Sprintf("phase %s, attempt %d, %d/%d ready", last.Status.Phase, last.Status.Attempt, last.Status.ReadyWorkers, last.Spec.Workers)
		}
		return last, fmt.Errorf("waiting for %s of trainingrun %s (%s): %w", what, runName, state, err)
	}
	return last, nil
}

func running(attempt int32, workers int) func(*v1alpha1.TrainingRun) bool {
	return func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt == attempt && r.Status.Phase == v1alpha1.PhaseRunning && int(r.Status.ReadyWorkers) == workers
	}
}

// registrations is attempt 2's coordinator's log once it says the whole gang registered:
// Running is when every worker started, and the last ones register a moment later.
func (d *demo) registrations(ctx context.Context) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		logs, err := d.launcher(ctx, false, "logs", runName, "--attempt", "2", "--index", "0")
		if err != nil || strings.Contains(logs, "coordinator: all") || time.Now().After(deadline) {
			return logs, err
		}
		select {
		case <-ctx.Done():
			return logs, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// splitInPlace splits the pods of the next attempt into those that restarted in place (pods
// of the attempt before) and those made for it.
func splitInPlace(before, next []*corev1.Pod) (inPlace, made []*corev1.Pod) {
	old := map[types.UID]bool{}
	for _, p := range before {
		old[p.UID] = true
	}
	for _, p := range next {
		if old[p.UID] {
			inPlace = append(inPlace, p)
		} else {
			made = append(made, p)
		}
	}
	return inPlace, made
}

// attemptPods returns the Running pods of an attempt, by index.
func (d *demo) attemptPods(ctx context.Context, number int) ([]*corev1.Pod, error) {
	sel := labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: runName})
	var out []*corev1.Pod
	_, err := d.c.WaitPods(ctx, namespace, sel, func(pods []*corev1.Pod) (bool, error) {
		out = out[:0]
		for _, p := range pods {
			// Made for the attempt, or restarted in place for it.
			if n, _ := attempt.Running(p); int(n) == number && cluster.PodRunning(p) {
				out = append(out, p)
			}
		}
		return len(out) == d.opts.Workers, nil
	})
	sort.Slice(out, func(i, j int) bool { return attempt.IndexOrNone(out[i]) < attempt.IndexOrNone(out[j]) })
	return out, err
}

// waitMarked waits until every pod carries the agent's InfrastructureFault condition and
// returns when that was seen.
func (d *demo) waitMarked(ctx context.Context, pods []*corev1.Pod) (time.Time, error) {
	want := map[string]bool{}
	for _, p := range pods {
		want[p.Name] = true
	}
	sel := labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: runName, v1alpha1.LabelAttempt: "1"})
	_, err := d.c.WaitPods(ctx, namespace, sel, func(all []*corev1.Pod) (bool, error) {
		n := 0
		for _, p := range all {
			if want[p.Name] && hasFault(p) {
				n++
			}
		}
		return n == len(want), nil
	})
	return time.Now(), err
}

func hasFault(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1alpha1.PodConditionInfrastructureFault && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func indexes(pods []*corev1.Pod) string {
	var s []string
	for _, p := range pods {
		s = append(s, strconv.Itoa(attempt.IndexOrNone(p)))
	}
	return strings.Join(s, ", ")
}

func since(t time.Time) string { return span(time.Since(t)) }

// span renders a duration as the summary does: "2.31s", "48.2s", "1m05s".
func span(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	d = d.Round(time.Second)
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// dumpState says, when the demo failed, where the run's pods and Jobs were, and keeps the
// control plane's logs: a failure seen once in many runs is otherwise gone with the cluster.
func (d *demo) dumpState() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if jobs, err := d.c.Client.BatchV1().Jobs(namespace).List(ctx, metav1.ListOptions{}); err == nil {
		for _, j := range jobs.Items {
			d.say("      job %s uid %s attempt %s: active %d, ready %d, failed %d, deleting %v",
				j.Name, j.UID, j.Labels[v1alpha1.LabelAttempt], j.Status.Active, ptr.Deref(j.Status.Ready, 0), j.Status.Failed, j.DeletionTimestamp != nil)
		}
	}
	if pods, err := d.c.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			var gates []string
			for _, g := range p.Spec.SchedulingGates {
				gates = append(gates, g.Name)
			}
			d.say("      pod %s attempt %s: %s on %q, gates %v, finalizers %v, deleting %v",
				p.Name, p.Labels[v1alpha1.LabelAttempt], p.Status.Phase, p.Spec.NodeName, gates, p.Finalizers, p.DeletionTimestamp != nil)
		}
	}
	if dir, err := d.c.SaveLogs(filepath.Join(d.c.Tools.Root, "_output", "test-logs")); err == nil {
		d.say("      control-plane logs kept in %s", dir)
	}
}
