package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"

	"github.com/faultline-dev/faultline/pkg/nodeagent/listen"
	"github.com/faultline-dev/faultline/pkg/shutdown/login1sim"
)

// The node agent's DaemonSet, as deploy/daemonset names it.
const (
	AgentNamespace = "faultline-system"
	AgentAppLabel  = "faultline-nodeagent"
)

// InstallAgentDaemonSet applies deploy/admission and deploy/daemonset as an operator would
// (the agent's namespace first) and waits until kwok runs one agent pod on each of the first
// nodes nodes. It returns those pods by node: their tokens carry the node's name, which is
// what StartAgent needs (kwok runs the pods; the agent processes run on this machine).
func (c *Cluster) InstallAgentDaemonSet(ctx context.Context, nodes int) (map[string]*corev1.Pod, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: AgentNamespace}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	for _, dir := range []string{"admission", "daemonset"} {
		if err := c.ApplyKustomization(ctx, filepath.Join(c.Tools.Root, "deploy", dir)); err != nil {
			return nil, err
		}
	}
	return c.AgentPods(ctx, nodes)
}

// AgentPods waits until the agent DaemonSet runs a pod on each of the first nodes nodes
// and returns them by node.
func (c *Cluster) AgentPods(ctx context.Context, nodes int) (map[string]*corev1.Pod, error) {
	sel := labels.SelectorFromSet(labels.Set{"app.kubernetes.io/name": AgentAppLabel})
	pods, err := c.WaitPods(ctx, AgentNamespace, sel, func(pods []*corev1.Pod) (bool, error) {
		running := 0
		for _, p := range pods {
			if PodRunning(p) {
				running++
			}
		}
		return running >= nodes, nil
	})
	if err != nil {
		return nil, fmt.Errorf("agent DaemonSet pods: %w", err)
	}
	byNode := map[string]*corev1.Pod{}
	for _, p := range pods {
		if PodRunning(p) {
			byNode[p.Spec.NodeName] = p
		}
	}
	return byNode, nil
}

// ErrNoBus: the machine cannot simulate a system bus (no dbus-daemon).
var ErrNoBus = errors.New("no system bus simulation")

// AgentOptions describe one simulated node's agent.
type AgentOptions struct {
	// Bin is the nodeagent binary.
	Bin string
	// Node is the node's name; DaemonSetPod is the agent's DaemonSet pod on it, to whose
	// token the agent authenticates (InstallAgentDaemonSet returns them).
	Node         string
	DaemonSetPod *corev1.Pod
	// Dir holds the agent's kubeconfig and log.
	Dir string
	// InhibitDelayMax is logind's InhibitDelayMaxSec (default 30s).
	InhibitDelayMax time.Duration
	// Args are more nodeagent flags (e.g. --release-timeout 5s).
	Args []string
	// RealNVML: a real node's agent looks for the NVIDIA library as on a real node, instead
	// of a mock of the node's fake GPUs (StartRealNodeAgent).
	RealNVML bool
}

// Agent is a node agent process in simulation mode with the simulated node around it: a
// system bus of its own (a real dbus-daemon) with login1sim's logind, and mock GPUs.
type Agent struct {
	Node string
	// Bus and Logind are the node's system bus and logind: Logind.PrepareForShutdown(true)
	// announces a shutdown to the agent.
	Bus    *login1sim.Bus
	Logind *login1sim.Login1
	// Lock is the delay inhibitor lock the agent took at start.
	Lock *login1sim.Lock
	// HTTPAddr serves /healthz and /metrics; SimulateAddr (loopback) serves /simulate.
	HTTPAddr     string
	SimulateAddr string
	// Token is the rest.Config the agent authenticates with.
	Token *rest.Config
	// LogPath is the agent's log (stdout and stderr).
	LogPath string

	cmd  *exec.Cmd
	done chan struct{}
}

// StartAgent starts a node agent for a node and returns once it holds its inhibitor lock,
// which it takes only after its pod cache has synced. Stop it with Stop.
func (c *Cluster) StartAgent(ctx context.Context, o AgentOptions) (a *Agent, err error) {
	if o.DaemonSetPod == nil {
		return nil, fmt.Errorf("no agent DaemonSet pod for node %s", o.Node)
	}
	if o.InhibitDelayMax == 0 {
		o.InhibitDelayMax = 30 * time.Second
	}
	agent := &Agent{Node: o.Node, done: make(chan struct{})}
	a = agent
	defer func() {
		if err != nil {
			agent.Stop() // a is nil on the error returns
		}
	}()
	if a.Bus, err = login1sim.StartBus(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoBus, err)
	}
	if a.Logind, err = login1sim.Serve(a.Bus.Address, o.InhibitDelayMax); err != nil {
		return nil, err
	}
	kubeconfig, token, err := c.PodBoundKubeconfig(ctx, o.DaemonSetPod, o.Dir)
	if err != nil {
		return nil, err
	}
	a.Token = token
	a.LogPath = filepath.Join(o.Dir, "nodeagent-"+o.Node+".log")
	logFile, err := os.Create(a.LogPath)
	if err != nil {
		return nil, err
	}
	args := append([]string{"--kubeconfig", kubeconfig, "--node-name", o.Node, "--simulate-hardware",
		"--dbus-address", a.Bus.Address, "--http-address", anyPort, "--simulate-address", anyPort}, o.Args...)
	a.cmd = exec.Command(o.Bin, args...)
	a.cmd.Stdout, a.cmd.Stderr = logFile, logFile
	if err := a.cmd.Start(); err != nil {
		logFile.Close()
		a.cmd = nil
		return nil, fmt.Errorf("start %s: %w", o.Bin, err)
	}
	go func() {
		_ = agent.cmd.Wait() // not a: the error returns set it to nil
		logFile.Close()
		close(agent.done)
	}()
	select {
	case a.Lock = <-a.Logind.Locks():
		return a, a.learnAddresses()
	case <-a.done:
		return nil, fmt.Errorf("node agent for %s exited at start: %s", o.Node, a.Tail(20))
	case <-ctx.Done():
		return nil, fmt.Errorf("node agent for %s took no inhibitor lock: %w", o.Node, ctx.Err())
	}
}

// Pid is the agent process's id.
func (a *Agent) Pid() int { return a.cmd.Process.Pid }

// Stop kills the agent and stops its bus and logind.
func (a *Agent) Stop() {
	if a.cmd != nil {
		select {
		case <-a.done:
		default:
			_ = a.cmd.Process.Kill()
			<-a.done
		}
	}
	if a.Logind != nil {
		_ = a.Logind.Close()
	}
	if a.Bus != nil {
		a.Bus.Stop()
	}
}

// InjectXID makes GPU gpu of the agent's simulated node report an XID.
func (a *Agent) InjectXID(gpu int, xid uint64) error {
	resp, err := http.Post(fmt.Sprintf("http://%s/simulate/xid?gpu=%d&xid=%d", a.SimulateAddr, gpu, xid), "", nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("inject XID %d on GPU %d of %s: %s", xid, gpu, a.Node, resp.Status)
	}
	return nil
}

// SetGPULost makes GPU gpu of the agent's simulated node lost (NVML's GPU_IS_LOST on every
// query, as a GPU that fell off the bus), or healthy again, for the agent's health poll.
func (a *Agent) SetGPULost(gpu int, lost bool) error {
	resp, err := http.Post(fmt.Sprintf("http://%s/simulate/health?gpu=%d&lost=%t", a.SimulateAddr, gpu, lost), "", nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("set GPU %d of %s lost=%t: %s", gpu, a.Node, lost, resp.Status)
	}
	return nil
}

// Tail returns the last n lines of the agent's log.
func (a *Agent) Tail(n int) string { return tailFile(a.LogPath, n) }

// anyPort has the agent listen on a loopback port the kernel picks, which it logs
// (listen.LogMessage). Not one the test picked free beforehand: between that pick and the
// agent's bind, another process on the machine may take it (CI lost an agent's start to that:
// "bind: address already in use").
const anyPort = "127.0.0.1:0"

// learnAddresses reads from the agent's log the addresses it listens on, which it logs before
// it takes its inhibitor lock. The last line of each counts: a real node's agent restarted
// after a node shutdown appends to its predecessor's log.
func (a *Agent) learnAddresses() error {
	f, err := os.Open(a.LogPath)
	if err != nil {
		return err
	}
	defer f.Close()
	got := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		var line struct{ Msg, Flag, Address string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == listen.LogMessage {
			got[line.Flag] = line.Address
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read the log of the node agent for %s: %w", a.Node, err)
	}
	a.HTTPAddr, a.SimulateAddr = got["--http-address"], got["--simulate-address"]
	if a.HTTPAddr == "" {
		return fmt.Errorf("the node agent for %s took its lock and logged no %q line for --http-address: %s", a.Node, listen.LogMessage, a.Tail(20))
	}
	return nil
}
