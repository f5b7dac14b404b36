// Command worker is the test worker of the real-node scenarios (test/e2e/realnode): a small
// static program that behaves like a TensorFlow or JAX process where faultline depends on
// it. It reads the environment faultline and the framework plugin give it; index 0 runs a
// coordination service on the rendezvous address and every index (0 too) registers with it
// by its DNS name, with an incarnation id of its own (see coord.go for what the service
// keeps of XLA's). When the service loses a task, or refuses one, every task prints the
// framework's words for it on stderr and exits 1; SIGTERM ends it with 143, as a Python
// process killed by it does.
//
// Faults on demand, for one index (--fail-index) of one attempt (--fail-attempt), some time
// after the whole gang registered (--fail-after):
//
//	--fail exit       a bug: a traceback on stderr, exit 1
//	--fail oom        allocate until the container's memory limit kills it (OOMKilled)
//	--fail message    print --message on stderr (e.g. a framework's error), exit 1
//
// With --fail-on-usr1 it fails when it receives SIGUSR1 instead of --fail-after: a test that
// must see the gang Running first (a kubelet's status write can take seconds) says when.
//
// With --replay NAME, every index of the attempt replays instead, once the whole gang has
// registered, the output its index printed in a recorded real gang and exits with its code
// at its time (replay.go; the recordings are package realoutput's).
//
// A gang that hangs, for one attempt (--fail-attempt), --fail-after the whole gang registered:
//
//	--hang            every index blocks for ever, as in a collective that never completes
//	                  (or a CUDA call on a GPU that fell off the bus): no more output, SIGTERM
//	                  ignored (a Python handler never runs while the process is stuck in C),
//	                  only SIGKILL ends it; its heartbeats go on, as XLA's heartbeat thread's do
//	--log-every D     every index logs a step every D, as a training loop that reports its
//	                  progress does (a gang that keeps logging)
//
// With --heartbeats-only the coordinator notices a lost task only when its heartbeats stop
// for --heartbeat-timeout, as XLA's does: the other tasks live on meanwhile, as real ones do.
// With --sigterm-delay a worker goes on for a while after SIGTERM, as one that saves a
// checkpoint does (only index --sigterm-delay-index, if set).
//
// With --exit-at-once it exits 0 at once, needing no environment: an init container that
// costs the kubelet what a barrier that is already open costs (a container, and the relist
// that sees it exit), for BenchmarkRealNodeRestartAllContainers.
//
// Training on the clock, for the checkpoint scenarios: with --log-every D it takes a step
// every D once the gang registered; with --checkpoint-dir DIR (a directory every node sees)
// it resumes from the step its index saved there last (DIR/index-<i>), saves every
// --save-every steps, and with --save-on-usr1 saves on SIGUSR1 (after --save-delay, as a
// sharded save takes a while) and says so as faultline's barrier asks: the file done, with
// the step, in $FAULTLINE_CHECKPOINT_DIR (but index --save-never-index, which never answers).
//
// It logs what it sees (attempt, index, peers registered) for the tests to read with
// `launcher logs`. The attempt comes from the file FAULTLINE_ATTEMPT_FILE names when it is
// set (a pod that restarts in place: its barrier writes the attempt there before each start,
// while FAULTLINE_ATTEMPT stays the attempt the pod was created in), else FAULTLINE_ATTEMPT.
package main

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/faultline-dev/faultline/pkg/framework/hinttest/realoutput"
)

// Environment the worker reads. FAULTLINE_* come from every faultline attempt (pkg/
// rendezvous); JAX_* from the jax plugin (plugins/jax/jaxplugin) and PyTorch's env://
// variables from the pytorch plugin (plugins/pytorch/torchplugin: one process per pod, the
// pod's rank and the number of pods, the master's address and port), which win when set.
const (
	envRun         = "FAULTLINE_RUN"
	envAttempt     = "FAULTLINE_ATTEMPT"
	envAttemptFile = "FAULTLINE_ATTEMPT_FILE"
	envIndex       = "FAULTLINE_INDEX"
	envWorldSize   = "FAULTLINE_WORLD_SIZE"
	envService     = "FAULTLINE_SERVICE"
	envCoordinator = "JAX_COORDINATOR_ADDRESS"
	envNumProcs    = "JAX_NUM_PROCESSES"
	envProcessID   = "JAX_PROCESS_ID"
	envMasterAddr  = "MASTER_ADDR"
	envMasterPort  = "MASTER_PORT"
	envRank        = "RANK"
	envTorchWorld  = "WORLD_SIZE"

	// defaultPort is the coordinator's port when JAX_COORDINATOR_ADDRESS does not name one
	// (the jax plugin's default).
	defaultPort = 1234
)

// Exit codes: 1 for every error the program reports itself, 143 (128+SIGTERM) on SIGTERM.
const (
	exitError   = 1
	exitSIGTERM = 143
)

type config struct {
	run, attempt, coordinator, job string
	index, world                   int
	failIndex, failAttempt         int
	fail, message                  string
	replay                         string
	failAfter, heartbeat, timeout  time.Duration
	registerTimeout                time.Duration
	heartbeatsOnly                 bool
	sigtermDelay                   time.Duration
	sigtermDelayIndex              int
	hang, failOnUSR1, exitAtOnce   bool
	logEvery                       time.Duration
	checkpointDir                  string
	saveEvery                      int
	saveOnUSR1                     bool
	saveDelay                      time.Duration
	saveNeverIndex                 int
	journal                        bool
	quietFor                       time.Duration
	saySaves                       bool
}

func main() {
	cfg, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	}
	if cfg.exitAtOnce {
		os.Exit(0)
	}
	os.Exit(run(cfg))
}

func parse(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.IntVar(&c.failIndex, "fail-index", -1, "the index that fails (-1: none)")
	fs.IntVar(&c.failAttempt, "fail-attempt", 1, "the attempt in which it fails (0: every attempt)")
	fs.StringVar(&c.fail, "fail", "exit", "how it fails: exit, oom or message")
	fs.StringVar(&c.message, "message", "", "what --fail message prints on stderr")
	fs.StringVar(&c.replay, "replay", "", "replay this index's output and exit of a recorded real gang ("+strings.Join(realoutput.Names(), ", ")+") in attempt --fail-attempt")
	fs.DurationVar(&c.failAfter, "fail-after", 2*time.Second, "how long after the gang registered it fails")
	fs.BoolVar(&c.failOnUSR1, "fail-on-usr1", false, "fail when SIGUSR1 arrives (once the gang registered), not --fail-after it registered")
	fs.DurationVar(&c.heartbeat, "heartbeat", 500*time.Millisecond, "heartbeat interval")
	fs.DurationVar(&c.timeout, "heartbeat-timeout", 10*time.Second, "the coordinator's heartbeat timeout")
	fs.DurationVar(&c.sigtermDelay, "sigterm-delay", 0, "how long it goes on after SIGTERM before it exits 143 (a framework saving a checkpoint)")
	fs.IntVar(&c.sigtermDelayIndex, "sigterm-delay-index", -1, "the only index that --sigterm-delay applies to (-1: every index)")
	fs.BoolVar(&c.heartbeatsOnly, "heartbeats-only", false, "the coordinator notices a lost task by its heartbeat timeout only, as XLA's does, not at once when its connection closes")
	fs.DurationVar(&c.registerTimeout, "register-timeout", 5*time.Minute, "how long to try to reach the coordinator")
	fs.BoolVar(&c.hang, "hang", false, "every index blocks for ever --fail-after the gang registered in attempt --fail-attempt, as in a collective that never completes: no more output, SIGTERM ignored")
	fs.DurationVar(&c.logEvery, "log-every", 0, "every index logs a step this often once the gang registered (0: never), as a training loop reporting its progress")
	fs.StringVar(&c.checkpointDir, "checkpoint-dir", "", "where each index saves its step and resumes from (a directory every node sees)")
	fs.IntVar(&c.saveEvery, "save-every", 0, "save every this many steps (0: never), into --checkpoint-dir")
	fs.BoolVar(&c.saveOnUSR1, "save-on-usr1", false, "save on SIGUSR1 and say so in $FAULTLINE_CHECKPOINT_DIR/done (faultline's checkpoint on notice)")
	fs.DurationVar(&c.saveDelay, "save-delay", 0, "how long a save on SIGUSR1 takes")
	fs.BoolVar(&c.journal, "journal", false, "append each step, save and resume to --checkpoint-dir/journal-<index>, across attempts and systems (the benchmarks read what a move lost there)")
	fs.IntVar(&c.saveNeverIndex, "save-never-index", -1, "the index that ignores SIGUSR1 under --save-on-usr1: it never says it saved (-1: none)")
	fs.BoolVar(&c.saySaves, "say-saves", false, "say every periodic save to faultline's barrier too ($FAULTLINE_CHECKPOINT_DIR/done), as docs/checkpoint.md asks, so that it knows the work a restart redoes")
	fs.DurationVar(&c.quietFor, "quiet-for", 0, "write nothing for this long after starting, as a program that imports and compiles before its first line")
	fs.BoolVar(&c.exitAtOnce, "exit-at-once", false, "exit 0 at once (an init container that costs what an open barrier does); no environment needed")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.exitAtOnce {
		return c, nil
	}
	switch c.fail {
	case "exit", "oom", "message":
	default:
		return c, fmt.Errorf("--fail %q: want exit, oom or message", c.fail)
	}
	if (c.saveEvery > 0 || c.saveOnUSR1 || c.journal) && c.checkpointDir == "" {
		return c, errors.New("--save-every, --save-on-usr1 and --journal need --checkpoint-dir")
	}
	if c.saveOnUSR1 && c.failOnUSR1 {
		return c, errors.New("--save-on-usr1 and --fail-on-usr1 both take SIGUSR1: choose one")
	}
	if c.replay != "" {
		if _, err := realoutput.Load(c.replay); err != nil {
			return c, fmt.Errorf("--replay: %w", err)
		}
	}
	c.run = os.Getenv(envRun)
	var err error
	if c.attempt, err = attempt(); err != nil {
		return c, err
	}
	if c.index, err = envInt(envProcessID, envRank, envIndex); err != nil {
		return c, err
	}
	if c.world, err = envInt(envNumProcs, envTorchWorld, envWorldSize); err != nil {
		return c, err
	}
	c.job = "worker" // TensorFlow's job name
	if c.coordinator = os.Getenv(envCoordinator); c.coordinator != "" {
		c.job = "jax_worker" // JAX's
	} else if master := os.Getenv(envMasterAddr); master != "" {
		// PyTorch's env:// rendezvous: the master (rank 0) serves the store on MASTER_PORT.
		c.coordinator = net.JoinHostPort(master, os.Getenv(envMasterPort))
	} else {
		svc := os.Getenv(envService)
		if c.run == "" || svc == "" {
			return c, fmt.Errorf("no coordinator: set %s, or %s and %s", envCoordinator, envRun, envService)
		}
		c.coordinator = fmt.Sprintf("%s-0.%s", c.run, svc)
	}
	if _, _, err := net.SplitHostPort(c.coordinator); err != nil {
		c.coordinator = net.JoinHostPort(c.coordinator, strconv.Itoa(defaultPort))
	}
	return c, nil
}

// attempt is the attempt this process belongs to, as docs/plugins.md tells frameworks to
// read it: the file FAULTLINE_ATTEMPT_FILE names when that is set, else FAULTLINE_ATTEMPT.
// A file that is named but unreadable is an error, not a fall back: the env var would be
// the pod's first attempt, wrong after an in-place restart.
func attempt() (string, error) {
	path := os.Getenv(envAttemptFile)
	if path == "" {
		return os.Getenv(envAttempt), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", envAttemptFile, err)
	}
	a := strings.TrimSpace(string(b))
	if n, err := strconv.Atoi(a); err != nil || n < 1 {
		return "", fmt.Errorf("%s=%s holds %q: want an attempt", envAttemptFile, path, b)
	}
	return a, nil
}

// envInt reads the first of names that is set as an integer.
func envInt(names ...string) (int, error) {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			i, err := strconv.Atoi(v)
			if err != nil {
				return 0, fmt.Errorf("%s=%q: not an integer", n, v)
			}
			return i, nil
		}
	}
	return 0, fmt.Errorf("none of %s is set", strings.Join(names, ", "))
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stdout, "%s %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func run(c config) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sigs
		if c.sigtermDelay > 0 && (c.sigtermDelayIndex < 0 || c.sigtermDelayIndex == c.index) {
			logf("worker %d: received %v, exiting %d in %s", c.index, s, exitSIGTERM, c.sigtermDelay)
			time.Sleep(c.sigtermDelay)
		}
		logf("worker %d: received %v, exiting %d", c.index, s, exitSIGTERM)
		os.Exit(exitSIGTERM)
	}()
	// Notified from the start, not at the rendezvous: SIGUSR1's default action ends the
	// process, and the test may signal as soon as the pod is Ready.
	var usr1 chan os.Signal
	if c.failOnUSR1 && c.failsThisAttempt() {
		usr1 = make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
	}
	var saveOn chan os.Signal
	if c.saveOnUSR1 {
		saveOn = make(chan os.Signal, 1)
		signal.Notify(saveOn, syscall.SIGUSR1)
	}
	var failOn <-chan os.Signal
	time.Sleep(c.quietFor)
	step := c.resumed()
	incarnation := newIncarnation()
	host, _ := os.Hostname()
	logf("worker start: run=%s attempt=%s index=%d world=%d incarnation=%d host=%s coordinator=%s gpus=%q",
		c.run, c.attempt, c.index, c.world, incarnation, host, c.coordinator, os.Getenv("NVIDIA_VISIBLE_DEVICES"))

	if c.index == 0 {
		_, port, _ := net.SplitHostPort(c.coordinator)
		ln, err := net.Listen("tcp", ":"+port)
		if err != nil {
			return fatal(c, fmt.Sprintf("UNAVAILABLE: coordination service cannot listen on :%s: %v", port, err))
		}
		srv := newServer(c.job, c.world, c.timeout, c.heartbeatsOnly, logf)
		go srv.serve(ln)
		logf("coordinator: serving %d tasks of /job:%s on :%s (attempt %s)", c.world, c.job, port, c.attempt)
	}

	conn, err := dialCoordinator(c)
	if err != nil {
		// XLA's words when the leader was never reached: gRPC's connection failure, which
		// faultline's hints do not take for a peer's (a wrong address says it too).
		return fatal(c, "UNAVAILABLE: Failed to send RPC to coordination service. Either the leader task was preempted/died/restarted unexpectedly or this task is experiencing network issues. Check earlier logs from 1) this task, 2) the leader (usually slice 0 task 0), and 3) cluster scheduler to debug further.\n"+
			"Additional GRPC error information from remote target coordination_service while calling /tensorflow.CoordinationService/RegisterTask:\n"+
			":UNKNOWN:failed to connect to all addresses; last error: "+err.Error()+" {grpc_status:14}")
	}
	enc := json.NewEncoder(conn)
	dec := json.NewDecoder(bufio.NewReader(conn))
	if err := enc.Encode(message{Op: opRegister, Task: c.index, Incarnation: incarnation, Attempt: c.attempt}); err != nil {
		return lostCoordinator(c, err)
	}
	// Heartbeats until the process ends.
	go func() {
		for range time.Tick(c.heartbeat) {
			if enc.Encode(message{Op: opHeartbeat, Task: c.index, Incarnation: incarnation}) != nil {
				return
			}
		}
	}()
	failAt := make(<-chan time.Time)
	hangAt := make(<-chan time.Time)
	var steps <-chan time.Time
	msgs := make(chan message)
	errs := make(chan error, 1)
	go func() {
		for {
			var m message
			if err := dec.Decode(&m); err != nil {
				errs <- err
				return
			}
			msgs <- m
		}
	}()
	for {
		select {
		case m := <-msgs:
			switch m.Op {
			case opStart:
				logf("worker %d: rendezvous complete: %d tasks registered %v (attempt %s)", c.index, len(m.Tasks), m.Tasks, c.attempt)
				if c.replay != "" && c.inFailAttempt() {
					// The recording's own output from here on: nothing of the coordinator's.
					rec, _ := realoutput.Load(c.replay)
					return replayer{out: os.Stdout, sleep: sleepUntil}.replay(rec, c.index, time.Now())
				}
				switch {
				case c.failsThisAttempt() && usr1 != nil:
					logf("worker %d: will fail (%s) on SIGUSR1", c.index, c.fail)
					failOn = usr1
				case c.failsThisAttempt():
					logf("worker %d: will fail (%s) in %s", c.index, c.fail, c.failAfter)
					failAt = time.After(c.failAfter)
				}
				if c.hang && c.inFailAttempt() {
					logf("worker %d: will hang in %s", c.index, c.failAfter)
					hangAt = time.After(c.failAfter)
				}
				if c.logEvery > 0 {
					steps = time.Tick(c.logEvery)
				}
			case opError:
				return fatal(c, m.Status)
			}
		case err := <-errs:
			return lostCoordinator(c, err)
		case <-failAt:
			return failNow(c)
		case <-failOn:
			return failNow(c)
		case <-hangAt:
			hang(c)
		case <-steps:
			step++
			logf("worker %d: step %d (attempt %s)", c.index, step, c.attempt)
			c.note("step %d", step)
			if c.saveEvery > 0 && step%c.saveEvery == 0 {
				c.save(step, "periodic")
				if c.saySaves {
					if err := sayDone(step); err != nil {
						logf("worker %d: cannot say it saved: %v", c.index, err)
					}
				}
			}
		case <-saveOn:
			if c.index == c.saveNeverIndex {
				logf("worker %d: asked to save at step %d, ignored (--save-never-index)", c.index, step)
				continue
			}
			logf("worker %d: asked to save at step %d (attempt %s)", c.index, step, c.attempt)
			time.Sleep(c.saveDelay)
			c.save(step, "on notice")
			if err := sayDone(step); err != nil {
				logf("worker %d: cannot say it saved: %v", c.index, err)
			}
		}
	}
}

// stepFile is where this index saves its step.
func (c config) stepFile() string {
	return fmt.Sprintf("%s/index-%d", c.checkpointDir, c.index)
}

// resumed is the step this index saved last (0 without a checkpoint), which it resumes from.
func (c config) resumed() int {
	if c.checkpointDir == "" {
		return 0
	}
	b, err := os.ReadFile(c.stepFile())
	n, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || perr != nil {
		logf("worker %d: resumes from step 0 (no checkpoint: %v)", c.index, err)
		c.note("resume 0")
		return 0
	}
	logf("worker %d: resumes from step %d (attempt %s)", c.index, n, c.attempt)
	c.note("resume %d", n)
	return n
}

// note appends a line to this index's journal (--journal), which outlives its pods: each
// step, each save and each resume, in order.
func (c config) note(format string, args ...any) {
	if !c.journal {
		return
	}
	f, err := os.OpenFile(fmt.Sprintf("%s/journal-%d", c.checkpointDir, c.index), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		logf("worker %d: journal: %v", c.index, err)
		return
	}
	fmt.Fprintf(f, format+"\n", args...)
	f.Close()
}

// save writes step as this index's checkpoint, whole (a rename).
func (c config) save(step int, why string) {
	if err := writeWhole(c.stepFile(), strconv.Itoa(step)); err != nil {
		logf("worker %d: save of step %d failed: %v", c.index, step, err)
		return
	}
	logf("worker %d: saved step %d (%s, attempt %s)", c.index, step, why, c.attempt)
	c.note("save %d", step)
}

// sayDone tells faultline's barrier the save of step is done: the file done in
// $FAULTLINE_CHECKPOINT_DIR, holding the step.
func sayDone(step int) error {
	dir := os.Getenv("FAULTLINE_CHECKPOINT_DIR")
	if dir == "" {
		return errors.New("FAULTLINE_CHECKPOINT_DIR is not set: no barrier supervises this worker")
	}
	return writeWhole(dir+"/done", strconv.Itoa(step))
}

// writeWhole writes content to path through a rename: a reader sees all of it or none.
func writeWhole(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// inFailAttempt says whether this is the attempt of the faults (--fail-attempt).
func (c config) inFailAttempt() bool {
	return c.failAttempt == 0 || strconv.Itoa(c.failAttempt) == c.attempt
}

// failsThisAttempt says whether this index fails (--fail) in this attempt.
func (c config) failsThisAttempt() bool {
	return c.failIndex == c.index && c.inFailAttempt()
}

// hang blocks for ever, as a process stuck in a collective that never completes: its last
// line says so, then nothing more; SIGTERM and SIGINT are ignored (a Python handler never
// runs while the interpreter is stuck in a C call), SIGKILL ends it. Its heartbeats go on.
func hang(c config) {
	logf("worker %d: blocked in a collective that never completes (--hang, attempt %s): no more output, SIGTERM ignored", c.index, c.attempt)
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
	for {
		time.Sleep(time.Hour) // a sleeping goroutine: never a deadlock the runtime would end
	}
}

// dialCoordinator connects to the coordinator by its DNS name, retrying while the name does
// not resolve yet or nobody listens yet (the pods of a gang start in any order).
func dialCoordinator(c config) (net.Conn, error) {
	deadline := time.Now().Add(c.registerTimeout)
	var last error
	for tries := 0; ; tries++ {
		conn, err := net.DialTimeout("tcp", c.coordinator, 2*time.Second)
		if err == nil {
			logf("worker %d: connected to the coordinator %s (%s) after %d tries", c.index, c.coordinator, conn.RemoteAddr(), tries+1)
			return conn, nil
		}
		if last == nil || err.Error() != last.Error() {
			logf("worker %d: coordinator %s not reachable yet: %v", c.index, c.coordinator, err)
		}
		last = err
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("coordinator %s unreachable for %s: %w", c.coordinator, c.registerTimeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// fatal ends the process as JAX's client does when the coordination service reports an
// error: its message on stderr, then exit.
func fatal(c config, status string) int {
	fmt.Fprintf(os.Stderr, "F%s client.h:77] Terminating process because the JAX distributed service detected fatal errors. "+
		"This most likely indicates that another task died; see the other task logs for more details. "+
		"Disable Python buffering, i.e. `python -u`, to be sure to see all the previous output. absl::Status: %s\n",
		time.Now().UTC().Format("0102 15:04:05.000000"), status)
	logf("worker %d: ended by the coordination service's error (attempt %s)", c.index, c.attempt)
	return exitError
}

// lostCoordinator ends the process as XLA does when the leader's connection closes under
// its long-running PollForError call (JAX's fault tolerance guide shows the text): gRPC's
// "Socket closed", which faultline's hints take for a peer's loss.
func lostCoordinator(c config, err error) int {
	logf("worker %d: connection to the coordinator: %v", c.index, err)
	return fatal(c, "UNAVAILABLE: Failed to send RPC to coordination service. Either the leader task was preempted/died/restarted unexpectedly or this task is experiencing network issues. Check earlier logs from 1) this task, 2) the leader (usually slice 0 task 0), and 3) cluster scheduler to debug further.\n"+
		"Additional GRPC error information from remote target coordination_service while calling /tensorflow.CoordinationService/PollForError:\n"+
		":UNKNOWN:Error received from peer  {grpc_message:\"Socket closed\", grpc_status:14}")
}

// failNow is the injected fault.
func failNow(c config) int {
	logf("worker %d: failing now (--fail %s, attempt %s)", c.index, c.fail, c.attempt)
	switch c.fail {
	case "oom":
		logf("worker %d: allocating until the memory limit", c.index)
		var hold [][]byte
		for {
			b := make([]byte, 16<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1 // touch every page: only resident memory counts against the limit
			}
			hold = append(hold, b)
			if len(hold)%8 == 0 {
				logf("worker %d: holding %d MiB", c.index, len(hold)*16)
			}
		}
	case "message":
		fmt.Fprintln(os.Stderr, c.message)
		return exitError
	default:
		fmt.Fprintf(os.Stderr, "Traceback (most recent call last):\n  File \"train.py\", line 42, in <module>\n    step(batch)\n"+
			"ValueError: injected application error in worker %d (attempt %s)\n", c.index, c.attempt)
		return exitError
	}
}

func newIncarnation() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(errors.New("no randomness for the incarnation id"))
	}
	return binary.LittleEndian.Uint64(b[:]) >> 1 // positive when printed as int64 too
}
