// Package realnode runs faultline's core claims on real nodes: kubelets v1.37 with containerd
// 2.x and runc beside the local control plane (test/cluster, Options.RealNodes), running the
// test worker (test/worker), which behaves like a JAX process where faultline depends on it.
// The node agent runs as a process per node (as the other agent scenarios run it), sharing
// the node's logind stand-in with the kubelet and mapping GPUs through the kubelet's own
// PodResources API; the GPUs come from test/fakegpu, a device plugin on the kubelet's real
// API. One cluster serves the package, with one kwok node beside the real ones; the
// node-shutdown and GPU scenarios run alone (they change a node), the others side by side.
// test/e2e/oldest runs some of them again on the oldest supported Kubernetes (v1.36).
package realnode

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/faultline-dev/faultline/test/cluster"
	"github.com/faultline-dev/faultline/test/otlp"
)

// gpusPerNode: enough for a GPU scenario beside the others on either node; draGPUsPerNode,
// those a DRA driver allocates, enough for a gang of two on either node after the other is
// excluded (TestRealDRAGPUFaultRestartsTheGang).
const (
	realNodes      = 2
	gpusPerNode    = 4
	draGPUsPerNode = 2
)

var (
	// launcherBin (with the framework plugins beside it) and agentBin are built once.
	launcherBin, agentBin string
	// agents are the node agents, one per real node, by node name.
	agents = map[string]*cluster.Agent{}
	// agentDir holds their kubeconfigs (their logs are in their nodes' directories, which the
	// cluster saves when a test fails).
	agentDir string
	// nodes are the cluster's real nodes, kept to check after the teardown.
	nodes *cluster.RealNodes
	// traces is the package's trace collector: the kubelets', controllers' and agents' spans
	// (nil with -real-traces=false).
	traces *otlp.Receiver
	// realTraces: the kubelets trace every sync and CRI call (every span sampled); off, the
	// benchmark measures without it, to show what it costs (docs/benchmarks.md), and breaks
	// nothing down.
	realTraces = flag.Bool("real-traces", true, "the real nodes' kubelets, the controllers and the agents export their spans to the package's collector")
	// realRecordsOnHeartbeat: the agents' records where they keep them by default (false:
	// on each pod, to measure what the heartbeat's one write a node saves).
	realRecordsOnHeartbeat = flag.Bool("real-agent-records-on-heartbeat", true, "the node agents keep their pods' barrier records on their heartbeats (nodeagent --barrier-records-on-heartbeat, its default); false: on each pod")
	// The kubelets' gates beyond their defaults, to measure what one changes: EventedPLEG=true
	// (docs/benchmarks.md).
	realKubeletGates = flag.String("real-kubelet-feature-gates", "", "comma-separated Gate=bool for the real nodes' kubelets, beyond their defaults (e.g. EventedPLEG=true)")
)

func TestMain(m *testing.M) {
	flag.Parse()
	var binDir string
	// Without root no test here runs (cluster.Main says why): nothing to build.
	if !testing.Short() && cluster.RealNodesNeedRoot() == "" {
		var err error
		if binDir, err = os.MkdirTemp("", "faultline-realnode-bin-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		agentDir = filepath.Join(binDir, "agents")
		if launcherBin, err = cluster.BuildLauncher(binDir); err == nil {
			agentBin, err = cluster.BuildBinary(binDir, "./cmd/nodeagent", "")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(binDir)
			os.Exit(1)
		}
	}
	// One collector for the package, as a cluster's would be: the kubelets export their
	// spans there, and the controllers and agents the tests start (they inherit the
	// environment).
	spec := cluster.RealNodeSpec{GPUs: gpusPerNode, DRAGPUs: draGPUsPerNode}
	gates, err := parseGates(*realKubeletGates)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	spec.FeatureGates = gates
	if *realTraces {
		var err error
		if traces, err = otlp.Start("127.0.0.1:0"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		spec.TracingEndpoint = traces.Addr
		for _, kv := range traces.Env() {
			k, v, _ := strings.Cut(kv, "=")
			os.Setenv(k, v)
		}
	}
	code := cluster.Main(m, cluster.Options{
		Name: "realnode",
		// One kwok node beside the real ones: the substrate keeps them apart.
		Nodes:     1,
		RealNodes: realNodes,
		RealNode:  spec,
		Setup:     setup,
		// A node that dies is found unreachable after Kubernetes' own 40 s, not kwokctl's
		// 3m20s (TestRealNodeLostRestartsTheGang).
		ExtraArgs: []string{
			"kube-controller-manager=node-monitor-grace-period=40s",
			"kube-controller-manager=node-monitor-period=5s",
		},
	})
	for _, a := range agents {
		a.Stop()
	}
	stopInstallation() // install_test.go's cluster
	if traces != nil {
		traces.Stop()
	}
	// Every run leaves the machine as it found it: no process, bridge, cgroup or directory
	// of the real nodes.
	if nodes != nil {
		if l := nodes.Leftovers(); len(l) > 0 {
			fmt.Fprintf(os.Stderr, "the real nodes left on the machine: %s\n", strings.Join(l, "\n  "))
			code = 1
		}
	}
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// setup installs the CRD, the admission policies and the agent's DaemonSet as an operator
// would, and starts a node agent for each real node with a token bound to the DaemonSet's pod
// there.
func setup(ctx context.Context, c *cluster.Cluster) error {
	nodes = c.Real
	if err := c.InstallCRDs(ctx, filepath.Join(c.Tools.Root, "deploy", "crd")); err != nil {
		return err
	}
	if _, err := c.InstallAgentDaemonSet(ctx, 0); err != nil {
		return err
	}
	for _, n := range c.Real.Nodes {
		if err := startAgent(ctx, c, n); err != nil {
			return err
		}
	}
	return nil
}

// startAgent (re)starts the node agent of a real node with a token bound to the agent
// DaemonSet's current pod there. A node shutdown stops that pod (the kubelet stops every
// pod, critical ones last) and the DaemonSet replaces it, which invalidates the tokens bound
// to it: as the kubelet would start the new pod's agent with the new pod's token, the test
// restarts the agent after the node comes back.
func startAgent(ctx context.Context, c *cluster.Cluster, n *cluster.RealNode) error {
	return startAgentWith(ctx, c, n, cluster.AgentOptions{})
}

// startAgentWith is startAgent with o's RealNVML and more flags (o.Args).
func startAgentWith(ctx context.Context, c *cluster.Cluster, n *cluster.RealNode, o cluster.AgentOptions) error {
	if old := agents[n.Name]; old != nil {
		old.Stop()
		delete(agents, n.Name)
	}
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	pod, err := c.AgentPodOn(actx, n.Name)
	if err != nil {
		return err
	}
	started := time.Now()
	args := append([]string{"--release-timeout", "5s", fmt.Sprintf("--barrier-records-on-heartbeat=%v", *realRecordsOnHeartbeat)}, o.Args...)
	a, err := c.StartRealNodeAgent(actx, n, cluster.AgentOptions{
		Bin: agentBin, DaemonSetPod: pod, Dir: agentDir, Args: args, RealNVML: o.RealNVML,
	})
	if err != nil {
		return err
	}
	agents[n.Name] = a
	// Handed on only once the controller hears it: a test after one that killed the agent
	// must not meet its node as silent (a restart in place there would give up at once).
	return c.WaitAgentHeartbeat(actx, n.Name, started)
}

// parseGates reads -real-kubelet-feature-gates: Gate=bool, comma-separated.
func parseGates(s string) (map[string]bool, error) {
	gates := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		name, val, ok := strings.Cut(kv, "=")
		on, err := strconv.ParseBool(val)
		if !ok || name == "" || err != nil {
			return nil, fmt.Errorf("-real-kubelet-feature-gates %q: want Gate=true or Gate=false, comma-separated", s)
		}
		gates[name] = on
	}
	return gates, nil
}
