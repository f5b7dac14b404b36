package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/faultline-dev/faultline/pkg/barrier"
)

// The node agent reads open's outcome from its exit code through ExecSync: each must be
// the one it expects.
func TestExitCodes(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for name, tc := range map[string]struct {
		ctx     context.Context
		args    []string
		openErr error
		waitErr error
		env     string // FAULTLINE_ATTEMPT
		want    int
	}{
		"wait opened":             {args: nil, want: exitOK},
		"wait, explicit":          {args: []string{"wait"}, want: exitOK},
		"wait ended by SIGTERM":   {ctx: cancelled, args: nil, waitErr: context.Canceled, want: exitSIGTERM},
		"wait failed":             {args: nil, waitErr: errors.New("bad file"), want: exitError},
		"open":                    {args: []string{"open", "--attempt", "2"}, want: exitOK},
		"open refused as stale":   {args: []string{"open", "--attempt", "2"}, openErr: fmt.Errorf("x: %w", barrier.ErrStale), want: exitStale},
		"open finds no barrier":   {args: []string{"open", "--attempt", "2"}, openErr: fmt.Errorf("x: %w", barrier.ErrNotWaiting), want: exitNotWaiting},
		"open fails otherwise":    {args: []string{"open", "--attempt", "2"}, openErr: errors.New("eof"), want: exitError},
		"open without an attempt": {args: []string{"open"}, want: exitUsage},
		"unknown flag":            {args: []string{"--nope"}, want: exitUsage},
		"stray argument":          {args: []string{"open", "--attempt", "2", "now"}, want: exitUsage},
		"a garbled pod attempt":   {args: []string{"wait"}, env: "two", want: exitUsage},
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
				open:   func(context.Context, string, int) error { return tc.openErr },
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
