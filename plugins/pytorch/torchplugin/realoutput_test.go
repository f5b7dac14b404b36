package torchplugin

import (
	"context"
	"testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/framework/hinttest"
)

// TestHintsOnRealTorchOutput: the whole output of real PyTorch 2.11 gangs (torchrun, the
// plugin's static rendezvous, gloo), one rank failing on purpose, and of a CUDA program on an
// H100 (hinttest's fixtures), fed as the kubelet cuts it and as the node agent keeps it, with
// the hints as the host compiles them: the root is the failing index with its own cause,
// every survivor a PeerFailure (gloo's "Connection closed by peer" in torchrun's summary).
//
// torchrun exits 1 whoever failed: the failing rank's summary carries its own exception,
// the survivors' the collective's lost connection; in rank2-raises every torchrun exits in
// the same second, and the survivors' PeerFailure leaves rank 2 the root. A device-side
// assert and an illegal address are the program's own GPU faults.
func TestHintsOnRealTorchOutput(t *testing.T) {
	h := framework.NewTestHost(t, framework.HostOptions{}, map[string]framework.Plugin{Name: Plugin{}})
	hints, err := h.Hints(context.Background(), makeRun("r", 4, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	hinttest.RunGangs(t, hints, map[string]hinttest.GangCase{
		"torch-2.11-gloo-rank2-raises":  {Root: 2, Cause: v1alpha1.CauseAppExit},
		"torch-2.11-gloo-rank0-crashes": {Root: 0, Cause: v1alpha1.CauseAppExit},
		"torch-2.11-cuda-device-assert": {Root: 0, Cause: v1alpha1.CauseAppGPUError},
		"cupy-14-illegal-address":       {Root: 0, Cause: v1alpha1.CauseAppGPUError},
	})
}
