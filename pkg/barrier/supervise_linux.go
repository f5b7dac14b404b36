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
		attempt, index, err := s.waitOpen(ctx, start)
		if err != nil {
			return 128 + int(syscall.SIGTERM), err
		}
		// A spare holds the index it was handed for good (Identity.Take).
		s.cfg.Identity.Index = index
		log.Info("opened", "attempt", attempt, "index", index)
		// The container's log holds every attempt's output: the marker says where each
		// starts (`launcher logs --attempt`). On both streams: the runtime copies the
		// container's stdout and stderr into its log apart, so a worker's first line on
		// stdout can land before a marker written on stderr a moment earlier; on each
		// stream the marker comes before every line the worker writes there.
		marker := AttemptMarker(attempt)
		fmt.Fprintln(os.Stdout, marker)
		fmt.Fprintln(os.Stderr, marker)
		env := s.cfg.Identity.Env(os.Environ(), index)
		pid, err := startWorker(s.cfg.Identity.Argv(argv, env), env)
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
	// saved is the worker's last save the barrier heard of (nil: none), in any attempt.
	saved *Save
}

// heardSave notes a save the worker said (step -1: none said) at at.
func (s *supervisor) heardSave(step int64, at time.Time) {
	s.saved = &Save{At: at}
	if step >= 0 {
		s.saved.Step = &step
	}
}

// stopped is the answer to a stop for attempt: with the worker's last save, where the
// barrier knows one. A done file the worker left is a save too (one it wrote without a
// request: its modification time says when), where it is later than what the barrier heard.
func (s *supervisor) stopped(attempt int) string {
	s.noteDoneFile()
	if s.saved == nil {
		return fmt.Sprintf("%s %d", verbStopped, attempt)
	}
	return fmt.Sprintf("%s %d %s", verbStopped, attempt, s.saved.field())
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
func (s *supervisor) waitOpen(ctx context.Context, start int) (attempt, index int, err error) {
	for {
		select {
		case <-ctx.Done():
			return 0, NoIndex, ctx.Err()
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
				fmt.Fprintln(conn, s.stopped(req.attempt))
				conn.Close()
				continue
			}
			if req.attempt < s.stoppedFor {
				fmt.Fprintf(conn, "%s %d %d (stopped for attempt %d: no earlier attempt opens)\n", verbStale, req.attempt, start, s.stoppedFor)
				conn.Close()
				s.log.Warn("go signal refused: the worker was stopped for a later attempt", "attempt", req.attempt, "stopped-for", s.stoppedFor)
				continue
			}
			attempt, index, done, err := answerOpen(conn, s.cfg, start, req)
			conn.Close()
			if err != nil {
				s.log.Warn("go signal not taken", "error", err)
			}
			if done {
				return attempt, index, nil
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
// ends, is stopped, or the request's timeout passes; a request that comes while a save is
// under way waits for its answer. A worker that ends after a signal that asks it to end
// (SIGTERM, SIGINT) has answered: the barrier stays, as after a stop, and the container with
// it, for the attempt that moves the gang.
//
// Where the run saves on notice (Config.CheckpointSignal), the container's own SIGTERM (a
// node's shutdown: its kubelet stops every pod at the announcement, before any request can
// reach the workers) asks the worker to save first: its signal, and SIGTERM once it said it
// saved or the timeout passed. The answer waits for the node agent's request, which takes
// it.
func (s *supervisor) run(pid, attempt int) (status, stoppedFor int) {
	var ck checkpoint
	defer ck.answer(fmt.Sprintf("%s %d", verbStopped, attempt)) // a stop, if one is pending
	// answer answers the save under way, and passes on the container's SIGTERM it held.
	answer := func(line string) {
		if ck.answer(line) {
			s.log.Info("passing the container's SIGTERM on to the worker, after its save", "pid", pid)
			syscall.Kill(-pid, syscall.SIGTERM)
		}
	}
	for {
		select {
		case r := <-s.exits:
			if r.pid == pid {
				// What the worker left goes with it.
				s.killAll(pid)
				status := exitStatus(r.status)
				if ck.pending() {
					waits := ck.ends && !ck.terminating
					answer(fmt.Sprintf("%s %d %d", verbExited, attempt, status))
					if waits {
						s.log.Info("the worker ended after the checkpoint signal: it waits for the next attempt", "attempt", attempt, "status", status)
						return status, attempt + 1
					}
				}
				// The container ends now; a save its SIGTERM asked for waits a moment for
				// the node agent's request, which records it.
				s.handOver(&ck, attempt)
				return status, 0
			}
		case <-ck.tick:
			if step, ok := s.doneFile(); ok {
				answer(fmt.Sprintf("%s %d %s", verbSaved, attempt, stepField(step)))
			}
		case <-ck.timeout:
			s.log.Warn("the worker did not say it saved within the timeout", "attempt", attempt)
			answer(fmt.Sprintf("%s %d", verbTimeout, attempt))
		case sig := <-s.signals:
			if sig == syscall.SIGTERM && s.saveFirst(&ck, pid, attempt) {
				continue
			}
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
				s.heardSave(req.step, time.Now())
				answer(fmt.Sprintf("%s %d %s", verbSaved, attempt, stepField(req.step)))
				fmt.Fprintf(conn, "%s %d\n", verbOK, attempt)
			case req.verb == verbCheckpoint:
				sig, ok := checkpointSignals[req.signal]
				if !ok {
					fmt.Fprintf(conn, "error unknown signal %q\n", req.signal)
					break
				}
				// The answer waits for the worker: this connection is kept, and answered
				// in this loop, with any other request that comes meanwhile.
				conn.SetDeadline(time.Time{})
				if ck.take(conn) {
					continue
				}
				s.removeDone()
				ck.start(req.grace, sig == syscall.SIGTERM || sig == syscall.SIGINT)
				ck.take(conn)
				s.log.Info("asking the worker to save", "attempt", attempt, "signal", req.signal, "timeout", req.grace)
				syscall.Kill(-pid, sig)
				continue
			case req.attempt <= attempt:
				fmt.Fprintf(conn, "%s %d %d\n", verbStale, req.attempt, attempt)
			default:
				s.log.Info("stopping the worker for a later attempt", "attempt", attempt, "for", req.attempt, "grace", req.grace)
				conn.SetDeadline(time.Time{})
				s.stop(pid, req.grace)
				fmt.Fprintln(conn, s.stopped(req.attempt))
				conn.Close()
				return 0, req.attempt
			}
			conn.Close()
		}
	}
}

// handOver answers, for up to keptFor, the node agent's checkpoint request of attempt with
// the answer kept from a save the container's SIGTERM asked for, before the container ends:
// a quick save can end before the request reaches the barrier.
func (s *supervisor) handOver(ck *checkpoint, attempt int) {
	if ck.kept == "" {
		return
	}
	timer := time.NewTimer(keptFor)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
			s.log.Warn("no checkpoint request took the worker's answer before the container ended", "attempt", attempt, "answer", ck.kept)
			return
		case <-s.exits:
		case <-s.signals:
		case conn := <-s.conns:
			req, err := readRequest(conn)
			if err == nil && req.verb == verbCheckpoint && req.attempt == attempt && ck.take(conn) {
				return
			}
			if err == nil {
				fmt.Fprintf(conn, "%s %d %d (its worker has ended)\n", verbStale, req.attempt, attempt)
			}
			conn.Close()
		}
	}
}

// keptFor bounds handOver: the request follows the node's shutdown announcement by the
// controller's and the agent's reaction, under a second.
const keptFor = 5 * time.Second

// saveFirst turns the container's SIGTERM into a save, then the SIGTERM (see run), where the
// run saves on notice and no SIGTERM was held before; it reports whether it held this one.
// A run whose signal is SIGTERM (or SIGINT) gets it at once: its worker saves on it, and its
// exit is the answer.
func (s *supervisor) saveFirst(ck *checkpoint, pid, attempt int) bool {
	sig, ok := checkpointSignals[s.cfg.CheckpointSignal]
	if !ok || ck.terminating {
		return false
	}
	ck.terminating = true
	ends := sig == syscall.SIGTERM || sig == syscall.SIGINT
	if !ck.pending() {
		s.removeDone()
		ck.start(s.cfg.CheckpointTimeout, ends)
		if !ends {
			s.log.Info("the container is stopping: the worker saves first", "attempt", attempt, "signal", s.cfg.CheckpointSignal, "timeout", s.cfg.CheckpointTimeout)
			syscall.Kill(-pid, sig)
		}
	}
	if ends {
		return false // passed on as it is: the worker saves on it
	}
	ck.holdTerm = true
	return true
}

// checkpointSignals are the signals a checkpoint request may send, by name
// (CheckpointPolicy.Signal's enum).
var checkpointSignals = map[string]syscall.Signal{
	"SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2, "SIGTERM": syscall.SIGTERM, "SIGINT": syscall.SIGINT,
}

// checkpoint is the save a supervisor's loop is waiting on, if any: the requests waiting
// for its answer, the ticks on which it looks for the worker's done file, and its timeout.
type checkpoint struct {
	active  bool
	conns   []*net.UnixConn
	ticker  *time.Ticker
	timer   *time.Timer
	tick    <-chan time.Time
	timeout <-chan time.Time
	// ends: the signal asks the worker to end (its exit answers).
	ends bool
	// holdTerm: the container's SIGTERM waits for the answer; terminating: the container
	// got SIGTERM (it ends with the worker).
	holdTerm, terminating bool
	// kept is the answer of a save no request waited for (the container's SIGTERM asked):
	// the next request of the attempt takes it.
	kept string
}

// doneTick is how often a pending checkpoint looks for the worker's done file.
const doneTick = 50 * time.Millisecond

func (c *checkpoint) start(timeout time.Duration, ends bool) {
	c.active, c.ends, c.kept = true, ends, ""
	if timeout <= 0 {
		timeout = defaultCheckpointTimeout
	}
	c.ticker, c.timer = time.NewTicker(doneTick), time.NewTimer(timeout)
	c.tick, c.timeout = c.ticker.C, c.timer.C
}

// defaultCheckpointTimeout bounds a save with no timeout given (spec.checkpoint's default).
const defaultCheckpointTimeout = 300 * time.Second

func (c *checkpoint) pending() bool { return c.active }

// take gives conn the answer of the save under way (it waits), or the one kept; it reports
// false when there is neither (a new save is to start).
func (c *checkpoint) take(conn *net.UnixConn) bool {
	switch {
	case c.active:
		c.conns = append(c.conns, conn)
		return true
	case c.kept != "":
		fmt.Fprintln(conn, c.kept)
		conn.Close()
		c.kept = ""
		return true
	}
	return false
}

// answer answers the save under way, if any, to every request that waits (or keeps the
// answer for the next one), and ends it; it reports whether a SIGTERM the container got
// is to be passed on now.
func (c *checkpoint) answer(line string) (passTerm bool) {
	if !c.active {
		return false
	}
	for _, conn := range c.conns {
		fmt.Fprintln(conn, line)
		conn.Close()
	}
	if len(c.conns) == 0 {
		c.kept = line
	}
	c.ticker.Stop()
	c.timer.Stop()
	passTerm = c.holdTerm
	c.active, c.conns, c.tick, c.timeout, c.holdTerm = false, nil, nil, nil, false
	return passTerm
}

// doneFile reads and removes the worker's done file, noted as its last save at the file's
// time: the step it holds (-1: none), and whether it was there.
func (s *supervisor) doneFile() (int64, bool) {
	step, at, ok := s.readDone()
	if ok {
		s.heardSave(step, at)
		os.Remove(filepath.Join(s.cfg.CheckpointDir, CheckpointDoneFile))
	}
	return step, ok
}

// readDone reads the worker's done file: the step it holds (-1: none), when it was written,
// and whether it is there.
func (s *supervisor) readDone() (step int64, at time.Time, ok bool) {
	if s.cfg.CheckpointDir == "" {
		return 0, time.Time{}, false
	}
	path := filepath.Join(s.cfg.CheckpointDir, CheckpointDoneFile)
	info, err := os.Stat(path)
	if err != nil {
		return 0, time.Time{}, false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, time.Time{}, false
	}
	step = -1
	if n := ReadDone(b); n != nil {
		step = *n
	}
	return step, info.ModTime(), true
}

// noteDoneFile takes a done file the worker wrote without a request (a periodic save) as
// its last save, where it is later than the last the barrier heard.
func (s *supervisor) noteDoneFile() {
	if step, at, ok := s.readDone(); ok && (s.saved == nil || at.After(s.saved.At)) {
		s.heardSave(step, at)
	}
}

// removeDone removes a done file left from before a request (a worker's own periodic word,
// noted as its last save first), and makes sure the directory is there for the worker to
// write it.
func (s *supervisor) removeDone() {
	if s.cfg.CheckpointDir == "" {
		return
	}
	s.noteDoneFile()
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
func startWorker(argv, env []string) (int, error) {
	path, err := lookPath(argv[0])
	if err != nil {
		return 0, err
	}
	p, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   env,
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
