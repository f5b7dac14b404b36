package barrier

import (
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// awaitPeerExit returns once the process at the other end of conn (the exec'd open) has
// exited, or after timeout. The barrier is its container's first process: when it exits,
// the kernel kills every other process of the container, and an open still on its way out
// would die of it (exit 137) and tell the node agent nothing. So the barrier outlives it:
// it learns its PID from the socket (SO_PEERCRED) and watches it through a pidfd, which
// becomes readable when the process has exited. Where pidfds are not available (kernels
// before 5.3, some sandboxed runtimes), it waits for the connection's end instead, which
// the process's exit also closes (the agent then reads the barrier's exit code: Restarter).
func awaitPeerExit(conn *net.UnixConn, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	pid := peerPID(conn)
	if pid == os.Getpid() {
		return // an open in this process (the tests): nothing to outlive
	}
	if pid > 0 {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			defer unix.Close(fd)
			for {
				ms := int(time.Until(deadline).Milliseconds())
				if ms <= 0 {
					return
				}
				n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
				if err == unix.EINTR {
					continue
				}
				if err != nil || n >= 0 {
					return // exited, timed out, or cannot tell
				}
			}
		}
	}
	conn.SetReadDeadline(deadline)
	var b [16]byte
	for {
		if _, err := conn.Read(b[:]); err != nil {
			return
		}
	}
}

// peerPID is the PID of conn's peer, 0 if unknown.
func peerPID(conn *net.UnixConn) int {
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}
