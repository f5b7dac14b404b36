package cluster

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// shared is the cluster of the running test package, started by Main; skipped, when set,
// is why Main started none and Shared skips every test that needs it.
var (
	shared  *Cluster
	skipped string
)

// RealNodesNeedRoot says, for a user who is not root, why the tests that need real nodes are
// skipped and how to run them; "" for root, who runs them (and fails where the machine lacks
// what they need: a skip would hide it).
func RealNodesNeedRoot() string {
	if os.Geteuid() == 0 {
		return ""
	}
	return "real nodes need root: a kubelet and containerd run here, with a bridge, cgroups and mounts. " +
		"Run them as root (sudo make test, or sudo go test ./test/e2e/realnode/) on a machine with runc, " +
		"containernetworking-plugins, iproute2 and util-linux (.ci/run installs them)"
}

// KubernetesEnv, set to KubernetesOldest, makes Main start the package's cluster on the
// oldest Kubernetes the default installation supports (Options.Oldest): how the
// oldest-version leg (test/e2e/oldest) runs other packages' scenarios.
const (
	KubernetesEnv    = "FAULTLINE_TEST_KUBERNETES"
	KubernetesOldest = "oldest"
)

// ServerVersionLine and KubeletVersionLine start the lines Main logs with the API server's
// version and each real node's kubelet's.
const (
	ServerVersionLine  = "kube-apiserver version"
	KubeletVersionLine = "kubelet version"
)

// realNodeSuiteLock is held by a test package's Main while its cluster has real nodes.
var realNodeSuiteLock = filepath.Join(os.TempDir(), realNodePrefix+"suite.lock")

// Main runs a test package against one shared cluster: it starts the cluster, runs the tests,
// saves the components' logs under _output/test-logs if any test failed, and always deletes
// the cluster. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(cluster.Main(m, cluster.Options{Name: "e2e", Nodes: 4})) }
//
// With -short no cluster is started and Shared skips the tests that need one.
func Main(m *testing.M, opts Options) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	if opts.Logf == nil {
		opts.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "cluster: "+format+"\n", args...) }
	}
	if os.Getenv(KubernetesEnv) == KubernetesOldest {
		opts.Oldest = true
	}
	if opts.RealNodes > 0 {
		if skipped = RealNodesNeedRoot(); skipped != "" {
			opts.Logf("%s: every test of this package skipped: %s", opts.Name, skipped)
			return m.Run()
		}
		// One package's real nodes at a time on this machine: two suites of them side by
		// side (go test runs packages in parallel; the oldest-version leg runs one) would
		// share two cores, and their waits are sized for one.
		unlock, err := flock(realNodeSuiteLock, true)
		if err != nil {
			fmt.Fprintf(os.Stderr, "lock %s: %v\n", realNodeSuiteLock, err)
			return 1
		}
		defer unlock.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	c, err := Start(ctx, opts)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "start cluster: %v\n", err)
		return 1
	}
	// The version the package ran on, as the API server and the kubelets say it (the
	// oldest-version leg checks this line).
	if v, err := c.Client.Discovery().ServerVersion(); err == nil {
		opts.Logf("%s %s", ServerVersionLine, v.GitVersion)
	}
	if c.Real != nil {
		for _, n := range c.Real.Nodes {
			if node, err := c.Client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{}); err == nil {
				opts.Logf("%s %s %s", KubeletVersionLine, n.Name, node.Status.NodeInfo.KubeletVersion)
			}
		}
	}
	shared = c
	code := m.Run()
	if code != 0 {
		if dir, err := c.SaveLogs(filepath.Join(c.Tools.Root, "_output", "test-logs")); err != nil {
			fmt.Fprintf(os.Stderr, "save cluster logs: %v\n", err)
		} else {
			fmt.Fprintf(os.Stderr, "cluster logs saved in %s\n", dir)
		}
	}
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stop cluster: %v\n", err)
	}
	return code
}

// Shared returns the package's cluster, started by Main. Under -short it skips the test.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the local control plane; skipped with -short")
	}
	if skipped != "" {
		t.Skip(skipped)
	}
	if shared == nil {
		t.Fatal("no shared cluster: call cluster.Main from TestMain")
	}
	return shared
}

// Namespace creates a namespace of its own for the test and deletes it when the test ends,
// so tests that share a cluster never see each other's objects.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	ns, err := c.Client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}
