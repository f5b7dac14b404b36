package cluster

import (
	"net"
	"strconv"
	"testing"
)

// A port picked for a process to bind later is none that the kernel hands out meanwhile (a
// listen on port 0, an outgoing connection's): it lies outside the ephemeral range, and is
// free.
func TestFreeAddressIsOutsideTheEphemeralRange(t *testing.T) {
	first, last, ok := EphemeralRange()
	if !ok {
		t.Skip("no readable /proc/sys/net/ipv4/ip_local_port_range")
	}
	for range 20 {
		addr := MustFreeAddress(t)
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if port >= first && port <= last {
			t.Fatalf("FreeAddress gave %s, in the ephemeral range [%d, %d]", addr, first, last)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("FreeAddress gave %s, which is not free: %v", addr, err)
		}
		ln.Close()
	}
}
