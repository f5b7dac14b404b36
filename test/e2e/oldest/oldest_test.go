// Package oldest is the suite's second leg: scenarios of other packages, chosen to cover
// every API faultline depends on, run again on the oldest Kubernetes the default
// installation supports (hack/tools/kubernetes-oldest), its control plane and its real
// kubelets. Each package's test binary runs as a process of its own with
// cluster.KubernetesEnv set, which makes its cluster.Main start that version; the leg
// passes only if every chosen scenario ran there and passed, and the cluster said which
// version it was.
package oldest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/faultline-dev/faultline/test/cluster"
)

// legs are the scenarios the oldest version runs, by package, and what of faultline's
// footing each stands on. Every real-node scenario runs with the admission policies that
// confine the controller and the node agent installed (the package's setup), and every gang
// run's pods are created by the controller under a Job it manages (spec.managedBy).
var legs = []struct {
	pkg       string
	tests     []string
	realNodes bool
}{
	{"./test/e2e/realnode", []string{
		// The real nodes beside a kwok node, the agent's heartbeats and locks: the footing.
		"TestRealNodesBesideKwokNodes",
		// An application error judged from the kubelet's own report; the gang's Job
		// managed by faultline.
		"TestRealAppExitFailsFast",
		// The kubelet's RestartAllContainers action (KEP-5532).
		"TestRealRestartAllContainersInPlace",
		// The in-place restart: the barrier, the agent's stop, the kubelet's restart.
		"TestRealInPlaceRestartKeepsHealthyPods",
		// A node shutdown: logind's signal, the kubelet's graceful shutdown, the restart.
		"TestRealNodeShutdownRestartsTheGang",
	}, true},
	{"./test/e2e/kueue", []string{
		// Kueue's admission of a run: its Workload, quota, the gang started once admitted.
		"TestKueueAdmitsTheRun",
	}, false},
}

// legTimeout bounds one package's run of its scenarios: its cluster's start (real nodes:
// about a minute) and the scenarios, each a few minutes at most; the wait for another
// package's real nodes to be done (cluster.Main runs one package's real nodes at a time)
// comes on top, and is bounded by go test's own timeout.
const legTimeout = 25 * time.Minute

func TestE2EOldestSupportedVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("runs other packages' scenarios on a local control plane; skipped with -short")
	}
	tools, err := cluster.FindTools()
	if err != nil {
		t.Fatal(err)
	}
	oldest, err := tools.Oldest()
	if err != nil {
		t.Fatal(err)
	}
	want := oldest.KubernetesVersion()
	if !strings.HasPrefix(want, "v1.") {
		t.Fatalf("the oldest control plane's directory %s names no version", oldest.KubeDir)
	}
	t.Logf("oldest supported Kubernetes: %s", want)
	bin := t.TempDir()
	for _, leg := range legs {
		t.Run(filepath.Base(leg.pkg), func(t *testing.T) {
			if reason := cluster.RealNodesNeedRoot(); reason != "" && leg.realNodes {
				t.Skip(reason)
			}
			out := runLeg(t, tools.Root, bin, leg.pkg, leg.tests)
			requireVersion(t, out, want)
			for _, name := range leg.tests {
				switch {
				case regexp.MustCompile(`(?m)^\s*--- PASS: ` + regexp.QuoteMeta(name) + ` `).Match(out):
				case regexp.MustCompile(`(?m)^\s*--- SKIP: ` + regexp.QuoteMeta(name) + ` `).Match(out):
					t.Errorf("%s %s was skipped on %s: the leg must run it", leg.pkg, name, want)
				case regexp.MustCompile(`(?m)^\s*--- FAIL: ` + regexp.QuoteMeta(name) + ` `).Match(out):
					t.Errorf("%s %s failed on %s", leg.pkg, name, want)
				default:
					t.Errorf("%s %s did not run on %s (no result in its output)", leg.pkg, name, want)
				}
			}
		})
	}
}

// runLeg builds pkg's test binary and runs the named tests in pkg's directory, as go test
// would, on the oldest version; it passes the output through and returns it.
func runLeg(t *testing.T, root, bin, pkg string, tests []string) []byte {
	t.Helper()
	exe := filepath.Join(bin, filepath.Base(pkg)+".test")
	build := exec.Command("go", "test", "-c", "-o", exe, pkg)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -c %s: %v\n%s", pkg, err, out)
	}
	// The test binary's own timeout (legTimeout) fires first and stops its cluster; the
	// interrupt after it is for a binary that hangs in its teardown.
	ctx, cancel := context.WithTimeout(context.Background(), legTimeout+time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, exe, "-test.v", "-test.count=1", "-test.timeout", legTimeout.String(),
		"-test.run", "^("+strings.Join(tests, "|")+")$")
	run.Dir = filepath.Join(root, pkg)
	run.Env = append(os.Environ(), cluster.KubernetesEnv+"="+cluster.KubernetesOldest)
	run.Cancel = func() error { return run.Process.Signal(os.Interrupt) }
	run.WaitDelay = time.Minute
	// The leg's output goes through as it comes (the legs run one after the other) and is
	// kept to read its results.
	fmt.Fprintf(os.Stderr, "=== leg %s on the oldest supported Kubernetes: %s\n", pkg, strings.Join(tests, " "))
	var buf bytes.Buffer
	out := io.MultiWriter(&buf, os.Stderr)
	run.Stdout, run.Stderr = out, out
	start := time.Now()
	err := run.Run()
	t.Logf("%s: %d scenario(s) on the oldest version in %s", pkg, len(tests), time.Since(start).Round(time.Second))
	if err != nil {
		t.Errorf("%s on the oldest version: %v", pkg, err)
	}
	return buf.Bytes()
}

// requireVersion checks that the leg's cluster said it ran want: the API server, and every
// real node's kubelet.
func requireVersion(t *testing.T, out []byte, want string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)` + regexp.QuoteMeta(cluster.ServerVersionLine) + ` (\S+)$`).FindSubmatch(out)
	if m == nil {
		t.Errorf("the leg's cluster did not say its API server's version (%q)", cluster.ServerVersionLine)
	} else if got := string(m[1]); got != want {
		t.Errorf("the leg's API server is %s, want %s", got, want)
	}
	for _, k := range regexp.MustCompile(`(?m)`+regexp.QuoteMeta(cluster.KubeletVersionLine)+` (\S+) (\S+)$`).FindAllSubmatch(out, -1) {
		if got := string(k[2]); got != want {
			t.Errorf("the leg's node %s runs kubelet %s, want %s", k[1], got, want)
		}
	}
}
