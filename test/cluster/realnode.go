package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/image"
	"github.com/faultline-dev/faultline/pkg/shutdown/login1sim"
	"github.com/faultline-dev/faultline/pkg/version"
)

// Names of the real nodes' images, taint and label. Real nodes carry the taint so that
// scenarios written for kwok nodes (which tolerate nothing of it) never land on them; a pod
// meant for a real node tolerates it (RealNodeToleration) and selects the label.
const (
	// PauseImage is the sandbox image every real node's containerd uses (test/pause).
	PauseImage = "localhost/faultline/pause:dev"
	// WorkerImage is the test worker (test/worker), imported into every real node;
	// WorkerProgram is the program in it (its entrypoint).
	WorkerImage   = "localhost/faultline/test-worker:dev"
	WorkerProgram = "/worker"
	// BarrierImage is faultline-barrier (cmd/faultline-barrier), the init container of
	// pods that restart in place: the release's barrier image (pkg/image), imported into
	// every real node under this name.
	BarrierImage = "localhost/faultline/barrier:dev"
	// TaintRealNode (NoSchedule) is on every real node.
	TaintRealNode = "test.faultline.dev/real-node"
	// LabelNodeKind is "real" on real nodes (kwok's nodes have "kwok").
	LabelNodeKind = "type"
	NodeKindReal  = "real"
)

// RealNodeToleration lets a pod onto real nodes.
var RealNodeToleration = corev1.Toleration{Key: TaintRealNode, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}

// RealNodeSpec shapes the real nodes. Zero fields take the defaults below.
type RealNodeSpec struct {
	// GPUs is how many fake GPUs each node's device plugin (test/fakegpu) registers as
	// nvidia.com/gpu; 0 runs no device plugin.
	GPUs int
	// DRAGPUs is how many more fake GPUs each node has that a DRA driver (test/fakegpu
	// --dra-driver, named DRADriverName) publishes in a ResourceSlice and prepares for the
	// claims allocated to them, of the DeviceClass DRADeviceClass; 0 runs no DRA driver.
	DRAGPUs int
	// ShutdownGracePeriod is the kubelet's shutdownGracePeriod (default 10s), of which
	// ShutdownGracePeriodCriticalPods (default 2s) is for critical pods.
	ShutdownGracePeriod             time.Duration
	ShutdownGracePeriodCriticalPods time.Duration
	// InhibitDelayMax is the InhibitDelayMaxSec that the node's logind stand-in announces
	// (default 30s). The kubelet refuses one below its shutdownGracePeriod: it would try to
	// rewrite logind's configuration (/etc/systemd/logind.conf.d) and reload systemd.
	InhibitDelayMax time.Duration
	// Untainted registers the nodes without TaintRealNode: for a cluster whose only nodes
	// are the real ones, where pods that tolerate nothing of the test's (an installed
	// controller's Deployment) must run.
	Untainted bool
	// TracingEndpoint, when set, is where the kubelets export their OpenTelemetry spans
	// (OTLP/gRPC host:port, every span sampled): the pods' syncs with their CRI calls.
	TracingEndpoint string
	// FeatureGates are the kubelets' feature gates beyond their defaults (EventedPLEG, for
	// its measured effect); a restart's own gates (RestartKubelet) come on top.
	FeatureGates map[string]bool
}

func (s RealNodeSpec) withDefaults() RealNodeSpec {
	if s.ShutdownGracePeriod == 0 {
		s.ShutdownGracePeriod = 10 * time.Second
	}
	if s.ShutdownGracePeriodCriticalPods == 0 {
		s.ShutdownGracePeriodCriticalPods = 2 * time.Second
	}
	if s.InhibitDelayMax == 0 {
		s.InhibitDelayMax = 30 * time.Second
	}
	return s
}

// RealNodes are the real nodes of a cluster and what they share: the pod bridge and CoreDNS.
type RealNodes struct {
	Nodes []*RealNode
	// Dir is the instance's state directory (os.TempDir()/fl-rn-<id>).
	Dir string
	// Tools are the real nodes' binaries.
	Tools RealNodeTools

	id      string
	net     *podNetwork
	lock    *os.File
	coredns *Process
	proxy   *serviceProxy
	spec    RealNodeSpec
	logf    func(string, ...any)
}

// RealNode is one kubelet with a containerd of its own, in a mount namespace of its own,
// and a system bus with logind's stand-in that the kubelet (and a node agent, StartAgent)
// listens to for shutdowns.
type RealNode struct {
	// Name is the Node's name; Index its place among the real nodes.
	Name  string
	Index int
	// IP is the node's InternalIP (on the pod bridge; the kubelet listens there).
	IP string
	// RootDir is the kubelet's --root-dir; PodResourcesSocket its PodResources API.
	RootDir            string
	PodResourcesSocket string
	// ContainerdSocket is the node's containerd (CRI and ctr). In the node's mount namespace
	// its directory is also /run/containerd, as on a node of a real cluster.
	ContainerdSocket string
	// Bus and Logind are the node's system bus and logind stand-in:
	// Logind.PrepareForShutdown(true) announces a shutdown to the kubelet and to the node's
	// agent. KubeletLock is the delay inhibitor lock the kubelet took.
	Bus         *login1sim.Bus
	Logind      *login1sim.Login1
	KubeletLock *login1sim.Lock
	// GPUs are the UUIDs of the node's fake GPUs, in index order (none without GPUs);
	// DRAGPUs those of its DRA driver's (devices gpu-0, gpu-1, ... of its pool).
	GPUs    []string
	DRAGPUs []string
	// Timings are how long the node's start took, step by step.
	Timings struct {
		// Containerd: from its start to its images imported; KubeletReady: from the
		// kubelet's start to the Node Ready; GPUs: from the device plugin's start to the
		// GPUs in the Node's allocatable.
		Containerd, KubeletReady, GPUs time.Duration
	}

	dirPath     string
	cgroup      string
	kubeletPort int
	// featureGates are the kubelet's feature gates beyond its defaults (RestartKubelet).
	featureGates map[string]bool
	holder       *Process // the mount namespace's first process
	containerd   *Process
	kubelet      *Process
	devicePlug   *Process
	draDriver    *Process
	// kubeletStopped is when StopKubelet stopped the kubelet.
	kubeletStopped time.Time
}

// dir is a path under the node's state directory.
func (n *RealNode) dir(elem ...string) string {
	return filepath.Join(append([]string{n.dirPath}, elem...)...)
}

// KubeletLog and ContainerdLog are the node's logs.
func (n *RealNode) KubeletLog() string    { return n.dir("kubelet.log") }
func (n *RealNode) ContainerdLog() string { return n.dir("containerd.log") }

// RealNodeName is the name of the i-th real node.
func RealNodeName(i int) string { return fmt.Sprintf("real-node-%d", i) }

// startRealNodes starts n real nodes beside the cluster's control plane.
func (c *Cluster) startRealNodes(ctx context.Context, n int, spec RealNodeSpec) (rn *RealNodes, err error) {
	start := time.Now()
	tools, err := FindRealNodeTools(c.Tools.Root)
	if err != nil {
		return nil, err
	}
	if err := checkRealNodeHost(); err != nil {
		return nil, err
	}
	rn = &RealNodes{Tools: tools, spec: spec.withDefaults(), logf: c.logf}
	defer func() {
		if err != nil {
			if serr := rn.Stop(); serr != nil {
				err = fmt.Errorf("%w (and its teardown: %v)", err, serr)
			}
			rn = nil
		}
	}()
	if err := rn.create(n); err != nil {
		return rn, err
	}
	if err := rn.buildImages(c.Tools.Root); err != nil {
		return rn, err
	}
	if err := rn.startCoreDNS(c); err != nil {
		return rn, err
	}
	if err := rn.startServiceProxy(ctx, c); err != nil {
		return rn, err
	}
	if rn.spec.DRAGPUs > 0 {
		if err := createDRADeviceClass(ctx, c); err != nil {
			return rn, err
		}
	}
	c.logf("real nodes: bridge %s (%s), CoreDNS on %s, binaries and images in %s",
		rn.net.bridge, rn.net.subnet, rn.net.dnsIP(), time.Since(start).Round(time.Millisecond))
	// Nodes start one after the other: their kubelets each take a few seconds of the
	// machine's CPU to start, and a failure is clearer for one node at a time.
	for i := range n {
		t := time.Now()
		node, err := rn.startNode(ctx, c, i)
		if node != nil {
			rn.Nodes = append(rn.Nodes, node)
		}
		if err != nil {
			return rn, fmt.Errorf("real node %s: %w", RealNodeName(i), err)
		}
		c.logf("real node %s Ready in %s: containerd with the images %s, kubelet start to Node Ready %s, GPUs registered %s (kubelet pid %d, containerd pid %d)",
			node.Name, time.Since(t).Round(time.Millisecond), node.Timings.Containerd.Round(time.Millisecond),
			node.Timings.KubeletReady.Round(time.Millisecond), node.Timings.GPUs.Round(time.Millisecond), node.kubelet.Pid(), node.containerd.Pid())
	}
	return rn, nil
}

// checkRealNodeHost says what the machine lacks for real nodes, and how to get it.
func checkRealNodeHost() error {
	if reason := RealNodesNeedRoot(); reason != "" {
		return errors.New(reason)
	}
	var missing []string
	for _, bin := range []string{"runc", "ip", "unshare", "nsenter", "mount"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, plugin)); err != nil {
			missing = append(missing, filepath.Join(cniBinDir, plugin))
		}
	}
	if _, err := os.Stat(login1sim.DBusDaemon); err != nil {
		missing = append(missing, login1sim.DBusDaemon)
	}
	if len(missing) > 0 {
		return fmt.Errorf("real nodes need %s: apt-get install runc containernetworking-plugins dbus iproute2 util-linux (.ci/run does)",
			strings.Join(missing, ", "))
	}
	return nil
}

// cniBinDir is where Debian's containernetworking-plugins installs the CNI plugins.
const cniBinDir = "/usr/lib/cni"

// create cleans what dead instances left, then claims an id, a state directory and a
// subnet, and makes the pod bridge.
func (rn *RealNodes) create(nodes int) error {
	if nodes > maxRealNodes {
		return fmt.Errorf("%d real nodes: at most %d (the pod network's layout)", nodes, maxRealNodes)
	}
	setup, err := flock(realNodeSetupLock, true)
	if err != nil {
		return fmt.Errorf("lock %s: %w", realNodeSetupLock, err)
	}
	defer setup.Close()
	cleaned, err := cleanStaleRealNodes()
	if len(cleaned) > 0 {
		rn.logf("real nodes: removed what a dead run left: %s", strings.Join(cleaned, ", "))
	}
	if err != nil {
		return fmt.Errorf("remove a dead run's real nodes: %w", err)
	}
	rn.id = randomSuffix()
	rn.Dir = filepath.Join(os.TempDir(), realNodePrefix+rn.id)
	if err := os.Mkdir(rn.Dir, 0o755); err != nil {
		return err
	}
	if rn.lock, err = flock(filepath.Join(rn.Dir, "lock"), false); err != nil {
		return fmt.Errorf("lock %s: %w", rn.Dir, err)
	}
	subnet, err := choosePodSubnet()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(rn.Dir, "subnet"), []byte(subnet.String()), 0o644); err != nil {
		return err
	}
	rn.net = &podNetwork{bridge: realNodePrefix + rn.id, subnet: subnet}
	return rn.net.create(nodes)
}

// maxRealNodes is how many real nodes one instance can have.
const maxRealNodes = 8

// buildImages builds the programs the nodes run (pause, the test worker, the fake GPU device
// plugin, faultline-barrier) as static binaries, and the pause, worker and barrier images
// from them with pkg/image: the barrier's is the release's own (image.BarrierSpec), under
// BarrierImage.
func (rn *RealNodes) buildImages(root string) error {
	bin := filepath.Join(rn.Dir, "bin")
	for _, p := range []string{"./test/pause", "./test/worker", "./test/fakegpu", "./cmd/faultline-barrier"} {
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(bin, filepath.Base(p)), p)
		cmd.Dir = root
		// Static: the images hold nothing but the binary.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", p, err, out)
		}
	}
	platform := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	testImage := func(name string) image.Spec {
		return image.Spec{Name: name, Platform: platform, Entrypoint: []string{"/" + name}, Env: []string{"PATH=/"},
			Files: []image.File{{Path: "/" + name, Source: filepath.Join(bin, name), Mode: 0o755}}}
	}
	barrierSpec, err := image.BarrierSpec(platform, image.Inputs{Version: version.Version, BinDir: bin, CABundle: image.DefaultCABundle})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(rn.Dir, "images"), 0o755); err != nil {
		return err
	}
	for ref, spec := range map[string]image.Spec{PauseImage: testImage("pause"), WorkerImage: testImage("worker"), BarrierImage: barrierSpec} {
		img, err := image.Build(spec)
		if err != nil {
			return err
		}
		if err := image.WriteArchiveFile(rn.imageTar(ref), ref, img); err != nil {
			return err
		}
	}
	return nil
}

func (rn *RealNodes) imageTar(ref string) string {
	return filepath.Join(rn.Dir, "images", strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
}

// startCoreDNS runs CoreDNS on the host's address of the bridge, with the admin kubeconfig.
func (rn *RealNodes) startCoreDNS(c *Cluster) error {
	conf := filepath.Join(rn.Dir, "Corefile")
	if err := os.WriteFile(conf, []byte(corefile(rn.net.dnsIP().String(), c.Kubeconfig)), 0o644); err != nil {
		return err
	}
	p, err := startProcess(filepath.Join(rn.Dir, "coredns.log"), nil, rn.Tools.CoreDNS, "-conf", conf)
	if err != nil {
		return err
	}
	rn.coredns = p
	// Ready once it answers for the cluster's own Service (the kubernetes plugin serves
	// only after its first sync with the API server).
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", net.JoinHostPort(rn.net.dnsIP().String(), "53"))
	}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := r.LookupHost(ctx, "kubernetes.default.svc.cluster.local")
		cancel()
		if err == nil {
			return nil
		}
		if p.Exited() || time.Now().After(deadline) {
			return fmt.Errorf("CoreDNS does not answer on %s: %v\n%s", rn.net.dnsIP(), err, p.Tail(20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startNode starts real node i: its mount namespace, bus, containerd (with the images) and
// kubelet, and its device plugin; it returns once the node is Ready (and has its GPUs).
func (rn *RealNodes) startNode(ctx context.Context, c *Cluster, i int) (n *RealNode, err error) {
	n = &RealNode{
		Name: RealNodeName(i), Index: i, IP: rn.net.nodeIP(i).String(),
		dirPath: filepath.Join(rn.Dir, "n"+strconv.Itoa(i)),
		cgroup:  fmt.Sprintf("%s%s-n%d", realNodePrefix, rn.id, i),
	}
	n.RootDir = n.dir("kubelet")
	n.PodResourcesSocket = filepath.Join(n.RootDir, "pod-resources", "kubelet.sock")
	n.ContainerdSocket = n.dir("run-containerd", "containerd.sock")
	for _, d := range []string{"kubelet", "kubelet/pod-resources", "certs", "certs.d", "pod-logs", "run-containerd", "volume-plugins", "cni/conf", "cni/ipam", "runc", "device-plugins",
		"containerd/root", "containerd/state"} {
		if err := os.MkdirAll(n.dir(d), 0o755); err != nil {
			return n, err
		}
	}
	if err := createCgroup(n.cgroup); err != nil {
		return n, err
	}
	if err := rn.startNamespace(n); err != nil {
		return n, err
	}
	t := time.Now()
	if err := rn.startContainerd(ctx, n); err != nil {
		return n, err
	}
	n.Timings.Containerd = time.Since(t)
	if n.Bus, err = login1sim.StartBus(); err != nil {
		return n, fmt.Errorf("%w: %v", ErrNoBus, err)
	}
	if n.Logind, err = login1sim.Serve(n.Bus.Address, rn.spec.InhibitDelayMax); err != nil {
		return n, err
	}
	if err := n.mountSystemBus(); err != nil {
		return n, err
	}
	t = time.Now()
	if err := rn.startKubelet(ctx, c, n); err != nil {
		return n, err
	}
	n.Timings.KubeletReady = time.Since(t)
	if rn.spec.GPUs > 0 {
		t = time.Now()
		if err := rn.startDevicePlugin(ctx, c, n); err != nil {
			return n, err
		}
		n.Timings.GPUs = time.Since(t)
	}
	if rn.spec.DRAGPUs > 0 {
		if err := rn.startDRADriver(ctx, c, n); err != nil {
			return n, err
		}
	}
	return n, nil
}

// startNamespace starts the process that holds the node's mount namespace, and gives the
// namespace private copies of /var/lib, /var/log and /run (overlays on the host's, their
// changes in the node's directory). The kubelet hard-codes paths there whatever its root
// directory: its device-plugin socket /var/lib/kubelet/device-plugins/kubelet.sock (two
// kubelets would take each other's), /var/log/containers, and the CNI cache /var/lib/cni;
// the runc shim puts its sockets in /run/containerd/s. Nothing in the namespace propagates
// to the host's mounts, so the volumes the kubelet mounts stay there too, and the whole
// namespace goes away with its last process.
func (rn *RealNodes) startNamespace(n *RealNode) error {
	p, err := startProcess(n.dir("holder.log"), nil, "unshare", "--mount", "--propagation", "private", "--", filepath.Join(rn.Dir, "bin", "pause"))
	if err != nil {
		return err
	}
	n.holder = p
	// unshare execs pause once the namespace exists: wait until it has.
	self, _ := os.Readlink("/proc/self/ns/mnt")
	deadline := time.Now().Add(10 * time.Second)
	for {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", p.Pid()))
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.Pid()))
		if err == nil && ns != self && strings.HasSuffix(exe, "/pause") {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			return fmt.Errorf("mount namespace of %s not created: %s", n.Name, p.Tail(10))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, target := range []string{"/var/lib", "/var/log", "/run"} {
		name := strings.ReplaceAll(strings.Trim(target, "/"), "/", "-")
		upper, work := n.dir("overlay", name, "upper"), n.dir("overlay", name, "work")
		for _, d := range []string{upper, work} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", target, upper, work)
		if out, err := n.inNamespace("mount", "-t", "overlay", "overlay", "-o", opts, target).CombinedOutput(); err != nil {
			return fmt.Errorf("mount an overlay on %s in %s's namespace: %w: %s", target, n.Name, err, bytes.TrimSpace(out))
		}
	}
	if out, err := n.inNamespace("mkdir", "-p", "/var/lib/kubelet/device-plugins").CombinedOutput(); err != nil {
		return fmt.Errorf("device-plugin directory in %s's namespace: %w: %s", n.Name, err, out)
	}
	// What a node agent's pod mounts from its node (deploy/daemonset) is where a node of a
	// real cluster has it: the node's own directories, bound there in its namespace, so that
	// the DaemonSet's manifest runs as it is. The kubelet's and containerd's own paths name
	// the same directories (the kubelet's pod logs by the standard path, as the runtime
	// reports them to a node agent; see StartRealNodeAgent).
	for _, b := range [][2]string{
		{n.dir("run-containerd"), "/run/containerd"},
		{n.dir("kubelet", "pod-resources"), "/var/lib/kubelet/pod-resources"},
		{n.dir("pod-logs"), "/var/log/pods"},
	} {
		if err := n.bindInNamespace(b[0], b[1]); err != nil {
			return err
		}
	}
	return nil
}

// bindInNamespace bind-mounts directory src of the host at target in the node's namespace.
func (n *RealNode) bindInNamespace(src, target string) error {
	if out, err := n.inNamespace("mkdir", "-p", target).CombinedOutput(); err != nil {
		return fmt.Errorf("create %s in %s's namespace: %w: %s", target, n.Name, err, bytes.TrimSpace(out))
	}
	if out, err := n.inNamespace("mount", "--bind", src, target).CombinedOutput(); err != nil {
		return fmt.Errorf("bind %s at %s in %s's namespace: %w: %s", src, target, n.Name, err, bytes.TrimSpace(out))
	}
	return nil
}

// mountSystemBus makes the node's bus the system bus of its namespace: the bus's directory
// bound at /run/dbus, with the standard name system_bus_socket for its socket (a link in the
// directory, which a restart of the bus keeps).
func (n *RealNode) mountSystemBus() error {
	socket, _, _ := strings.Cut(strings.TrimPrefix(n.Bus.Address, "unix:path="), ",")
	if !filepath.IsAbs(socket) {
		return fmt.Errorf("bus address %q of %s: want unix:path=/…", n.Bus.Address, n.Name)
	}
	link := filepath.Join(filepath.Dir(socket), "system_bus_socket")
	if err := os.Symlink(filepath.Base(socket), link); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return n.bindInNamespace(filepath.Dir(socket), "/run/dbus")
}

// inNamespace is a command that runs in the node's mount namespace.
func (n *RealNode) inNamespace(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--mount=/proc/" + strconv.Itoa(n.holder.Pid()) + "/ns/mnt", "--", name}, args...)...)
}

// startInNamespace starts a long-running process of the node in its mount namespace, its
// output in logName under the node's directory.
func (n *RealNode) startInNamespace(logName string, env []string, bin string, args ...string) (*Process, error) {
	return startProcess(n.dir(logName), env, "nsenter", append([]string{"--mount=/proc/" + strconv.Itoa(n.holder.Pid()) + "/ns/mnt", "--", bin}, args...)...)
}

// startContainerd starts the node's containerd and imports the images into it.
func (rn *RealNodes) startContainerd(ctx context.Context, n *RealNode) error {
	conf := n.dir("containerd.toml")
	if err := os.WriteFile(conf, []byte(containerdConfig(n, cniBinDir)), 0o644); err != nil {
		return err
	}
	cni, err := cniConfig(n, rn.net)
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.dir("cni", "conf", "10-pods.conflist"), cni, 0o644); err != nil {
		return err
	}
	// The shim it starts finds runc, and nothing else, on the PATH.
	env := []string{"PATH=" + rn.Tools.ContainerdDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	p, err := n.startInNamespace("containerd.log", env, filepath.Join(rn.Tools.ContainerdDir, "containerd"), "--config", conf)
	if err != nil {
		return err
	}
	n.containerd = p
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := rn.ctr(ctx, n, "version"); err == nil {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			return fmt.Errorf("containerd does not answer on %s:\n%s", n.ContainerdSocket, p.Tail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, ref := range []string{PauseImage, WorkerImage, BarrierImage} {
		if out, err := rn.ctr(ctx, n, "-n", "k8s.io", "images", "import", rn.imageTar(ref)); err != nil {
			return fmt.Errorf("import %s: %w\n%s", ref, err, out)
		}
	}
	return nil
}

// ctr runs ctr against the node's containerd.
func (rn *RealNodes) ctr(ctx context.Context, n *RealNode, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(rn.Tools.ContainerdDir, "ctr"), append([]string{"--address", n.ContainerdSocket}, args...)...)
	return cmd.CombinedOutput()
}

// Ctr runs ctr against the node's containerd (e.g. "-n", "k8s.io", "tasks", "kill", id).
func (rn *RealNodes) Ctr(ctx context.Context, n *RealNode, args ...string) ([]byte, error) {
	return rn.ctr(ctx, n, args...)
}

// startKubelet starts the node's kubelet with the node's bus as its system bus, and waits
// until it holds its shutdown inhibitor lock and its Node is Ready.
func (rn *RealNodes) startKubelet(ctx context.Context, c *Cluster, n *RealNode) error {
	port, err := freePort(n.IP)
	if err != nil {
		return err
	}
	n.kubeletPort = port
	caFile := filepath.Join(c.pkiDir(), "ca.crt")
	conf := n.dir("kubelet.yaml")
	if err := os.WriteFile(conf, []byte(kubeletConfig(n, rn.spec, caFile, rn.net.dnsIP().String(), withGates(rn.spec.FeatureGates, n.featureGates))), 0o644); err != nil {
		return err
	}
	kubeconfig, err := c.nodeKubeconfig(n)
	if err != nil {
		return err
	}
	env := []string{"DBUS_SYSTEM_BUS_ADDRESS=" + n.Bus.Address}
	p, err := n.startInNamespace("kubelet.log", env, filepath.Join(c.Tools.KubeDir, "kubelet"),
		"--config", conf,
		"--kubeconfig", kubeconfig,
		"--root-dir", n.RootDir,
		"--cert-dir", n.dir("certs"),
		"--hostname-override", n.Name,
		"--node-ip", n.IP,
		"--node-labels", fmt.Sprintf("%s=%s,%s=true", LabelNodeKind, NodeKindReal, LabelRealNode),
		"--v", "2",
	)
	if err != nil {
		return err
	}
	n.kubelet = p
	// The kubelet takes its delay lock on the node's logind at start (its graceful node
	// shutdown manager); a kubelet that took none would ignore a shutdown.
	select {
	case l := <-n.Logind.Locks():
		if l.Who != "kubelet" || l.Mode != "delay" {
			return fmt.Errorf("first inhibitor lock on %s's logind is %q (%s), not the kubelet's delay lock", n.Name, l.Who, l.Mode)
		}
		n.KubeletLock = l
	case <-time.After(60 * time.Second):
		return fmt.Errorf("kubelet took no inhibitor lock on the node's logind in 60s:\n%s", p.Tail(30))
	case <-ctx.Done():
		return ctx.Err()
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := c.WaitNodeReady(wctx, n.Name); err != nil {
		return fmt.Errorf("%w\n%s", err, p.Tail(30))
	}
	return nil
}

// RestartKubelet stops node n's kubelet and starts it again with these feature gates set
// beyond the kubelet's defaults (nil: the defaults), as an operator who changes a node's
// kubelet configuration does: the node's pods run on meanwhile (containerd holds them). It
// returns once the new kubelet holds its inhibitor lock on the node's logind (n.KubeletLock)
// and has written its Node's status: a Ready heartbeat from after the restart, which also
// carries the features it declares (Node.status.declaredFeatures, from its gates). The gates
// stay for later starts of the node's kubelet (ReviveNode) until changed again.
func (rn *RealNodes) RestartKubelet(ctx context.Context, c *Cluster, n *RealNode, gates map[string]bool) error {
	rn.StopKubelet(n)
	return rn.StartKubelet(ctx, c, n, gates)
}

// KubeletRunning reports whether node n's kubelet runs (StopKubelet stops it).
func (n *RealNode) KubeletRunning() bool { return n.kubeletStopped.IsZero() }

// withGates is base with over's gates on top, a new map.
func withGates(base, over map[string]bool) map[string]bool {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]bool{}
	}
	maps.Copy(out, over)
	return out
}

// StopKubelet stops node n's kubelet alone, as a kubelet upgrade or crash does: the node's
// pods run on (containerd holds them), and its node agent with them; the API hears nothing
// from the node until StartKubelet.
func (rn *RealNodes) StopKubelet(n *RealNode) {
	n.kubelet.Stop()
	n.kubeletStopped = time.Now()
}

// StartKubelet starts node n's kubelet again after StopKubelet, with these feature gates
// (see RestartKubelet), and returns once it has written a Ready heartbeat of its own and the
// node is healthy again as the API sees it (cluster.NodeUnhealthy: the node lifecycle
// controller has taken off the taints it put on a silent node).
func (rn *RealNodes) StartKubelet(ctx context.Context, c *Cluster, n *RealNode, gates map[string]bool) error {
	// Heartbeats have a resolution of one second: only one from a later second than the
	// old kubelet's end can be the new kubelet's.
	fresh := n.kubeletStopped.Truncate(time.Second).Add(time.Second)
	n.featureGates = gates
	if err := rn.startKubelet(ctx, c, n); err != nil {
		return fmt.Errorf("restart the kubelet of %s with feature gates %v: %w", n.Name, gates, err)
	}
	n.kubeletStopped = time.Time{}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	_, err := c.WaitNode(wctx, n.Name, func(node *corev1.Node) (bool, error) {
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue && !cond.LastHeartbeatTime.Time.Before(fresh), nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("%s: no Ready heartbeat from its restarted kubelet: %w\n%s", n.Name, err, n.kubelet.Tail(30))
	}
	if err := c.WaitNodeHealthy(wctx, n.Name); err != nil {
		return fmt.Errorf("after its kubelet's restart: %w", err)
	}
	return nil
}

// CancelShutdown cancels an announced shutdown of node n (logind's PrepareForShutdown(false))
// and returns once its kubelet holds a new inhibitor lock (n.KubeletLock) and the node is
// Ready again. Locks that others (a node agent) take meanwhile are not waited for.
func (c *Cluster) CancelShutdown(ctx context.Context, n *RealNode) error {
	if err := n.Logind.PrepareForShutdown(false); err != nil {
		return err
	}
	for n.KubeletLock = nil; n.KubeletLock == nil; {
		select {
		case l := <-n.Logind.Locks():
			if l.Who == "kubelet" {
				n.KubeletLock = l
			}
		case <-ctx.Done():
			return fmt.Errorf("the kubelet of %s took no new inhibitor lock after the cancelled shutdown: %w", n.Name, ctx.Err())
		}
	}
	return c.WaitNodeHealthy(ctx, n.Name)
}

// LabelRealNode is "true" on real nodes.
const LabelRealNode = "test.faultline.dev/real-node"

// startDevicePlugin runs test/fakegpu in the node's namespace (where the kubelet's
// device-plugin socket is) and waits until the Node has its GPUs.
func (rn *RealNodes) startDevicePlugin(ctx context.Context, c *Cluster, n *RealNode) error {
	for g := range rn.spec.GPUs {
		n.GPUs = append(n.GPUs, FakeGPUUUID(rn.id, n.Index, g))
	}
	p, err := n.startInNamespace("fakegpu.log", nil, filepath.Join(rn.Dir, "bin", "fakegpu"),
		"--resource", v1alpha1.ResourceGPU, "--uuids", strings.Join(n.GPUs, ","), "--health-file", n.gpuHealthFile())
	if err != nil {
		return err
	}
	n.devicePlug = p
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	_, err = c.WaitNode(wctx, n.Name, func(node *corev1.Node) (bool, error) {
		q := node.Status.Allocatable[corev1.ResourceName(v1alpha1.ResourceGPU)]
		return q.Value() == int64(rn.spec.GPUs), nil
	})
	if err != nil {
		return fmt.Errorf("%s: %d GPUs from the device plugin: %w\n%s", n.Name, rn.spec.GPUs, err, p.Tail(20))
	}
	return nil
}

// gpuHealthFile lists the node's fake GPUs its device plugin reports Unhealthy.
func (n *RealNode) gpuHealthFile() string { return filepath.Join(n.dirPath, "unhealthy-gpus") }

// SetGPUHealthy has the node's device plugin report GPU uuid healthy or Unhealthy to its
// kubelet (ListAndWatch, as NVIDIA's plugin reports a GPU after a fatal XID), within 100 ms.
func (n *RealNode) SetGPUHealthy(uuid string, healthy bool) error {
	b, err := os.ReadFile(n.gpuHealthFile())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	ids := slices.DeleteFunc(strings.Fields(string(b)), func(id string) bool { return id == uuid })
	if !healthy {
		ids = append(ids, uuid)
	}
	return os.WriteFile(n.gpuHealthFile(), []byte(strings.Join(ids, "\n")), 0o644)
}

// FakeGPUUUID is the UUID of fake GPU g of real node i of instance id: unique on the
// machine, in NVIDIA's form (GPU-<8>-<4>-<4>-<4>-<12> hex digits).
func FakeGPUUUID(id string, node, gpu int) string {
	return fmt.Sprintf("GPU-%08s-%04x-%04x-0000-%012x", id, node, gpu, 0xfa4e)
}

// Stop tears the real nodes down and leaves the machine as it was: it stops every process
// (the pods' too), removes the nodes' cgroups and the bridge, and the state directory.
func (rn *RealNodes) Stop() error {
	var errs []error
	for _, n := range rn.Nodes {
		for _, p := range []*Process{n.draDriver, n.devicePlug, n.kubelet} {
			if p != nil {
				p.Stop()
			}
		}
		if n.Logind != nil {
			_ = n.Logind.Close()
		}
		if n.Bus != nil {
			n.Bus.Stop()
		}
	}
	if rn.coredns != nil {
		rn.coredns.Stop()
	}
	if rn.proxy != nil {
		errs = append(errs, rn.proxy.close())
	}
	if rn.Dir != "" {
		errs = append(errs, teardownInstance(rn.Dir, rn.id))
	} else if rn.id != "" {
		errs = append(errs, teardownInstance("", rn.id))
	}
	if rn.lock != nil {
		rn.lock.Close()
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if l := rn.Leftovers(); len(l) > 0 {
		return fmt.Errorf("real nodes %s left on the machine: %s", rn.id, strings.Join(l, "; "))
	}
	return nil
}

// Leftovers lists what of the real nodes is still on the machine (nothing after Stop).
func (rn *RealNodes) Leftovers() []string {
	if rn.id == "" {
		return nil
	}
	return leftovers(rn.Dir, rn.id)
}

// saveLogs copies every node's logs (kubelet, containerd, device plugin) and CoreDNS's into
// dst, as <node>-<log>.
func (rn *RealNodes) saveLogs(dst string) error {
	var errs []error
	for _, n := range rn.Nodes {
		logs, _ := filepath.Glob(n.dir("*.log"))
		for _, l := range logs {
			errs = append(errs, copyFile(l, filepath.Join(dst, n.Name+"-"+filepath.Base(l))))
		}
	}
	if rn.coredns != nil {
		errs = append(errs, copyFile(filepath.Join(rn.Dir, "coredns.log"), filepath.Join(dst, "coredns.log")))
	}
	return errors.Join(errs...)
}

// UseRegistry lets every node's containerd pull from the registry at host (127.0.0.1:PORT,
// plain HTTP, e.g. StartRegistry's): images named host/… are pulled there.
func (rn *RealNodes) UseRegistry(host string) error {
	for _, n := range rn.Nodes {
		dir := n.dir("certs.d", host)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(registryHosts(host)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Node returns the real node of that name, or nil.

func (rn *RealNodes) Node(name string) *RealNode {
	for _, n := range rn.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// pkiDir holds the cluster's CA (ca.crt) and the admin's certificate (admin.crt), which
// kube-apiserver also presents to kubelets.
func (c *Cluster) pkiDir() string { return filepath.Join(c.workdir, "clusters", c.Name, "pki") }

// KillNode makes real node n die hard, as a power loss would: its kubelet, device plugin,
// containerd, the containers' shims and every process of its pods are killed at once, and
// nothing tells the API server: the Node's heartbeats stop and its pods stay Running there.
// ReviveNode brings it back.
func (rn *RealNodes) KillNode(n *RealNode) error {
	for _, p := range []*Process{n.draDriver, n.devicePlug, n.kubelet, n.containerd} {
		if p != nil {
			p.Stop()
		}
	}
	// The shims name the node's containerd socket; the pods' processes are in its cgroup.
	err := killProcessesNaming(n.ContainerdSocket)
	hs, herr := cgroupHierarchies()
	for _, h := range hs {
		killCgroupTree(filepath.Join(h, n.cgroup))
	}
	return errors.Join(err, herr)
}

// ReviveNode starts a node that KillNode killed again, as a node that boots: containerd
// (its images kept), the kubelet (it registers again and takes a new inhibitor lock) and
// the device plugin. It returns once the Node is Ready with its GPUs.
func (rn *RealNodes) ReviveNode(ctx context.Context, c *Cluster, n *RealNode) error {
	if err := rn.startContainerd(ctx, n); err != nil {
		return err
	}
	if err := rn.startKubelet(ctx, c, n); err != nil {
		return err
	}
	if rn.spec.GPUs > 0 {
		n.GPUs = nil
		if err := rn.startDevicePlugin(ctx, c, n); err != nil {
			return err
		}
	}
	if rn.spec.DRAGPUs > 0 {
		n.DRAGPUs = nil
		if err := rn.startDRADriver(ctx, c, n); err != nil {
			return err
		}
	}
	return nil
}

// HostIP is the host's address on the pod bridge: a server of the test's listening there
// (an OTLP receiver) is reachable from every real node's pods.
func (rn *RealNodes) HostIP() string { return rn.net.dnsIP().String() }

// WaitLock waits until someone (who, e.g. "faultline-nodeagent") takes an inhibitor lock on
// node n's logind: an agent of the node's DaemonSet pod, which a test does not start itself.
// Locks others take meanwhile are passed over.
func (n *RealNode) WaitLock(ctx context.Context, who string) (*login1sim.Lock, error) {
	for {
		select {
		case l := <-n.Logind.Locks():
			if l.Who == who {
				return l, nil
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("no inhibitor lock of %s on the logind of %s: %w", who, n.Name, ctx.Err())
		}
	}
}
