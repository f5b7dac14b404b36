package trace

import (
	"context"
	"fmt"
	"github.com/faultline-dev/faultline/test/otlp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/scheme"
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/shutdown/login1sim"
	"github.com/faultline-dev/faultline/pkg/tracing"
	"github.com/faultline-dev/faultline/test/cluster"
)

// episodeChildren are the phases of a restart, in order; detect is the node agent's.
var episodeChildren = []string{
	tracing.SpanDetect, tracing.SpanSettle, tracing.SpanClassify, tracing.SpanTeardown,
	tracing.SpanBackoff, tracing.SpanCreate, tracing.SpanSchedule, tracing.SpanRunning,
}

// TestE2ERestartTraceArrivesWhole: a maintenance shutdown under a run's workers restarts the
// run, and the spans that the node agent and the controller export of that one episode
// arrive as one trace: faultline.restart (the controller's) is the root and the parent of
// detect (the agent's) and of every controller phase; the root lasts what the test measured
// from the signal to every worker of the new attempt Running; its children cover it.
func TestE2ERestartTraceArrivesWhole(t *testing.T) {
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	node := cluster.NodeName(0)
	const workers = 4
	st := startStack(ctx, t, c, node)
	ns, recv, logind, cl := st.ns, st.recv, st.logind, st.cl
	run := newRun("llm", workers, node)
	run.Namespace = ns
	if err := cl.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	waitRun(ctx, t, cl, run, "attempt 1 Running", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt == 1 && r.Status.Phase == v1alpha1.PhaseRunning
	})
	start, marked, markedAt, seenRunning := shutdownUnder(ctx, t, c, logind, run, workers)

	restarted := waitRun(ctx, t, cl, run, "attempt 2 Running with the episode's end recorded", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt == 2 && r.Status.Trace != nil && r.Status.Trace.RunningAt != nil
	})
	// The time to restart, from the signal to the moment the controller saw every worker of
	// attempt 2 Running (its record, which ends the episode): the pods' own Running, which
	// this test sees first, is a watch event before it, by more on a loaded machine.
	measured := restarted.Status.Trace.RunningAt.Time.Sub(start)
	t.Logf("signal → %d workers marked in %s; → attempt 2 all Running in %s (pods), recorded %s", workers, markedAt.Sub(start).Round(time.Millisecond),
		seenRunning.Round(time.Millisecond), measured.Round(time.Millisecond))
	root, ok := tracing.ParseTraceparent(restarted.Status.Trace.Traceparent)
	if !ok {
		t.Fatalf("status.trace.traceparent %q", restarted.Status.Trace.Traceparent)
	}
	traceID, rootID := root.TraceID().String(), root.SpanID().String()
	// The pods of attempt 1 are gone; the agent's traceparent on them was the episode's.
	if got := marked[0].Annotations[v1alpha1.AnnotationTraceparent]; got != restarted.Status.Trace.Traceparent {
		t.Errorf("the agent wrote traceparent %q on %s; the controller's episode is %q", got, marked[0].Name, restarted.Status.Trace.Traceparent)
	}

	// Wait for the whole episode, and the attempt span, to arrive.
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	spans, err := recv.WaitFor(wctx, func(spans []otlp.Span) bool {
		names := map[string]bool{}
		for _, s := range spans {
			if s.TraceID() == traceID || s.Name == tracing.SpanAttempt {
				names[s.Name] = true
			}
		}
		for _, n := range append([]string{tracing.SpanRestart, tracing.SpanAttempt}, episodeChildren...) {
			if !names[n] {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("spans received by the OTLP receiver: %v\n%s", err, describeSpans(spans))
	}

	byName := map[string][]otlp.Span{}
	for _, s := range spans {
		if s.TraceID() == traceID {
			byName[s.Name] = append(byName[s.Name], s)
		}
	}
	rootSpans := byName[tracing.SpanRestart]
	if len(rootSpans) != 1 {
		t.Fatalf("%d faultline.restart spans in trace %s, want 1\n%s", len(rootSpans), traceID, describeSpans(spans))
	}
	rootSpan := rootSpans[0]
	if rootSpan.ID() != rootID || rootSpan.Parent() != "" || rootSpan.Service != tracing.ServiceController {
		t.Errorf("root span %s (parent %q) from %s; want %s without parent, from faultline-controller", rootSpan.ID(), rootSpan.Parent(), rootSpan.Service, rootID)
	}
	for k, want := range map[string]string{
		"faultline.run": run.Name, "k8s.namespace.name": ns, "faultline.attempt.from": "1", "faultline.attempt.to": "2",
		"faultline.class": "Infrastructure", "faultline.cause": "NodeShutdown", "k8s.node.name": node, "faultline.exit_code": "143",
	} {
		if got := rootSpan.Attr(k); got != want {
			t.Errorf("root attribute %s = %q, want %q", k, got, want)
		}
	}
	if rootSpan.Attr("k8s.pod.name") == "" || rootSpan.Attr("faultline.index") == "" {
		t.Errorf("root span names no root pod and index: %v", rootSpan.Attributes)
	}

	var children []otlp.Span
	var breakdown strings.Builder
	for _, name := range episodeChildren {
		got := byName[name]
		if len(got) != 1 {
			t.Errorf("%d %s spans in the trace, want 1", len(got), name)
			continue
		}
		s := got[0]
		wantService := tracing.ServiceController
		if name == tracing.SpanDetect {
			wantService = tracing.ServiceAgent
		}
		if s.Service != wantService {
			t.Errorf("%s came from %q, want %q", name, s.Service, wantService)
		}
		if s.Parent() != rootID {
			t.Errorf("%s has parent %s, want the root %s", name, s.Parent(), rootID)
		}
		if s.Start().Before(rootSpan.Start()) || s.End().After(rootSpan.End()) {
			t.Errorf("%s [%s, %s] lies outside the root [%s, %s]", name, s.Start().Format(time.StampMicro), s.End().Format(time.StampMicro), rootSpan.Start().Format(time.StampMicro), rootSpan.End().Format(time.StampMicro))
		}
		children = append(children, s)
		fmt.Fprintf(&breakdown, "\n  %-9s +%6.1fms %7.1fms  (%s)", name, ms(s.Start().Sub(rootSpan.Start())), ms(s.Duration()), s.Service)
	}
	rootDur := rootSpan.Duration()
	covered := coverage(children)
	t.Logf("trace %s: faultline.restart %.1fms (measured %.1fms), children cover %.1fms, uncovered %.1fms:%s",
		traceID, ms(rootDur), ms(measured), ms(covered), ms(rootDur-covered), breakdown.String())
	if !within(rootDur, measured, 0.10) {
		t.Errorf("faultline.restart lasts %s, the measured time to restart is %s: more than 10%% apart", rootDur, measured)
	}
	if !within(covered, rootDur, 0.10) {
		t.Errorf("the children cover %s, the root lasts %s: more than 10%% apart", covered, rootDur)
	}
	// Attempt 2's Job is made once the teardown is over (the old Job, of the same name, is
	// held until then): the phases follow one another.
	if one := func(name string) bool { return len(byName[name]) == 1 }; one(tracing.SpanTeardown) && one(tracing.SpanBackoff) && one(tracing.SpanCreate) && one(tracing.SpanSchedule) {
		teardown, backoff, create, schedule := byName[tracing.SpanTeardown][0], byName[tracing.SpanBackoff][0], byName[tracing.SpanCreate][0], byName[tracing.SpanSchedule][0]
		if !backoff.Start().Equal(teardown.End()) || !create.Start().Equal(backoff.End()) || !schedule.Start().Equal(create.End()) {
			t.Errorf("want teardown, backoff, create and schedule one after another: teardown [%s, %s], backoff [%s, %s], create [%s, %s], schedule [%s, %s]",
				teardown.Start().Format(time.StampMicro), teardown.End().Format(time.StampMicro), backoff.Start().Format(time.StampMicro), backoff.End().Format(time.StampMicro),
				create.Start().Format(time.StampMicro), create.End().Format(time.StampMicro), schedule.Start().Format(time.StampMicro), schedule.End().Format(time.StampMicro))
		}
	}

	// The attempt that the shutdown ended is linked to the episode.
	var linked bool
	for _, s := range spans {
		if s.Name != tracing.SpanAttempt || s.Attr("faultline.attempt.number") != "1" {
			continue
		}
		for _, l := range s.Links {
			if fmt.Sprintf("%x", l.TraceId) == traceID && fmt.Sprintf("%x", l.SpanId) == rootID && otlp.Attr(l.Attributes, string(tracing.KeyLink)) == tracing.LinkEndedBy {
				linked = true
			}
		}
	}
	if !linked {
		t.Errorf("no faultline.attempt span of attempt 1 linked (ended-by) to the episode\n%s", describeSpans(spans))
	}
}

// stack is one test's faultline, in a namespace of its own: the node agent of one node and a
// controller, both exporting their spans to recv (tracing on: the controller keeps
// status.trace), and a client of the runs.
type stack struct {
	ns         string
	env        []string
	recv       *otlp.Receiver
	logind     *login1sim.Login1
	controller *cluster.Process
	cl         client.Client
}

func startStack(ctx context.Context, t *testing.T, c *cluster.Cluster, node string) *stack {
	t.Helper()
	s := &stack{ns: c.Namespace(t)}
	var err error
	if s.recv, err = otlp.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.recv.Stop)
	s.env = s.recv.Env()
	s.logind = startAgent(ctx, t, c, node, s.env)
	s.startController(t, c)
	if s.cl, err = client.New(c.Config, client.Options{Scheme: scheme.New()}); err != nil {
		t.Fatal(err)
	}
	return s
}

// startController starts the stack's controller (again, after a Stop).
func (s *stack) startController(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	s.controller = cluster.StartProcessEnv(t, s.env, launcherBin, "controller",
		"--kubeconfig", c.Kubeconfig, "--namespace", s.ns, "--leader-elect=false",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0")
}

// shutdownUnder shuts the node of run's workers down (logind's PrepareForShutdown) while
// attempt 1 runs, and plays the kubelet: once the agent has marked a worker, and let the
// shutdown go on, the worker gets SIGTERM and exits 143. It returns when the signal went,
// attempt 1's marked pods, when the last was marked, and how long after the signal every
// worker of attempt 2 ran. The watch is up before the signal, so that the test adds no delay
// of its own.
func shutdownUnder(ctx context.Context, t *testing.T, c *cluster.Cluster, logind *login1sim.Login1, run *v1alpha1.TrainingRun, workers int) (start time.Time, marked []*corev1.Pod, markedAt time.Time, seenRunning time.Duration) {
	t.Helper()
	ns := run.Namespace
	attemptPods := func(n int) labels.Selector {
		return labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run.Name, v1alpha1.LabelAttempt: fmt.Sprint(n)})
	}
	var (
		wg      sync.WaitGroup
		failing = map[string]bool{}
		synced  = make(chan struct{})
		done    = make(chan []*corev1.Pod, 1)
	)
	go func() {
		first := true
		pods, err := c.WaitPods(ctx, ns, attemptPods(1), func(pods []*corev1.Pod) (bool, error) {
			if first {
				first = false
				close(synced)
			}
			for _, p := range pods {
				if p.Annotations[v1alpha1.AnnotationFaultEvidence] == "" || !hasInfraCondition(p) || failing[p.Name] {
					continue
				}
				failing[p.Name] = true
				wg.Go(func() {
					if err := c.FailPod(ctx, ns, p.Name, cluster.Failure{ExitCode: 143, Message: "terminated by SIGTERM"}); err != nil {
						t.Error(err)
					}
				})
			}
			return len(failing) == workers, nil
		})
		if err != nil {
			t.Errorf("workers marked after PrepareForShutdown: %v", err)
		}
		done <- pods
	}()
	<-synced
	start = time.Now()
	if err := logind.PrepareForShutdown(true); err != nil {
		t.Fatal(err)
	}
	marked = <-done
	markedAt = time.Now()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if _, err := c.WaitPods(ctx, ns, attemptPods(2), func(pods []*corev1.Pod) (bool, error) {
		n := 0
		for _, p := range pods {
			if cluster.PodRunning(p) {
				n++
			}
		}
		return n == workers, nil
	}); err != nil {
		t.Fatalf("attempt 2 Running: %v", err)
	}
	return start, marked, markedAt, time.Since(start)
}

// coverage is how much time the spans cover together, each moment once: the phases of a
// restart whose next attempt was created during the teardown run side by side.
func coverage(spans []otlp.Span) time.Duration {
	sorted := slices.SortedFunc(slices.Values(spans), func(a, b otlp.Span) int { return a.Start().Compare(b.Start()) })
	var total time.Duration
	var end time.Time
	for _, s := range sorted {
		start := s.Start()
		if start.Before(end) {
			start = end
		}
		if s.End().After(start) {
			total += s.End().Sub(start)
			end = s.End()
		}
	}
	return total
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func within(got, want time.Duration, frac float64) bool {
	diff := got - want
	if diff < 0 {
		diff = -diff
	}
	return float64(diff) <= frac*float64(want)
}

func describeSpans(spans []otlp.Span) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s %s/%s parent %s %s %.1fms\n", s.Service, s.TraceID(), s.ID(), s.Parent(), s.Name, ms(s.Duration()))
	}
	return b.String()
}

// startAgent runs a node agent for node with env, a system bus and logind of its own, and
// a token bound to the node's DaemonSet pod; it returns the node's logind once the agent
// holds its inhibitor lock.
func startAgent(ctx context.Context, t *testing.T, c *cluster.Cluster, node string, env []string) *login1sim.Login1 {
	t.Helper()
	bus, err := login1sim.StartBus()
	if err != nil {
		t.Skipf("no system bus simulation: %v", err)
	}
	t.Cleanup(bus.Stop)
	logind, err := login1sim.Serve(bus.Address, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logind.Close() })
	kubeconfig, _, err := c.PodBoundKubeconfig(ctx, dsPods[node], t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cluster.StartProcessEnv(t, env, agentBin, "--kubeconfig", kubeconfig, "--node-name", node,
		"--simulate-hardware", "--dbus-address", bus.Address, "--http-address", "", "--release-timeout", "5s")
	select {
	case <-logind.Locks():
	case <-ctx.Done():
		t.Fatalf("agent for %s took no inhibitor lock: %v", node, ctx.Err())
	}
	return logind
}

// newRun is a run of workers workers on node. They ask for no GPU: a shutdown marks every
// run pod of the node, and a test repeated with -count must not wait for the GPUs of the
// previous one's pods, which go with its namespace.
func newRun(name string, workers int32, node string) *v1alpha1.TrainingRun {
	return &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TrainingRunSpec{
			Workers: workers,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				NodeSelector:  map[string]string{corev1.LabelHostname: node},
				Containers:    []corev1.Container{{Name: "worker", Image: "trainer:latest"}},
			}},
		},
	}
}

// waitRun polls the run until cond holds of it.
func waitRun(ctx context.Context, t *testing.T, cl client.Client, run *v1alpha1.TrainingRun, what string, cond func(*v1alpha1.TrainingRun) bool) *v1alpha1.TrainingRun {
	t.Helper()
	got := &v1alpha1.TrainingRun{}
	err := wait.PollUntilContextTimeout(ctx, 25*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(run), got); err != nil {
			return false, nil
		}
		return cond(got), nil
	})
	if err != nil {
		t.Fatalf("run %s: %s: %v (phase %s, attempt %d)", run.Name, what, err, got.Status.Phase, got.Status.Attempt)
	}
	return got
}

func hasInfraCondition(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1alpha1.PodConditionInfrastructureFault && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
