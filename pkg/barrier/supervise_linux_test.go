//go:build linux

package barrier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperSuperviseEnv makes the test binary a supervising barrier over the worker script in
// its directory (superviseHelper): a process of its own, since a subreaper reaps every child
// of its process.
const helperSuperviseEnv = "BARRIER_TEST_HELPER_SUPERVISE"

func superviseHelper(dir string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	cfg := Config{AttemptFile: filepath.Join(dir, "attempt"), Socket: filepath.Join(dir, "b.sock"),
		CheckpointDir: filepath.Join(dir, "checkpoint"), Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		CheckpointSignal: os.Getenv(EnvCheckpointSignal), CheckpointTimeout: 10 * time.Second}
	status, err := Supervise(ctx, cfg, []string{"/bin/sh", filepath.Join(dir, "worker.sh")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "supervise:", err)
	}
	return status
}

// supervised starts a supervising barrier over script, a worker written to a directory of
// its own that it returns; the barrier's process is waited for by the test's end.
func supervised(t *testing.T, script string, env ...string) (dir string, proc *exec.Cmd) {
	t.Helper()
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "worker.sh"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), helperSuperviseEnv+"="+dir), env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A container's end kills every process in it; a test's must kill what the
		// worker started itself (it wrote their pids beside its script).
		names, _ := filepath.Glob(filepath.Join(dir, "[dlw]*"))
		for _, name := range names {
			if b, err := os.ReadFile(name); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
					syscall.Kill(-pid, syscall.SIGKILL) // its process group (a shell's children)
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
	})
	waitFor(t, "the barrier's socket", func() bool { _, err := os.Stat(filepath.Join(dir, "b.sock")); return err == nil })
	return dir, cmd
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
	}
}

// pidIn reads a pid the worker wrote to name in dir, once it is there.
func pidIn(t *testing.T, dir, name string) int {
	t.Helper()
	var pid int
	waitFor(t, name, func() bool {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return pid
}

// alive: the process runs (a zombie, dead but not reaped yet, counts as ended).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && !strings.HasPrefix(strings.TrimSpace(string(b[i+1:])), "Z")
}

// The worker ignores SIGTERM and leaves a process in a session of its own: a stop ends both
// (SIGKILL after the grace period, the detached one as an orphan the barrier reaps), answers
// only then, and the barrier waits again; the next open runs the worker again in the same
// process, with the new attempt in the attempt file.
func TestSuperviseRestartsItsWorkerInPlace(t *testing.T) {
	dir, proc := supervised(t, `
n=$(cat "$(dirname "$0")/attempt")
setsid sh -c 'echo $$ > "$1/detached.$2"; exec sleep 300' sh "$(dirname "$0")" "$n" &
trap '' TERM
echo $$ > "$(dirname "$0")/worker.$n"
while :; do sleep 1; done
`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	socket := filepath.Join(dir, "b.sock")
	if _, err := Stop(ctx, socket, 1, time.Second); err != nil {
		t.Fatalf("a stop before any open: %v, want nothing to stop", err)
	}
	if err := Open(ctx, socket, 1, NoIndex); err != nil {
		t.Fatal(err)
	}
	worker, detached := pidIn(t, dir, "worker.1"), pidIn(t, dir, "detached.1")
	if err := Open(ctx, socket, 2, NoIndex); !errors.Is(err, ErrNotWaiting) {
		t.Errorf("an open while the worker runs: %v, want ErrNotWaiting", err)
	}
	if _, err := Stop(ctx, socket, 1, time.Second); !errors.Is(err, ErrStale) {
		t.Errorf("a stop for the attempt the worker runs: %v, want ErrStale", err)
	}
	begin := time.Now()
	if _, err := Stop(ctx, socket, 2, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took < 300*time.Millisecond {
		t.Errorf("the stop answered after %s, before the grace period the worker ignoring SIGTERM had", took)
	}
	if alive(worker) || alive(detached) {
		t.Fatalf("after the stop: worker %d alive %v, its detached process %d alive %v; want neither", worker, alive(worker), detached, alive(detached))
	}
	if err := Open(ctx, socket, 2, NoIndex); err != nil {
		t.Fatal(err)
	}
	again := pidIn(t, dir, "worker.2")
	pidIn(t, dir, "detached.2") // for the cleanup to kill
	if !alive(again) || proc.ProcessState != nil {
		t.Errorf("after the second open: worker %d alive %v; want it running under the same barrier", again, alive(again))
	}
	if n, _ := ReadAttempt(filepath.Join(dir, "attempt")); n != 2 {
		t.Errorf("attempt file %d, want 2", n)
	}
	if err := Open(ctx, socket, 1, NoIndex); !errors.Is(err, ErrNotWaiting) {
		t.Errorf("a late open of attempt 1: %v, want refused", err)
	}
}

// The barrier's exit is its worker's: an exit code as it is, a signal as a shell says it.
// What the worker left goes with it.
func TestSuperviseEndsWithItsWorker(t *testing.T) {
	for script, want := range map[string]int{
		"sleep 300 & echo $! > \"$(dirname \"$0\")/left\"; exit 7": 7,
		"kill -9 $$": 137,
	} {
		t.Run(fmt.Sprint(want), func(t *testing.T) {
			dir, proc := supervised(t, script)
			if err := Open(context.Background(), filepath.Join(dir, "b.sock"), 1, NoIndex); err != nil {
				t.Fatal(err)
			}
			err := proc.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != want {
				t.Fatalf("the barrier ended with %v, want exit %d", err, want)
			}
			if _, err := os.Stat(filepath.Join(dir, "left")); err == nil {
				if left := pidIn(t, dir, "left"); alive(left) {
					t.Errorf("process %d the worker left runs on after the barrier ended", left)
				}
			}
		})
	}
}

// The signals a container's first process gets go on to the worker (SIGTERM: the kubelet
// ending the pod; SIGUSR1: a user's), whose exit is the barrier's.
func TestSupervisePassesSignalsOn(t *testing.T) {
	for sig, want := range map[syscall.Signal]int{syscall.SIGTERM: 42, syscall.SIGUSR1: 43} {
		t.Run(sig.String(), func(t *testing.T) {
			dir, proc := supervised(t, `trap 'exit 42' TERM; trap 'exit 43' USR1; echo $$ > "$(dirname "$0")/worker"; while :; do sleep 0.1; done`)
			if err := Open(context.Background(), filepath.Join(dir, "b.sock"), 1, NoIndex); err != nil {
				t.Fatal(err)
			}
			pidIn(t, dir, "worker")
			proc.Process.Signal(sig)
			err := proc.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != want {
				t.Fatalf("the barrier ended with %v, want the worker's %d", err, want)
			}
		})
	}
}

// A supervising barrier remembers the attempt its worker was stopped for: stopped while
// running attempt 1 for attempt 3, it refuses an open of attempt 2 (a stale agent's, or one
// of an attempt the gang gave up) and says why; so it does for a stop that finds it waiting.
// An open of attempt 3 then runs the worker.
func TestSupervisedBarrierRefusesAnOpenOfAnEarlierAttempt(t *testing.T) {
	dir, _ := supervised(t, `echo $$ > "$(dirname "$0")/worker.$(cat "$(dirname "$0")/attempt")"; exec sleep 300`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	socket := filepath.Join(dir, "b.sock")
	if err := Open(ctx, socket, 1, NoIndex); err != nil {
		t.Fatal(err)
	}
	pidIn(t, dir, "worker.1")
	if _, err := Stop(ctx, socket, 3, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	err := Open(ctx, socket, 2, NoIndex)
	if !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "stopped for attempt 3") {
		t.Fatalf("an open of attempt 2 after a stop for 3: %v, want ErrStale naming attempt 3", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "worker.2")); err == nil {
		t.Fatal("the worker ran attempt 2 after its stop for attempt 3")
	}
	// Waiting, a stop for a still later attempt raises the bar again.
	if _, err := Stop(ctx, socket, 5, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := Open(ctx, socket, 4, NoIndex); !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "stopped for attempt 5") {
		t.Fatalf("an open of attempt 4 after a stop for 5 while waiting: %v, want ErrStale naming attempt 5", err)
	}
	if err := Open(ctx, socket, 5, NoIndex); err != nil {
		t.Fatal(err)
	}
	pidIn(t, dir, "worker.5")
	if n, _ := ReadAttempt(filepath.Join(dir, "attempt")); n != 5 {
		t.Errorf("attempt file %d, want 5", n)
	}
}

// A checkpoint request signals the worker of the attempt it names and is answered by what
// the worker does: it writes its done file (with the step), says so through checkpoint-done,
// ignores the signal (the timeout), ends after a signal that asks it to (its exit answers,
// and the barrier stays for the next attempt), or is stopped while it saves. A request of
// another attempt is stale, and the worker never sees its signal.
func TestSuperviseAsksItsWorkerToSave(t *testing.T) {
	dir, _ := supervised(t, `
d="$(dirname "$0")"
n=$(cat "$d/attempt")
trap 'echo 42 > "$d/checkpoint/done"' USR1
trap 'echo saving >> "$d/usr2"' USR2
trap 'echo $n > "$d/ended.$n"; exit 0' TERM
echo $$ > "$d/worker.$n"
while :; do sleep 0.05; done
`)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	socket := filepath.Join(dir, "b.sock")
	if err := Open(ctx, socket, 1, NoIndex); err != nil {
		t.Fatal(err)
	}
	pidIn(t, dir, "worker.1")

	// Another attempt's request: stale, no signal.
	if _, err := Checkpoint(ctx, socket, 2, "SIGUSR1", time.Second); !errors.Is(err, ErrStale) {
		t.Fatalf("checkpoint of attempt 2 while attempt 1 runs: %v, want ErrStale", err)
	}
	if _, err := Checkpoint(ctx, socket, 1, "SIGKILL", time.Second); err == nil {
		t.Fatal("a checkpoint with SIGKILL was taken")
	}
	// The done file, with its step.
	a, err := Checkpoint(ctx, socket, 1, "SIGUSR1", 10*time.Second)
	if err != nil || !a.Saved || a.Step == nil || *a.Step != 42 || a.Exit != nil {
		t.Fatalf("checkpoint by the done file: %+v, %v; want saved step 42", a, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoint", CheckpointDoneFile)); !os.IsNotExist(err) {
		t.Errorf("the done file is still there after the answer (%v): the next request would read it", err)
	}
	// checkpoint-done's word answers it (the worker traps SIGUSR2 and writes no file).
	answered := make(chan CheckpointAnswer, 1)
	go func() {
		a, err := Checkpoint(ctx, socket, 1, "SIGUSR2", 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		answered <- a
	}()
	waitFor(t, "the worker's SIGUSR2", func() bool { _, err := os.Stat(filepath.Join(dir, "usr2")); return err == nil })
	if err := CheckpointDone(ctx, socket, 1, 7); err != nil {
		t.Fatal(err)
	}
	if a := <-answered; !a.Saved || a.Step == nil || *a.Step != 7 {
		t.Fatalf("checkpoint answered by checkpoint-done: %+v, want saved step 7", a)
	}
	// A worker that says nothing: the timeout answers.
	start := time.Now()
	a, err = Checkpoint(ctx, socket, 1, "SIGUSR2", 300*time.Millisecond)
	if err != nil || a.Saved || !strings.Contains(a.Reason, "timeout") {
		t.Fatalf("checkpoint of a worker that says nothing: %+v, %v; want the timeout", a, err)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 5*time.Second {
		t.Errorf("the timeout of 300 ms answered after %s", took)
	}
	// SIGTERM: the worker ends, which answers; the barrier waits for the next attempt.
	a, err = Checkpoint(ctx, socket, 1, "SIGTERM", 10*time.Second)
	if err != nil || !a.Saved || a.Exit == nil || *a.Exit != 0 {
		t.Fatalf("checkpoint by SIGTERM: %+v, %v; want the worker's exit 0", a, err)
	}
	if err := Open(ctx, socket, 1, NoIndex); !errors.Is(err, ErrStale) {
		t.Fatalf("open of attempt 1 again after its worker ended on the request: %v, want ErrStale", err)
	}
	if err := Open(ctx, socket, 2, NoIndex); err != nil {
		t.Fatalf("open of attempt 2 after the worker ended on the request: %v", err)
	}
	pidIn(t, dir, "worker.2")
	// A stop answers a pending request.
	go func() {
		a, err := Checkpoint(ctx, socket, 2, "SIGUSR2", 30*time.Second)
		if err != nil {
			t.Error(err)
		}
		answered <- a
	}()
	waitFor(t, "the second SIGUSR2", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "usr2"))
		return strings.Count(string(b), "saving") == 3
	})
	if _, err := Stop(ctx, socket, 3, time.Second); err != nil {
		t.Fatal(err)
	}
	if a := <-answered; a.Saved || !strings.Contains(a.Reason, "stopped") {
		t.Fatalf("checkpoint pending at a stop: %+v, want not saved, stopped", a)
	}
}

// Where the run saves on notice, the container's SIGTERM (a node's shutdown) asks the worker
// to save first: its signal, the SIGTERM only once it said it saved; the node agent's request,
// coming after, gets that answer; then the container ends with the worker.
func TestSuperviseSavesBeforeTheContainersSIGTERM(t *testing.T) {
	dir, proc := supervised(t, `
d="$(dirname "$0")"
trap 'sleep 0.3; echo saved >> "$d/order"; echo 9 > "$d/checkpoint/done"' USR1
trap 'echo term >> "$d/order"; exit 143' TERM
echo $$ > "$d/worker.1"
while :; do sleep 0.05; done
`, EnvCheckpointSignal+"=SIGUSR1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	socket := filepath.Join(dir, "b.sock")
	if err := Open(ctx, socket, 1, NoIndex); err != nil {
		t.Fatal(err)
	}
	pidIn(t, dir, "worker.1")
	if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	a, err := Checkpoint(ctx, socket, 1, "SIGUSR1", 10*time.Second)
	if err != nil || !a.Saved || a.Step == nil || *a.Step != 9 {
		t.Fatalf("the agent's request after the container's SIGTERM: %+v, %v; want saved step 9", a, err)
	}
	err = proc.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 143 {
		t.Fatalf("the barrier ended %v, want its worker's 143", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "order")); string(b) != "saved\nterm\n" {
		t.Errorf("the worker saw %q, want its save before the SIGTERM", b)
	}
}

// A stop's answer carries the worker's last save the barrier knows of: its word without any
// request (a periodic save, checkpoint-done), or a done file it left later; kept across
// attempts (a worker that saved nothing since resumes from it), none before any save.
func TestStopSaysTheWorkersLastSave(t *testing.T) {
	dir, _ := supervised(t, `
d="$(dirname "$0")"
n=$(cat "$d/attempt")
echo $$ > "$d/worker.$n"
while :; do sleep 0.05; done
`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	socket := filepath.Join(dir, "b.sock")
	step := func(s *Save) string {
		if s == nil {
			return "none"
		}
		if s.Step == nil {
			return "- at " + s.At.Format(time.RFC3339Nano)
		}
		return strconv.FormatInt(*s.Step, 10) + " at " + s.At.Format(time.RFC3339Nano)
	}
	if err := Open(ctx, socket, 1, NoIndex); err != nil {
		t.Fatal(err)
	}
	pidIn(t, dir, "worker.1")
	if s, err := Stop(ctx, socket, 2, time.Second); err != nil || s != nil {
		t.Fatalf("stop of a worker that never saved: %s, %v; want no save", step(s), err)
	}
	if err := Open(ctx, socket, 2, NoIndex); err != nil {
		t.Fatal(err)
	}
	pidIn(t, dir, "worker.2")
	before := time.Now()
	if err := CheckpointDone(ctx, socket, 2, 300); err != nil {
		t.Fatalf("a periodic save's word, no request pending: %v", err)
	}
	s, err := Stop(ctx, socket, 3, time.Second)
	if err != nil || s == nil || s.Step == nil || *s.Step != 300 || s.At.Before(before) || s.At.After(time.Now()) {
		t.Fatalf("stop after checkpoint-done 300: %s, %v; want step 300 at its word", step(s), err)
	}
	// Attempt 3 says nothing: the last save is still attempt 2's. Attempt 4 writes its done
	// file (no request): that is its last save, at the file's time.
	if err := Open(ctx, socket, 3, NoIndex); err != nil {
		t.Fatal(err)
	}
	pidIn(t, dir, "worker.3")
	if again, err := Stop(ctx, socket, 4, time.Second); err != nil || again == nil || *again.Step != 300 || !again.At.Equal(s.At) {
		t.Fatalf("stop of an attempt that saved nothing: %s, %v; want attempt 2's save", step(again), err)
	}
	if err := Open(ctx, socket, 4, NoIndex); err != nil {
		t.Fatal(err)
	}
	pidIn(t, dir, "worker.4")
	done := filepath.Join(dir, "checkpoint", CheckpointDoneFile)
	if err := os.WriteFile(done, []byte("450\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	written := time.Now().Add(time.Second).Truncate(time.Millisecond)
	if err := os.Chtimes(done, written, written); err != nil {
		t.Fatal(err)
	}
	if s, err := Stop(ctx, socket, 5, time.Second); err != nil || s == nil || s.Step == nil || *s.Step != 450 || !s.At.Equal(written) {
		t.Fatalf("stop after a done file written at %s: %s, %v; want step 450 at the file's time", written.Format(time.RFC3339Nano), step(s), err)
	}
}
