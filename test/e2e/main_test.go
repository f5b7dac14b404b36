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
		// The scenarios run side by side and ask for about 45 GPUs when they all start
		// together: 6 nodes of 8 hold them all. With fewer, a pod left unscheduled waits
		// for the scheduler to retry it, which can take longer than a scenario may.
		Nodes: 6,
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
