//go:build !linux

package barrier

import (
	"net"
	"time"
)

// awaitPeerExit waits for the connection's end (see peer_linux.go; the barrier runs on
// Linux, this keeps the package building elsewhere).
func awaitPeerExit(conn *net.UnixConn, timeout time.Duration) {
	conn.SetReadDeadline(time.Now().Add(timeout))
	var b [16]byte
	for {
		if _, err := conn.Read(b[:]); err != nil {
			return
		}
	}
}
