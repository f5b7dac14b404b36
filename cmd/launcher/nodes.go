package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/cli"
)

func newNodesCommand(env *cli.Env) *cobra.Command {
	var output, selector string
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "Show nodes as faultline sees them: GPUs, node agent, shutdown, maintenance, runs",
		Long: `Show every node (or those -l selects) with:

  GPUS         healthy/total nvidia.com/gpu: total is the capacity, healthy what the device
               plugin still offers (allocatable), 0 while the node agent's GPUHealthy is False
  GPU-HEALTH   the node agent's faultline.dev/GPUHealthy condition: Healthy, or its reason
               (Xid79, DoubleBitECC, ...) and for how long; <unknown> if the agent never wrote it
  GPU-MONITOR  whether the node agent watches the node's GPUs (NVML loaded), from its heartbeat:
               on, or off and why (NVMLNotFound: no libnvidia-ml where it looked, NVMLFailed);
               <unknown> when it says nothing. Off, a GPU fault there is no evidence
  AGENT        the node agent pod on the node: Locked (Ready: its readiness probe passes only
               while it holds logind's delay inhibitor lock, which is all the API shows of the
               lock), NoLock (running, not Ready: a shutdown would go unseen), Pending, None
  SHUTDOWN     how long ago the agent announced a shutdown (faultline.dev/shutdown-detected-at)
  CORDONED     spec.unschedulable or the node.kubernetes.io/unschedulable taint
  MAINTENANCE  why the controller treats the node as under maintenance: a NodeMaintenance, a
               cordon, GKE's cloud.google.com/scheduled-maintenance-time within 30 minutes (or
               "GKE in 2h" before that), a CSPMaintenance condition. These are the controller's
               default signals; a controller run with --maintenance-lead or
               --maintenance-conditions acts on its own
  RUNS         the runs whose current attempt has workers there: NAMESPACE/RUN#ATTEMPT[INDEXES],
               * when index 0 (the coordinator) is there, BLOCKED when a drain cannot move it

-o wide adds AGENT-CANNOT: what the agent says it cannot do there (GPU monitoring, the
shutdown lock, restarts in place, the kubelet's PodResources), each with why.

The runs need list on pods and trainingruns in every namespace, the agents list on pods in
faultline-system, the agents' capabilities list on leases there; without them the column says <unknown> and a warning says why (the
faultline-sre role grants neither: ` + "`launcher drain --dry-run`" + ` shows an SRE what a drain hits).`,
		Example: `  launcher nodes
  launcher nodes -l cloud.google.com/gke-nodepool=a3-pool -o wide
  launcher nodes -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := cli.ParseFormat(output)
			if err != nil {
				return err
			}
			cl, err := env.Clients()
			if err != nil {
				return err
			}
			now := env.Now()
			in, warnings, err := cli.ReadNodes(cmd.Context(), cl, selector, now)
			if err != nil {
				return err
			}
			for _, w := range warnings {
				fmt.Fprintln(env.IO.ErrOut, "warning: "+w)
			}
			if len(in.Nodes) == 0 && (format == cli.FormatTable || format == cli.FormatWide) {
				fmt.Fprintln(env.IO.ErrOut, "No nodes found.")
				return nil
			}
			reports := cli.NodeReports(in)
			if err := cli.PrintNodes(out(env), reports, format, now); err != nil {
				return err
			}
			if format == cli.FormatTable || format == cli.FormatWide {
				if blocked := cli.Blocked(reports); len(blocked) > 0 {
					fmt.Fprintln(out(env), "\nRuns a drain cannot move (no placement left for the gang):")
					for _, b := range blocked {
						fmt.Fprintln(out(env), "  "+b)
					}
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: "+strings.Join(cli.Formats, "|"))
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector of the nodes (e.g. -l node.kubernetes.io/instance-type=a3-highgpu-8g)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(cli.Formats, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func newDrainCommand(env *cli.Env) *cobra.Command {
	var (
		req    cli.DrainRequest
		wait   bool
		labels []string
	)
	cmd := &cobra.Command{
		Use:   "drain NODE... [--dry-run] [--wait] [--reason TEXT]",
		Short: "Move every training run off nodes in a planned way, before a maintenance",
		Long: `Create a NodeMaintenance of the nodes and print the controller's plan: which runs have
workers there, which indexes, whether the coordinator (index 0) is among them, and which
runs have no feasible placement off the nodes (those are not moved: they stay until
capacity frees or the node goes).

Without --dry-run the controller then cordons the nodes and gives every run hit a planned
restart off them (cause PlannedMaintenance): no failure budget spent, no backoff, a Normal
event on the run with --reason, and the nodes avoided only until they are uncordoned.
--wait returns once no worker is left on the nodes, with what moved and how long each run
was interrupted; while a run is Blocked it keeps waiting (say so on stderr), and an
interrupt stops only the waiting: the drain goes on in the cluster. Uncordon the nodes
(kubectl uncordon) when the maintenance is over.

An SRE needs only the faultline-sre ClusterRole (create/get/list/watch nodemaintenances,
read nodes): the controller acts on the runs.`,
		Example: `  launcher drain gpu-node-17 --dry-run
  launcher drain gpu-node-17 gpu-node-18 --reason "firmware update FW-2291" --wait`,
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Nodes = args
			if wait && req.DryRun {
				return cli.UsageError("--wait waits for a drain to finish, and --dry-run moves nothing: drop one of them")
			}
			if err := req.Validate(); err != nil {
				return err
			}
			req.Labels = map[string]string{}
			for _, l := range labels {
				k, v, ok := strings.Cut(l, "=")
				if !ok || k == "" {
					return cli.UsageError("--label %q: want KEY=VALUE", l)
				}
				req.Labels[k] = v
			}
			cl, err := env.Clients()
			if err != nil {
				return err
			}
			if err := cli.NodesExist(cmd.Context(), cl, req.Nodes); err != nil {
				return err
			}
			m := &cli.Maintenances{REST: cl.Runs.REST}
			nm, err := m.Create(cmd.Context(), req.Object())
			if err != nil {
				return err
			}
			fmt.Fprintf(env.IO.ErrOut, "nodemaintenance.%s/%s created; waiting for the controller's plan\n", v1alpha1.GroupName, nm.Name)
			nm, err = m.Wait(cmd.Context(), nm.Name, cli.Planned, nil)
			if err != nil {
				return fmt.Errorf("%w (is the faultline controller running? `kubectl -n faultline-system get pods`)", err)
			}
			if err := cli.PrintPlan(out(env), nm); err != nil {
				return err
			}
			if !wait {
				return nil
			}
			phase := nm.Status.Phase
			nm, err = m.Wait(cmd.Context(), nm.Name, cli.Settled, func(nm *v1alpha1.NodeMaintenance) bool {
				if nm.Status.Phase != phase {
					phase = nm.Status.Phase
					fmt.Fprintf(env.IO.ErrOut, "%s: %s\n", phase, nm.Status.Message)
					if phase == v1alpha1.MaintenanceBlocked {
						fmt.Fprintf(env.IO.ErrOut, "still waiting on nodemaintenance %s: a run hit has no placement off the nodes (see the plan above); free capacity for it, or interrupt: the drain goes on in the cluster\n", nm.Name)
					}
				}
				return false
			})
			if err != nil {
				return err
			}
			return cli.PrintMoves(out(env), nm)
		},
	}
	cmd.Flags().BoolVar(&req.DryRun, "dry-run", false, "only plan: print the runs and indexes a drain would hit; cordon and move nothing")
	cmd.Flags().BoolVar(&wait, "wait", false, "return once no worker is left on the nodes, with what moved and how long each run was interrupted")
	cmd.Flags().StringVar(&req.Reason, "reason", "", "why (e.g. a ticket): written into the events the runs' owners read")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "KEY=VALUE label on the NodeMaintenance (repeatable), e.g. for a controller run with --node-maintenance-selector")
	return cmd
}
