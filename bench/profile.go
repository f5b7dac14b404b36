package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// profileSeconds bounds the controller's CPU profile of one restart.
var profileSeconds = 30

// profiled runs fn, and when it is a faultline system's first node-shutdown restart of the
// profiled gang size, takes the controller's and the API server's CPU profiles meanwhile:
// the profiles are kept next to the report, the controller's top entries and the share of
// the API server's CPU that admission policies took go into it.
func (b *bench) profiled(ctx context.Context, s system, n int, first bool, fn func() error) error {
	if !first || n != b.cfg.profileWorkers || (s.name() != sysFaultline && s.name() != sysFaultlineInPlace) {
		return fn()
	}
	length := time.Duration(profileSeconds) * time.Second
	ctrl := b.startProfile(ctx, length)
	api := b.startAPIServerProfile(ctx, length)
	if err := fn(); err != nil {
		return err
	}
	top, err := ctrl.save(ctx, fmt.Sprintf("%s-controller-%s-%d-workers-qps%d.pprof", b.cfg.stem, slug(s.name()), n, b.results.qps))
	if err != nil {
		return err
	}
	b.results.profile += fmt.Sprintf("Controller CPU profile during %s's %d-worker node-shutdown restart (%s):\n\n%s\n\n", s.name(), n, length, top)
	share, err := api.admissionShare(fmt.Sprintf("%s-apiserver-%s-%d-workers-qps%d.pprof", b.cfg.stem, slug(s.name()), n, b.results.qps))
	if err != nil {
		return err
	}
	b.results.profile += fmt.Sprintf("API server CPU profile during %s's %d-worker node-shutdown restart (%s from the fault): %s\n\n", s.name(), n, length, share)
	return nil
}

// startAPIServerProfile starts taking the API server's CPU profile over the next length,
// through the bench's client (kube-apiserver serves /debug/pprof to its admin by default).
func (b *bench) startAPIServerProfile(ctx context.Context, length time.Duration) *cpuProfile {
	p := &cpuProfile{length: length, got: make(chan profileData, 1)}
	go func() {
		data, err := b.c.Client.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(int(length.Seconds()))).DoRaw(ctx)
		p.got <- profileData{data, err}
	}()
	return p
}

// admissionShare waits for an API server profile, writes it to path and says how much of
// its CPU went to admission policies (ValidatingAdmissionPolicy and
// MutatingAdmissionPolicy: matching, converting the object for CEL, evaluating).
func (p *cpuProfile) admissionShare(path string) (string, error) {
	r := <-p.got
	if r.err != nil {
		return "", fmt.Errorf("API server CPU profile: %w", r.err)
	}
	if err := os.WriteFile(path, r.data, 0o644); err != nil {
		return "", err
	}
	prof, err := profile.ParseData(r.data)
	if err != nil {
		return "", fmt.Errorf("API server CPU profile %s: %w", path, err)
	}
	policies, total, err := cpuIn(prof, admissionPolicyPackage)
	if err != nil {
		return "", fmt.Errorf("API server CPU profile %s: %w", path, err)
	}
	if total == 0 {
		return fmt.Sprintf("no CPU samples (`%s`)", path), nil
	}
	return fmt.Sprintf("**admission policies %.0f%%** of its CPU (%s of %s; `%s`)",
		100*float64(policies)/float64(total), time.Duration(policies).Round(10*time.Millisecond), time.Duration(total).Round(10*time.Millisecond), path), nil
}

// admissionPolicyPackage is where kube-apiserver's admission policies run: a sample with a
// frame in it is CPU the policies cost.
const admissionPolicyPackage = "k8s.io/apiserver/pkg/admission/plugin/policy/"

// cpuIn sums a CPU profile's samples (in nanoseconds) whose stack has a function of pkg, and
// all of them.
func cpuIn(prof *profile.Profile, pkg string) (in, total int64, err error) {
	idx := -1
	for i, st := range prof.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			idx = i
		}
	}
	if idx < 0 {
		return 0, 0, errors.New("no cpu/nanoseconds samples")
	}
	for _, smp := range prof.Sample {
		v := smp.Value[idx]
		total += v
		if stackHas(smp, pkg) {
			in += v
		}
	}
	return in, total, nil
}

func stackHas(smp *profile.Sample, pkg string) bool {
	for _, loc := range smp.Location {
		for _, ln := range loc.Line {
			if ln.Function != nil && strings.HasPrefix(ln.Function.Name, pkg) {
				return true
			}
		}
	}
	return false
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
