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
	// exitNotSaved: a checkpoint's worker did not say it saved (the timeout passed, or it
	// was stopped).
	exitNotSaved = 6
	// exitSIGTERM: the pod is terminating (128+SIGTERM); it is not restarted then.
	exitSIGTERM = 143
	// supervise's, when the worker's command cannot be run, are the shell's
	// (barrier.ExecError.ExitStatus): 127 no such program, 126 not executable.
)

// The process's side effects, as fields: the tests run main's logic in process.
type cli struct {
	stderr    io.Writer
	wait      func(context.Context, barrier.Config) (int, error)
	open      func(context.Context, string, int, int) error
	supervise func(context.Context, barrier.Config, []string) (int, error)
	stop      func(context.Context, string, int, time.Duration) error
	// checkpoint and done: the request to save, and the worker's word that it saved.
	checkpoint func(context.Context, string, int, string, time.Duration) (barrier.CheckpointAnswer, error)
	done       func(context.Context, string, int, int64) error
	getenv     func(string) string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	c := cli{stderr: os.Stderr, wait: barrier.Wait, open: barrier.Open, supervise: barrier.Supervise, stop: stopWorker,
		checkpoint: barrier.Checkpoint, done: barrier.CheckpointDone, getenv: os.Getenv}
	os.Exit(c.run(ctx, os.Args[1:]))
}

// stopWorker is barrier.Stop without the worker's last save, which the node agent records
// and this command does not print.
func stopWorker(ctx context.Context, socket string, attempt int, grace time.Duration) error {
	_, err := barrier.Stop(ctx, socket, attempt, grace)
	return err
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
	// Which index the worker is, or, in a warm spare, what waits for the index.
	id, err := barrier.ReadIdentity(getenv)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return exitUsage
	}
	cfg.Identity = id
	// How the run saves on notice (spec.checkpoint): the container's SIGTERM asks first.
	if v := getenv(barrier.EnvCheckpointSignal); v != "" {
		cfg.CheckpointSignal = v
		if d, err := time.ParseDuration(getenv(barrier.EnvCheckpointTimeout)); err == nil && d > 0 {
			cfg.CheckpointTimeout = d
		}
	}
	fs := flag.NewFlagSet("faultline-barrier", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.StringVar(&cfg.AttemptFile, "attempt-file", barrier.AttemptFile, "the file the workers read their attempt from")
	fs.StringVar(&cfg.Socket, "socket", barrier.DefaultSocket, "where the waiting barrier listens for open")
	fs.StringVar(&cfg.TerminationLog, "termination-log", barrier.DefaultTerminationLog, "the container's termination message file")
	fs.StringVar(&cfg.CheckpointDir, "checkpoint-dir", barrier.CheckpointDir, "supervise: where the worker writes "+barrier.CheckpointDoneFile+" once it saved")
	index := fs.Int("index", barrier.NoIndex, "open: the index it hands a warm spare's barrier (none: the pod's own)")
	attempt := fs.Int("attempt", 0, "open, stop, checkpoint: the attempt the gang is to run (checkpoint: runs)")
	timeout := fs.Duration("timeout", 10*time.Second, "open, stop: how long to wait for the barrier's answer (stop: beyond the grace period); checkpoint: for the worker to say it saved")
	grace := fs.Duration("grace", 30*time.Second, "stop: how long the worker has after SIGTERM before SIGKILL")
	sig := fs.String("signal", "SIGUSR1", "checkpoint: the signal that asks the worker to save (SIGUSR1, SIGUSR2, SIGTERM, SIGINT)")
	step := fs.Int64("step", -1, "checkpoint-done: the step the worker saved (-1: none said)")
	fs.Usage = func() {
		fmt.Fprintln(c.stderr, "usage: faultline-barrier [wait] [flags]\n"+
			"       faultline-barrier supervise [flags] -- COMMAND [ARG...]\n       faultline-barrier open --attempt N [--index I] [flags]\n       faultline-barrier stop --attempt N [--grace D] [flags]\n"+
			"       faultline-barrier checkpoint --attempt N [--signal S] [--timeout D] [flags]\n       faultline-barrier checkpoint-done [--step N] [flags]  (in the worker: it saved)")
		fs.PrintDefaults()
	}
	cmd := "wait"
	if len(args) > 0 && slices.Contains([]string{"wait", "open", barrier.CommandSupervise, "stop", "checkpoint", "checkpoint-done"}, args[0]) {
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
	case "checkpoint":
		if *attempt < 1 || *timeout <= 0 {
			fmt.Fprintln(c.stderr, "checkpoint needs --attempt N (N >= 1) and a --timeout above 0")
			return exitUsage
		}
		ctx, cancel := context.WithTimeout(ctx, *timeout+10*time.Second)
		defer cancel()
		a, err := c.checkpoint(ctx, cfg.Socket, *attempt, *sig, *timeout)
		if err != nil {
			return c.exitOf("checkpoint", err)
		}
		fmt.Fprintln(c.stderr, describeAnswer(a))
		if !a.Saved {
			return exitNotSaved
		}
		return exitOK
	case "checkpoint-done":
		// The worker's attempt is the attempt file's (FAULTLINE_ATTEMPT is its pod's first).
		n, err := barrier.ReadAttempt(cfg.AttemptFile)
		if err == nil && n == 0 {
			err = fmt.Errorf("%s holds no attempt: is this a worker its barrier supervises?", cfg.AttemptFile)
		}
		if err != nil {
			fmt.Fprintln(c.stderr, "checkpoint-done:", err)
			return exitError
		}
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		return c.exitOf("checkpoint-done", c.done(ctx, cfg.Socket, n, *step))
	case "open":
		if *attempt < 1 {
			fmt.Fprintln(c.stderr, "open needs --attempt N (N >= 1)")
			return exitUsage
		}
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		err := c.open(ctx, cfg.Socket, *attempt, *index)
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

// describeAnswer is a checkpoint's answer, for people.
func describeAnswer(a barrier.CheckpointAnswer) string {
	switch {
	case a.Exit != nil:
		return fmt.Sprintf("the worker ended (status %d)", *a.Exit)
	case a.Saved && a.Step != nil:
		return fmt.Sprintf("the worker saved step %d", *a.Step)
	case a.Saved:
		return "the worker saved"
	}
	return "the worker did not save: " + a.Reason
}
