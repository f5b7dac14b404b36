package jaxplugin

import (
	"context"
	"testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/framework/hinttest"
)

// TestHintsOnRealJaxOutput: the whole output of real JAX 0.11.2 gangs, one worker failing
// on purpose (hinttest's fixtures, recorded on an H100 machine), fed as the kubelet cuts it
// (last 80 lines, 2 KiB) and as the node agent keeps it, with the hints as the host compiles
// them: the root is the failing index with its own cause, every survivor a PeerFailure.
//
// When worker 2 raises, the coordination service aborts all four (exit 134) in the same
// millisecond, and the survivors' messages name task 2, the one that reached the shutdown
// barrier alone; its own message names itself. When it crashes hard, the survivors say
// "Task 2 heartbeat timeout". A CUDA program's illegal address (CuPy, XID 31) is its own
// fault through the GPU hints every GPU plugin shares.
func TestHintsOnRealJaxOutput(t *testing.T) {
	h := framework.NewTestHost(t, framework.HostOptions{}, map[string]framework.Plugin{Name: Plugin{}})
	hints, err := h.Hints(context.Background(), makeRun("r", 4, nil))
	if err != nil {
		t.Fatal(err)
	}
	hinttest.RunGangs(t, hints, map[string]hinttest.GangCase{
		"jax-0.11.2-cpu-worker2-raises": {Root: 2, Cause: v1alpha1.CauseAppExit, NamedBy: 4},
		"jax-0.11.2-cpu-worker2-exits":  {Root: 2, Cause: v1alpha1.CauseAppExit, NamedBy: 3},
		"cupy-14-illegal-address":       {Root: 0, Cause: v1alpha1.CauseAppGPUError},
	})
}
