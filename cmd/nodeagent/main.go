// Command nodeagent is faultline's per-node DaemonSet: it turns logind shutdown
// announcements and NVML GPU faults into evidence on the node's training pods before they
// fail. It only wires flags to pkg/nodeagent.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/attribute"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/coreclient"
	"github.com/faultline-dev/faultline/pkg/nodeagent"
	"github.com/faultline-dev/faultline/pkg/nodeagent/inplace"
	"github.com/faultline-dev/faultline/pkg/shutdown"
	"github.com/faultline-dev/faultline/pkg/tracing"
	"github.com/faultline-dev/faultline/pkg/version"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "nodeagent:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	cfg := nodeagent.DaemonConfig{}
	var kubeconfig string
	cmd := &cobra.Command{
		Use:           "nodeagent",
		Short:         "Mark training pods with node fault evidence before they fail",
		Version:       version.Version,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
			simulating := cfg.SimulateHardware || len(cfg.SimulateGPUs) > 0 || cfg.SimulateAddr != ""
			if simulating && kubeconfig == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
				// In a pod of the DaemonSet the simulation would hide every real fault.
				return errors.New("--simulate-hardware, --simulate-gpus and --simulate-address are for tests run outside the cluster; they are refused in-cluster")
			}
			// --kubeconfig, else $KUBECONFIG, else in-cluster, else ~/.kube/config.
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			rules.ExplicitPath = kubeconfig
			rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
			if err != nil {
				return fmt.Errorf("load kubeconfig: %w", err)
			}
			rc.QPS, rc.Burst = 200, 400 // a shutdown marks up to 110 pods at once, one write each
			if cfg.Client, err = coreclient.New(rc); err != nil {
				return err
			}
			cfg.Logger = log
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			tp, err := tracing.Setup(ctx, tracing.Options{
				ServiceName: tracing.ServiceAgent,
				Attributes:  []attribute.KeyValue{tracing.KeyNode.String(cfg.Node)},
				Logger:      log,
			})
			if err != nil {
				log.Warn("tracing is off: its configuration is invalid", "error", err)
			}
			defer func() {
				// Bounded (tracing.ShutdownTimeout): the node may be shutting down.
				if err := tp.Shutdown(context.Background()); err != nil {
					log.Warn("spans lost at exit", "error", err)
				}
			}()
			cfg.Tracing = tp
			return nodeagent.RunDaemon(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "path to a kubeconfig (default: in-cluster)")
	f.StringVar(&cfg.Node, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	f.StringVar(&cfg.PodResourcesSocket, "pod-resources-socket", nodeagent.DefaultPodResourcesSocket, "the kubelet's PodResources API socket")
	f.StringVar(&cfg.PodLogDir, "pod-log-dir", nodeagent.DefaultPodLogDir, "the kubelet's pod log directory (its podLogsDir), mounted into the agent: where the progress watch reads when each worker last wrote; a worker whose log cannot be read there has progress Unknown, never silence")
	f.StringVar(&cfg.CRIEndpoint, "cri-endpoint", "", `the container runtime's CRI socket (unix:///path), for restarts in place ("": containerd's /run/containerd/containerd.sock, then CRI-O's /var/run/crio/crio.sock or /run/crio/crio.sock, under --host-root; "`+inplace.EndpointNone+`", none found or unreachable: no restarts in place on this node)`)
	f.StringVar(&cfg.DBusAddress, "dbus-address", os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"), "system bus address (default $DBUS_SYSTEM_BUS_ADDRESS, else the standard socket)")
	f.StringVar(&cfg.GPU.LibraryPath, "nvml-library", "", "path of libnvidia-ml.so.1 (default: found under --driver-root)")
	f.StringVar(&cfg.GPU.DriverRoot, "driver-root", "", `root of the NVIDIA driver installation, as the agent sees it: the only place libnvidia-ml.so.1 is looked for ("": the GPU Operator's /run/nvidia/driver, the host's library directories, then GKE's /home/kubernetes/bin/nvidia, under --host-root, then the dynamic loader)`)
	f.StringVar(&cfg.HostRoot, "host-root", "/", "the node's root as the agent sees it, where it looks for the NVIDIA driver and the CRI socket (the DaemonSet mounts it read-only at /host)")
	f.BoolVar(&cfg.GPU.RequireGPU, "require-gpu", false, "exit when NVML cannot be loaded instead of running without GPU monitoring")
	f.DurationVar(&cfg.GPU.HealthInterval, "gpu-health-interval", 10*time.Second, "period of the GPU health poll")
	f.DurationVar(&cfg.ReleaseTimeout, "release-timeout", shutdown.DefaultReleaseTimeout, "longest a shutdown is held back while pods are marked (keep below logind's InhibitDelayMaxSec); marks not in by then go on after the release")
	f.BoolVar(&cfg.BarrierRecordsOnHeartbeat, "barrier-records-on-heartbeat", true, "keep the barrier records of the node's pods (which attempt each worker container was opened for, or stopped for) on the agent's heartbeat Lease, the node's pods in one write, instead of one write on each pod; the controller reads both, and must be of a release that reads the heartbeat's (faultline.dev/barrier-records, since 2026-12-04): upgrade the controller first (docs/deploy.md#upgrading), or set false until it is")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", agentlease.RenewInterval, "how often the agent renews its heartbeat Lease (a renewal holds for four): the controller's sign that the agent is on the node")
	f.BoolVar(&cfg.TaintUnhealthyGPU, "taint-unhealthy-gpu", false, "also taint a node NoSchedule after a fatal GPU fault")
	f.StringVar(&cfg.HTTPAddr, "http-address", ":8082", `address of /healthz, /readyz and /metrics ("" disables)`)
	f.BoolVar(&cfg.SimulateHardware, "simulate-hardware", false, "TEST ONLY (kwok nodes): mock NVML and GPU allocations guessed from pod specs")
	f.StringSliceVar(&cfg.SimulateGPUs, "simulate-gpus", nil, "TEST ONLY (real nodes with a fake device plugin): mock NVML with GPUs of these UUIDs; allocations from the kubelet's PodResources")
	f.StringVar(&cfg.SimulateAddr, "simulate-address", "", "TEST ONLY: loopback address (127.0.0.1:PORT) of POST /simulate/xid?gpu=N|uuid=U&xid=M, with --simulate-hardware or --simulate-gpus")
	return cmd
}
