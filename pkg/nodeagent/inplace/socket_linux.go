package inplace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/faultline-dev/faultline/pkg/barrier"
)

// openBySocket hands attempt to the barrier of container id through the barrier's own
// socket, reached through the container's root as the node's /proc shows it: a connect,
// where an exec starts a runc process and the barrier's binary in the container (seconds
// each on a node that starts many pods at once). It returns barrier.Open's outcome, or an
// error wrapping errNoSocket when the socket cannot be reached that way (the caller execs):
// the runtime names no process for the container, procRoot is not the node's PID namespace
// (the process there is not the container's), the kernel lacks openat2 (before 5.6), or the
// agent may not connect.
func (r *Restarter) openBySocket(ctx context.Context, id string, attempt, index int) error {
	// As an exec's: a barrier answers in milliseconds; one that took the connection and
	// never answered must not hold the agent's loop.
	ctx, cancel := context.WithTimeout(ctx, r.ExecTimeout)
	defer cancel()
	return r.inRunDirOf(ctx, id, func(proc, dir int) error {
		// The runtime's start event, on which the agent acts, comes before the barrier's
		// program listens: while its process lives, a socket not there yet is looked for
		// again, for up to listenWait.
		until := time.Now().Add(listenWait)
		for {
			err := openIn(ctx, dir, attempt, index)
			if errors.Is(err, barrier.ErrNotWaiting) && openedFor(dir, attempt) {
				// A barrier in the worker container that opened before: it runs that
				// attempt's worker, and answers that it does (barrier.Open: not waiting).
				return fmt.Errorf("barrier of container %s: %w", id, errOpenedBefore)
			}
			if !errors.Is(err, barrier.ErrNotWaiting) || !alive(proc) || time.Now().After(until) {
				return err
			}
			select {
			case <-ctx.Done():
				return err
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
}

// inRunDirOf calls talk with container id's first process's /proc directory and the
// barrier's run directory (runDirOf), and closes both; a socket that could not be
// connected to (barrier.ErrUnreachable) is an error wrapping errNoSocket: the caller execs.
func (r *Restarter) inRunDirOf(ctx context.Context, id string, talk func(proc, dir int) error) error {
	proc, dir, err := r.runDirOf(ctx, id)
	if err != nil {
		return err
	}
	defer unix.Close(proc)
	defer unix.Close(dir)
	err = talk(proc, dir)
	if errors.Is(err, barrier.ErrUnreachable) {
		return fmt.Errorf("%w: %v", errNoSocket, err)
	}
	return err
}

// runDirOf opens container id's first process's /proc directory and the barrier's run
// directory in its root, as the node's /proc shows them (the caller closes both), or says,
// wrapping errNoSocket, why it cannot.
func (r *Restarter) runDirOf(ctx context.Context, id string) (proc, dir int, err error) {
	pid, err := r.containerPID(ctx, id)
	if err != nil {
		return -1, -1, err
	}
	// A descriptor of /proc/<pid> stays the process it was opened for: were the PID reused
	// after the container's end, what is read through it fails rather than name another.
	proc, err = unix.Open(filepath.Join(r.ProcRoot, strconv.Itoa(pid)), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return -1, -1, fmt.Errorf("%w: %w: process %d of container %s", errNoSocket, errProcessGone, pid, id)
	}
	if err != nil {
		return -1, -1, fmt.Errorf("%w: process %d of container %s: %v", errNoSocket, pid, id, err)
	}
	if err := inCgroupOf(proc, id); err != nil {
		unix.Close(proc)
		return -1, -1, err
	}
	root, err := unix.Openat(proc, "root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(proc)
		return -1, -1, fmt.Errorf("%w: the root of container %s: %v", errNoSocket, id, err)
	}
	defer unix.Close(root)
	dir, err = runDir(root)
	if err != nil {
		unix.Close(proc)
		return -1, -1, fmt.Errorf("%w: the run directory of container %s: %v", errNoSocket, id, err)
	}
	return proc, dir, nil
}

// stopBySocket asks the supervising barrier of container id (barrier.Supervise) to end its
// worker for attempt, with grace before SIGKILL, through its socket as openBySocket reaches
// it; it returns barrier.Stop's outcome (the worker's last save, and nil) once the barrier
// answered that none of the worker's processes is left, or an error wrapping errNoSocket when
// the socket cannot be reached so.
func (r *Restarter) stopBySocket(ctx context.Context, id string, attempt int, grace time.Duration) (*barrier.Save, error) {
	ctx, cancel := context.WithTimeout(ctx, grace+r.ExecTimeout)
	defer cancel()
	var save *barrier.Save
	err := r.inRunDirOf(ctx, id, func(_, dir int) error {
		return viaSocketIn(dir, func(socket string) (err error) {
			save, err = barrier.Stop(ctx, socket, attempt, grace)
			return err
		})
	})
	return save, err
}

// listenWait bounds how long a barrier just started is given to listen (milliseconds, as a
// rule) before the open says nobody listens.
const listenWait = 2 * time.Second

// alive says whether the process of proc (a descriptor of its /proc directory) still runs:
// not ended, nor a zombie.
func alive(proc int) bool {
	b, err := readAt(proc, "stat", 4096)
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last parenthesis.
	_, rest, ok := strings.Cut(b[max(0, strings.LastIndexByte(b, ')')):], ") ")
	return ok && rest != "" && rest[0] != 'Z' && rest[0] != 'X'
}

// openIn hands attempt to the barrier listening in the run directory dir (barrier.Open). The
// socket is opened without following a link, and reached through that descriptor: the run
// volume is writable to a worker whose barrier is its entrypoint, and a link its program
// planted there (left for the next container's barrier, before it listens) must not lead the
// agent to another socket of the node. Anything but a socket there is nobody waiting yet.
func openIn(ctx context.Context, dir, attempt, index int) error {
	return viaSocketIn(dir, func(socket string) error { return barrier.Open(ctx, socket, attempt, index) })
}

// viaSocketIn calls talk with the path of the barrier's socket in the run directory dir,
// opened without following a link (openIn says why); anything but a socket there is
// nobody waiting (barrier.ErrNotWaiting).
func viaSocketIn(dir int, talk func(socket string) error) error {
	name := filepath.Base(barrier.DefaultSocket)
	fd, err := unix.Openat(dir, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w: no socket yet", barrier.ErrNotWaiting)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %v", barrier.ErrUnreachable, name, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%w: %s: %v", barrier.ErrUnreachable, name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("%w: %s is not a socket (mode %o)", barrier.ErrNotWaiting, name, st.Mode)
	}
	return talk(fmt.Sprintf("/proc/self/fd/%d", fd))
}

// openedFor says whether the attempt file in the run directory dir holds attempt or a later
// one (the barrier writes it before it answers its opener): read without following a link,
// and at most a line of it, since the worker may write there.
func openedFor(dir, attempt int) bool {
	fd, err := unix.Openat(dir, filepath.Base(barrier.AttemptFile), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), barrier.AttemptFile)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return false
	}
	n, err := barrier.ParseAttempt(b)
	return err == nil && n >= attempt
}

// readAt reads up to limit bytes of file name in the directory of descriptor dir.
func readAt(dir int, name string, limit int64) (string, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit))
	return string(b), err
}

// openat2Tries bounds the lookups of a run directory that a mount or a rename elsewhere on
// the node interrupted (openat2's EAGAIN): a node starting many containers mounts all the
// time.
const openat2Tries = 16

// runDir opens the barrier's run directory inside the container's root: resolved there, so
// that a symbolic link in its image (/var/run -> /run) leads to its own /run, never the node's.
func runDir(root int) (int, error) {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	for try := 1; ; try++ {
		fd, err := unix.Openat2(root, strings.TrimPrefix(filepath.Dir(barrier.DefaultSocket), "/"), how)
		if err != unix.EAGAIN || try == openat2Tries {
			return fd, err
		}
	}
}

// containerPID is the PID of container id's first process as the runtime reports it in its
// verbose status (containerd's and CRI-O's info: {"pid": N}).
func (r *Restarter) containerPID(ctx context.Context, id string) (int, error) {
	resp, err := r.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return 0, fmt.Errorf("%w: status of container %s: %v", errNoSocket, id, err)
	}
	if st := resp.GetStatus(); st != nil && st.State == runtimeapi.ContainerState_CONTAINER_EXITED {
		// Ended since the runtime listed it running (an opened barrier exits): no process
		// to reach, and nothing to exec into.
		return 0, fmt.Errorf("%w: %w: container %s has exited", errNoSocket, errProcessGone, id)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if raw, ok := resp.GetInfo()["info"]; !ok || json.Unmarshal([]byte(raw), &info) != nil || info.Pid <= 0 {
		return 0, fmt.Errorf("%w: the runtime names no process of container %s", errNoSocket, id)
	}
	return info.Pid, nil
}

// inCgroupOf checks that the process of proc runs in container id's cgroup, whose path names
// the container on every runtime and cgroup driver the kubelet supports: a PID read from the
// runtime names the container's process only in the node's PID namespace.
func inCgroupOf(proc int, id string) error {
	b, err := readAt(proc, "cgroup", 64<<10)
	if err != nil {
		return fmt.Errorf("%w: the cgroup of container %s's process: %v", errNoSocket, id, err)
	}
	if !strings.Contains(b, id) {
		return fmt.Errorf("%w: the process the runtime names for container %s is not in its cgroup here (the agent does not see the node's PID namespace)", errNoSocket, id)
	}
	return nil
}

// checkpointBySocket asks the supervising barrier of container id (barrier.Checkpoint) to
// send its worker of attempt signal and returns the barrier's answer once the worker said
// it saved, ended, was stopped, or timeout passed; an error wrapping errNoSocket when the
// socket cannot be reached so.
func (r *Restarter) checkpointBySocket(ctx context.Context, id string, attempt int, signal string, timeout time.Duration) (barrier.CheckpointAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout+r.ExecTimeout)
	defer cancel()
	var a barrier.CheckpointAnswer
	err := r.inRunDirOf(ctx, id, func(_, dir int) error {
		return viaSocketIn(dir, func(socket string) (err error) {
			a, err = barrier.Checkpoint(ctx, socket, attempt, signal, timeout)
			return err
		})
	})
	return a, err
}
