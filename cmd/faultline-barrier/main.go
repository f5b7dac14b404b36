// Command faultline-barrier is the init container of a worker pod that restarts in place
// (pkg/barrier, docs/in-place-restart.md): `faultline-barrier` (wait) holds the workers
// back until `faultline-barrier open --attempt N`, which the node agent runs in the same
// container through the CRI, gives it an attempt newer than the pod's last.
// `faultline-barrier supervise -- COMMAND [ARG...]`, the worker container's own entrypoint,
// waits the same way and runs COMMAND as its child, which `faultline-barrier stop --attempt N`
// ends (with every process it left) for a restart in place in the same container
// (barrier.Supervise). It only wires flags to pkg/barrier; it is built static
// (CGO_ENABLED=0): its image holds nothing else.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/faultline-dev/faultline/pkg/barrier"
)

// Exit codes, deliberate: the node agent reads open's through ExecSync.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
	// exitStale: the waiting barrier refused the attempt as not newer than its own.
	exitStale = 3
	// exitNotWaiting: no barrier listens (already opened, or not started).
	exitNotWaiting = 4
	// exitOpenedBefore: no barrier listens, and the attempt file holds the attempt asked
	// for (or a later one): it opened for it before.
	exitOpenedBefore = 5
	// exitSIGTERM: the pod is terminating (128+SIGTERM); it is not restarted then.
	exitSIGTERM = 143
	// supervise's, when the worker's command cannot be run, are the shell's
	// (barrier.ExecError.ExitStatus): 127 no such program, 126 not executable.
)

// The process's side effects, as fields: the tests run main's logic in process.
type cli struct {
	stderr    io.Writer
	wait      func(context.Context, barrier.Config) (int, error)
	open      func(context.Context, string, int) error
	supervise func(context.Context, barrier.Config, []string) (int, error)
	stop      func(context.Context, string, int, time.Duration) error
	getenv    func(string) string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	c := cli{stderr: os.Stderr, wait: barrier.Wait, open: barrier.Open, supervise: barrier.Supervise, stop: barrier.Stop, getenv: os.Getenv}
	os.Exit(c.run(ctx, os.Args[1:]))
}

func (c cli) run(ctx context.Context, args []string) int {
	cfg := barrier.Config{Logger: slog.New(slog.NewTextHandler(c.stderr, nil))}
	getenv := c.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if v := getenv(barrier.EnvAttempt); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fmt.Fprintf(c.stderr, "%s=%q: want the attempt the pod was made for (a positive number)\n", barrier.EnvAttempt, v)
			return exitUsage
		}
		cfg.MadeFor = n
	}
	fs := flag.NewFlagSet("faultline-barrier", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.StringVar(&cfg.AttemptFile, "attempt-file", barrier.AttemptFile, "the file the workers read their attempt from")
	fs.StringVar(&cfg.Socket, "socket", barrier.DefaultSocket, "where the waiting barrier listens for open")
	fs.StringVar(&cfg.TerminationLog, "termination-log", barrier.DefaultTerminationLog, "the container's termination message file")
	attempt := fs.Int("attempt", 0, "open, stop: the attempt the gang is to run")
	timeout := fs.Duration("timeout", 10*time.Second, "open, stop: how long to wait for the barrier's answer (stop: beyond the grace period)")
	grace := fs.Duration("grace", 30*time.Second, "stop: how long the worker has after SIGTERM before SIGKILL")
	fs.Usage = func() {
		fmt.Fprintln(c.stderr, "usage: faultline-barrier [wait] [flags]\n"+
			"       faultline-barrier supervise [flags] -- COMMAND [ARG...]\n       faultline-barrier open --attempt N [flags]\n       faultline-barrier stop --attempt N [--grace D] [flags]")
		fs.PrintDefaults()
	}
	cmd := "wait"
	if len(args) > 0 && slices.Contains([]string{"wait", "open", barrier.CommandSupervise, "stop"}, args[0]) {
		cmd, args = args[0], args[1:]
	}
	runsWorker := cmd == barrier.CommandSupervise
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	switch {
	case runsWorker && fs.NArg() == 0:
		fmt.Fprintf(c.stderr, "%s needs the worker's command: faultline-barrier %s [flags] -- COMMAND [ARG...]\n", cmd, cmd)
		return exitUsage
	case !runsWorker && fs.NArg() > 0:
		fmt.Fprintf(c.stderr, "unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	switch cmd {
	case barrier.CommandSupervise:
		status, err := c.supervise(ctx, cfg, fs.Args())
		if err != nil {
			fmt.Fprintln(c.stderr, "supervise:", err)
		}
		return status
	case "stop":
		if *attempt < 1 || *grace < 0 {
			fmt.Fprintln(c.stderr, "stop needs --attempt N (N >= 1) and a --grace of 0 or more")
			return exitUsage
		}
		ctx, cancel := context.WithTimeout(ctx, *grace+*timeout)
		defer cancel()
		return c.exitOf("stop", c.stop(ctx, cfg.Socket, *attempt, *grace))
	case "open":
		if *attempt < 1 {
			fmt.Fprintln(c.stderr, "open needs --attempt N (N >= 1)")
			return exitUsage
		}
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		err := c.open(ctx, cfg.Socket, *attempt)
		if errors.Is(err, barrier.ErrNotWaiting) && barrier.OpenedBefore(cfg.AttemptFile, *attempt) {
			fmt.Fprintf(c.stderr, "opened for attempt %d before\n", *attempt)
			return exitOpenedBefore
		}
		return c.exitOf("open", err)
	default:
		if _, err := c.wait(ctx, cfg); err != nil {
			if ctx.Err() != nil {
				return exitSIGTERM
			}
			fmt.Fprintln(c.stderr, "wait:", err)
			return exitError
		}
		return exitOK
	}
}

// exitOf is the exit code of an open's or a stop's outcome, which the node agent reads.
func (c cli) exitOf(verb string, err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, barrier.ErrStale):
		fmt.Fprintln(c.stderr, "refused:", err)
		return exitStale
	case errors.Is(err, barrier.ErrNotWaiting):
		fmt.Fprintln(c.stderr, err)
		return exitNotWaiting
	}
	fmt.Fprintln(c.stderr, verb+":", err)
	return exitError
}
