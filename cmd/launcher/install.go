package main

import (
	"github.com/spf13/cobra"
	"slices"

	"github.com/faultline-dev/faultline/pkg/cli"
)

func newInstallCommand(env *cli.Env) *cobra.Command {
	var (
		o     cli.InstallOptions
		print bool
	)
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install faultline: the CRD, its admission policies, the controller and the node agent",
		Long: `Apply faultline's manifests (the ones in deploy/, built into this binary) with server-side
apply, as 'kubectl apply --server-side -k deploy/' does; --print writes them to standard
output instead. --components chooses among crd, admission (the policies that keep fault
evidence to the node agent and each service account to its own writes), controller and
agent; kueue (not in the default) lets Kueue read TrainingRuns, for the Kueue integration.`,
		Example: `  launcher install
  launcher install --print > faultline.yaml
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
			return cli.Apply(cmd.Context(), cl.Config, objs, out(env))
		},
	}
	f := cmd.Flags()
	f.BoolVar(&print, "print", false, "write the manifests to standard output instead of applying them")
	f.StringSliceVar(&o.Components, "components", nil, "what to install: crd, admission, controller, agent (default all four), kueue")
	f.StringVar(&o.ControllerImage, "controller-image", "", "image of the controller (default: the manifests')")
	f.StringVar(&o.AgentImage, "agent-image", "", "image of the node agent (default: the manifests')")
	_ = cmd.RegisterFlagCompletionFunc("components", cobra.FixedCompletions(slices.Concat(cli.InstallComponents, cli.OptionalComponents), cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
