package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"
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
	p := b.startProfile(ctx, time.Duration(profileSeconds)*time.Second)
	if err := fn(); err != nil {
		return err
	}
	top, err := p.save(ctx, fmt.Sprintf("%s-controller-%d-workers-qps%d.pprof", b.cfg.stem, n, b.results.qps))
	if err != nil {
		return err
	}
	b.results.profile = fmt.Sprintf("Controller CPU profile during faultline's %d-worker node-shutdown restart (%s):\n\n%s", n, p.length, top)
	return nil
}

// cpuProfile is a CPU profile of the controller being taken.
type cpuProfile struct {
	length   time.Duration
	launcher string // the binary, for its symbols
	got      chan profileData
}

type profileData struct {
	data []byte
	err  error
}

// startProfile starts taking the controller's CPU profile over the next length.
func (b *bench) startProfile(ctx context.Context, length time.Duration) *cpuProfile {
	p := &cpuProfile{length: length, launcher: b.bin.launcher, got: make(chan profileData, 1)}
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", b.pprof, int(length.Seconds()))
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			p.got <- profileData{err: err}
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			p.got <- profileData{err: err}
			return
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		p.got <- profileData{data, err}
	}()
	return p
}

// save waits for the profile, writes it to path and returns its top entries as markdown.
func (p *cpuProfile) save(ctx context.Context, path string) (string, error) {
	r := <-p.got
	if r.err != nil {
		return "", fmt.Errorf("controller CPU profile: %w", r.err)
	}
	if err := os.WriteFile(path, r.data, 0o644); err != nil {
		return "", err
	}
	top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount", "15", p.launcher, path).Output()
	if err != nil {
		return "", fmt.Errorf("go tool pprof %s: %w", path, err)
	}
	return fmt.Sprintf("`%s`:\n\n```\n%s```", path, strings.Join(strings.SplitN(string(top), "\n", 22), "\n")), nil
}

// heapProfile takes the controller's heap profile now, writes it to path and returns its top
// entries by space in use as markdown: where the memory that grows with the pods goes.
func (b *bench) heapProfile(ctx context.Context, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/heap", b.pprof), nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("controller heap profile: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("controller heap profile: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return "", err
	}
	top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-sample_index=inuse_space", "-nodecount", "15", b.bin.launcher, path).Output()
	if err != nil {
		return "", fmt.Errorf("go tool pprof %s: %w", path, err)
	}
	return fmt.Sprintf("`%s`:\n\n```\n%s```", path, strings.Join(strings.SplitN(string(top), "\n", 22), "\n")), nil
}
