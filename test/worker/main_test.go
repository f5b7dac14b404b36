package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/faultline-dev/faultline/pkg/framework/hinttest/realoutput"
	"github.com/faultline-dev/faultline/test/cluster"
)

// The worker forms its gang from whichever framework's environment the pod has: the jax
// plugin's, the pytorch plugin's env://, or faultline's own.
func TestParseFindsTheGangInEachFrameworksEnv(t *testing.T) {
	common := map[string]string{envRun: "llm", envAttempt: "2", envIndex: "1", envWorldSize: "4", envService: "llm.ml.svc"}
	for name, tc := range map[string]struct {
		env              map[string]string
		index, world     int
		coordinator, job string
	}{
		"faultline's own": {coordinator: "llm-0.llm.ml.svc:1234", index: 1, world: 4, job: "worker"},
		"jax": {env: map[string]string{envCoordinator: "llm-0.llm.ml.svc:1234", envProcessID: "1", envNumProcs: "4"},
			coordinator: "llm-0.llm.ml.svc:1234", index: 1, world: 4, job: "jax_worker"},
		"pytorch env://": {env: map[string]string{envMasterAddr: "llm-0.llm.ml.svc", envMasterPort: "29500", envRank: "3", envTorchWorld: "4"},
			coordinator: "llm-0.llm.ml.svc:29500", index: 3, world: 4, job: "worker"},
	} {
		t.Run(name, func(t *testing.T) {
			for _, k := range []string{envCoordinator, envProcessID, envNumProcs, envMasterAddr, envMasterPort, envRank, envTorchWorld} {
				t.Setenv(k, "")
			}
			for k, v := range common {
				t.Setenv(k, v)
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			c, err := parse(nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.coordinator != tc.coordinator || c.index != tc.index || c.world != tc.world || c.job != tc.job {
				t.Errorf("coordinator %s index %d world %d job %s; want %s %d %d %s", c.coordinator, c.index, c.world, c.job, tc.coordinator, tc.index, tc.world, tc.job)
			}
		})
	}
}

// TestExitAtOnceNeedsNoEnvironment: an init container that stands in for an open barrier
// exits 0 without a gang to join, where any other worker needs one.
func TestExitAtOnceNeedsNoEnvironment(t *testing.T) {
	for _, name := range []string{envCoordinator, envMasterAddr, envRun, envService, envProcessID, envNumProcs} {
		t.Setenv(name, "")
	}
	if _, err := parse(nil); err == nil {
		t.Fatal("parse without a gang's environment: want an error")
	}
	c, err := parse([]string{"--exit-at-once"})
	if err != nil || !c.exitAtOnce {
		t.Fatalf("parse --exit-at-once without a gang's environment: %+v, %v; want exitAtOnce and no error", c, err)
	}
}

// A pod that restarts in place names the attempt file, which wins over FAULTLINE_ATTEMPT
// (the pod's first attempt); without it the env var is the attempt.
func TestParseReadsTheAttemptFileWhenNamed(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "attempt")
	if err := os.WriteFile(file, []byte("3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		file, want string
		wantErr    bool
	}{
		"no file named: the env var":   {want: "1"},
		"the file wins":                {file: file, want: "3"},
		"a named file that is missing": {file: filepath.Join(dir, "none"), wantErr: true},
		"an empty file":                {file: empty, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(envCoordinator, "127.0.0.1:1234")
			t.Setenv(envProcessID, "0")
			t.Setenv(envNumProcs, "1")
			t.Setenv(envAttempt, "1")
			t.Setenv(envAttemptFile, tc.file)
			c, err := parse(nil)
			if tc.wantErr {
				if err == nil {
					t.Errorf("attempt %q, want an error", c.attempt)
				}
				return
			}
			if err != nil || c.attempt != tc.want {
				t.Errorf("attempt %q, %v; want %q", c.attempt, err, tc.want)
			}
		})
	}
}

// --replay prints the recorded worker's output line by line at its original offsets from
// the gang's start, and exits with its code when its output ended: worker 2 of the JAX gang
// whose every process was aborted, 14.167487 s after the recorded gang's first line.
func TestReplay(t *testing.T) {
	rec, err := realoutput.Load("jax-0.11.2-cpu-worker2-raises")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var out strings.Builder
	var waits []time.Time
	r := replayer{out: &out, sleep: func(t time.Time) { waits = append(waits, t) }}
	if code := r.replay(rec, 2, start); code != 134 {
		t.Errorf("exit code %d, want 134", code)
	}
	if out.String() != rec.Workers[2].Log {
		t.Errorf("printed %q, want the recorded log", out.String())
	}
	if want := start.Add(14*time.Second + 167487*time.Microsecond); len(waits) == 0 || !waits[len(waits)-1].Equal(want) {
		t.Errorf("exits at %v, want %s", waits[len(waits)-1:], want)
	}
	if !waits[0].Equal(start.Add(time.Second)) { // its first line, DEVCHECK 02:26:37, a second after the gang's first
		t.Errorf("first line at %s, want a second after the start", waits[0])
	}
	for i := 1; i < len(waits); i++ {
		if waits[i].Before(waits[i-1]) {
			t.Fatalf("line %d printed at %s, before the line above it (%s)", i, waits[i], waits[i-1])
		}
	}
	if code := r.replay(rec, 4, start); code != 2 {
		t.Errorf("an index the recording lacks: exit %d, want 2", code)
	}
	if _, err := parse([]string{"--replay", "nonesuch"}); err == nil {
		t.Error("--replay of an unknown recording: no error")
	}
}

// --hang blocks the process for ever: no more output, SIGTERM ignored, until SIGKILL. The
// test runs the worker as a gang of one and sends it SIGTERM once it says it hangs.
func TestHangIgnoresSIGTERM(t *testing.T) {
	cmd, out, done := startGangOfOne(t, "--hang", "--fail-after", "100ms", "--log-every", "50ms")
	waitOutput(t, out, "blocked in a collective")
	if !strings.Contains(out.String(), "worker 0: step 1") {
		t.Errorf("--log-every logged no step before the hang:\n%s", out.String())
	}
	hungAt := len(out.String())
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("a hung worker ended on SIGTERM: %v\n%s", err, out.String())
	case <-time.After(time.Second):
	}
	if more := out.String()[hungAt:]; more != "" {
		t.Errorf("a hung worker wrote on: %q", more)
	}
}

// --fail-on-usr1 fails when the test says, however long after the rendezvous: the worker
// still runs after a wait longer than --fail-after's default, and exits 1 with its traceback
// on SIGUSR1.
func TestFailOnUSR1WaitsForTheSignal(t *testing.T) {
	cmd, out, done := startGangOfOne(t, "--fail-index", "0", "--fail-on-usr1", "--heartbeat", "100ms")
	waitOutput(t, out, "will fail (exit) on SIGUSR1")
	select {
	case err := <-done:
		t.Fatalf("the worker failed before SIGUSR1: %v\n%s", err, out.String())
	case <-time.After(3 * time.Second): // longer than --fail-after's default (2 s)
	}
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != exitError {
			t.Fatalf("after SIGUSR1: %v, want exit %d\n%s", err, exitError, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the worker did not fail within 20 s of SIGUSR1:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "ValueError: injected application error in worker 0 (attempt 1)") {
		t.Errorf("no traceback after SIGUSR1:\n%s", out.String())
	}
}

// startGangOfOne builds the worker and runs it as a gang of one (index 0, attempt 1) with
// args; done receives its Wait's result. The process is killed when the test ends.
func startGangOfOne(t *testing.T, args ...string) (*exec.Cmd, *syncBuffer, <-chan error) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the worker")
	}
	bin := filepath.Join(t.TempDir(), "worker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), envCoordinator+"="+cluster.MustFreeAddress(t), envProcessID+"=0", envNumProcs+"=1", envAttempt+"=1", envAttemptFile+"=")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// The goroutine above reaps it; done is buffered, so no one need receive.
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, out, done
}

// waitOutput waits up to 20 s for the worker to print want.
func waitOutput(t *testing.T, out *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the worker never printed %q:\n%s", want, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer that the process's output and the test may use at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
