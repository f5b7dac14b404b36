package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/faultline-dev/faultline/pkg/cli"
	"github.com/faultline-dev/faultline/pkg/version"
)

func newInstallCommand(env *cli.Env) *cobra.Command {
	var (
		o             cli.InstallOptions
		print         bool
		skipPreflight bool
		waitReady     bool
		timeout       time.Duration
		dryRun        string
		diff          bool
	)
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install faultline: the CRD, its admission policies, the controller and the node agent",
		Long: `Apply faultline's manifests (the ones in deploy/, built into this binary) with server-side
apply, as 'kubectl apply --server-side -k deploy/' does, with this launcher's version of the
three images (the controller's, the node agent's and the barrier's; 'launcher version' names
them); --print writes them to standard output instead. --registry moves all three images to
a registry of yours; --controller-image, --agent-image and --barrier-image replace one each.

It then waits until the controller and the node agent run the new version everywhere
(--wait, up to --timeout): a pod whose image cannot be pulled, or that crashes, ends the
wait at once with the image or the pod named, and the command fails.

Before it applies anything, install checks that the cluster serves what the manifests need
(ValidatingAdmissionPolicy and MutatingAdmissionPolicy v1, Job spec.managedBy, ...) and
refuses with one message that names what is missing, leaving the cluster untouched; what
faultline can do without (restarts in place, Kueue) is reported.

--components chooses among crd, admission (the policies that keep fault evidence to the node
agent and each service account to its own writes), controller and agent; kueue (not in the
default) lets Kueue read TrainingRuns, for the Kueue integration.`,
		Example: `  launcher install
  launcher install --print > faultline.yaml
  launcher install --diff                  # what an upgrade would change, changing nothing
  launcher install --registry registry.example.com/faultline   # all three images from your registry
  launcher install --components crd        # e.g. to run the controller yourself
  launcher install --components kueue      # on a cluster that runs Kueue`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			objs, err := cli.Manifests(o)
			if err != nil {
				return err
			}
			if print {
				return cli.PrintManifests(out(env), objs)
			}
			cl, err := env.Clients()
			if err != nil {
				return err
			}
			if !skipPreflight {
				facts, err := cli.GatherClusterFacts(cmd.Context(), cl.Config)
				if err != nil {
					return err
				}
				report := cli.Preflight(objs, facts)
				if err := report.Err(facts); err != nil {
					return err
				}
				cli.PrintPreflight(out(env), facts, report)
			}
			im := o.Images()
			fmt.Fprintf(out(env), "installing faultline %s: controller %s, node agent %s, barrier %s\n", version.Version, im.Controller, im.Agent, im.Barrier)
			mode := cli.ApplyForReal
			switch {
			case diff:
				mode = cli.ApplyDiff
			case dryRun == string(cli.DryRunServer):
				mode = cli.ApplyDryRun
			case dryRun != "" && dryRun != string(cli.DryRunNone):
				return cli.UsageError("--dry-run=%s: install checks through the API server only: --dry-run=server (or --print, to see the manifests)", dryRun)
			}
			if err := cli.Apply(cmd.Context(), cl.Config, objs, out(env), mode); err != nil || !waitReady || mode != cli.ApplyForReal {
				return err
			}
			return cli.WaitReady(cmd.Context(), cl.Kube, objs, timeout, out(env))
		},
	}
	f := cmd.Flags()
	f.StringVar(&dryRun, "dry-run", "none", "server: the API server checks every object (its schema and admission) and stores nothing; what would be pruned is named")
	f.BoolVar(&diff, "diff", false, "change nothing: print, object by object, what the install would change (a unified diff of what the API server stores against what it would), and what it would prune; exit 3 when it would change something, 0 when not")
	f.BoolVar(&waitReady, "wait", true, "wait until the controller and the node agent have rolled out (every pod of the new version Ready), and fail naming what is not (an image that cannot be pulled, a pod that crashes)")
	f.DurationVar(&timeout, "timeout", cli.DefaultInstallTimeout, "the longest wait for the rollouts")
	f.BoolVar(&print, "print", false, "write the manifests to standard output instead of applying them")
	f.StringSliceVar(&o.Components, "components", nil, "what to install: crd, admission, controller, agent (default all four), kueue")
	f.StringVar(&o.Registry, "registry", "", "registry of all three images, e.g. registry.example.com/faultline (default "+version.DefaultRegistry+")")
	f.StringVar(&o.ControllerImage, "controller-image", "", "image of the controller (default: "+version.ControllerImageName+" of this version under --registry)")
	f.StringVar(&o.AgentImage, "agent-image", "", "image of the node agent (default: "+version.AgentImageName+" of this version under --registry)")
	f.StringVar(&o.BarrierImage, "barrier-image", "", "image of the barrier, the controller's --barrier-image (default: "+version.BarrierImageName+" of this version under --registry)")
	f.BoolVar(&o.WithoutRolesPolicy, "without-roles-policy", false, "leave out the MutatingAdmissionPolicy "+cli.RolesPolicyName+
		" (Kubernetes 1.36 and later), which labels the pods of Index-scope runs with roles (TensorFlow's chief/ps/worker): for an older cluster")
	f.BoolVar(&skipPreflight, "skip-preflight", false, "apply without checking what the cluster serves first")
	f.StringVar(&o.AgentDriverRoot, "agent-driver-root", "", "the node agent's --driver-root: where the nodes' NVIDIA driver is, as the agent sees the node's root under /host, e.g. /host/run/nvidia/driver (default: found on each node, the GPU Operator's, the host's, GKE's)")
	f.StringVar(&o.AgentCRIEndpoint, "agent-cri-endpoint", "", "the node agent's --cri-endpoint, e.g. unix:///host/run/containerd/containerd.sock (default: found on each node, containerd's, then CRI-O's)")
	_ = cmd.RegisterFlagCompletionFunc("components", cobra.FixedCompletions(slices.Concat(cli.InstallComponents, cli.OptionalComponents), cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func newUninstallCommand(env *cli.Env) *cobra.Command {
	var o cli.UninstallOptions
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove everything 'launcher install' installed",
		Long: `Remove faultline from the cluster, in the order that leaves nothing stuck: the TrainingRuns
and NodeMaintenances first, while the controller still runs (it stops their workers and lets
go of their Jobs), any finalizer of faultline's still on a Job or a worker, then the node
agent, the controller, their admission policies, their namespace and the CRDs, and last the
node agent's conditions, annotations and taint on the Nodes; it ends once the Jobs, pods
and Services the runs made are gone too.

Runs that have not finished (and maintenances in progress) are refused: wait for them or
delete them, or --force to end them (uninstall names each one it ends).`,
		Example: `  launcher uninstall
  launcher uninstall --force   # also end the runs that have not finished`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := env.Clients()
			if err != nil {
				return err
			}
			if err := cli.Uninstall(cmd.Context(), cl.Config, o, out(env)); err != nil {
				return err
			}
			fmt.Fprintln(out(env), "faultline uninstalled")
			return nil
		},
	}
	cmd.Flags().BoolVar(&o.Force, "force", false, "end the runs that have not finished and the maintenances in progress")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 3*time.Minute, "longest wait for each step (the runs' teardown, the pods' end, the namespace's)")
	return cmd
}
