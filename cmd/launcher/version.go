package main

import (
	"github.com/spf13/cobra"

	"github.com/faultline-dev/faultline/pkg/cli"
)

func newVersionCommand() *cobra.Command {
	var (
		short    bool
		registry string
	)
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the launcher's version, its license and the images it installs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.PrintVersion(cmd.OutOrStdout(), registry, short)
		},
	}
	cmd.Flags().BoolVar(&short, "short", false, "print the version alone")
	cmd.Flags().StringVar(&registry, "registry", "", "name the images as `launcher install --registry` would")
	return cmd
}
