// Package e2e holds faultline's end-to-end scenarios. They run against one real control
// plane per package (test/cluster), each in a namespace of its own and in parallel where
// they do not interfere.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/faultline-dev/faultline/test/cluster"
)

func TestMain(m *testing.M) {
	flag.Parse()
	var binDir string
	if !testing.Short() {
		// The controller scenarios each start their own `launcher controller`: build it, and the
		// framework plugins, once.
		var err error
		if binDir, err = os.MkdirTemp("", "faultline-e2e-bin-"); err != nil {
			fmt.Fprintf(os.Stderr, "temp dir for the launcher: %v\n", err)
			os.Exit(1)
		}
		// The broken test plugin goes next to the launcher and the real plugins.
		if launcherBin, err = cluster.BuildLauncher(binDir); err == nil {
			_, err = cluster.BuildBinary(binDir, "./pkg/framework/testdata/brokenplugin", "faultline-plugin-crash")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(binDir)
			os.Exit(1)
		}
	}
	code := cluster.Main(m, cluster.Options{
		Name: "e2e",
		// The scenarios run side by side and ask for about 50 GPUs when they all start
		// together (those that need none ask for none): 7 nodes of 8 hold them all. With
		// fewer, a pod left unscheduled waits for the scheduler to retry it, which can take
		// longer than a scenario may.
		Nodes: 7,
		// kwokctl runs the node lifecycle controller with a grace period of 3m20s; a node that
		// dies hard (TestE2ENodeLostRestartsTheGang) is marked unreachable after Kubernetes'
		// own 40 s here (kwok renews the nodes' leases every 10 s).
		ExtraArgs: []string{
			"kube-controller-manager=node-monitor-grace-period=40s",
			"kube-controller-manager=node-monitor-period=5s",
		},
		// Every scenario needs the TrainingRun CRD; install it once for the package.
		Setup: func(ctx context.Context, c *cluster.Cluster) error {
			return c.InstallCRDs(ctx, filepath.Join(c.Tools.Root, "deploy", "crd"))
		},
	})
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}
