// Package listen opens the node agent's TCP listeners and logs, for each, the address it got:
// whoever starts the agent with a port 0 (a test harness) learns the port from that line.
// Apart from package nodeagent, which links NVML, so that a harness that reads the line need
// not.
package listen

import (
	"fmt"
	"log/slog"
	"net"
)

// LogMessage is the message of the line logged for each listener, with the flag that asked
// for it ("flag") and the address it got ("address").
const LogMessage = "listening"

// TCP listens on addr, which the command-line flag flag gave, and logs the address it got.
func TCP(flag, addr string, log *slog.Logger) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	log.Info(LogMessage, "flag", flag, "address", ln.Addr().String())
	return ln, nil
}
