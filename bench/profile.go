package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
)

// profileSeconds bounds the controller's CPU profile of one restart.
var profileSeconds = 30

// profiled runs fn, and when it is faultline's first node-shutdown restart of the profiled
// gang size, takes the controller's CPU profile meanwhile: the profile is kept next to the
// report and its top entries go into it.
func (b *bench) profiled(ctx context.Context, s system, n int, first bool, fn func() error) error {
	if !first || s.name() != sysFaultline || n != b.cfg.profileWorkers {
		return fn()
	}
	type result struct {
		data []byte
		err  error
	}
	got := make(chan result, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", b.pprof, profileSeconds), nil)
		if err != nil {
			got <- result{err: err}
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		got <- result{data, err}
	}()
	if err := fn(); err != nil {
		return err
	}
	r := <-got
	if r.err != nil {
		return fmt.Errorf("controller CPU profile: %w", r.err)
	}
	path := fmt.Sprintf("%s-controller-%d-workers-qps%d.pprof", b.cfg.stem, n, b.results.qps)
	if err := os.WriteFile(path, r.data, 0o644); err != nil {
		return err
	}
	top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount", "15", b.bin.launcher, path).Output()
	if err != nil {
		return fmt.Errorf("go tool pprof %s: %w", path, err)
	}
	b.results.profile = fmt.Sprintf("Controller CPU profile during faultline's %d-worker node-shutdown restart (%d s, `%s`):\n\n```\n%s```",
		n, profileSeconds, path, strings.Join(strings.SplitN(string(top), "\n", 22), "\n"))
	return nil
}
