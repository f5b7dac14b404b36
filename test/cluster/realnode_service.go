package cluster

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// In-cluster clients (rest.InClusterConfig: a controller's or a node agent's pod) reach the
// API server at the `kubernetes` Service's address, KUBERNETES_SERVICE_HOST in every pod. On
// a real cluster kube-proxy makes that address lead to the API server; the real nodes have no
// kube-proxy (it would rewrite the host's iptables), so the harness does that one Service's
// part itself: the address is the host's, on the instance's bridge (the pods route it there,
// cniConfig), where a proxy of the test process forwards each connection to the API server.
// TLS goes through untouched: the API server's certificate names the address
// (realNodeKwokctlConfig), and the pod checks it with its service account's CA.

// serviceNetwork is kube-apiserver's default Service network, pinned for real-node clusters;
// apiServiceIP is the `kubernetes` Service's address in it (its first).
const serviceNetwork = "10.0.0.0/24"

var apiServiceIP = netip.MustParseAddr("10.0.0.1")

// serviceProxy forwards connections to the `kubernetes` Service's address, on one bridge, to
// the API server.
type serviceProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]bool
}

// startServiceProxy puts the `kubernetes` Service's address on the instance's bridge (it goes
// with the bridge) and forwards its port there to the API server. The listener is bound to
// the bridge (SO_BINDTODEVICE): every instance on the machine has the same address on its own
// bridge, and a listener of its own.
func (rn *RealNodes) startServiceProxy(ctx context.Context, c *Cluster) error {
	svc, err := c.Client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the kubernetes Service: %w", err)
	}
	if svc.Spec.ClusterIP != apiServiceIP.String() || len(svc.Spec.Ports) == 0 {
		return fmt.Errorf("the kubernetes Service is %s %v, want %s (kube-apiserver --service-cluster-ip-range %s): its address is in the API server's certificate",
			svc.Spec.ClusterIP, svc.Spec.Ports, apiServiceIP, serviceNetwork)
	}
	if err := checkServiceAddressFree(); err != nil {
		return err
	}
	if err := certNames(filepath.Join(c.pkiDir(), "admin.crt"), apiServiceIP); err != nil {
		return err
	}
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		return fmt.Errorf("the API server's address %q: %w", c.Config.Host, err)
	}
	if err := ip("addr", "add", netip.PrefixFrom(apiServiceIP, 32).String(), "dev", rn.net.bridge); err != nil {
		return err
	}
	bridge := rn.net.bridge
	lc := net.ListenConfig{Control: func(_, _ string, raw syscall.RawConn) error {
		var serr error
		if err := raw.Control(func(fd uintptr) {
			serr = syscall.SetsockoptString(int(fd), syscall.SOL_SOCKET, syscall.SO_BINDTODEVICE, bridge)
		}); err != nil {
			return err
		}
		return serr
	}}
	addr := net.JoinHostPort(apiServiceIP.String(), fmt.Sprint(svc.Spec.Ports[0].Port))
	ln, err := lc.Listen(ctx, "tcp4", addr)
	if err != nil {
		return fmt.Errorf("listen on the kubernetes Service's address %s on %s: %w", addr, bridge, err)
	}
	p := &serviceProxy{ln: ln, target: u.Host, conns: map[net.Conn]bool{}}
	rn.proxy = p
	go p.serve()
	return nil
}

// checkServiceAddressFree fails when a network of the machine's, other than the real nodes'
// bridges, holds the Service's address: putting it on a bridge would take it from there.
func checkServiceAddressFree() error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return err
	}
	for _, ifc := range ifaces {
		if strings.HasPrefix(ifc.Name, realNodePrefix) {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.Contains(apiServiceIP.AsSlice()) {
				return fmt.Errorf("%s's network %s holds %s, the kubernetes Service's address the real nodes' pods use", ifc.Name, n, apiServiceIP)
			}
		}
	}
	return nil
}

func (p *serviceProxy) serve() {
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		go p.forward(conn)
	}
}

// track adds conn to the open connections (close ends them), or removes it.
func (p *serviceProxy) track(conn net.Conn, open bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if open {
		p.conns[conn] = true
	} else {
		delete(p.conns, conn)
	}
}

// forward copies one connection both ways to the API server until either side closes.
func (p *serviceProxy) forward(in net.Conn) {
	p.track(in, true)
	defer p.track(in, false)
	defer in.Close()
	out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	p.track(out, true)
	defer p.track(out, false)
	defer out.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
}

// close stops the proxy and ends its connections.
func (p *serviceProxy) close() error {
	err := p.ln.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	return err
}

// certNames fails unless the certificate in file (PEM) names ip: the API server's, which a
// pod checks against the Service's address.
func certNames(file string, ip netip.Addr) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return fmt.Errorf("%s holds no PEM certificate", file)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	for _, a := range cert.IPAddresses {
		if a.Equal(ip.AsSlice()) {
			return nil
		}
	}
	return fmt.Errorf("the API server's certificate %s does not name %s (its addresses: %v): pods on real nodes could not check it (kwokctl's kubeApiserverCertSANs)", file, ip, cert.IPAddresses)
}
