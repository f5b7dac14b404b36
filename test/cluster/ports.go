package cluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreeAddress is a loopback address with a port nobody listens on, for a process that must be
// told its address before it starts (a webhook's, which its configuration names). A process
// that can say where it listens is better started on port 0 (the node agent: anyPort).
func FreeAddress() (string, error) {
	port, err := freePort("127.0.0.1")
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// freePort is a TCP port nobody listens on at ip, for a process to bind soon after. It is drawn
// from below the kernel's ephemeral range: the ports a listen on port 0 and an outgoing
// connection take come from that range, so until the process binds, only another pick like
// this one may take the port. One taken from the range itself (a listen on port 0, closed)
// went to another process before the node agent bound it, in CI ("bind: address already in
// use"). kwokctl takes its clusters' ports downwards from 32767: the draw stays thousands
// below that.
func freePort(ip string) (int, error) {
	lo, hi := portRange()
	for range 100 {
		port := lo + rand.IntN(hi-lo)
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			continue
		}
		ln.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free TCP port at %s in [%d, %d) after 100 draws", ip, lo, hi)
}

// portRange is where freePort draws: ten thousand ports ending 2,768 below the kernel's
// ephemeral range (Linux's default range starts at 32768: [20000, 30000)), or above the range
// where a machine's starts too low for that.
func portRange() (lo, hi int) {
	first, last, ok := EphemeralRange()
	if !ok {
		first, last = 32768, 60999 // Linux's default
	}
	hi = first - 2768
	lo = max(hi-10000, 1024)
	switch {
	case hi-lo >= 1000:
		return lo, hi
	case 65536-(last+1) >= 1000:
		return last + 1, 65536
	default:
		return 1024, 65536 // the whole space is ephemeral: any port may be taken
	}
}

// EphemeralRange is the kernel's range of ports for a listen on port 0 and for outgoing
// connections, both ends included (ip_local_port_range); ok is false where it cannot be read.
func EphemeralRange() (first, last int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	first, errA := strconv.Atoi(f[0])
	last, errZ := strconv.Atoi(f[1])
	return first, last, errA == nil && errZ == nil
}

// MustFreeAddress is FreeAddress for a test, which it fails if there is none.
func MustFreeAddress(t testing.TB) string {
	t.Helper()
	addr, err := FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
