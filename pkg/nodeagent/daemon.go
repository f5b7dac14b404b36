package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/faultline-dev/faultline/pkg/gpu"
	"github.com/faultline-dev/faultline/pkg/gpu/gpusim"
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
	// GPU configures NVML; GPU.NewLibrary is replaced in simulation.
	GPU gpu.Options
	// ReleaseTimeout bounds how long pod marking may hold a shutdown back.
	ReleaseTimeout time.Duration
	// TaintUnhealthyGPU adds a NoSchedule taint on a fatal GPU fault.
	TaintUnhealthyGPU bool
	// HTTPAddr serves /healthz, /readyz and /metrics ("" disables).
	HTTPAddr string
	// SimulateHardware replaces NVML with gpusim, the kubelet's PodResources with
	// SimulatedOwners, and serves POST /simulate/xid?gpu=N&xid=M. For kwok nodes only.
	SimulateHardware bool
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
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := NewMetrics(reg)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
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

	gpuOpts := cfg.GPU
	gpuOpts.Logger = log
	var sim *gpusim.Server
	var owners GPUOwnerSource
	if cfg.SimulateHardware {
		log.Warn("SIMULATED HARDWARE: GPUs are a go-nvml mock and GPU allocations are guessed from pod specs; never use this on a real node", "node", cfg.Node)
		sim = gpusim.New()
		gpuOpts.NewLibrary = func(string) gpu.Library { return sim }
	} else {
		client, conn, err := DialPodResources(cfg.PodResourcesSocket)
		if err != nil {
			return err
		}
		defer conn.Close()
		owners = &GPUMapper{Lister: client}
	}
	monitor, err := gpu.New(gpuOpts)
	if err != nil {
		return err
	}
	if sim != nil {
		var uuids []string
		for _, d := range monitor.Devices() {
			uuids = append(uuids, d.UUID)
		}
		owners = SimulatedOwners{Pods: pods, UUIDs: uuids}
	}
	agent, err := NewAgent(AgentConfig{Node: cfg.Node, Owners: owners, Writer: writer, Metrics: metrics, Tracing: cfg.Tracing, Clock: clock.RealClock{}, Logger: log})
	if err != nil {
		return err
	}
	inhibitor, err := shutdown.New(shutdown.Config{
		Handler: agent, Dial: shutdown.BusDialer(cfg.DBusAddress),
		ReleaseTimeout: cfg.ReleaseTimeout, Clock: clock.RealClock{}, Logger: log,
	})
	if err != nil {
		return err
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return agent.Run(ctx) })
	g.Go(func() error { return monitor.Run(ctx, agent.OnGPUFault) })
	g.Go(func() error { return inhibitor.Run(ctx) })
	if cfg.HTTPAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			// Ready once the shutdown lock is held: before that a shutdown would go unseen.
			if !inhibitor.Holding() {
				http.Error(w, "logind delay inhibitor lock not held", http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok"))
		})
		if sim != nil {
			mux.HandleFunc("POST /simulate/xid", simulateXID(sim, log))
		}
		g.Go(func() error { return serveHTTP(ctx, cfg.HTTPAddr, mux) })
	}
	log.Info("node agent running", "node", cfg.Node, "gpus", len(monitor.Devices()), "simulated", cfg.SimulateHardware)
	err = g.Wait()
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// simulateXID injects an XID on a simulated GPU: POST /simulate/xid?gpu=3&xid=79.
func simulateXID(sim *gpusim.Server, log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		idx, err1 := strconv.Atoi(r.URL.Query().Get("gpu"))
		xid, err2 := strconv.ParseUint(r.URL.Query().Get("xid"), 10, 64)
		if err := errors.Join(err1, err2); err != nil || idx < 0 || idx >= len(sim.Devices) {
			http.Error(w, fmt.Sprintf("want ?gpu=<0..%d>&xid=<n>", len(sim.Devices)-1), http.StatusBadRequest)
			return
		}
		log.Warn("SIMULATED XID injected", "gpu", idx, "xid", xid)
		sim.InjectXID(idx, xid)
		w.WriteHeader(http.StatusAccepted)
	}
}

func serveHTTP(ctx context.Context, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
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
