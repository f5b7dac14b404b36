package cli

import (
	"bufio"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/faultline-dev/faultline/pkg/controller"
	"github.com/faultline-dev/faultline/pkg/election"
	"github.com/faultline-dev/faultline/test/cluster"
)

// quietPorts keep a test's controllers off the ports that other tests' controllers use.
var quietPorts = []string{"--metrics-bind-address", "0", "--health-probe-bind-address", "0"}

// outsideACluster skips a test where this machine is a pod: there the controller has a
// namespace of its own, which is what these tests take away.
func outsideACluster(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(election.PodNamespaceFile); err == nil {
		t.Skipf("%s exists: these tests run the controller outside a cluster", election.PodNamespaceFile)
	}
}

// TestCLIControllerOutsideAClusterNamesTheFlags: run with only a kubeconfig, outside a
// cluster, the controller has no namespace for its Lease. It refuses at once and names the
// two flags that make it run, rather than controller-runtime's "unable to find leader
// election namespace", and never runs unelected beside a controller that may lead.
func TestCLIControllerOutsideAClusterNamesTheFlags(t *testing.T) {
	t.Parallel()
	outsideACluster(t)
	c := cluster.Shared(t)
	// A controller that started would run until killed: the deadline turns that into a failure.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r := launcher(ctx, t, c, "", append([]string{"controller"}, quietPorts...)...)
	requireOutput(t, r, 2, "stderr", "outside a cluster", "--leader-election-namespace=faultline-system", "--leader-elect=false")
	if strings.Contains(r.stderr, "LeaderElectionNamespace") {
		t.Errorf("controller-runtime's message, which names no flag of the launcher, reached the user: %s", r)
	}
}

// TestCLIControllerOutsideAClusterWithALeaseNamespace: with --leader-election-namespace the
// same controller runs outside a cluster and leads through the Lease there.
func TestCLIControllerOutsideAClusterWithALeaseNamespace(t *testing.T) {
	t.Parallel()
	outsideACluster(t)
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(t.Context(), scenarioTimeout)
	defer cancel()
	// --namespace keeps this controller off the other tests' runs; the Lease namespace is
	// the flag under test, so it differs from it.
	watched := c.Namespace(t)
	p := cluster.StartProcess(t, launcherBin, append([]string{"controller", "--kubeconfig", c.Kubeconfig,
		"--namespace", watched, "--leader-election-namespace", ns}, quietPorts...)...)
	var holder string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if p.Exited() {
			return false, errors.New("the controller exited")
		}
		lease, err := c.Client.CoordinationV1().Leases(ns).Get(ctx, controller.LeaderElectionID, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		return holder != "", nil
	})
	if err != nil {
		t.Fatalf("no controller leads through Lease %s/%s: %v\n%s", ns, controller.LeaderElectionID, err, p.Tail(20))
	}
	t.Logf("Lease %s/%s held by %s", ns, controller.LeaderElectionID, holder)
}

// TestCLIControllerWithoutElectionSaysSoFirst: a controller run with --leader-elect=false
// acts beside any other; the first line of its log says so, where a person looking for why
// a run was restarted twice reads first.
func TestCLIControllerWithoutElectionSaysSoFirst(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(t.Context(), scenarioTimeout)
	defer cancel()
	p := cluster.StartProcess(t, launcherBin, append([]string{"controller", "--kubeconfig", c.Kubeconfig,
		"--namespace", ns, "--leader-elect=false"}, quietPorts...)...)
	var first string
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		sc := bufio.NewScanner(strings.NewReader(p.Tail(1000)))
		if sc.Scan() {
			first = sc.Text()
		}
		return first != "" || p.Exited(), nil
	})
	if err != nil {
		t.Fatalf("the controller logged nothing: %v", err)
	}
	for _, phrase := range []string{"leader election is off", "--leader-elect=false", "no other faultline controller"} {
		if !strings.Contains(first, phrase) {
			t.Errorf("the first log line does not say %q: %s\n%s", phrase, first, p.Tail(20))
		}
	}
	if p.Exited() {
		t.Errorf("the controller exited:\n%s", p.Tail(20))
	}
}
