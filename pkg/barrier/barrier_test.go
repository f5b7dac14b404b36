package barrier

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// The barrier repeats the shared names it uses (it must not link the API machinery): they
// must stay what the controller and the agent read.
func TestSharedNamesMatchTheAPI(t *testing.T) {
	for _, c := range []struct{ here, api string }{
		{RunDir, v1alpha1.RunDir},
		{AttemptFile, v1alpha1.AttemptFile},
		{EnvAttempt, v1alpha1.EnvAttempt},
		{CheckpointDir, v1alpha1.CheckpointDir},
		{CheckpointDoneFile, v1alpha1.CheckpointDoneFile},
		{EnvCheckpointSignal, v1alpha1.EnvCheckpointSignal},
		{EnvCheckpointTimeout, v1alpha1.EnvCheckpointTimeout},
		{OpenedMessagePrefix, v1alpha1.BarrierOpenedMessagePrefix},
		// The program, where the barrier's image volume is mounted in a worker container.
		{v1alpha1.BarrierMount + Binary, v1alpha1.BarrierBinary},
	} {
		if c.here != c.api {
			t.Errorf("barrier has %q where api/v1alpha1 has %q", c.here, c.api)
		}
	}
}

func TestJudgeOpensOnlyANewerAttempt(t *testing.T) {
	for name, tc := range map[string]struct {
		start, attempt int
		want           Verdict
	}{
		"a new pod, first attempt":                  {0, 1, Opened},
		"a new pod of a moved index, later attempt": {0, 4, Opened},
		"restarted in place, the next attempt":      {1, 2, Opened},
		"restarted in place, a jump":                {2, 5, Opened},
		"the previous process's attempt":            {2, 2, Stale},
		"an older attempt's late signal":            {3, 2, Stale},
	} {
		t.Run(name, func(t *testing.T) {
			if got := Judge(tc.start, tc.attempt); got != tc.want {
				t.Errorf("Judge(%d, %d) = %v, want %v", tc.start, tc.attempt, got, tc.want)
			}
		})
	}
}

func TestOpenedMessage(t *testing.T) {
	if got := OpenedMessage(7); got != "attempt=7" {
		t.Errorf("OpenedMessage(7) = %q", got)
	}
	for msg, want := range map[string]int{"attempt=7": 7, "attempt=12\n": 12, "attempt=0": 0, "attempt=": 0, "attempt=x": 0, "": 0, "Error": 0, "attempt=-1": 0} {
		got, ok := ParseOpenedMessage(msg)
		if got != want || ok != (want > 0) {
			t.Errorf("ParseOpenedMessage(%q) = %d, %v; want %d, %v", msg, got, ok, want, want > 0)
		}
	}
}

func TestImage(t *testing.T) {
	for version, want := range map[string]string{
		"v0.3.1":                 ImageRepository + ":v0.3.1",
		"dev":                    ImageRepository + ":dev",
		"v0.3.1-4-gabcdef-dirty": ImageRepository + ":v0.3.1-4-gabcdef-dirty",
		"v0.3.1+build.5":         ImageRepository + ":v0.3.1-build.5",
		"":                       ImageRepository + ":dev",
	} {
		if got := Image(version); got != want {
			t.Errorf("Image(%q) = %q, want %q", version, got, want)
		}
	}
}

func TestAttemptFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "attempt")
	if n, err := ReadAttempt(path); n != 0 || err != nil {
		t.Fatalf("no file: ReadAttempt = %d, %v; want 0, nil (a new pod)", n, err)
	}
	for _, n := range []int{1, 2, 10} {
		if err := WriteAttempt(path, n); err != nil {
			t.Fatal(err)
		}
		if got, err := ReadAttempt(path); got != n || err != nil {
			t.Fatalf("after WriteAttempt(%d): ReadAttempt = %d, %v", n, got, err)
		}
	}
	// The rename leaves nothing beside the file.
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory after three writes: %v, want only the attempt file", entries)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("attempt file mode %v (%v): want 0644, readable by workers of any user", fi.Mode(), err)
	}
	for _, bad := range []string{"", "two", "0", "-3"} {
		os.WriteFile(path, []byte(bad), 0o644)
		if n, err := ReadAttempt(path); err == nil {
			t.Errorf("file %q: ReadAttempt = %d, nil; want an error", bad, n)
		}
	}
}

// barrierAt runs Wait in dir (a previous attempt's file if start > 0) and returns once it
// listens, with the channel its result arrives on.
func barrierAt(t *testing.T, ctx context.Context, dir string, start int, madeFor ...int) (Config, <-chan result) {
	t.Helper()
	cfg := Config{
		AttemptFile:    filepath.Join(dir, "attempt"),
		Socket:         filepath.Join(dir, ".barrier.sock"),
		TerminationLog: filepath.Join(dir, "termination-log"),
	}
	if len(madeFor) > 0 {
		cfg.MadeFor = madeFor[0]
	}
	if start > 0 {
		if err := WriteAttempt(cfg.AttemptFile, start); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(cfg.TerminationLog, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	listening := make(chan struct{})
	cfg.Listening = func() { close(listening) }
	done := make(chan result, 1)
	go func() {
		n, err := Wait(ctx, cfg)
		done <- result{n, err}
	}()
	select {
	case <-listening:
	case r := <-done:
		t.Fatalf("Wait returned before it listened: %v", r)
	}
	return cfg, done
}

type result struct {
	attempt int
	err     error
}

// A new pod made for attempt 3 (a moved index): its attempt file is empty, and it still
// opens for no older attempt than its own, which a node agent with a stale view of the run
// would ask for.
func TestWaitOpensNoAttemptBeforeItsPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg, done := barrierAt(t, ctx, t.TempDir(), 0, 3)
	for _, stale := range []int{2, 1} {
		if err := Open(ctx, cfg.Socket, stale, NoIndex); !errors.Is(err, ErrStale) {
			t.Fatalf("Open(%d) in a pod made for attempt 3: %v, want ErrStale", stale, err)
		}
	}
	if err := Open(ctx, cfg.Socket, 3, NoIndex); err != nil {
		t.Fatalf("Open(3): %v", err)
	}
	if r := <-done; r.err != nil || r.attempt != 3 {
		t.Fatalf("Wait = %d, %v; want 3", r.attempt, r.err)
	}
}

// An in-place restart: the file holds the attempt the pod's previous process ran. The
// signals of that attempt and older are refused and leave the barrier waiting; the next
// attempt opens it, and the file and the termination message say so.
func TestWaitOpensOnlyForANewerAttempt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg, done := barrierAt(t, ctx, t.TempDir(), 2)
	for _, stale := range []int{2, 1} {
		if err := Open(ctx, cfg.Socket, stale, NoIndex); !errors.Is(err, ErrStale) {
			t.Fatalf("Open(%d) with attempt 2 in the file: %v, want ErrStale", stale, err)
		}
	}
	select {
	case r := <-done:
		t.Fatalf("the barrier returned on a stale attempt: %+v", r)
	default:
	}
	if msg, _ := os.ReadFile(cfg.TerminationLog); len(msg) != 0 {
		t.Errorf("termination message while waiting: %q, want none", msg)
	}
	if err := Open(ctx, cfg.Socket, 3, NoIndex); err != nil {
		t.Fatalf("Open(3): %v", err)
	}
	r := <-done
	if r.err != nil || r.attempt != 3 {
		t.Fatalf("Wait = %d, %v; want 3", r.attempt, r.err)
	}
	if n, err := ReadAttempt(cfg.AttemptFile); n != 3 || err != nil {
		t.Errorf("attempt file: %d, %v; want 3", n, err)
	}
	if msg, _ := os.ReadFile(cfg.TerminationLog); string(msg) != "attempt=3" {
		t.Errorf("termination message %q, want attempt=3", msg)
	}
	// Opened and gone: a second open finds nobody, which the agent takes for done.
	if err := Open(ctx, cfg.Socket, 3, NoIndex); !errors.Is(err, ErrNotWaiting) {
		t.Errorf("Open after the barrier opened: %v, want ErrNotWaiting", err)
	}
}

// A new pod has no file: the first attempt opens it. A socket left behind by a barrier
// that was killed does not stop the next one from listening.
func TestWaitInANewPodAndOverAStaleSocket(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ".barrier.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, done := barrierAt(t, ctx, dir, 0)
	if err := Open(ctx, cfg.Socket, 1, NoIndex); err != nil {
		t.Fatalf("Open(1): %v", err)
	}
	if r := <-done; r.err != nil || r.attempt != 1 {
		t.Fatalf("Wait = %+v; want 1", r)
	}
}

// SIGTERM (the pod terminating) ends the wait at once, with no attempt written.
func TestWaitEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wctx, stop := context.WithCancel(ctx)
	cfg, done := barrierAt(t, wctx, t.TempDir(), 1)
	stop()
	select {
	case r := <-done:
		if !errors.Is(r.err, context.Canceled) {
			t.Errorf("Wait after its context ended: %+v, want context.Canceled", r)
		}
	case <-ctx.Done():
		t.Fatal("Wait did not return after its context ended")
	}
	if n, _ := ReadAttempt(cfg.AttemptFile); n != 1 {
		t.Errorf("attempt file %d after a cancelled wait, want the previous 1", n)
	}
	if _, err := os.Stat(cfg.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after the wait: %v", err)
	}
}

func TestOpenWithNoBarrier(t *testing.T) {
	err := Open(context.Background(), filepath.Join(t.TempDir(), "none.sock"), 1, NoIndex)
	if !errors.Is(err, ErrNotWaiting) {
		t.Errorf("Open with no socket: %v, want ErrNotWaiting", err)
	}
}

// helperOpenEnv makes the test binary an open that lingers after its answer (see
// TestOpenedBarrierOutlivesItsOpen).
const helperOpenEnv = "BARRIER_TEST_HELPER_OPEN"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperSuperviseEnv); dir != "" {
		os.Exit(superviseHelper(dir))
	}
	if socket := os.Getenv(helperOpenEnv); socket != "" {
		err := Open(context.Background(), socket, 2, NoIndex)
		// Slow to exit after its answer, as a process may be: the barrier must wait.
		time.Sleep(300 * time.Millisecond)
		if err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The barrier is its container's first process: once it exits, the kernel kills the rest
// of the container, an open still exiting included (exit 137: the agent would not learn
// that it opened). It returns only after its open, another process, has exited.
func TestOpenedBarrierOutlivesItsOpen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg, done := barrierAt(t, ctx, t.TempDir(), 1)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperOpenEnv+"="+cfg.Socket)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.attempt != 2 {
		t.Fatalf("Wait = %+v, want 2", r)
	}
	// The open must be gone already: a zombie to reap, not a process still running.
	var ws syscall.WaitStatus
	pid, err := syscall.Wait4(cmd.Process.Pid, &ws, syscall.WNOHANG, nil)
	if err != nil || pid != cmd.Process.Pid {
		t.Errorf("the barrier returned while its open was still running (wait4: %d, %v)", pid, err)
		cmd.Wait()
		return
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		t.Errorf("open exited %v, want 0", ws)
	}
}
