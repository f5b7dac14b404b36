package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/scheme"
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

const namespace = "bench"

// Systems by flag name.
const (
	flagFaultline        = "faultline"
	flagFaultlineKueue   = "faultline-kueue"
	flagFaultlineInPlace = "faultline-inplace"
	flagFaultlineSpares  = "faultline-spares"
	flagJob              = "job"
	flagJobSet           = "jobset"
	flagJobSetDefault    = "jobset-default"
)

type config struct {
	sizes     []int
	qps       []int
	rounds    int
	systems   []string
	scenarios []string
	// failMax: scenario a runs up to this gang size (the targets name 8 and 256).
	failMax int
	steady  steadyConfig
	// profileWorkers: profile the controller's CPU during faultline's node-shutdown restart
	// of this gang size (0: no profile).
	profileWorkers int
	// auditPolicy, when set, turns on the API server's audit log, kept with the session's
	// component logs.
	auditPolicy string
	// gpuQuota: the bench namespace gets a ResourceQuota of as many GPUs as the largest gang.
	gpuQuota bool
	// controllerQPS is faultline's controller's client rate limit (see controllerBurst).
	controllerQPS int
	// hangTimeout is the framework's timeout that ends a hung worker for the systems that
	// wait for it (scenario hung): added to their measured restart, not waited.
	hangTimeout time.Duration
	// inPlaceSupervise: the in-place system's barriers supervise their workers and the
	// simulated agents keep their records on their nodes' heartbeats (no pod write per step).
	inPlaceSupervise bool
	// fleet is the fleet replay's configuration (scenario fleet).
	fleet fleetConfig
	// stem is the report's path without its extension: the plots and profiles are named
	// after it, so that a run never overwrites another run's files.
	stem string
}

// inPlace: a system that restarts in place is measured (in place, or with warm spares), so
// the nodes can, the bench plays their agents, and the controller has a barrier image.
func (c config) inPlace() bool {
	return slices.Contains(c.systems, flagFaultlineInPlace) || slices.Contains(c.systems, flagFaultlineSpares)
}

// controllerBurst is the burst of faultline's controller's client: twice its QPS, as the
// controller's own defaults are.
func (c config) controllerBurst() int { return 2 * c.controllerQPS }

// restartScenarios: a scenario that measures a restart or a failure (a, b, c, e) is asked for.
func (c config) restartScenarios() bool {
	return slices.ContainsFunc(c.scenarios, func(s string) bool {
		return s == scenarioFailFlag || s == scenarioShutdownFlag || s == scenarioXIDFlag || s == scenarioHungFlag
	})
}

// measuresFloor: the floor is what restarts (b, c) are compared with.
func (c config) measuresFloor() bool {
	return slices.Contains(c.scenarios, scenarioShutdownFlag) || slices.Contains(c.scenarios, scenarioXIDFlag) || slices.Contains(c.scenarios, scenarioHungFlag)
}

// binaries are built once for every session.
type binaries struct {
	dir, launcher, agent string
}

// bench is one session: a control plane at one rate limit, faultline's controller (with
// tracing on, so that every restart records its phases), agents as needed, and JobSet.
type bench struct {
	cfg     config
	bin     binaries
	c       *cluster.Cluster
	runs    client.WithWatch
	dyn     dynamic.Interface
	dsPods  map[string]*corev1.Pod
	agents  map[string]*cluster.Agent
	ctrl    *exec.Cmd
	pprof   string
	results *session
}

func run(ctx context.Context, cfg config) ([]*session, error) {
	if !cfg.restartScenarios() && !slices.Contains(cfg.scenarios, scenarioSteadyFlag) {
		return nil, nil // the fleet replay alone needs no control plane
	}
	dir, err := os.MkdirTemp("", "faultline-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := binaries{dir: dir}
	if bin.launcher, err = cluster.BuildLauncher(dir); err != nil {
		return nil, err
	}
	if bin.agent, err = cluster.BuildBinary(dir, "./cmd/nodeagent", ""); err != nil {
		return nil, err
	}
	// Tracing on, exported to a sink: status.trace (the phases) is kept only with tracing.
	stopSink, err := startTraceSink()
	if err != nil {
		return nil, err
	}
	defer stopSink()
	var out []*session
	largest := slices.Max(cfg.sizes)
	if cfg.restartScenarios() {
		for _, qps := range cfg.qps {
			// One GPU per worker on 8-GPU nodes, and a spare node for the gang that loses one.
			s, err := session1(ctx, cfg, bin, sessionShape{qps: qps, nodes: (largest+gpusPerNode-1)/gpusPerNode + 1, gpusPerNode: gpusPerNode}, func(ctx context.Context, b *bench) error { return b.scenarios(ctx) })
			if s != nil {
				out = append(out, s) // what it measured, even if it failed later
			}
			if err != nil {
				return out, err
			}
		}
	}
	if slices.Contains(cfg.scenarios, scenarioSteadyFlag) {
		st := cfg.steady
		shape := sessionShape{qps: st.qps, nodes: (st.runs*st.workers+st.gpusPerNode-1)/st.gpusPerNode + 1, gpusPerNode: st.gpusPerNode, schedulerQPS: st.schedulerQPS}
		s, err := session1(ctx, cfg, bin, shape, func(ctx context.Context, b *bench) error { return b.steadyState(ctx) })
		if s != nil {
			out = append(out, s)
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// sessionShape is a session's control plane: its nodes, and its controllers' rate limits.
type sessionShape struct {
	// qps is kube-controller-manager's (0: upstream default), schedulerQPS kube-scheduler's.
	qps, schedulerQPS  int
	nodes, gpusPerNode int
}

// session1 starts a control plane of shape, runs body, and tears everything down.
func session1(ctx context.Context, cfg config, bin binaries, shape sessionShape, body func(context.Context, *bench) error) (*session, error) {
	qps, nodes := shape.qps, shape.nodes
	fmt.Fprintf(os.Stderr, "session: %d nodes of %d GPUs, kube-controller-manager %s\n", nodes, shape.gpusPerNode, qpsLabel(qps))
	c, err := cluster.Start(ctx, cluster.Options{
		Name: "bench", Nodes: nodes, Node: cluster.NodeSpec{GPUs: shape.gpusPerNode}, ControllerManagerQPS: qps, SchedulerQPS: shape.schedulerQPS,
		// kwok's nodes heartbeat every 20–45 s (stages/node-heartbeat.yaml). With a thousand
		// nodes on this machine a heartbeat can come late, and the node lifecycle controller
		// would evict the pods of a node it takes for lost (40 s by default): a fault nobody
		// injected, in the middle of a measurement.
		ExtraArgs:   []string{"kube-controller-manager=node-monitor-grace-period=5m"},
		AuditPolicy: cfg.auditPolicy,
		Logf:        func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
		Setup: func(ctx context.Context, c *cluster.Cluster) error {
			return c.InstallCRDs(ctx, filepath.Join(c.Tools.Root, "deploy", "crd"))
		},
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Stop() }()
	b := &bench{cfg: cfg, bin: bin, c: c, agents: map[string]*cluster.Agent{}, results: &session{qps: qps, nodes: nodes, gpusPerNode: shape.gpusPerNode, schedulerQPS: shape.schedulerQPS}}
	if cfg.auditPolicy != "" {
		defer func() {
			dir, err := c.SaveLogs(filepath.Join(c.Tools.Root, "_output", "bench-logs"))
			fmt.Fprintf(os.Stderr, "session logs: %s %v\n", dir, err)
			if err == nil {
				if b.results.teardowns, err = auditTeardowns(filepath.Join(dir, "audit.log")); err != nil {
					fmt.Fprintf(os.Stderr, "audit log: %v\n", err)
				}
			}
		}()
	}
	defer b.stopAgents()
	if v, err := c.Client.Discovery().ServerVersion(); err == nil {
		b.results.k8s = v.GitVersion
	}
	if b.dsPods, err = c.InstallAgentDaemonSet(ctx, nodes); err != nil {
		return nil, err
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if cfg.gpuQuota {
		if err := createGPUQuota(ctx, c, slices.Max(cfg.sizes)); err != nil {
			return nil, err
		}
	}
	if b.runs, err = client.NewWithWatch(c.Config, client.Options{Scheme: scheme.New()}); err != nil {
		return nil, err
	}
	if b.dyn, err = dynamic.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	if slices.Contains(cfg.systems, flagFaultlineKueue) {
		// Before the controller, whose --kueue=auto turns the integration on when the
		// cluster serves Workloads at its start.
		kq, err := c.StartKueue(ctx, filepath.Join(b.bin.dir, "kueue"), cluster.KueueOptions{ExternalFrameworks: []string{v1alpha1.KueueExternalFramework}})
		if err != nil {
			return nil, err
		}
		defer kq.Stop()
		if err := createBenchQueue(ctx, b.dyn, nodes*shape.gpusPerNode); err != nil {
			return nil, err
		}
	}
	if cfg.inPlace() {
		for i := range nodes {
			if err := c.MakeInPlaceCapable(ctx, cluster.NodeName(i)); err != nil {
				return nil, err
			}
		}
		// The simulated agents go with the session's cluster, not with the whole bench.
		simCtx, stopSim := context.WithCancel(ctx)
		defer stopSim()
		if err := c.SimulateInPlaceWith(simCtx, namespace, cluster.InPlaceSim{RecordsOnHeartbeat: cfg.inPlaceSupervise}); err != nil {
			return nil, err
		}
	}
	if err := b.startController(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = b.ctrl.Process.Kill(); _ = b.ctrl.Wait() }()
	if slices.ContainsFunc(cfg.systems, func(s string) bool { return s == flagJobSet || s == flagJobSetDefault }) {
		js, err := c.StartJobSet(ctx, b.bin.dir)
		if err != nil {
			return nil, err
		}
		defer js.Stop()
	}
	return b.results, body(ctx, b)
}

// benchBarrierImage is the in-place pods' barrier image; kwok runs no container.
const benchBarrierImage = "localhost/faultline/barrier:bench"

// startController runs `launcher controller` for the bench namespace, with its metrics and
// pprof served on free local ports.
func (b *bench) startController(ctx context.Context) error {
	metrics, err := cluster.FreeAddress()
	if err != nil {
		return err
	}
	if b.pprof, err = cluster.FreeAddress(); err != nil {
		return err
	}
	b.ctrl = exec.CommandContext(ctx, b.bin.launcher, "controller", "--kubeconfig", b.c.Kubeconfig, "--namespace", namespace,
		"--leader-elect=false", "--metrics-bind-address", metrics, "--health-probe-bind-address", "0", "--pprof-bind-address", b.pprof,
		"--kube-api-qps", strconv.Itoa(b.cfg.controllerQPS), "--kube-api-burst", strconv.Itoa(b.cfg.controllerBurst()))
	if b.cfg.inPlace() {
		// No container runs it: kwok plays the kubelet (stages/pod-*-barrier.yaml).
		b.ctrl.Args = append(b.ctrl.Args, "--barrier-image", benchBarrierImage)
	}
	logFile, err := os.Create(filepath.Join(b.bin.dir, "controller.log"))
	if err != nil {
		return err
	}
	b.ctrl.Stdout, b.ctrl.Stderr = logFile, logFile
	b.results.metricsAddr = metrics
	return b.ctrl.Start()
}

// systems are the systems under test, in report order.
func (b *bench) systems() []system {
	var out []system
	for _, s := range b.cfg.systems {
		switch s {
		case flagFaultline:
			out = append(out, faultline{runs: b.runs})
		case flagFaultlineKueue:
			out = append(out, faultlineKueue{faultline{runs: b.runs}})
		case flagFaultlineInPlace:
			out = append(out, faultlineInPlace{faultline: faultline{runs: b.runs, mode: v1alpha1.RestartModeInPlace}, supervise: b.cfg.inPlaceSupervise})
		case flagFaultlineSpares:
			// As many spares as a node holds workers: the lost node's indexes all find one.
			out = append(out, faultlineSpares{faultlineInPlace{faultline: faultline{runs: b.runs, mode: v1alpha1.RestartModeInPlace}, supervise: true}})
		case flagJob:
			out = append(out, bareJob{c: b.c})
		case flagJobSet:
			out = append(out, jobSet{dyn: b.dyn, best: true})
		case flagJobSetDefault:
			out = append(out, jobSet{dyn: b.dyn})
		}
	}
	return out
}

// scenarios runs a, b and c for every size, round and system, interleaving the systems so
// that a slow moment of the machine does not land on one of them only.
func (b *bench) scenarios(ctx context.Context) error {
	for _, n := range b.cfg.sizes {
		for r := range b.cfg.rounds {
			fmt.Fprintf(os.Stderr, "%s: %d workers, round %d\n", qpsLabel(b.results.qps), n, r+1)
			if b.cfg.measuresFloor() {
				if err := b.floor(ctx, n, r); err != nil {
					return fmt.Errorf("floor, %d workers: %w", n, err)
				}
			}
			for _, sc := range b.cfg.scenarios {
				for _, s := range b.systems() {
					var err error
					switch sc {
					case scenarioFailFlag:
						if n > b.cfg.failMax {
							continue
						}
						err = b.timeToFail(ctx, s, n, r)
					case scenarioShutdownFlag:
						err = b.profiled(ctx, s, n, r == 0, func() error { return b.timeToRestart(ctx, s, scenarioShutdown, n, r) })
					case scenarioXIDFlag:
						err = b.timeToRestart(ctx, s, scenarioXID, n, r)
					case scenarioHungFlag:
						err = b.timeToRestart(ctx, s, scenarioHung, n, r)
					}
					if err != nil {
						return fmt.Errorf("%s, %s, %d workers: %w", sc, s.name(), n, err)
					}
				}
			}
		}
	}
	return nil
}

func gpuWorker() corev1.PodSpec {
	return corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		// No command: an in-place run's barrier is the init container here. With one it
		// would be the worker's entrypoint, whose open the node agent records on the pod,
		// which the bench's admission policies let only the agent of the pod's node write:
		// the simulated node side (cluster.SimulateInPlace) writes as the cluster's admin.
		// With -inplace-supervise the in-place runs get one (faultlineInPlace.create), and
		// the records go on the nodes' heartbeats.
		Containers: []corev1.Container{{Name: "worker", Image: "trainer:latest", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{v1alpha1.ResourceGPU: resource.MustParse("1")},
		}}},
	}
}

func (b *bench) agentOn(ctx context.Context, node string) (*cluster.Agent, error) {
	if a, ok := b.agents[node]; ok {
		return a, nil
	}
	a, err := b.c.StartAgent(ctx, cluster.AgentOptions{Bin: b.bin.agent, Node: node, DaemonSetPod: b.dsPods[node], Dir: b.bin.dir})
	if err != nil {
		return nil, err
	}
	if b.cfg.inPlace() {
		// The agent wrote, before it was ready, that it has no container runtime (simulated
		// hardware); the bench plays its runtime (cluster.SimulateInPlace).
		if err := b.c.MakeInPlaceCapable(ctx, node); err != nil {
			return nil, err
		}
	}
	b.agents[node] = a
	return a, nil
}

func (b *bench) stopAgents() {
	for node, a := range b.agents {
		a.Stop()
		delete(b.agents, node)
	}
}

// startTraceSink accepts OTLP/HTTP trace exports and drops them, and points this process's
// children (the controller, the agents) at it.
func startTraceSink() (stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// An empty ExportTraceServiceResponse: everything accepted.
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = srv.Serve(l) }()
	for k, v := range map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + l.Addr().String(),
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
	} {
		if err := os.Setenv(k, v); err != nil {
			return nil, err
		}
	}
	return func() { _ = srv.Close() }, nil
}

// The GPU quota, and its name for the GPUs that pods request.
const (
	gpuQuotaName = "gpus"
	gpuQuotaKey  = corev1.ResourceName(corev1.DefaultResourceRequestsPrefix + v1alpha1.ResourceGPU)
)

// createGPUQuota gives the bench namespace a quota of gpus GPUs, and waits until the quota
// controller has counted what the namespace uses: until then, the API server admits no pod.
func createGPUQuota(ctx context.Context, c *cluster.Cluster, gpus int) error {
	q := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: gpuQuotaName, Namespace: namespace},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{gpuQuotaKey: *resource.NewQuantity(int64(gpus), resource.DecimalSI)}},
	}
	if _, err := c.Client.CoreV1().ResourceQuotas(namespace).Create(ctx, q, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the GPU quota: %w", err)
	}
	return waitQuota(ctx, c, func(int64) bool { return true })
}

// waitQuota waits until the quota controller has counted the namespace's GPUs in use, and
// done(the count) holds.
func waitQuota(ctx context.Context, c *cluster.Cluster, done func(used int64) bool) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err := c.WaitResourceQuota(ctx, namespace, gpuQuotaName, func(q *corev1.ResourceQuota) bool {
		used := q.Status.Used[gpuQuotaKey]
		return done(used.Value())
	})
	return err
}
