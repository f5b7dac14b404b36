package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/faultline-dev/faultline/pkg/barrier"
)

// The node agent reads open's outcome from its exit code through ExecSync: each must be
// the one it expects.
func TestExitCodes(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	opened := filepath.Join(t.TempDir(), "attempt")
	if err := barrier.WriteAttempt(opened, 2); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		ctx     context.Context
		args    []string
		openErr error
		waitErr error
		env     string // FAULTLINE_ATTEMPT
		want    int
	}{
		"wait opened":           {args: nil, want: exitOK},
		"wait, explicit":        {args: []string{"wait"}, want: exitOK},
		"wait ended by SIGTERM": {ctx: cancelled, args: nil, waitErr: context.Canceled, want: exitSIGTERM},
		"wait failed":           {args: nil, waitErr: errors.New("bad file"), want: exitError},
		"open":                  {args: []string{"open", "--attempt", "2"}, want: exitOK},
		"open refused as stale": {args: []string{"open", "--attempt", "2"}, openErr: fmt.Errorf("x: %w", barrier.ErrStale), want: exitStale},
		"open finds no barrier": {args: []string{"open", "--attempt", "2"}, openErr: fmt.Errorf("x: %w", barrier.ErrNotWaiting), want: exitNotWaiting},
		"open fails otherwise":  {args: []string{"open", "--attempt", "2"}, openErr: errors.New("eof"), want: exitError},
		// A barrier in the worker container opened for 2 runs its worker: it answers that
		// it does not wait, and its attempt file says so.
		"open finds it opened before": {args: []string{"open", "--attempt", "2", "--attempt-file", opened}, openErr: fmt.Errorf("x: %w", barrier.ErrNotWaiting), want: exitOpenedBefore},
		"open finds an older attempt": {args: []string{"open", "--attempt", "3", "--attempt-file", opened}, openErr: fmt.Errorf("x: %w", barrier.ErrNotWaiting), want: exitNotWaiting},
		"open without an attempt":     {args: []string{"open"}, want: exitUsage},
		"unknown flag":                {args: []string{"--nope"}, want: exitUsage},
		"stray argument":              {args: []string{"open", "--attempt", "2", "now"}, want: exitUsage},
		"a garbled pod attempt":       {args: []string{"wait"}, env: "two", want: exitUsage},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			var stderr bytes.Buffer
			c := cli{
				stderr: &stderr,
				wait:   func(context.Context, barrier.Config) (int, error) { return 1, tc.waitErr },
				open:   func(context.Context, string, int, int) error { return tc.openErr },
				getenv: func(string) string { return tc.env },
			}
			if got := c.run(ctx, tc.args); got != tc.want {
				t.Errorf("exit %d, want %d; stderr %s", got, tc.want, stderr.String())
			}
		})
	}
}

// TestWaitKnowsItsPodsAttempt: the barrier reads the attempt its pod was made for from
// FAULTLINE_ATTEMPT, and opens for no older one (barrier.Config.MadeFor).
func TestWaitKnowsItsPodsAttempt(t *testing.T) {
	var got barrier.Config
	c := cli{stderr: io.Discard, getenv: func(k string) string {
		if k == barrier.EnvAttempt {
			return "3"
		}
		return ""
	}, wait: func(_ context.Context, cfg barrier.Config) (int, error) { got = cfg; return 3, nil }}
	if code := c.run(context.Background(), []string{"wait"}); code != exitOK || got.MadeFor != 3 {
		t.Errorf("exit %d, MadeFor %d; want 0 and 3", code, got.MadeFor)
	}
}

// envRunMain makes the test binary run main (TestSuperviseWithACommandThatCannotRun).
const envRunMain = "FAULTLINE_BARRIER_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// TestSuperviseWithACommandThatCannotRun, with the real process: supervise waits for the go
// signal, writes the attempt file, and only then finds the worker's command missing: it
// exits as a shell's would (127), an exit of the attempt judged as the worker's, where
// failing before the wait would restart the pod at once, again and again (the kubelet has
// no backoff for RestartAllContainers).
func TestSuperviseWithACommandThatCannotRun(t *testing.T) {
	dir := t.TempDir()
	socket, file := filepath.Join(dir, "s.sock"), filepath.Join(dir, "attempt")
	cmd := exec.Command(os.Args[0], "supervise", "--socket", socket, "--attempt-file", file, "--", filepath.Join(dir, "nope"))
	cmd.Env = append(os.Environ(), envRunMain+"=1")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		err := barrier.Open(ctx, socket, 2, barrier.NoIndex)
		if err == nil {
			break
		}
		if !errors.Is(err, barrier.ErrNotWaiting) || ctx.Err() != nil {
			cmd.Process.Kill()
			t.Fatalf("open: %v; stderr %s", err, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 127 {
		t.Fatalf("exit %v, want 127, the shell's for no such program; stderr %s", err, stderr.String())
	}
	if n, err := barrier.ReadAttempt(file); err != nil || n != 2 {
		t.Errorf("attempt file: %d, %v; want 2, written before the command was looked for", n, err)
	}
}

// TestSuperviseAndStop: supervise runs the worker's command as given and exits with the
// worker's status; stop's outcome is its exit code, as open's, and it gives the barrier
// its grace period and the time to answer beyond it.
func TestSuperviseAndStop(t *testing.T) {
	var argv []string
	var cfg barrier.Config
	c := cli{stderr: io.Discard, getenv: func(string) string { return "" },
		supervise: func(_ context.Context, got barrier.Config, a []string) (int, error) {
			cfg, argv = got, a
			return 7, nil
		}}
	if code := c.run(context.Background(), []string{"supervise", "--socket", "/s", "--", "prog", "--attempt", "9"}); code != 7 ||
		!slices.Equal(argv, []string{"prog", "--attempt", "9"}) || cfg.Socket != "/s" {
		t.Errorf("supervise: exit %d, argv %q, socket %q; want 7, the command as given (its flags its own), /s", code, argv, cfg.Socket)
	}
	for _, args := range [][]string{{"supervise"}, {"supervise", "--"}} {
		if code := c.run(context.Background(), args); code != exitUsage {
			t.Errorf("%q without a command: exit %d, want %d", args, code, exitUsage)
		}
	}
	if code := c.run(context.Background(), []string{"exec", "--", "prog"}); code != exitUsage {
		t.Errorf("exec, a command of no barrier any more: exit %d, want %d", code, exitUsage)
	}
	for name, tc := range map[string]struct {
		args    []string
		stopErr error
		want    int
	}{
		"stopped":         {args: []string{"stop", "--attempt", "2", "--grace", "5s"}, want: exitOK},
		"stale":           {args: []string{"stop", "--attempt", "2"}, stopErr: fmt.Errorf("x: %w", barrier.ErrStale), want: exitStale},
		"no barrier":      {args: []string{"stop", "--attempt", "2"}, stopErr: fmt.Errorf("x: %w", barrier.ErrNotWaiting), want: exitNotWaiting},
		"other error":     {args: []string{"stop", "--attempt", "2"}, stopErr: errors.New("eof"), want: exitError},
		"no attempt":      {args: []string{"stop"}, want: exitUsage},
		"negative grace":  {args: []string{"stop", "--attempt", "2", "--grace", "-1s"}, want: exitUsage},
		"stray arguments": {args: []string{"stop", "--attempt", "2", "now"}, want: exitUsage},
	} {
		t.Run(name, func(t *testing.T) {
			var grace time.Duration
			var deadline time.Time
			c := cli{stderr: io.Discard, getenv: func(string) string { return "" },
				stop: func(ctx context.Context, _ string, _ int, g time.Duration) error {
					grace, deadline = g, time.Time{}
					if dl, ok := ctx.Deadline(); ok {
						deadline = dl
					}
					return tc.stopErr
				}}
			start := time.Now()
			if got := c.run(context.Background(), tc.args); got != tc.want {
				t.Errorf("exit %d, want %d", got, tc.want)
			}
			if name == "stopped" && (grace != 5*time.Second || deadline.Sub(start) < 15*time.Second) {
				t.Errorf("stop got grace %s and %s to answer; want 5s, and the grace period and the timeout", grace, deadline.Sub(start))
			}
		})
	}
}
