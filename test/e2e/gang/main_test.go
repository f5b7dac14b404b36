// Package gang runs the scenario of Kubernetes 1.37's gang scheduling (KEP-4671): a control
// plane that serves PodGroups (scheduling.k8s.io/v1beta1) and whose scheduler has the
// GenericWorkload feature on, where faultline puts each gang run's workers in a PodGroup of
// the run's and the scheduler binds them all or none, at the first attempt and at a restart.
// It has a cluster of its own: the feature changes how every pod of a run is scheduled.
package gang

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/faultline-dev/faultline/test/cluster"
)

// nodes is the cluster's fake 8-GPU nodes at the start: one fewer than a run of the
// scenario needs.
const nodes = 3

var launcherBin string

func TestMain(m *testing.M) {
	flag.Parse()
	var binDir string
	if !testing.Short() {
		var err error
		if binDir, err = os.MkdirTemp("", "faultline-gang-e2e-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if launcherBin, err = cluster.BuildLauncher(binDir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(binDir)
			os.Exit(1)
		}
	}
	code := cluster.Main(m, cluster.Options{
		Name:          "gang",
		Nodes:         nodes,
		FeatureGates:  "GenericWorkload=true",
		RuntimeConfig: "scheduling.k8s.io/v1beta1=true",
		Setup: func(ctx context.Context, c *cluster.Cluster) error {
			return c.InstallCRDs(ctx, filepath.Join(c.Tools.Root, "deploy", "crd"))
		},
	})
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}
