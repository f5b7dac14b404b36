package cluster

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// podNetwork is the pod network of one real-node instance: one bridge, one /16 subnet. The
// host holds .0.1 (CoreDNS listens there, the pods' clusterDNS) and .0.(10+i), node i's
// InternalIP (its kubelet listens there); node i's pods get addresses from .(i+1).1 to
// .(i+1).254. The subnet is the only route the bridge adds to the host, so nothing is
// routed off the machine.
type podNetwork struct {
	bridge string
	subnet netip.Prefix
}

// podSubnetSlots: instance k uses 10.(podSubnetBase+k).0.0/16, for k below this many.
const (
	podSubnetBase  = 200
	podSubnetSlots = 40
)

// choosePodSubnet picks a /16 that neither the machine's addresses and routes nor another
// live instance uses. The caller holds realNodeSetupLock, so two instances never pick the
// same one.
func choosePodSubnet() (netip.Prefix, error) {
	taken := map[netip.Prefix]bool{}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), realNodePrefix+"*", "subnet"))
	for _, f := range dirs {
		if b, err := os.ReadFile(f); err == nil {
			if p, err := netip.ParsePrefix(strings.TrimSpace(string(b))); err == nil {
				taken[p] = true
			}
		}
	}
	used, err := hostPrefixes()
	if err != nil {
		return netip.Prefix{}, err
	}
	for k := range podSubnetSlots {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(podSubnetBase + k), 0, 0}), 16)
		if taken[p] {
			continue
		}
		clash := false
		for _, u := range used {
			clash = clash || u.Overlaps(p)
		}
		if !clash {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("no free /16 in 10.%d.0.0-10.%d.0.0 for the pod network: every one overlaps the machine's addresses or another instance's",
		podSubnetBase, podSubnetBase+podSubnetSlots-1)
}

// hostPrefixes are the machine's IPv4 networks: its interfaces' addresses and every route
// but the default one (which overlaps everything and is what "off the machine" means).
func hostPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			ones, _ := n.Mask.Size()
			addr, _ := netip.AddrFromSlice(n.IP.To4())
			out = append(out, netip.PrefixFrom(addr, ones).Masked())
		}
	}
	routes, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return out, nil
	}
	for _, line := range strings.Split(string(routes), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		var dst, mask uint32
		if _, err := fmt.Sscanf(f[1]+" "+f[7], "%x %x", &dst, &mask); err != nil || mask == 0 {
			continue
		}
		// /proc/net/route holds addresses in host (little-endian) byte order.
		a := netip.AddrFrom4([4]byte{byte(dst), byte(dst >> 8), byte(dst >> 16), byte(dst >> 24)})
		ones := 0
		for m := mask; m != 0; m >>= 1 {
			ones += int(m & 1)
		}
		out = append(out, netip.PrefixFrom(a, ones).Masked())
	}
	return out, nil
}

// host is the host's address .0.<last> of the subnet.
func (p *podNetwork) host(last byte) netip.Addr {
	b := p.subnet.Addr().As4()
	return netip.AddrFrom4([4]byte{b[0], b[1], 0, last})
}

// dnsIP is where CoreDNS listens: the pods' clusterDNS.
func (p *podNetwork) dnsIP() netip.Addr { return p.host(1) }

// nodeIP is node i's InternalIP.
func (p *podNetwork) nodeIP(i int) netip.Addr { return p.host(byte(10 + i)) }

// nodeRange is the first and last pod address of node i.
func (p *podNetwork) nodeRange(i int) (netip.Addr, netip.Addr) {
	b := p.subnet.Addr().As4()
	return netip.AddrFrom4([4]byte{b[0], b[1], byte(i + 1), 1}), netip.AddrFrom4([4]byte{b[0], b[1], byte(i + 1), 254})
}

// create makes the bridge with the host's addresses for n nodes.
//
// The bridge gets a MAC address of its own. Without one, Linux gives a bridge the lowest MAC
// of its ports, so a pod's veth that joins with a lower one, or leaves holding it, changes
// the MAC of every host address on the bridge: each pod's ARP entry for them (the API
// server's Service address, CoreDNS, the kubelets' probes answered back) then points nowhere
// until it expires, 30 to 45 s in which every pod of the instance is cut off from the host.
// A set address (addr_assign_type 3) never follows the ports.
func (p *podNetwork) create(nodes int) error {
	mac, err := localMAC()
	if err != nil {
		return err
	}
	if err := ip("link", "add", p.bridge, "address", mac.String(), "type", "bridge"); err != nil {
		return err
	}
	addrs := []netip.Addr{p.dnsIP()}
	for i := range nodes {
		addrs = append(addrs, p.nodeIP(i))
	}
	for _, a := range addrs {
		if err := ip("addr", "add", netip.PrefixFrom(a, p.subnet.Bits()).String(), "dev", p.bridge); err != nil {
			return errors.Join(err, deleteLink(p.bridge))
		}
	}
	if err := ip("link", "set", p.bridge, "up"); err != nil {
		return errors.Join(err, deleteLink(p.bridge))
	}
	return nil
}

// localMAC is a random locally administered unicast MAC address.
func localMAC() (net.HardwareAddr, error) {
	mac := make(net.HardwareAddr, 6)
	if _, err := rand.Read(mac); err != nil {
		return nil, err
	}
	mac[0] = mac[0]&^0x01 | 0x02 // unicast, locally administered
	return mac, nil
}
