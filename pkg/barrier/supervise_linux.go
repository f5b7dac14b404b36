//go:build linux

package barrier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Supervise is the barrier as the worker container's first process, for good: it waits as
// Wait does, then runs the worker's command as its child, in a process group of its own;
// while the child runs, it listens on the same socket for the node agent's stop of a later
// attempt. A stop ends the child and every process it left (SIGTERM to its process group,
// SIGKILL to whatever of its descendants is left after the grace period: the barrier is
// their subreaper, so none escapes it), answers once none is left, and waits again for the
// next open. A restart in place is then a message on a socket: no container ends, and the
// kubelet has nothing to do.
//
// It returns the child's exit status (its exit code, or 128 + the signal that ended it)
// when the child ends on its own: the container ends with it, and the worker's exit is
// judged as before. The signals a container's first process gets (forwarded: SIGTERM from
// the kubelet, and SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH) go on to the
// child's process group, as an init would pass them; while no child runs, ctx's end (the
// caller's SIGTERM) returns 143 and ctx's error. A command that cannot run returns its
// *ExecError (ExitStatus), after the go signal.
func Supervise(ctx context.Context, cfg Config, argv []string) (int, error) {
	if len(argv) == 0 {
		return 1, errors.New("supervise needs the worker's command")
	}
	cfg.TerminationLog = "" // the worker writes the termination message
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := setChildSubreaper(); err != nil {
		return 1, fmt.Errorf("become the subreaper of the worker's processes: %w", err)
	}
	ln, start, err := listen(cfg)
	if err != nil {
		return 1, err
	}
	defer ln.Close()
	if cfg.CheckpointDir != "" {
		// The worker's, to say it saved (Checkpoint): the worker runs as the barrier's user.
		if err := os.MkdirAll(cfg.CheckpointDir, 0o755); err != nil {
			log.Warn("no checkpoint directory for the worker", "dir", cfg.CheckpointDir, "error", err)
		}
	}
	s := &supervisor{cfg: cfg, log: log, conns: make(chan *net.UnixConn), exits: make(chan reaped, 16), done: make(chan struct{}),
		signals: make(chan os.Signal, 8)}
	defer close(s.done)
	signal.Notify(s.signals, forwarded...)
	defer signal.Stop(s.signals)
	go s.accept(ln)
	go s.reap()
	if cfg.Listening != nil {
		cfg.Listening()
	}
	for {
		log.Info("waiting for the go signal", "after-attempt", start, "socket", cfg.Socket)
		attempt, err := s.waitOpen(ctx, start)
		if err != nil {
			return 128 + int(syscall.SIGTERM), err
		}
		log.Info("opened", "attempt", attempt)
		// The container's log holds every attempt's output: the marker says where each
		// starts (`launcher logs --attempt`). On both streams: the runtime copies the
		// container's stdout and stderr into its log apart, so a worker's first line on
		// stdout can land before a marker written on stderr a moment earlier; on each
		// stream the marker comes before every line the worker writes there.
		marker := AttemptMarker(attempt)
		fmt.Fprintln(os.Stdout, marker)
		fmt.Fprintln(os.Stderr, marker)
		pid, err := startWorker(argv)
		if err != nil {
			var ee *ExecError
			if errors.As(err, &ee) {
				return ee.ExitStatus(), err
			}
			return 1, err
		}
		status, stoppedFor := s.run(pid, attempt)
		if stoppedFor == 0 {
			return status, nil
		}
		// Stopped for a later attempt: the gang has moved on to it, so no open of an
		// attempt before it may start the worker again (a stale agent's, or one of an
		// attempt the gang abandoned).
		s.stoppedFor = stoppedFor
		start = stoppedFor - 1
	}
}

// forwarded are the signals the barrier passes on to its worker.
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// reaped is a child the supervisor reaped, with its wait status.
type reaped struct {
	pid    int
	status syscall.WaitStatus
}

type supervisor struct {
	cfg   Config
	log   *slog.Logger
	conns chan *net.UnixConn
	exits chan reaped
	done  chan struct{}
	// signals are the forwarded signals the barrier got.
	signals chan os.Signal
	// stoppedFor is the latest attempt a stop was for (0: none): no open of an earlier one
	// starts the worker again.
	stoppedFor int
}

// accept hands every connection to the loop until the listener closes.
func (s *supervisor) accept(ln *net.UnixListener) {
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		select {
		case s.conns <- conn:
		case <-s.done:
			conn.Close()
			return
		}
	}
}

// reap waits for every child that ends (the worker, and the orphans of its descendants that
// the kernel hands the subreaper) and reports each.
func (s *supervisor) reap() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	defer signal.Stop(sigs)
	tick := time.NewTicker(time.Second) // SIGCHLDs coalesce: look now and then anyway
	defer tick.Stop()
	for {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
			select {
			case s.exits <- reaped{pid: pid, status: ws}:
			case <-s.done:
				return
			}
		}
		select {
		case <-sigs:
		case <-tick.C:
		case <-s.done:
			return
		}
	}
}

// waitOpen serves the socket until an open of an attempt after start: it returns that
// attempt, written to the attempt file. A stop finds nothing running and is answered so; a
// stop for a later attempt than start raises start as a stop of a running worker does. An
// open it refuses is answered stale, with the attempt it was stopped for (the agent logs it).
func (s *supervisor) waitOpen(ctx context.Context, start int) (int, error) {
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-s.signals: // no worker to pass it on to; SIGTERM ends ctx
		case <-s.exits: // an orphan of a stopped worker, reaped late
		case conn := <-s.conns:
			req, err := readRequest(conn)
			if err != nil {
				s.log.Warn("request not taken", "error", err)
				conn.Close()
				continue
			}
			if req.verb == verbCheckpoint || req.verb == verbDone {
				fmt.Fprintf(conn, "%s %d %d (no worker runs)\n", verbStale, req.attempt, start)
				conn.Close()
				continue
			}
			if req.verb == verbStop {
				if req.attempt > s.stoppedFor {
					s.stoppedFor = req.attempt
				}
				start = max(start, s.stoppedFor-1)
				fmt.Fprintf(conn, "%s %d\n", verbStopped, req.attempt)
				conn.Close()
				continue
			}
			if req.attempt < s.stoppedFor {
				fmt.Fprintf(conn, "%s %d %d (stopped for attempt %d: no earlier attempt opens)\n", verbStale, req.attempt, start, s.stoppedFor)
				conn.Close()
				s.log.Warn("go signal refused: the worker was stopped for a later attempt", "attempt", req.attempt, "stopped-for", s.stoppedFor)
				continue
			}
			attempt, done, err := answerOpen(conn, s.cfg, start, req.attempt)
			conn.Close()
			if err != nil {
				s.log.Warn("go signal not taken", "error", err)
			}
			if done {
				return attempt, nil
			}
		}
	}
}

// run follows the worker pid, which runs attempt, until it ends on its own (its status) or a
// stop of a later attempt ends it and what it left (stoppedFor, that attempt; 0 otherwise).
// The signals the barrier gets go on to its process group; after SIGTERM the barrier waits
// for the worker's exit (the kubelet kills the container after its grace period).
//
// A checkpoint request of attempt sends its signal to the worker's process group and is
// answered (checkpoint) when the worker says it saved (its done file, or checkpoint-done),
// ends, is stopped, or the request's timeout passes. A worker that ends after a signal that
// asks it to end (SIGTERM, SIGINT) has answered: the barrier stays, as after a stop, and the
// container with it, for the attempt that moves the gang.
func (s *supervisor) run(pid, attempt int) (status, stoppedFor int) {
	var ck checkpoint
	defer ck.answer("%s %d\n", verbStopped, attempt) // a stop, if one is pending
	for {
		select {
		case r := <-s.exits:
			if r.pid == pid {
				// What the worker left goes with it.
				s.killAll(pid)
				status := exitStatus(r.status)
				if ck.pending() {
					ends := ck.ends
					ck.answer("%s %d %d\n", verbExited, attempt, status)
					if ends {
						s.log.Info("the worker ended after the checkpoint signal: it waits for the next attempt", "attempt", attempt, "status", status)
						return status, attempt + 1
					}
				}
				// The container ends now.
				return status, 0
			}
		case <-ck.tick:
			if step, ok := s.doneFile(); ok {
				ck.answer("%s %d %s\n", verbSaved, attempt, stepField(step))
			}
		case <-ck.timeout:
			s.log.Warn("the worker did not say it saved within the timeout", "attempt", attempt)
			ck.answer("%s %d\n", verbTimeout, attempt)
		case sig := <-s.signals:
			s.log.Info("passing a signal on to the worker", "signal", sig, "pid", pid)
			syscall.Kill(-pid, sig.(syscall.Signal))
		case conn := <-s.conns:
			req, err := readRequest(conn)
			switch {
			case err != nil:
				s.log.Warn("request not taken", "error", err)
			case req.verb == verbOpen:
				fmt.Fprintf(conn, "%s %d\n", verbRunning, attempt)
			case (req.verb == verbCheckpoint || req.verb == verbDone) && req.attempt != attempt:
				fmt.Fprintf(conn, "%s %d %d\n", verbStale, req.attempt, attempt)
			case req.verb == verbDone:
				s.log.Info("the worker says it saved", "attempt", attempt, "step", req.step)
				ck.answer("%s %d %s\n", verbSaved, attempt, stepField(req.step))
				fmt.Fprintf(conn, "%s %d\n", verbOK, attempt)
			case req.verb == verbCheckpoint:
				sig, ok := checkpointSignals[req.signal]
				if !ok {
					fmt.Fprintf(conn, "error unknown signal %q\n", req.signal)
					break
				}
				// The answer waits for the worker: this connection is kept, and answered
				// in this loop. A later request replaces an earlier one, answered stale.
				ck.answer("%s %d %d (a later checkpoint request)\n", verbStale, attempt, attempt)
				s.removeDone()
				conn.SetDeadline(time.Time{})
				ck.start(conn, req.grace, sig == syscall.SIGTERM || sig == syscall.SIGINT)
				s.log.Info("asking the worker to save", "attempt", attempt, "signal", req.signal, "timeout", req.grace)
				syscall.Kill(-pid, sig)
				continue
			case req.attempt <= attempt:
				fmt.Fprintf(conn, "%s %d %d\n", verbStale, req.attempt, attempt)
			default:
				s.log.Info("stopping the worker for a later attempt", "attempt", attempt, "for", req.attempt, "grace", req.grace)
				conn.SetDeadline(time.Time{})
				s.stop(pid, req.grace)
				fmt.Fprintf(conn, "%s %d\n", verbStopped, req.attempt)
				conn.Close()
				return 0, req.attempt
			}
			conn.Close()
		}
	}
}

// checkpointSignals are the signals a checkpoint request may send, by name
// (CheckpointPolicy.Signal's enum).
var checkpointSignals = map[string]syscall.Signal{
	"SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2, "SIGTERM": syscall.SIGTERM, "SIGINT": syscall.SIGINT,
}

// checkpoint is the request a supervisor's loop is answering, if any: the connection that
// waits for the answer, the ticks on which it looks for the worker's done file, and the
// request's timeout.
type checkpoint struct {
	conn    *net.UnixConn
	ticker  *time.Ticker
	timer   *time.Timer
	tick    <-chan time.Time
	timeout <-chan time.Time
	// ends: the signal asks the worker to end (its exit answers).
	ends bool
}

// doneTick is how often a pending checkpoint looks for the worker's done file.
const doneTick = 50 * time.Millisecond

func (c *checkpoint) start(conn *net.UnixConn, timeout time.Duration, ends bool) {
	c.conn, c.ends = conn, ends
	c.ticker, c.timer = time.NewTicker(doneTick), time.NewTimer(timeout)
	c.tick, c.timeout = c.ticker.C, c.timer.C
}

func (c *checkpoint) pending() bool { return c.conn != nil }

// answer answers the pending request, if any, and forgets it.
func (c *checkpoint) answer(format string, args ...any) {
	if c.conn == nil {
		return
	}
	fmt.Fprintf(c.conn, format, args...)
	c.conn.Close()
	c.ticker.Stop()
	c.timer.Stop()
	*c = checkpoint{}
}

// stepField is a step as the protocol writes it: "-" for none.
func stepField(step int64) string {
	if step < 0 {
		return "-"
	}
	return strconv.FormatInt(step, 10)
}

// doneFile reads and removes the worker's done file: the step it holds (-1: none), and
// whether it was there.
func (s *supervisor) doneFile() (int64, bool) {
	if s.cfg.CheckpointDir == "" {
		return 0, false
	}
	path := filepath.Join(s.cfg.CheckpointDir, CheckpointDoneFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	os.Remove(path)
	step := int64(-1)
	if n := ReadDone(b); n != nil {
		step = *n
	}
	return step, true
}

// removeDone removes a done file left from before a request (a worker's own periodic word),
// and makes sure the directory is there for the worker to write it.
func (s *supervisor) removeDone() {
	if s.cfg.CheckpointDir == "" {
		return
	}
	if err := os.MkdirAll(s.cfg.CheckpointDir, 0o755); err != nil {
		s.log.Warn("no checkpoint directory for the worker", "dir", s.cfg.CheckpointDir, "error", err)
	}
	os.Remove(filepath.Join(s.cfg.CheckpointDir, CheckpointDoneFile))
}

// stop ends the worker pid: SIGTERM to its process group, and after grace (or its exit)
// SIGKILL to every descendant left.
func (s *supervisor) stop(pid int, grace time.Duration) {
	syscall.Kill(-pid, syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
wait:
	for {
		select {
		case r := <-s.exits:
			if r.pid == pid {
				break wait
			}
		case <-timer.C:
			break wait
		}
	}
	s.killAll(pid)
}

// killAll kills the process group pgid and every child of the supervisor until none is
// left: each child's own children come to the supervisor (their subreaper) as it dies, and
// are killed in the next round. It gives up only on processes that do not die (a process in
// uninterruptible sleep), after killTimeout, and says so.
func (s *supervisor) killAll(pgid int) {
	syscall.Kill(-pgid, syscall.SIGKILL)
	deadline := time.Now().Add(killTimeout)
	for {
		left := children()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			s.log.Error("processes of the worker did not die", "pids", left)
			return
		}
		for _, p := range left {
			syscall.Kill(p, syscall.SIGKILL)
		}
		select {
		case <-s.exits:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// killTimeout bounds killAll.
const killTimeout = 10 * time.Second

// children are the processes whose parent is this one, zombies included (not reaped yet).
func children() []int {
	self := os.Getpid()
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue // gone since
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses; the last ')' ends it.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil && ppid == self {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(d))); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// startWorker starts argv as a child in its own process group, with the barrier's
// environment and standard streams; it is reaped by reap, never waited for here.
func startWorker(argv []string) (int, error) {
	path, err := lookPath(argv[0])
	if err != nil {
		return 0, err
	}
	p, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return 0, &ExecError{Command: argv[0], Err: err}
	}
	pid := p.Pid
	p.Release()
	return pid, nil
}

// exitStatus is a wait status as a shell reports it.
func exitStatus(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// setChildSubreaper makes this process the reaper of its descendants' orphans
// (prctl PR_SET_CHILD_SUBREAPER): a process the worker detached comes to it when its
// parent dies, not to the container's init.
func setChildSubreaper() error {
	const prSetChildSubreaper = 36
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return errno
	}
	return nil
}
