package nodeagent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/clock"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/gpu"
	"github.com/faultline-dev/faultline/pkg/gpu/gpusim"
	"github.com/faultline-dev/faultline/pkg/nodeagent/heartbeat"
	"github.com/faultline-dev/faultline/pkg/nodeagent/inplace"
	"github.com/faultline-dev/faultline/pkg/nodeagent/listen"
	"github.com/faultline-dev/faultline/pkg/shutdown"
	"github.com/faultline-dev/faultline/pkg/tracing"
)

// DaemonConfig is everything the node agent process needs; cmd/nodeagent fills it from flags.
type DaemonConfig struct {
	Client Kube
	Node   string
	// PodResourcesSocket is the kubelet's PodResources socket.
	PodResourcesSocket string
	// DBusAddress is the system bus ("" = the default system bus).
	DBusAddress string
	// CRIEndpoint is the container runtime's CRI socket ("unix:///path"), through which the
	// agent restarts its node's pods in place (pkg/nodeagent/inplace); "" finds it under
	// HostRoot (inplace.RuntimeSockets); inplace.EndpointNone, none found, or a runtime that
	// does not answer leaves the node without in-place restarts, never the agent down.
	CRIEndpoint string
	// HostRoot is the node's root as the agent sees it (the DaemonSet mounts it read-only at
	// /host), under which it finds the NVIDIA driver and the CRI socket.
	HostRoot string
	// GPU configures NVML; GPU.NewLibrary is replaced in simulation.
	GPU gpu.Options
	// ReleaseTimeout bounds how long pod marking may hold a shutdown back (the marks go on
	// after it).
	ReleaseTimeout time.Duration
	// TaintUnhealthyGPU adds a NoSchedule taint on a fatal GPU fault.
	TaintUnhealthyGPU bool
	// HTTPAddr serves /healthz, /readyz and /metrics ("" disables).
	HTTPAddr string
	// BarrierRecordsOnHeartbeat keeps the barrier records of the node's pods on the
	// heartbeat Lease (heartbeat.Records: one write for the node's pods at once) rather
	// than on each pod (Writer.RecordBarrier).
	BarrierRecordsOnHeartbeat bool
	// HeartbeatInterval is how often the agent renews its heartbeat Lease (zero:
	// agentlease.RenewInterval); a renewal holds for four intervals.
	HeartbeatInterval time.Duration
	// PodLogDir is the kubelet's pod log directory, where the progress watch reads when each
	// worker last wrote ("": DefaultPodLogDir).
	PodLogDir string
	// TEST ONLY. SimulateHardware replaces NVML with gpusim and the kubelet's PodResources
	// with SimulatedOwners: for kwok nodes, which have neither.
	SimulateHardware bool
	// TEST ONLY. SimulateGPUs replaces NVML with gpusim GPUs of these UUIDs, and keeps the
	// kubelet's real PodResources: for the test substrate's real nodes, whose kubelet hands
	// out these GPUs through a fake device plugin.
	SimulateGPUs []string
	// TEST ONLY. SimulateAddr, in a simulation mode only, serves POST
	// /simulate/xid?gpu=N|uuid=U&xid=M on a listener of its own, which must be a loopback
	// address: nobody but a test on the same machine may inject faults ("" serves none).
	SimulateAddr string
	// Tracing records the detect span of each fault episode (nil: none).
	Tracing *tracing.Provider
	Logger  *slog.Logger
}

// RunDaemon runs the node agent until ctx is done.
func RunDaemon(ctx context.Context, cfg DaemonConfig) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Node == "" {
		return errors.New("node name is empty: set --node-name (the DaemonSet passes spec.nodeName as NODE_NAME)")
	}
	if err := cfg.checkSimulation(); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := NewMetrics(reg)

	// asked ends when the agent is asked to stop (SIGTERM: its cause names the signal), as
	// opposed to a component that fails and stops the others.
	asked := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Served from the start: the liveness probe asks whether the process lives, which it does
	// while its start waits (the TrainingRuns' first list alone may take 20 s, then NVML and
	// logind, longer on a loaded node: a probe that failed all that time had the kubelet
	// restart a healthy agent mid-start). Ready only once the shutdown lock is held.
	var inhibitor atomic.Pointer[shutdown.Inhibitor]
	httpErr := make(chan error, 1)
	if cfg.HTTPAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			// Ready once the shutdown lock is held: before that a shutdown would go unseen.
			if i := inhibitor.Load(); i == nil || !i.Holding() {
				http.Error(w, "logind delay inhibitor lock not held", http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok"))
		})
		ln, err := listen.TCP("--http-address", cfg.HTTPAddr, log)
		if err != nil {
			return err
		}
		httpDone := make(chan struct{})
		go func() {
			defer close(httpDone)
			httpErr <- serve(ctx, ln, mux)
		}()
		defer func() { cancel(); <-httpDone }()
	}
	// Bound now, before the agent takes its lock, as the main listener: an address taken
	// fails the start, not a running agent.
	var simLn net.Listener
	if cfg.SimulateAddr != "" {
		var err error
		if simLn, err = listen.TCP("--simulate-address", cfg.SimulateAddr, log); err != nil {
			return err
		}
		defer simLn.Close()
	}
	podInformer := NodePodInformer(cfg.Client, cfg.Node, 0)
	pods := corelisters.NewPodLister(podInformer.GetIndexer())
	informerDone := make(chan struct{})
	go func() {
		defer close(informerDone)
		podInformer.RunWithContext(ctx)
	}()
	defer func() {
		cancel() // the informer stops with ctx, also when RunDaemon returns an error early
		<-informerDone
	}()
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.HasSynced) {
		return fmt.Errorf("sync the cache of the pods on node %s: %w", cfg.Node, context.Cause(ctx))
	}
	// The heartbeat first: it says an agent is on this node while the rest starts (a wait
	// for the TrainingRuns can take 20 s). It lasts as long as the agent.
	var hb *heartbeat.Heartbeat
	if leases, ok := cfg.Client.(heartbeat.Leases); ok {
		hb = heartbeat.New(heartbeat.Config{Client: leases, Node: cfg.Node, Interval: cfg.HeartbeatInterval, Logger: log})
		heartbeatDone := make(chan struct{})
		go func() {
			defer close(heartbeatDone)
			hb.Run(ctx)
		}()
		defer func() { cancel(); <-heartbeatDone }()
	} else {
		log.Warn("no heartbeat: the agent's client cannot write Leases; the controller takes this node's agent for gone")
	}
	writer, err := NewWriter(WriterConfig{
		Client: cfg.Client, Node: cfg.Node, Pods: pods, TaintUnhealthyGPU: cfg.TaintUnhealthyGPU,
		Metrics: metrics, Clock: clock.RealClock{}, Logger: log,
	})
	if err != nil {
		return err
	}
	if err := ForgetDeletedPods(podInformer, writer, log); err != nil {
		return err
	}

	// Before readiness: whoever sees the agent ready can read whether it restarts in place.
	restarter, reason, message := dialRestarter(ctx, cfg.CRIEndpoint, cfg.HostRoot, log)
	// A runtime that sends no container events is found once the exit watcher subscribes:
	// the node then says it cannot restart in place, after (never before) the start's word.
	marked := make(chan struct{})
	caps := &capabilities{holding: func() bool { i := inhibitor.Load(); return i != nil && i.Holding() }}
	noExits := func(err error) {
		<-marked
		msg := "the container runtime sends no container events (CRI GetContainerEvents), so a worker's own exit could not be reported: " + err.Error()
		caps.setInPlace(false, v1alpha1.InPlaceReasonNoExitEvents, msg)
		if err := writer.MarkInPlaceReady(ctx, false, v1alpha1.InPlaceReasonNoExitEvents, msg, time.Now()); err != nil {
			log.Warn("the node's in-place readiness is not written", "error", err)
		}
	}
	// The node's pods as read with the barrier records this agent keeps on its heartbeat:
	// which attempt each supervised worker runs, and since when (its incarnation).
	recorded := corelisters.PodLister(pods)
	// The node's workers asked to save on notice (spec.checkpoint): nil without in-place
	// restarts, whose barriers are how they are asked.
	var checkpoints *inplace.Checkpointer
	if restarter != nil {
		defer restarter.Close()
		// A barrier in the worker container is opened once recorded: on each pod, or on
		// the heartbeat, the node's pods in one write.
		restarter.Records = writer
		var recordsErr error
		if hb != nil && cfg.BarrierRecordsOnHeartbeat {
			records := heartbeat.NewRecords(hb, cfg.Client, cfg.Node, pods, log.With("component", "barrier-records"))
			restarter.Records, recorded = records, records.Lister(pods)
			// Read before the loop reads a pod: an agent started again mid-restart goes on
			// from the records its predecessor wrote, not from the pods' own.
			lctx, cancel := context.WithTimeout(ctx, runsSyncTimeout)
			recordsErr = records.Load(lctx)
			cancel()
		}
		runs, ok := cfg.Client.(Runs)
		err := recordsErr
		if ok && err == nil {
			checkpoints, err = runInPlace(ctx, runs, restarter, podInformer, recorded, writer, noExits, podStops(writer), cfg.Node, cfg.Tracing, log)
		}
		if !ok {
			restarter, reason, message = nil, v1alpha1.InPlaceReasonNoRuntime, "the agent's client cannot read TrainingRuns"
		} else if err != nil {
			// Soft, as a missing runtime: this node's pods are then recreated, never
			// held at a barrier nobody opens.
			log.Warn("no in-place restarts on this node", "error", err)
			restarter, reason, message = nil, v1alpha1.InPlaceReasonNoRuntime, err.Error()
		}
	}
	caps.setInPlace(restarter != nil, reason, message)
	if err := writer.MarkInPlaceReady(ctx, restarter != nil, reason, message, time.Now()); err != nil {
		// Soft too: with no condition, the controller recreates this node's pods.
		log.Warn("the node's in-place readiness is not written", "error", err)
	}
	close(marked)

	gpuOpts := cfg.GPU
	gpuOpts.HostRoot = cfg.HostRoot
	gpuOpts.Logger = log
	var sim *gpusim.Server
	var owners GPUOwnerSource
	switch {
	case cfg.SimulateHardware:
		log.Warn("SIMULATED HARDWARE: GPUs are a go-nvml mock and GPU allocations are guessed from pod specs; never use this on a real node", "node", cfg.Node)
		sim = gpusim.New()
	case len(cfg.SimulateGPUs) > 0:
		log.Warn("SIMULATED GPUS: NVML is a go-nvml mock of these GPUs; allocations come from the kubelet's PodResources; test substrate only", "node", cfg.Node, "gpus", cfg.SimulateGPUs)
		if sim, err = gpusim.NewWithUUIDs(cfg.SimulateGPUs); err != nil {
			return fmt.Errorf("--simulate-gpus: %w", err)
		}
	}
	if sim != nil {
		gpuOpts.NewLibrary = func(string) gpu.Library { return sim }
		// The mock stands for the library wherever --driver-root points.
		gpuOpts.LibraryPath = "simulated"
	}
	var slices *SliceWatch // the node's ResourceSlices, where there is hardware
	if !cfg.SimulateHardware {
		client, conn, err := DialPodResources(cfg.PodResourcesSocket)
		if err != nil {
			return err
		}
		defer conn.Close()
		// GPUs a DRA driver allocated are mapped through their ResourceSlices' UUIDs, which
		// one watch of the node's slices holds.
		slices = NewSliceWatch(cfg.Client, cfg.Node)
		go slices.Run(ctx)
		owners = &GPUMapper{Lister: client, DRA: slices}
		caps.podResources = func(ctx context.Context) error {
			_, err := client.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
			return err
		}
		caps.draSlices = func(context.Context) error { return slices.Err() }
	}
	monitor, err := gpu.New(gpuOpts)
	if err != nil {
		return err
	}
	caps.monitor, caps.simulated = monitor, sim != nil
	if cfg.SimulateHardware {
		var uuids []string
		for _, d := range monitor.Devices() {
			uuids = append(uuids, d.UUID)
		}
		owners = SimulatedOwners{Pods: pods, UUIDs: uuids}
	}
	ac := AgentConfig{Node: cfg.Node, Owners: owners, Writer: writer, Metrics: metrics, Tracing: cfg.Tracing, Clock: clock.RealClock{}, Logger: log,
		CheckpointWait: cfg.ReleaseTimeout}
	if checkpoints != nil && restarter != nil {
		ac.Checkpoints = checkpoints
	}
	agent, err := NewAgent(ac)
	if err != nil {
		return err
	}
	// The kubelet's own word on its workers' devices (device plugin or DRA), attested.
	if err := agent.WatchDeviceHealth(podInformer); err != nil {
		return err
	}
	if slices != nil {
		// DRA drivers' and administrators' taints on the GPUs the workers hold, attested.
		go agent.WatchDeviceTaints(ctx, slices, cfg.Client)
	}
	inh, err := shutdown.New(shutdown.Config{
		Handler: agent, Dial: shutdown.BusDialer(cfg.DBusAddress),
		ReleaseTimeout: cfg.ReleaseTimeout, Clock: clock.RealClock{}, Logger: log,
	})
	if err != nil {
		return err
	}
	inhibitor.Store(inh)

	// The runs' progress deadlines (the workers' annotation): a worker silent that long is
	// said so on its pod.
	progress, err := NewProgressWatch(ProgressConfig{Node: cfg.Node, Pods: recorded, Writer: writer, LogDir: cfg.PodLogDir, Logger: log})
	if err != nil {
		return err
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return agent.Run(ctx) })
	g.Go(func() error { progress.Run(ctx); return nil })
	g.Go(func() error { return monitor.Run(ctx, agent.OnGPUFault) })
	g.Go(func() error { return inh.Run(ctx) })
	if hb != nil {
		g.Go(func() error {
			publishCapabilities(ctx, hb, caps, cmp.Or(cfg.HeartbeatInterval, agentlease.RenewInterval), log.With("component", "capabilities"))
			return nil
		})
	}
	g.Go(func() error {
		WatchResets(ctx, cfg.Client, cfg.Node, agent.ResetRequested, log)
		return nil
	})
	if cfg.HTTPAddr != "" {
		g.Go(func() error {
			select {
			case err := <-httpErr:
				return err
			case <-ctx.Done():
				return nil
			}
		})
	}
	if sim != nil && simLn != nil {
		// Apart from the main listener, which a DaemonSet exposes on the pod network.
		mux := http.NewServeMux()
		mux.HandleFunc("POST /simulate/xid", simulateXID(sim, log))
		mux.HandleFunc("POST /simulate/health", simulateHealth(sim, log))
		g.Go(func() error { return serve(ctx, simLn, mux) })
		log.Warn("SIMULATION endpoint serving (test only)", "address", simLn.Addr().String())
	}
	log.Info("node agent running", "node", cfg.Node, "gpus", len(monitor.Devices()),
		"simulatedHardware", cfg.SimulateHardware, "simulatedGPUs", len(cfg.SimulateGPUs) > 0)
	err = stopped(asked, cfg.Node, g.Wait())
	if err == nil {
		log.Info("node agent stopped", "node", cfg.Node, "why", context.Cause(asked).Error())
	}
	return err
}

// stopped is how the agent ends once its components returned err: cleanly when it was asked
// to stop (asked ended), whatever they returned on their way out; else with their error. A
// component that fails, even with an error that wraps context.Canceled, never ends the agent
// with exit 0, which reads as a SIGTERM.
func stopped(asked context.Context, node string, err error) error {
	if asked.Err() != nil {
		return nil
	}
	if err == nil {
		err = errors.New("every component stopped on its own")
	}
	return fmt.Errorf("node agent on %s stopped: %w", node, err)
}

// dialRestarter connects to the node's container runtime for in-place restarts, and says
// why not (the reason and message of the node's InPlaceReady condition). It fails soft, as
// a missing GPU library does: a node whose runtime the agent cannot reach restarts its pods
// the recreate way, and the agent goes on with everything else.
func dialRestarter(ctx context.Context, endpoint, hostRoot string, log *slog.Logger) (r *inplace.Restarter, reason, message string) {
	switch endpoint {
	case inplace.EndpointNone:
		log.Info("in-place restart off on this node: --cri-endpoint=" + inplace.EndpointNone)
		return nil, v1alpha1.InPlaceReasonNoRuntime, "the node agent was told to use no container runtime (--cri-endpoint=" + inplace.EndpointNone + ")"
	case "":
		var tried []string
		if endpoint, tried = inplace.FindEndpoint(hostRoot); endpoint == "" {
			msg := "no CRI socket found (looked in " + strings.Join(tried, ", ") + "); --cri-endpoint names one"
			log.Info("in-place restart off on this node: " + msg)
			return nil, v1alpha1.InPlaceReasonNoRuntime, msg
		}
	}
	r, v, err := inplace.Dial(ctx, endpoint, log)
	if err != nil {
		log.Warn("in-place restart off on this node: the container runtime cannot be reached", "endpoint", endpoint, "error", err)
		return nil, v1alpha1.InPlaceReasonNoRuntime, err.Error()
	}
	log.Info("in-place restart available", "endpoint", endpoint, "runtime", v.RuntimeName, "runtimeVersion", v.RuntimeVersion)
	return r, v1alpha1.InPlaceReasonRuntimeReady, fmt.Sprintf("%s %s at %s", v.RuntimeName, v.RuntimeVersion, endpoint)
}

// checkSimulation refuses simulation settings that do not go together, and a simulation
// endpoint anyone but this machine could reach.
func (cfg DaemonConfig) checkSimulation() error {
	if cfg.SimulateHardware && len(cfg.SimulateGPUs) > 0 {
		return errors.New("--simulate-hardware and --simulate-gpus exclude each other: the first is for kwok nodes (no kubelet), the second for real nodes with fake GPUs")
	}
	if cfg.SimulateAddr == "" {
		return nil
	}
	if !cfg.SimulateHardware && len(cfg.SimulateGPUs) == 0 {
		return fmt.Errorf("--simulate-address %s: there is nothing to simulate without --simulate-hardware or --simulate-gpus", cfg.SimulateAddr)
	}
	return CheckLoopback(cfg.SimulateAddr)
}

// CheckLoopback refuses an address (host:port) whose host is not a loopback IP: the
// simulation endpoint injects faults unauthenticated.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--simulate-address %q: %w (want 127.0.0.1:PORT or [::1]:PORT)", addr, err)
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		return fmt.Errorf("--simulate-address %q: not a loopback address (want 127.0.0.1:PORT or [::1]:PORT): it injects faults without authentication", addr)
	}
	return nil
}

// simulateXID injects an XID on a simulated GPU, chosen by index or by UUID:
// POST /simulate/xid?gpu=3&xid=79 or ?uuid=GPU-…&xid=79.
func simulateXID(sim *gpusim.Server, log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		idx, err1 := strconv.Atoi(q.Get("gpu"))
		if u := q.Get("uuid"); u != "" {
			idx, err1 = sim.IndexOf(u), nil
		}
		xid, err2 := strconv.ParseUint(q.Get("xid"), 10, 64)
		if err := errors.Join(err1, err2); err != nil || idx < 0 || idx >= sim.Count() {
			http.Error(w, fmt.Sprintf("want ?gpu=<0..%d>&xid=<n> or ?uuid=<one of this node's GPUs>&xid=<n>", sim.Count()-1), http.StatusBadRequest)
			return
		}
		log.Warn("SIMULATED XID injected", "gpu", idx, "uuid", sim.Device(idx).UUID, "xid", xid)
		sim.InjectXID(idx, xid)
		w.WriteHeader(http.StatusAccepted)
	}
}

// simulateHealth makes a simulated GPU lost, or healthy again, for the health poll:
// POST /simulate/health?gpu=3&lost=true (or false).
func simulateHealth(sim *gpusim.Server, log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		idx, err1 := strconv.Atoi(q.Get("gpu"))
		lost, err2 := strconv.ParseBool(q.Get("lost"))
		if err := errors.Join(err1, err2); err != nil || idx < 0 || idx >= sim.Count() {
			http.Error(w, fmt.Sprintf("want ?gpu=<0..%d>&lost=<true|false>", sim.Count()-1), http.StatusBadRequest)
			return
		}
		ret := nvml.SUCCESS
		if lost {
			ret = nvml.ERROR_GPU_IS_LOST
		}
		log.Warn("SIMULATED GPU health", "gpu", idx, "lost", lost)
		sim.GPUs[idx].LostRet.Store(int32(ret))
		w.WriteHeader(http.StatusAccepted)
	}
}

// serve serves h on ln until ctx is done.
func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
