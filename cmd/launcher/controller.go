package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/attribute"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/barrier"
	"github.com/faultline-dev/faultline/pkg/cli"
	"github.com/faultline-dev/faultline/pkg/controller"
	"github.com/faultline-dev/faultline/pkg/controller/plannedmove"
	"github.com/faultline-dev/faultline/pkg/election"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/kueue"
	"github.com/faultline-dev/faultline/pkg/maintenance"
	"github.com/faultline-dev/faultline/pkg/memlimit"
	"github.com/faultline-dev/faultline/pkg/sandbox"
	"github.com/faultline-dev/faultline/pkg/tracing"
	"github.com/faultline-dev/faultline/pkg/version"
)

const flagNodeMaintenanceSelector = "node-maintenance-selector"

func newControllerCommand(env *cli.Env) *cobra.Command {
	opts := controller.Options{}
	var crashAt string
	var qps float32
	var burst int
	var nmSelector string
	var kueueMode string
	var nodeConditions []string
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the in-cluster TrainingRun controller",
		Long: `Run the TrainingRun controller: what the Deployment of ` + "`launcher install`" + ` runs, one replica
leading through a Lease. It takes kubectl's connection flags (--kubeconfig, --context,
--cluster, --server, --token, --as); without them it runs with its pod's ServiceAccount, or
KUBECONFIG's cluster. Outside a cluster there is no pod namespace for the Lease: pass --leader-election-namespace (` + election.InstallNamespace + ` to stand by beside the installed
controller), or --leader-elect=false where no other faultline controller acts on the cluster.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if qps <= 0 || burst <= 0 {
				// client-go would read 0 as its own default (QPS 5) and a negative QPS as no limit.
				return fmt.Errorf("--kube-api-qps (%g) and --kube-api-burst (%d) must be positive", qps, burst)
			}
			if kubeconfig := ptr.Deref(env.Flags.KubeConfig, ""); kubeconfig != "" {
				// Without this, a mistyped path reaches client-go as an empty configuration,
				// whose error speaks of KUBERNETES_MASTER.
				if _, err := os.Stat(kubeconfig); err != nil {
					return fmt.Errorf("--kubeconfig: %w", err)
				}
			}
			leaseNS, err := election.LeaseNamespace(election.Config{
				Enabled: opts.LeaderElection, LeaseNamespace: opts.LeaderElectionNamespace, WatchNamespace: opts.Namespace,
			}, election.PodNamespace)
			if err != nil {
				return err
			}
			opts.LeaderElectionNamespace = leaseNS
			if opts.NodeMaintenances, err = plannedmove.NodeMaintenanceSelector(opts.Namespace, nmSelector, cmd.Flags().Changed(flagNodeMaintenanceSelector)); err != nil {
				return err
			}
			for _, c := range nodeConditions {
				r, err := exitclass.ParseNodeConditionRule(c)
				if err != nil {
					return cli.UsageError("--node-condition-evidence: %v", err)
				}
				opts.NodeConditions = append(opts.NodeConditions, r)
			}
			logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
			ctrl.SetLogger(logr.FromSlogHandler(logger.Handler()))
			if !opts.LeaderElection {
				// First, so that whoever reads the log of a controller that doubles another's
				// restarts finds why at its top.
				logger.Warn("leader election is off (--" + election.FlagLeaderElect + "=false): this controller acts on every TrainingRun it watches; no other faultline controller may act on this cluster")
			} else {
				logger.Info("leader election on: acting only while holding the Lease", "namespace", leaseNS, "lease", controller.LeaderElectionID)
			}
			if soft, err := memlimit.FromEnv(); err != nil {
				logger.Warn("no soft memory limit", "error", err)
			} else if soft > 0 {
				logger.Info("soft memory limit from the container's", "bytes", soft, "share", memlimit.Share)
			}
			// kubectl's flags, as every command of the launcher reads them: in a pod without
			// any, its ServiceAccount (client-go's in-cluster configuration).
			cfg, err := env.Flags.ToRESTConfig()
			if err != nil {
				// client-go's own words ("try setting KUBERNETES_MASTER") name no way a
				// controller is meant to be run.
				const how = "the controller runs in a pod of the cluster (`launcher install` deploys it), " +
					"or outside one with --kubeconfig or KUBECONFIG naming the cluster's kubeconfig"
				if clientcmd.IsEmptyConfig(err) {
					return cli.UsageError("no cluster to control: %s", how)
				}
				return cli.UsageError("load the kubeconfig: %v (%s)", err, how)
			}
			cfg.QPS, cfg.Burst = qps, burst
			dc, err := discovery.NewDiscoveryClientForConfig(cfg)
			if err != nil {
				return err
			}
			if opts.Kueue, err = kueue.Enabled("kueue", kueueMode, func() (bool, error) { return kueue.Served(dc) }); err != nil {
				return err
			}
			logger.Info("Kueue integration", "on", opts.Kueue, "mode", kueueMode)
			opts.Plugins.Logger = logger
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find this binary, which starts the framework plugins: %w", err)
			}
			if opts.Plugins.PluginDir == "" {
				opts.Plugins.PluginDir = filepath.Dir(exe) // where `make build` puts the plugins
			}
			// Each plugin starts confined: it never holds this controller's token.
			opts.Plugins.Command = sandbox.Command(exe)
			if abi, err := sandbox.Supported(); err != nil {
				logger.Warn("framework plugins run unconfined: they can read this controller's ServiceAccount token", "reason", err.Error())
			} else {
				logger.Info("framework plugins run confined", "landlockABI", abi)
			}
			if crashAt != "" {
				logger.Warn("test crash point armed: this controller kills itself on purpose", "point", crashAt)
				opts.Crash = func(point string) {
					if point == crashAt {
						logger.Warn("crash point reached, SIGKILL", "point", point)
						_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
					}
				}
			}
			ctx := ctrl.SetupSignalHandler()
			var where []attribute.KeyValue
			if opts.Namespace != "" {
				where = append(where, tracing.KeyNamespace.String(opts.Namespace))
			}
			tp, err := tracing.Setup(ctx, tracing.Options{ServiceName: tracing.ServiceController, Attributes: where, Logger: logger})
			if err != nil {
				logger.Warn("tracing is off: its configuration is invalid", "error", err)
			}
			defer func() {
				if err := tp.Shutdown(context.Background()); err != nil {
					logger.Warn("spans lost at exit", "error", err)
				}
			}()
			opts.Tracing = tp
			return controller.Run(ctx, cfg, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Namespace, election.FlagNamespace, "", "watch only this namespace (default: all)")
	f.BoolVar(&opts.LeaderElection, election.FlagLeaderElect, true, "elect a leader among replicas through a Lease (false: only where no other faultline controller acts on the cluster)")
	f.StringVar(&opts.LeaderElectionNamespace, election.FlagLeaseNamespace, "", "namespace of the leader Lease (default: --namespace, or the pod's own; outside a cluster one of them is required, e.g. "+election.InstallNamespace+" to stand by beside the installed controller)")
	f.StringVar(&opts.MetricsAddr, "metrics-bind-address", ":8080", `Prometheus metrics address ("0" disables)`)
	f.StringVar(&opts.ProbeAddr, "health-probe-bind-address", ":8081", `healthz/readyz address ("0" disables)`)
	f.StringVar(&opts.PprofAddr, "pprof-bind-address", "0", `net/http/pprof address, for profiling ("0" disables)`)
	f.Float32Var(&qps, "kube-api-qps", controller.DefaultKubeAPIQPS, "requests a second to the API server, over the burst")
	f.IntVar(&burst, "kube-api-burst", controller.DefaultKubeAPIBurst, "requests to the API server at once before --kube-api-qps applies")
	f.IntVar(&opts.Workers, "workers", controller.DefaultWorkers, "runs reconciled concurrently")
	f.StringVar(&opts.Plugins.PluginDir, "plugin-dir", "", "directory searched for framework plugins (faultline-plugin-<framework>) before PATH (default: this binary's directory)")
	f.DurationVar(&opts.Plugins.CallTimeout, "plugin-call-timeout", framework.DefaultCallTimeout, "deadline of every call to a framework plugin; a plugin that misses it is killed")
	f.StringVar(&opts.BarrierImage, "barrier-image", barrier.Image(version.Version), `faultline-barrier's image, the init container of workers that restart in place (docs/in-place-restart.md): a mirror's for a cluster that cannot pull it; "" turns restarts in place off (every gang restart recreates its pods)`)
	f.BoolVar(&opts.BarrierInWorker, "barrier-in-worker", true, "make the barrier the worker container's own entrypoint (from an image volume of --barrier-image) where the run's template has one container with a command and every node it may use mounts image volumes (containerd 2.1+, CRI-O 1.31+, as the kubelet reports its runtime), instead of an init container; it stays with the worker as its child, and a restart in place ends the worker and every process it left through the barrier and runs it again in the same container, with no container restart (the container's writable layer carries over between attempts); false: always the init container")
	opts.Maintenance = maintenance.DefaultConfig()
	f.StringVar(&nmSelector, flagNodeMaintenanceSelector, "", "act on the NodeMaintenances this label selector matches (default: every one when watching all namespaces, none with --namespace, which sees only that namespace's runs)")
	f.BoolVar(&opts.Maintenance.Cordon, "maintenance-cordon", opts.Maintenance.Cordon, "move runs off a cordoned node (spec.unschedulable or the node.kubernetes.io/unschedulable taint), or one tainted karpenter.sh/disrupted or ToBeDeletedByClusterAutoscaler, as a planned maintenance, before its drain evicts them")
	f.DurationVar(&opts.Maintenance.Lead, "maintenance-lead", opts.Maintenance.Lead, "move runs off a node this long before the maintenance GKE scheduled for it (cloud.google.com/scheduled-maintenance-time)")
	f.StringSliceVar(&nodeConditions, "node-condition-evidence", defaultNodeConditions(), "node conditions of the cluster's own GPU health checker, each TYPE[=STATUS][:CAUSE] (status True, cause GPUFault unless given), that are infrastructure evidence for the workers of their node when set while a worker ran (default: NVSentinel's fatal GPU checks); empty: none")
	f.StringSliceVar(&opts.Maintenance.Conditions, "maintenance-conditions", opts.Maintenance.Conditions, "node condition types that, status True, announce a planned maintenance (e.g. NVSentinel's)")
	f.StringVar(&kueueMode, "kueue", kueue.ModeAuto, "the Kueue integration for runs labelled "+v1alpha1.LabelQueueName+": auto (on when the cluster serves Kueue's Workloads at start), true or false")
	f.StringVar(&crashAt, "test-crash-at", "", "for crash-safety tests only: SIGKILL this process at the named point")
	_ = f.MarkHidden("test-crash-at")
	return cmd
}

// newPluginSandboxCommand is how the controller starts a framework plugin: this binary
// confines itself and becomes the plugin (pkg/sandbox). Not for people.
func newPluginSandboxCommand() *cobra.Command {
	return &cobra.Command{
		Use:    sandbox.Subcommand + " -- PLUGIN",
		Short:  "Start a framework plugin confined (the controller's own use)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return sandbox.Exec(args[0], args)
		},
	}
}

// defaultNodeConditions are exitclass.DefaultNodeConditionRules as the flag writes them.
func defaultNodeConditions() []string {
	out := make([]string, len(exitclass.DefaultNodeConditionRules))
	for i, r := range exitclass.DefaultNodeConditionRules {
		out[i] = r.String()
	}
	return out
}
