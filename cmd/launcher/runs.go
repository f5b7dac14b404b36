package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/cli"
	"github.com/faultline-dev/faultline/pkg/framework"
)

// completeRuns completes the names of the runs in the command's namespace.
func completeRuns(env *cli.Env) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		cl, err := env.Clients()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
		defer cancel()
		runs, err := cl.Runs.List(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []cobra.Completion
		for _, r := range runs {
			if strings.HasPrefix(r.Name, prefix) {
				names = append(names, r.Name)
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// oneRun checks that a command was given exactly one run, and says what to give where
// cobra would print its bare "accepts 1 arg(s), received 0".
func oneRun(cmd *cobra.Command, args []string) error {
	switch len(args) {
	case 1:
		return nil
	case 0:
		return cli.UsageError("%s needs the name of a run: %s (`launcher get` lists the runs)", cmd.Name(), cmd.UseLine())
	}
	return cli.UsageError("%s takes one run, not %d (%s): %s", cmd.Name(), len(args), strings.Join(args, " "), cmd.UseLine())
}

// someRuns checks that a command was given at least one run.
func someRuns(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cli.UsageError("%s needs the names of the runs: %s (`launcher get` lists the runs)", cmd.Name(), cmd.UseLine())
	}
	return nil
}

// follow watches a run to its end after submit or run --watch.
func follow(ctx context.Context, env *cli.Env, cl *cli.Clients, namespace, name string) error {
	runs := &cli.Runs{REST: cl.Runs.REST, Namespace: namespace}
	code, err := cli.Watch(ctx, runs, name, &cli.Progress{W: env.IO.Out, Now: env.Now, Live: isTerminal(env.IO.Out)})
	if err != nil {
		return err
	}
	if code != cli.ExitOK {
		return &cli.ExitError{Code: code}
	}
	return nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func newSubmitCommand(env *cli.Env) *cobra.Command {
	var file, dryRun string
	var watch bool
	cmd := &cobra.Command{
		Use:   "submit -f FILE",
		Short: "Create TrainingRuns from a YAML or JSON file",
		Long: `Create the TrainingRuns of a file ("-" reads standard input). The API server checks them
strictly: an unknown or misspelled field is refused, not dropped. --dry-run=client checks them
here (the fields, the CRD's bounds and enums, the names) without a cluster; --dry-run=server
has the API server check them through its whole validation and admission, storing nothing.`,
		Example: `  launcher submit -f run.yaml
  launcher submit -f run.yaml --watch
  launcher submit -f run.yaml --dry-run=server`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return cli.UsageError("-f FILE is required (\"-\" for standard input)")
			}
			var r io.Reader = env.IO.In
			source := "standard input"
			if file != "-" {
				f, err := os.Open(file)
				if err != nil {
					return cli.UsageError("%v", err)
				}
				defer f.Close()
				r, source = f, file
			}
			docs, err := cli.Documents(r, source)
			if err != nil {
				return err
			}
			dry, err := cli.ParseDryRun(dryRun)
			if err != nil {
				return err
			}
			if watch && len(docs) != 1 {
				return cli.UsageError("--watch follows one run; %s holds %d", source, len(docs))
			}
			if watch && dry != cli.DryRunNone {
				return cli.UsageError("--watch follows a run that --dry-run does not create: drop one")
			}
			cl, err := env.Clients()
			if err != nil {
				if dry != cli.DryRunClient {
					return err
				}
				cl = &cli.Clients{Runs: &cli.Runs{}} // a client dry run needs no cluster
			}
			created, err := cli.Submit(cmd.Context(), cl.Runs, docs, cl.NamespaceExplicit, dry, out(env), env.IO.ErrOut)
			if err != nil || !watch {
				return err
			}
			return follow(cmd.Context(), env, cl, created[0].Namespace, created[0].Name)
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", `file with the TrainingRuns ("-" for standard input)`)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "follow the run until it ends (exit 0 Succeeded, 1 Failed)")
	addDryRunFlag(cmd, &dryRun)
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
	return cmd
}

// addDryRunFlag adds kubectl's --dry-run: none, client ("--dry-run" alone) or server.
func addDryRunFlag(cmd *cobra.Command, v *string) {
	cmd.Flags().StringVar(v, "dry-run", string(cli.DryRunNone), `"client" checks here and prints, "server" has the API server check (nothing is stored); "--dry-run" alone is client`)
	cmd.Flags().Lookup("dry-run").NoOptDefVal = string(cli.DryRunClient)
	_ = cmd.RegisterFlagCompletionFunc("dry-run", cobra.FixedCompletions([]cobra.Completion{"none", "client", "server"}, cobra.ShellCompDirectiveNoFileComp))
}

func newRunCommand(env *cli.Env) *cobra.Command {
	var (
		s                        cli.RunSpec
		maxInfra, maxApp, maxUnk int32
		settle, ttl              int32
		watch                    bool
		dryRun                   string
	)
	cmd := &cobra.Command{
		Use:   "run --name NAME --image IMAGE --workers N [flags] [-- COMMAND ARGS...]",
		Short: "Create a TrainingRun from flags",
		Long: `Create a TrainingRun of N workers (one pod each) from flags. What follows -- is the
workers' command. Flags left out keep the API's defaults (docs/reference.md). --dry-run
(=client) checks the run here and prints it as YAML, without a cluster; --dry-run=server has the
API server check it and prints it as it would be stored, its defaults filled in.`,
		Example: `  launcher run --name llm --framework jax --workers 16 --image ghcr.io/me/train:1 \
      --gpus-per-worker 8 --exclude-faulty-nodes --watch -- python train.py --steps 10000
  launcher run --name smoke --image busybox --workers 2 --dry-run -- sh -c 'echo hi'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if n := cmd.ArgsLenAtDash(); (n < 0 && len(args) > 0) || n > 0 {
				return cli.UsageError("unexpected argument %q: name the run with --name, and put the workers' command after --", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			s.Command = args
			f := cmd.Flags()
			if f.Changed("max-infra-restarts") {
				s.MaxInfra = &maxInfra
			}
			if f.Changed("max-app-restarts") {
				s.MaxApp = &maxApp
			}
			if f.Changed("max-unknown-restarts") {
				s.MaxUnknown = &maxUnk
			}
			if f.Changed("settle-seconds") {
				s.SettleSeconds = &settle
			}
			if f.Changed("ttl-seconds-after-finished") {
				s.TTLSeconds = &ttl
			}
			dry, err := cli.ParseDryRun(dryRun)
			if err != nil {
				return err
			}
			if watch && dry != cli.DryRunNone {
				return cli.UsageError("--watch follows a run that --dry-run does not create: drop one")
			}
			cl, err := env.Clients()
			if err != nil && dry != cli.DryRunClient {
				return err
			}
			if cl == nil {
				cl = &cli.Clients{Runs: &cli.Runs{}} // a client dry run needs no cluster
			} else {
				s.Namespace = cl.Namespace
			}
			tr, err := s.TrainingRun()
			if err != nil {
				return err
			}
			created, err := cli.Create(cmd.Context(), cl.Runs, tr, dry, out(env), env.IO.ErrOut)
			if err != nil || !watch {
				return err
			}
			return follow(cmd.Context(), env, cl, created.Namespace, created.Name)
		},
	}
	f := cmd.Flags()
	f.StringVar(&s.Name, "name", "", "name of the TrainingRun (required)")
	f.StringVar(&s.Image, "image", "", "container image of the workers (required)")
	f.Int32Var(&s.Workers, "workers", 1, "number of workers (pods), one per index 0..N-1")
	f.StringVar(&s.Framework, "framework", "", fmt.Sprintf(`framework plugin: %s, or "none" (default none)`, strings.Join(framework.Shipped, ", ")))
	f.Int64Var(&s.GPUsPerWorker, "gpus-per-worker", 0, "nvidia.com/gpu per worker")
	f.StringVar(&s.CPU, "cpu", "", "CPU request per worker (e.g. 8)")
	f.StringVar(&s.Memory, "memory", "", "memory request and limit per worker (e.g. 64Gi)")
	f.StringArrayVar(&s.Env, "env", nil, "KEY=VALUE environment variable of the workers (repeatable)")
	f.StringArrayVar(&s.FrameworkOptions, "framework-option", nil, "KEY=VALUE option for the framework plugin (repeatable)")
	f.StringArrayVarP(&s.Labels, "label", "l", nil, "KEY=VALUE label of the run (repeatable)")
	f.StringVar(&s.RestartScope, "restart-scope", "", "Gang (default: a failure restarts every worker) or Index")
	f.StringVar(&s.SuccessPolicy, "success-policy", "", "AllWorkers (default) or Leader (index 0 exiting 0 ends the run)")
	f.Int32Var(&maxInfra, "max-infra-restarts", 10, "restarts allowed on infrastructure faults")
	f.Int32Var(&maxApp, "max-app-restarts", 0, "restarts allowed on application failures")
	f.Int32Var(&maxUnk, "max-unknown-restarts", 1, "restarts allowed on failures without evidence either way")
	f.Int32Var(&settle, "settle-seconds", 1, "seconds to wait for node evidence before blaming the application")
	f.BoolVar(&s.ExcludeFaultyNodes, "exclude-faulty-nodes", false, "keep later attempts off the node of any infrastructure fault (the default does it for GPU faults only)")
	f.BoolVar(&s.Suspend, "suspend", false, "create the run suspended (e.g. for a queue to admit)")
	f.StringVar(&s.Queue, "queue", "", "Kueue LocalQueue that admits the run (label "+v1alpha1.LabelQueueName+"): it starts when Kueue admits it, on the admitted flavor")
	f.Int32Var(&ttl, "ttl-seconds-after-finished", 0, "delete the run this long after it ends")
	f.BoolVarP(&watch, "watch", "w", false, "follow the run until it ends (exit 0 Succeeded, 1 Failed)")
	addDryRunFlag(cmd, &dryRun)
	_ = cmd.RegisterFlagCompletionFunc("framework", cobra.FixedCompletions(append(slices.Clone(framework.Shipped), v1alpha1.FrameworkNone), cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("restart-scope", cobra.FixedCompletions([]cobra.Completion{"Gang", "Index"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func newGetCommand(env *cli.Env) *cobra.Command {
	var req cli.GetRequest
	cmd := &cobra.Command{
		Use:     "get [RUN...]",
		Aliases: []string{"list", "ls"},
		Short:   "List TrainingRuns, or show some",
		Long: `List the runs of the namespace, or show those named, with kubectl get's flags: -o for the
output (the table, wide, json, yaml, name, jsonpath=…, go-template=…, custom-columns=…), -l to
select by label, -w to print each change until interrupted, -A for every namespace,
--no-headers, --sort-by.`,
		Example: `  launcher get
  launcher get -A -l team=research
  launcher get llm -o wide
  launcher get llm -o jsonpath='{.status.lastFailure.cause}'
  launcher get -o custom-columns=NAME:.metadata.name,ATTEMPT:.status.attempt --sort-by=.status.attempt
  launcher get llm -w`,
		ValidArgsFunction: completeRuns(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := env.Clients()
			if err != nil {
				return err
			}
			req.Names = args
			req.Print.Now = env.Now()
			return cli.Get(cmd.Context(), cl, req, out(env), env.IO.ErrOut)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&req.Print.Output, "output", "o", "", "output format: "+strings.Join(cli.GetOutputs, "|"))
	f.BoolVarP(&req.AllNamespaces, "all-namespaces", "A", false, "list the runs of every namespace")
	f.StringVarP(&req.Selector, "selector", "l", "", "label selector of the runs to list (e.g. team=research,tier!=batch)")
	f.BoolVarP(&req.Watch, "watch", "w", false, "after the list, print each change of the runs until interrupted")
	f.BoolVar(&req.Print.NoHeaders, "no-headers", false, "leave out the table's header")
	f.StringVar(&req.Print.SortBy, "sort-by", "", "sort by the value at this JSONPath (e.g. .status.attempt, {.metadata.creationTimestamp})")
	f.BoolVar(&req.Print.ShowLabels, "show-labels", false, "add a column with every label of the run")
	f.StringSliceVarP(&req.Print.LabelColumns, "label-columns", "L", nil, "add a column with the value of each of these labels")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]cobra.Completion{"table", "wide", "json", "yaml", "name", "jsonpath=", "go-template=", "custom-columns="}, cobra.ShellCompDirectiveNoFileComp|cobra.ShellCompDirectiveNoSpace))
	return cmd
}

func newDescribeCommand(env *cli.Env) *cobra.Command {
	return &cobra.Command{
		Use:               "describe RUN",
		Short:             "Show a run in detail: spec, attempts with verdicts and evidence, excluded nodes, events",
		Args:              oneRun,
		ValidArgsFunction: completeRuns(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			run, events, err := runWithEvents(cmd.Context(), env, args[0])
			if err != nil {
				return err
			}
			return cli.Describe(out(env), run, events, env.Now())
		},
	}
}

func newWatchCommand(env *cli.Env) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "watch RUN",
		Short: "Follow a run live until it ends: exit 0 Succeeded, 1 Failed, 2 on errors",
		Long: `Follow a run live: its phase, the ready workers of the current attempt as a bar, and why
each attempt ended. It uses the API server's watch, not polling. The exit code says how the
run ended: 0 Succeeded, 1 Failed (the verdict is printed), 2 usage or API errors (also a
--timeout that expired). Ctrl-C stops watching, not the run.`,
		Args:              oneRun,
		ValidArgsFunction: completeRuns(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := env.Clients()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			return follow(ctx, env, cl, cl.Namespace, args[0])
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "stop watching after this long (exit 2); 0 watches until the run ends")
	return cmd
}

func newExplainCommand(env *cli.Env) *cobra.Command {
	var attempt int32
	cmd := &cobra.Command{
		Use:   "explain RUN|POD",
		Short: "Explain why a run, or the attempt of a pod, failed: the verdict and its evidence",
		Long: `For a run: the controller's verdict on its last failure (or on --attempt K), with the
evidence it rests on and what to do about it. For a pod of a run (or pod/NAME): classify that
pod's attempt now, from its pods and their nodes, and say what part the pod played.`,
		Example: `  launcher explain llm
  launcher explain llm --attempt 1
  launcher explain pod/llm-3-x7k2p`,
		Args:              oneRun,
		ValidArgsFunction: completeRuns(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := env.Clients()
			if err != nil {
				return err
			}
			kind, name := "", args[0]
			if k, n, ok := strings.Cut(name, "/"); ok {
				kind, name = strings.ToLower(k), n
			}
			if name == "" {
				return cli.UsageError("explain: name a run or a pod (e.g. llm or pod/llm-3-x7k2p)")
			}
			ctx := cmd.Context()
			switch kind {
			case "", "trainingrun", "trainingruns", "tr", "trainingrun.faultline.dev":
				run, err := cl.Runs.Get(ctx, name)
				var nf *cli.RunNotFoundError
				if errors.As(err, &nf) && kind == "" {
					break // perhaps a pod
				}
				if err != nil {
					return err
				}
				return cli.ExplainRun(out(env), run, attempt)
			case "pod", "pods", "po":
			default:
				return cli.UsageError("explain takes a run or a pod, not a %q", kind)
			}
			pv, err := cli.ClassifyPod(ctx, cl.Kube, cl.Namespace, name, env.Now())
			if err != nil {
				return err
			}
			return cli.ExplainPod(out(env), pv)
		},
	}
	cmd.Flags().Int32Var(&attempt, "attempt", 0, "explain this attempt of the run (default: the last failure)")
	return cmd
}

func newLogsCommand(env *cli.Env) *cobra.Command {
	o := cli.LogsOptions{}
	cmd := &cobra.Command{
		Use:   "logs RUN",
		Short: "Print the logs of a run's workers",
		Long: `Print the logs of a run's workers, each line prefixed with its index when there are several.
--attempt K reads the pods of an earlier attempt that are still there; --previous reads each
worker container's previous instance (for workers restarted in place, the attempt before).
The workers are read --max-streams at a time; --follow keeps a stream open per worker, and
refuses more workers than --max-streams.`,
		Example: `  launcher logs llm --index 3
  launcher logs llm --attempt 1 --index 3 --tail 100
  launcher logs llm --since 10m --timestamps
  launcher logs llm --previous --index 0
  launcher logs llm -f --max-streams 64`,
		Args:              oneRun,
		ValidArgsFunction: completeRuns(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := env.Clients()
			if err != nil {
				return err
			}
			return cli.Logs(cmd.Context(), cl.Kube, cl.Runs, args[0], o, out(env), env.IO.ErrOut)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Index, "index", -1, "only the worker of this completion index (default: every worker, lines prefixed by index)")
	f.Int32Var(&o.Attempt, "attempt", 0, "attempt whose pods to read (default: the current one)")
	f.StringVarP(&o.Container, "container", "c", "", "container (default: the worker, the pod's first container)")
	f.BoolVarP(&o.Follow, "follow", "f", false, "stream new lines as they come")
	f.Int64Var(&o.Tail, "tail", -1, "lines from the end to show (-1: all)")
	f.DurationVar(&o.Since, "since", 0, "only lines newer than this (e.g. 10m, 2h); 0 shows all")
	f.BoolVar(&o.Timestamps, "timestamps", false, "start each line with its time (RFC 3339)")
	f.BoolVarP(&o.Previous, "previous", "p", false, "each worker container's previous instance (for a worker restarted in place, the attempt before)")
	f.IntVar(&o.MaxStreams, "max-streams", cli.DefaultMaxStreams, "log streams open at once, at most (one per worker)")
	return cmd
}

func newTimelineCommand(env *cli.Env) *cobra.Command {
	var html string
	cmd := &cobra.Command{
		Use:   "timeline RUN",
		Short: "Draw a run's attempts and restarts as a Gantt chart",
		Long: `Draw a run's attempts and restarts as a Gantt chart in the terminal, from status.attempts
and the run's events. --html FILE writes the same chart as a standalone HTML page (inline
SVG, no external assets).`,
		Args:              oneRun,
		ValidArgsFunction: completeRuns(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			run, events, err := runWithEvents(cmd.Context(), env, args[0])
			if err != nil {
				return err
			}
			if html == "" {
				return cli.Timeline(out(env), run, events, env.Now())
			}
			f, err := os.Create(html)
			if err != nil {
				return cli.UsageError("%v", err)
			}
			if err := cli.TimelineHTML(f, run, events, env.Now()); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			fmt.Fprintf(out(env), "timeline of trainingrun %s written to %s\n", run.Name, html)
			return nil
		},
	}
	cmd.Flags().StringVar(&html, "html", "", "write a standalone HTML page with the chart to this file")
	_ = cmd.MarkFlagFilename("html", "html")
	return cmd
}

func newDeleteCommand(env *cli.Env) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:               "delete RUN... | --all",
		Short:             "Delete runs; their Jobs, pods and Services go with them",
		ValidArgsFunction: completeRuns(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 0) {
				return cli.UsageError("name the runs to delete, or pass --all (not both)")
			}
			cl, err := env.Clients()
			if err != nil {
				return err
			}
			if all {
				runs, err := cl.Runs.List(cmd.Context())
				if err != nil {
					return err
				}
				for _, r := range runs {
					args = append(args, r.Name)
				}
				if len(args) == 0 {
					fmt.Fprintf(env.IO.ErrOut, "No trainingruns found in namespace %s.\n", cl.Namespace)
					return nil
				}
			}
			return cli.Delete(cmd.Context(), cl.Runs, args, out(env))
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "delete every run of the namespace")
	return cmd
}

func newSuspendCommand(env *cli.Env, suspend bool) *cobra.Command {
	cmd := &cobra.Command{
		Use:               "suspend RUN...",
		Short:             "Stop every worker of runs without counting a failure",
		Args:              someRuns,
		ValidArgsFunction: completeRuns(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := env.Clients()
			if err != nil {
				return err
			}
			return cli.SetSuspend(cmd.Context(), cl.Runs, args, suspend, out(env))
		},
	}
	if !suspend {
		cmd.Use = "resume RUN..."
		cmd.Short = "Resume suspended runs: each starts a fresh attempt, spending no restart"
	}
	return cmd
}

// runWithEvents reads a run and its events; events that cannot be read are only a warning,
// since the run's status tells most of the story.
func runWithEvents(ctx context.Context, env *cli.Env, name string) (*v1alpha1.TrainingRun, []corev1.Event, error) {
	cl, err := env.Clients()
	if err != nil {
		return nil, nil, err
	}
	run, err := cl.Runs.Get(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	events, err := cli.Events(ctx, cl.Kube, run)
	if err != nil {
		fmt.Fprintf(env.IO.ErrOut, "warning: %v\n", err)
	}
	return run, events, nil
}
