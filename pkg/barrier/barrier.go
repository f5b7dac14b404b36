// Package barrier is faultline-barrier, the init container that holds a worker pod's
// workers back until the node agent gives it the go signal of the attempt the gang is to
// run (docs/in-place-restart.md). A pod restarted in place by the kubelet's
// RestartAllContainers runs its init containers again, so the barrier runs before every
// start of the workers: the first one and each in-place restart.
//
// Wait blocks until Open, run inside the barrier's container through the CRI's ExecSync by
// the node agent, hands it an attempt newer than the one already in the attempt file when
// Wait started: the file lives in an emptyDir that survives an in-place restart, so the
// attempt the pod's previous process ran must never open it again. Wait then writes the
// attempt to the file (atomically, for the workers to read) and to its termination message
// (the kubelet copies it into the pod's status: which attempt a running worker belongs to,
// with no API write), and returns.
//
// The two halves meet over a unix socket in the barrier's run directory: Open learns
// whether the waiting barrier took its attempt (and why not), so the agent's exec reports
// the outcome instead of a guess.
//
// The barrier can also be the worker container's own entrypoint, its binary from an image
// volume of the barrier's image: Supervise (`faultline-barrier supervise -- COMMAND...`)
// waits the same way, then runs the worker's command as its child and stays: Stop ends that
// child and every process it left, and the barrier waits for the next open in the same
// container, without the kubelet. A restart in place is then one container per pod, and
// none restarted (docs/benchmarks.md, "A barrier that supervises its worker").
package barrier

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/faultline-dev/faultline/pkg/version"
)

// The shared names of api/v1alpha1 (wellknown.go) that the barrier uses, repeated here: the
// package that declares them links the Kubernetes API machinery, which would make the
// barrier's image 9 MB instead of 2 (a pull on every node before a gang's first start);
// barrier_test.go holds them equal.
const (
	// RunDir is v1alpha1.RunDir, AttemptFile v1alpha1.AttemptFile.
	RunDir      = "/var/run/faultline"
	AttemptFile = RunDir + "/attempt"
	// OpenedMessagePrefix is v1alpha1.BarrierOpenedMessagePrefix.
	OpenedMessagePrefix = "attempt="
	// EnvAttempt is v1alpha1.EnvAttempt: the attempt the barrier's pod was made for.
	EnvAttempt = "FAULTLINE_ATTEMPT"
	// CheckpointDir is v1alpha1.CheckpointDir, CheckpointDoneFile v1alpha1.CheckpointDoneFile:
	// where a supervised worker says it saved (Checkpoint).
	CheckpointDir      = RunDir + "/checkpoint"
	CheckpointDoneFile = "done"
	// EnvCheckpointSignal and EnvCheckpointTimeout are v1alpha1's: spec.checkpoint, in the
	// worker container of a run that saves on notice.
	EnvCheckpointSignal  = "FAULTLINE_CHECKPOINT_SIGNAL"
	EnvCheckpointTimeout = "FAULTLINE_CHECKPOINT_TIMEOUT"
)

const (
	// Binary is where the barrier's image holds the program: the node agent execs
	// `Binary open --attempt N` in the barrier's container.
	Binary = "/faultline-barrier"
	// ImageUser is the user the barrier's image runs as: not root (the distroless
	// images' nonroot). It needs no privilege: it writes only to the run volume (an
	// emptyDir, world-writable) and its termination log (which the kubelet makes writable
	// for any user), and open, exec'd as the same user, reaches its socket.
	ImageUser = "65532:65532"
	// ImageRepository is the barrier's image as released; the controller names it in the
	// pods it builds, tagged with its own version (Image).
	ImageRepository = version.DefaultRegistry + "/" + version.BarrierImageName
	// CommandSupervise is faultline-barrier's command where it is the worker container's
	// entrypoint (Supervise): the controller writes it into the pod's command.
	CommandSupervise = "supervise"
	// DefaultSocket is where a waiting barrier listens for Open: in the run volume, which
	// only the barrier mounts writable; no worker runs while the barrier does (it is an
	// init container, and the kubelet removes every old container before it runs it).
	DefaultSocket = RunDir + "/.barrier.sock"
	// DefaultTerminationLog is the container's terminationMessagePath unless the pod
	// says otherwise; the kubelet copies what is written there into the pod's status.
	DefaultTerminationLog = "/dev/termination-log"
)

// Image is the barrier's image reference for a faultline version: the image of the same
// version as the controller that names it, as `make images` tags it and `launcher install`
// renders it (version.Tag: a development build's own tag, built beside it).
func Image(v string) string {
	return version.ImageRef(version.DefaultRegistry, version.BarrierImageName, v)
}

// OpenedMessage is the barrier's termination message once opened for attempt.
func OpenedMessage(attempt int) string {
	return OpenedMessagePrefix + strconv.Itoa(attempt)
}

// ParseOpenedMessage reads the attempt out of a barrier's termination message; ok is false
// for any other message (a barrier that did not open: killed, or an error of its own).
func ParseOpenedMessage(msg string) (attempt int, ok bool) {
	rest, found := strings.CutPrefix(strings.TrimSpace(msg), OpenedMessagePrefix)
	if !found {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// ReadAttempt reads the attempt file: 0 when there is none (a new pod: the volume starts
// empty). A file that holds anything but a positive attempt is an error: guessing would
// risk opening for a stale attempt.
func ReadAttempt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the attempt file: %w", err)
	}
	n, err := ParseAttempt(b)
	if err != nil {
		return 0, fmt.Errorf("attempt file %s: %w", path, err)
	}
	return n, nil
}

// ParseAttempt reads an attempt file's content: a positive attempt in decimal.
func ParseAttempt(b []byte) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%q is not a positive attempt", b)
	}
	return n, nil
}

// OpenedBefore reports whether the attempt file at path holds attempt or a later one: a
// barrier writes it before it answers its opener, so one that no longer listens and whose
// file says so has opened for attempt (a barrier in the worker container runs on as the
// worker and never listens again).
func OpenedBefore(path string, attempt int) bool {
	n, err := ReadAttempt(path)
	return err == nil && n >= attempt
}

// WriteAttempt replaces the attempt file with attempt through a rename in its directory,
// so that a reader sees the old attempt or the new one, never a partial write.
func WriteAttempt(path string, attempt int) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".attempt-*")
	if err != nil {
		return fmt.Errorf("write the attempt file: %w", err)
	}
	tmp := f.Name()
	_, err = f.WriteString(strconv.Itoa(attempt) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// The workers mount the volume read-only and may run as any user.
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write the attempt file: %w", err)
	}
	return nil
}

// Verdict is what a waiting barrier answers an Open.
type Verdict int

const (
	// Opened: the attempt is newer than the barrier's starting one; the barrier opens.
	Opened Verdict = iota
	// Stale: the attempt is not newer than the one the pod's previous process ran (or an
	// open of an older attempt arrived late): the barrier stays closed.
	Stale
)

// Judge decides an open: only an attempt newer than the one in the attempt file when the
// barrier started opens it.
func Judge(start, attempt int) Verdict {
	if attempt > start {
		return Opened
	}
	return Stale
}

// The protocol on the socket: one line each way. Open sends "open <attempt>"; the barrier
// answers "opened <attempt>" or "stale <attempt> <start>". A supervising barrier
// (Supervise) takes "stop <attempt> <grace in ms>" too: it answers "stopped <attempt>" once
// no process of its worker is left, or "stale <attempt> <opened>" for an attempt not newer
// than the one its worker runs; to an open while its worker runs it answers
// "running <attempt>".
const (
	verbOpen    = "open"
	verbOpened  = "opened"
	verbStale   = "stale"
	verbStop    = "stop"
	verbStopped = "stopped"
	verbRunning = "running"
	// A supervising barrier takes "checkpoint <attempt> <signal name> <timeout in ms>" too,
	// for the worker that runs attempt: it sends the signal to the worker's process group
	// and answers once the worker said it saved ("saved <attempt> <step or ->"), ended
	// ("exited <attempt> <status>"), was stopped ("stopped <attempt>"), or the timeout passed
	// ("timeout <attempt>"); "stale <attempt> <running>" for a worker of another attempt, or
	// none. "done <attempt> <step or -1>" is the worker's own word that it saved
	// (`faultline-barrier checkpoint-done`), answered "ok <attempt>".
	verbCheckpoint = "checkpoint"
	verbSaved      = "saved"
	verbExited     = "exited"
	verbTimeout    = "timeout"
	verbDone       = "done"
	verbOK         = "ok"
)

// ErrStale is Open's error when the waiting barrier refused the attempt as not newer than
// the one it started with.
var ErrStale = errors.New("attempt not newer than the barrier's")

// ErrNotWaiting is Open's error when no barrier listens: it was opened already (and exits)
// or is not running yet.
var ErrNotWaiting = errors.New("no barrier is waiting")

// Config is where a barrier keeps its state.
type Config struct {
	// AttemptFile is the file the workers read the attempt from (AttemptFile).
	AttemptFile string
	// Socket is where it listens for Open (DefaultSocket).
	Socket string
	// TerminationLog is the container's termination message file (DefaultTerminationLog);
	// "" writes none (Supervise: the worker's program owns the container's message).
	TerminationLog string
	Logger         *slog.Logger
	// Listening, if set, is called once the barrier listens (tests wait for it).
	Listening func()
	// MadeFor is the attempt the barrier's pod was made for (FAULTLINE_ATTEMPT; 0: unknown):
	// it opens for no older attempt, even on a new pod whose attempt file is empty. A node
	// agent whose view of the run lags one attempt behind would otherwise start a pod made
	// for attempt 3 as attempt 2, beside the gang's attempt 3.
	MadeFor int
	// CheckpointDir is where a supervised worker writes CheckpointDoneFile once it saved
	// (CheckpointDir; "" none: only checkpoint-done answers a request).
	CheckpointDir string
	// CheckpointSignal, where the run saves on notice (EnvCheckpointSignal), is the signal
	// that asks the worker to save: the container's SIGTERM asks it first (Supervise), for
	// up to CheckpointTimeout (EnvCheckpointTimeout).
	CheckpointSignal  string
	CheckpointTimeout time.Duration
	// Identity is the worker's index, and a warm spare's variables that wait for one
	// (ReadIdentity): an open that leaves the worker without an index is refused.
	Identity Identity
}

// Wait blocks until an Open hands it an attempt newer than the attempt file's, then writes
// that attempt to the attempt file and the termination message and returns it. It returns
// ctx's error when ctx ends first (SIGTERM: the pod is terminating).
func Wait(ctx context.Context, cfg Config) (int, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ln, start, err := listen(cfg)
	if err != nil {
		return 0, err
	}
	defer ln.Close() // removes the socket
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	log.Info("waiting for the go signal", "after-attempt", start, "socket", cfg.Socket)
	if cfg.Listening != nil {
		cfg.Listening()
	}
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			return 0, fmt.Errorf("accept: %w", err)
		}
		attempt, done, err := serve(conn, cfg, start)
		if err != nil {
			log.Warn("go signal not taken", "error", err)
		}
		if done {
			awaitPeerExit(conn, peerExitTimeout)
			conn.Close()
			log.Info("opened", "attempt", attempt)
			return attempt, nil
		}
		conn.Close()
	}
}

// listen reads the attempt the barrier opens after (the attempt file's, and none before the
// one its pod was made for: Judge opens for attempts after start) and listens on its socket.
func listen(cfg Config) (ln *net.UnixListener, start int, err error) {
	if start, err = ReadAttempt(cfg.AttemptFile); err != nil {
		return nil, 0, err
	}
	start = max(start, cfg.MadeFor-1)
	// A socket left by a barrier killed before it could remove it (the volume outlives
	// the container) would make the listen fail.
	if err := os.Remove(cfg.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, 0, fmt.Errorf("remove a stale socket: %w", err)
	}
	if ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: cfg.Socket, Net: "unix"}); err != nil {
		return nil, 0, fmt.Errorf("listen for the go signal: %w", err)
	}
	return ln, start, nil
}

// peerExitTimeout bounds how long an opened barrier waits for its open to exit (it exits
// as soon as it read the answer).
const peerExitTimeout = 2 * time.Second

// serve answers one Open; done says the barrier opened.
func serve(conn *net.UnixConn, cfg Config, start int) (attempt int, done bool, err error) {
	req, err := readRequest(conn)
	if err != nil {
		return 0, false, err
	}
	if req.verb != verbOpen {
		fmt.Fprintf(conn, "error bad request %q\n", req.line)
		return 0, false, fmt.Errorf("bad request %q", req.line)
	}
	attempt, _, done, err = answerOpen(conn, cfg, start, req)
	return attempt, done, err
}

// request is one line a barrier's client sent: a verb and an attempt, and for a stop the
// grace period the worker gets.
type request struct {
	line    string
	verb    string
	attempt int
	// grace: a stop's; a checkpoint's timeout.
	grace time.Duration
	// signal: a checkpoint's signal, by name.
	signal string
	// step: a done's (-1: none said).
	step int64
	// index: the index an open hands a warm spare's barrier (NoIndex: none named).
	index int
}

// readRequest reads one request from conn, within a deadline: a client that connects and
// says nothing must not hold the barrier. A malformed one is answered, and an error.
func readRequest(conn *net.UnixConn) (request, error) {
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(io.LimitReader(conn, 64)).ReadString('\n')
	if err != nil {
		return request{}, fmt.Errorf("read the request: %w", err)
	}
	req := request{line: line, index: NoIndex}
	fields := strings.Fields(line)
	ok := len(fields) >= 2
	if ok {
		req.verb = fields[0]
		req.attempt, err = strconv.Atoi(fields[1])
		ok = err == nil && req.attempt >= 1
	}
	switch {
	case ok && req.verb == verbOpen:
		ok = len(fields) == 2
		if len(fields) == 3 {
			req.index, err = strconv.Atoi(fields[2])
			ok = err == nil && req.index >= 0
		}
	case ok && req.verb == verbStop:
		var ms int
		ms, err = strconv.Atoi(fields[len(fields)-1])
		ok = len(fields) == 3 && err == nil && ms >= 0
		req.grace = time.Duration(ms) * time.Millisecond
	case ok && req.verb == verbCheckpoint:
		var ms int
		ms, err = strconv.Atoi(fields[len(fields)-1])
		ok = len(fields) == 4 && err == nil && ms >= 0
		req.signal, req.grace = fields[2], time.Duration(ms)*time.Millisecond
	case ok && req.verb == verbDone:
		req.step, err = strconv.ParseInt(fields[len(fields)-1], 10, 64)
		ok = len(fields) == 3 && err == nil && req.step >= -1
	default:
		ok = false
	}
	if !ok {
		fmt.Fprintf(conn, "error bad request %q\n", line)
		return request{}, fmt.Errorf("bad request %q", line)
	}
	return req, nil
}

// answerOpen judges an open (req) for a barrier that started after start, and answers it:
// the attempt and the index its worker runs as (Identity.Take); done says it opened.
func answerOpen(conn *net.UnixConn, cfg Config, start int, req request) (attempt, index int, done bool, err error) {
	attempt = req.attempt
	if Judge(start, attempt) == Stale {
		fmt.Fprintf(conn, "%s %d %d\n", verbStale, attempt, start)
		return 0, NoIndex, false, fmt.Errorf("attempt %d: %w (%d)", attempt, ErrStale, start)
	}
	if index, err = cfg.Identity.Take(req.index); err != nil {
		fmt.Fprintf(conn, "error %v\n", err)
		return 0, NoIndex, false, err
	}
	// The file first: once the termination message is written and the barrier exits, the
	// kubelet starts the workers, which read it.
	if err := WriteAttempt(cfg.AttemptFile, attempt); err != nil {
		fmt.Fprintf(conn, "error %v\n", err)
		return 0, NoIndex, false, err
	}
	// A barrier that supervises the worker leaves the termination message to it.
	var msgErr error
	if cfg.TerminationLog != "" {
		if werr := os.WriteFile(cfg.TerminationLog, []byte(OpenedMessage(attempt)), 0o644); werr != nil {
			// The workers may still start: the status then lacks the attempt, which the
			// controller treats as a pod of unknown attempt. Say so, but open: holding the
			// gang for a message would be worse.
			msgErr = fmt.Errorf("write the termination message: %w", werr)
		}
	}
	fmt.Fprintf(conn, "%s %d\n", verbOpened, attempt)
	return attempt, index, true, msgErr
}

// SocketAt is the path of the barrier's socket in its run directory open as descriptor dir,
// through /proc/self/fd: the directory's own path on a node (the container's root, or the
// kubelet's directory of the pod's volume) is longer than a socket address may be.
func SocketAt(dir int) string {
	return fmt.Sprintf("/proc/self/fd/%d/%s", dir, filepath.Base(DefaultSocket))
}

// ErrUnreachable is Open's error when the socket cannot be connected to for another reason
// than no barrier listening (a permission): nothing was sent.
var ErrUnreachable = errors.New("cannot reach the barrier's socket")

// Open hands attempt to the barrier waiting on socket and returns once it answered: nil
// when it opened, ErrStale when it refused the attempt, ErrNotWaiting when none listens,
// ErrUnreachable when the socket cannot be connected to.
//
// index is the index it hands a warm spare (NoIndex: none, for a pod made with its index).
func Open(ctx context.Context, socket string, attempt, index int) error {
	line := fmt.Sprintf("%s %d", verbOpen, attempt)
	if index != NoIndex {
		line += fmt.Sprintf(" %d", index)
	}
	verb, rest, err := ask(ctx, socket, line, verbOpened)
	if verb == verbRunning {
		return fmt.Errorf("%w: its worker runs attempt %s", ErrNotWaiting, rest)
	}
	return err
}

// Stop asks the supervising barrier on socket (Supervise) to end its worker for attempt,
// giving it grace before SIGKILL, and returns once it answered that none of the worker's
// processes is left: the worker's last save as the barrier knows it (nil: none), and nil
// then, ErrStale when its worker runs attempt or a later one, ErrNotWaiting when no
// supervising barrier listens. ctx must outlast grace.
func Stop(ctx context.Context, socket string, attempt int, grace time.Duration) (*Save, error) {
	_, rest, err := ask(ctx, socket, fmt.Sprintf("%s %d %d", verbStop, attempt, grace.Milliseconds()), verbStopped)
	if err != nil {
		return nil, err
	}
	return parseStopped(rest), nil
}

// Save is a worker's save as its barrier heard it: the step it said (nil: none said) and
// when. Every save counts, the periodic ones too: a worker that says each one (its done
// file, or checkpoint-done) lets the goodput ledger count the work a restart redoes.
type Save struct {
	Step *int64
	At   time.Time
}

// field is the save as the stop's answer carries it: "<step|-> <RFC 3339 time>".
func (s *Save) field() string {
	step := int64(-1)
	if s.Step != nil {
		step = *s.Step
	}
	return stepField(step) + " " + s.At.UTC().Format(time.RFC3339Nano)
}

// parseStopped reads the save in the rest of a stop's answer ("<attempt> [<step|-> <time>]");
// nil when there is none (or an older barrier's answer, which carries none).
func parseStopped(rest string) *Save {
	f := strings.Fields(rest)
	if len(f) != 3 {
		return nil
	}
	at, err := time.Parse(time.RFC3339Nano, f[2])
	if err != nil {
		return nil
	}
	s := &Save{At: at}
	if n, err := strconv.ParseInt(f[1], 10, 64); err == nil && n >= 0 {
		s.Step = &n
	}
	return s
}

// stepField is a step as the protocol writes it: "-" for none.
func stepField(step int64) string {
	if step < 0 {
		return "-"
	}
	return strconv.FormatInt(step, 10)
}

// CheckpointAnswer is a supervising barrier's answer to a checkpoint request.
type CheckpointAnswer struct {
	// Saved: the worker said it saved, or ended (Exit) after the signal.
	Saved bool
	// Step is the step it said it saved, if it said one.
	Step *int64
	// Exit is the worker's exit status where it ended after the signal.
	Exit *int
	// Reason says why it did not save: the timeout passed, or it was stopped.
	Reason string
}

// Checkpoint asks the supervising barrier on socket to send its worker of attempt the
// signal (by name: SIGUSR1, SIGUSR2, SIGTERM or SIGINT) and returns its answer once the
// worker said it saved, ended, was stopped, or timeout passed; ErrStale when its worker
// runs another attempt or none, ErrNotWaiting when no supervising barrier listens. ctx
// must outlast timeout.
func Checkpoint(ctx context.Context, socket string, attempt int, signal string, timeout time.Duration) (CheckpointAnswer, error) {
	line, err := exchange(ctx, socket, fmt.Sprintf("%s %d %s %d", verbCheckpoint, attempt, signal, timeout.Milliseconds()))
	if err != nil {
		return CheckpointAnswer{}, err
	}
	return parseCheckpointAnswer(line, attempt)
}

// parseCheckpointAnswer reads a barrier's answer line to a checkpoint of attempt.
func parseCheckpointAnswer(line string, attempt int) (CheckpointAnswer, error) {
	f := strings.Fields(line)
	if len(f) >= 2 && f[1] != strconv.Itoa(attempt) {
		return CheckpointAnswer{}, fmt.Errorf("the barrier answered %q to a checkpoint of attempt %d", line, attempt)
	}
	switch {
	case len(f) == 3 && f[0] == verbSaved:
		a := CheckpointAnswer{Saved: true}
		if n, err := strconv.ParseInt(f[2], 10, 64); err == nil && n >= 0 {
			a.Step = &n
		}
		return a, nil
	case len(f) == 3 && f[0] == verbExited:
		n, err := strconv.Atoi(f[2])
		if err != nil {
			break
		}
		return CheckpointAnswer{Saved: true, Exit: &n}, nil
	case len(f) == 2 && f[0] == verbTimeout:
		return CheckpointAnswer{Reason: "it did not say it saved within the timeout"}, nil
	case len(f) == 2 && f[0] == verbStopped:
		return CheckpointAnswer{Reason: "it was stopped before it said it saved"}, nil
	case len(f) >= 2 && f[0] == verbStale:
		return CheckpointAnswer{}, fmt.Errorf("checkpoint of attempt %d: %w (%s)", attempt, ErrStale, strings.Join(f[2:], " "))
	}
	return CheckpointAnswer{}, fmt.Errorf("the barrier answered %q to a checkpoint of attempt %d", line, attempt)
}

// CheckpointDone tells the supervising barrier on socket that its worker of attempt saved
// step (-1: it says none), which answers the request it waits on, if any.
func CheckpointDone(ctx context.Context, socket string, attempt int, step int64) error {
	_, _, err := ask(ctx, socket, fmt.Sprintf("%s %d %d", verbDone, attempt, step), verbOK)
	return err
}

// ReadDone reads a worker's done file: the step it holds, if it holds one (anything else,
// an empty file too, says it saved without a step).
func ReadDone(b []byte) *int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return nil
	}
	return &n
}

// attemptMarkerPrefix starts the line a supervising barrier writes to its container's log
// as it starts a worker (AttemptMarker).
const attemptMarkerPrefix = "faultline-barrier: attempt "

// AttemptMarker is the line a supervising barrier writes to its container's log, on stdout
// and on stderr, as it starts the worker of attempt: that container's log holds every
// attempt it ran.
func AttemptMarker(attempt int) string {
	return fmt.Sprintf("%s%d starts", attemptMarkerPrefix, attempt)
}

// ParseAttemptMarker reads the attempt out of a log line that is an AttemptMarker.
func ParseAttemptMarker(line string) (int, bool) {
	rest, ok := strings.CutPrefix(line, attemptMarkerPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSuffix(rest, " starts"))
	return n, err == nil && n >= 1 && strings.HasSuffix(rest, " starts")
}

// ask sends one request to the barrier on socket and returns its answer, a verb and the
// rest of the line: nil error for the answer done, ErrStale for "stale", an error naming
// any other answer; ErrNotWaiting when none listens (or it closed without an answer:
// another request got there first and it moved on), ErrUnreachable when the socket cannot be
// connected to, and an error wrapping os.ErrDeadlineExceeded when ctx ended before the
// answer (the request may still be acted on: ask again).
func ask(ctx context.Context, socket, request, done string) (verb, rest string, err error) {
	line, err := exchange(ctx, socket, request)
	if err != nil {
		return "", "", err
	}
	verb, rest, _ = strings.Cut(line, " ")
	switch verb {
	case done:
		return verb, rest, nil
	case verbStale:
		return verb, rest, fmt.Errorf("%q: %w (%s)", request, ErrStale, rest)
	}
	return verb, rest, fmt.Errorf("the barrier answered %q to %q", line, request)
}

// exchange sends request on socket and reads the answer's line, trimmed (see ask).
func exchange(ctx context.Context, socket, request string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return "", fmt.Errorf("%w on %s", ErrNotWaiting, socket)
		}
		return "", fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if _, err := fmt.Fprintf(conn, "%s\n", request); err != nil {
		return "", fmt.Errorf("send %q: %w", request, err)
	}
	line, err := bufio.NewReader(io.LimitReader(conn, 256)).ReadString('\n')
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return "", fmt.Errorf("no answer from the barrier: %w", err)
	}
	if err != nil {
		return "", fmt.Errorf("%w: no answer: %v", ErrNotWaiting, err)
	}
	return strings.TrimSpace(line), nil
}
