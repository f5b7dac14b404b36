// Command launcher is faultline's CLI for ML engineers and, as `launcher controller`, the
// in-cluster controller of TrainingRuns. It only wires: the logic lives in pkg/ (the CLI's
// in pkg/cli).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/faultline-dev/faultline/pkg/cli"
)

func main() {
	os.Exit(run(os.Args[1:], cli.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}))
}

// run executes the command line and returns the exit code: 0, 1 when a watched run
// Failed, 2 for usage and API errors (pkg/cli's Exit* constants).
func run(args []string, streams cli.IOStreams) int {
	// client-go's own logging would print retries and internals; what a person needs is in
	// the error that comes back. The API server's warnings are printed as kubectl does.
	klog.SetLogger(logr.Discard())
	rest.SetDefaultWarningHandler(rest.NewWarningWriter(streams.ErrOut, rest.WarningWriterOptions{Deduplicate: true}))

	env := &cli.Env{Flags: genericclioptions.NewConfigFlags(true), IO: streams, Now: time.Now}
	root := newRootCommand(env)
	root.SetArgs(args)
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := root.ExecuteContext(ctx)
	msg, code := cli.Message(err, env.Server())
	if msg != "" {
		fmt.Fprintln(streams.ErrOut, "error: "+msg)
	}
	return code
}

func newRootCommand(env *cli.Env) *cobra.Command {
	root := &cobra.Command{
		Use:   "launcher",
		Short: "Run distributed TensorFlow, JAX and PyTorch training that survives infrastructure faults",
		Long: `launcher submits and follows faultline TrainingRuns: gangs of workers that are restarted
when the infrastructure fails them (a node shutdown, a GPU fault) and failed fast when the
program does. It takes kubectl's flags for the cluster and namespace.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	env.Flags.AddFlags(root.PersistentFlags())
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return cli.UsageError("%v\nSee '%s --help'.", err, c.CommandPath())
	})
	root.AddGroup(
		&cobra.Group{ID: "runs", Title: "Running training:"},
		&cobra.Group{ID: "inspect", Title: "Inspecting runs:"},
		&cobra.Group{ID: "nodes", Title: "Node maintenance (SREs):"},
		&cobra.Group{ID: "admin", Title: "Installing and operating faultline:"},
	)
	for _, c := range []*cobra.Command{newSubmitCommand(env), newRunCommand(env), newConvertCommand(env), newSuspendCommand(env, true), newSuspendCommand(env, false), newDeleteCommand(env)} {
		c.GroupID = "runs"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newGetCommand(env), newDescribeCommand(env), newWatchCommand(env), newExplainCommand(env), newLogsCommand(env), newTimelineCommand(env)} {
		c.GroupID = "inspect"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newNodesCommand(env), newDrainCommand(env)} {
		c.GroupID = "nodes"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newInstallCommand(env), newUninstallCommand(env), newControllerCommand(env), newVersionCommand()} {
		c.GroupID = "admin"
		root.AddCommand(c)
	}
	root.AddCommand(newPluginSandboxCommand())
	root.SetHelpCommandGroupID("admin")
	root.SetCompletionCommandGroupID("admin")
	return root
}

// out is where a command writes its result.
func out(env *cli.Env) io.Writer { return env.IO.Out }
