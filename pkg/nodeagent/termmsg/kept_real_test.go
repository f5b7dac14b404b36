package termmsg_test

import (
	"strings"
	"testing"

	"github.com/faultline-dev/faultline/pkg/framework/hinttest"
	"github.com/faultline-dev/faultline/pkg/framework/hinttest/realoutput"
	"github.com/faultline-dev/faultline/pkg/nodeagent/termmsg"
)

// What the agent keeps of the real frameworks' output (realoutput's recordings): the kubelet's
// tail unchanged, and above it, within the budget, the lines the kubelet's cut loses: the
// failing JAX worker's own traceback, the coordinator's words for the task it lost, a torch
// survivor's collective error.
func TestKeptRealOutput(t *testing.T) {
	fixtures, err := realoutput.All()
	if err != nil {
		t.Fatal(err)
	}
	// Lines the kubelet's tail loses and the agent must keep.
	lost := map[string]map[int]string{
		"jax-0.11.2-cpu-worker2-raises": {2: "RuntimeError: devcheck: worker 2 fails on purpose after initialize"},
		"jax-0.11.2-cpu-worker2-exits": {
			0: "The following tasks are unhealthy (stopped sending heartbeats):\n2\nThe tasks have crashed.",
			1: "ValueError: UNKNOWN: Gloo AllGather failed: [external/xla++third_party_ext+gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer",
		},
		"torch-2.11-gloo-rank2-raises": {0: "[rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer"},
	}
	for _, f := range fixtures {
		for _, w := range f.Workers {
			kubelet, kept := hinttest.KubeletCut(w.Log), hinttest.AgentKept(w.Log)
			if !strings.HasSuffix(kept, kubelet) {
				t.Errorf("%s w%d: the kept message does not end with the kubelet's tail", f.Name, w.Index)
			}
			if above := len(kept) - len(kubelet); above > termmsg.MaxKeptBytes+200 {
				t.Errorf("%s w%d: %d bytes kept above the tail, want at most %d and the mark", f.Name, w.Index, above, termmsg.MaxKeptBytes)
			}
			if want, ok := lost[f.Name][w.Index]; ok {
				if strings.Contains(kubelet, want) {
					t.Errorf("%s w%d: the kubelet's tail has %q already: not a line it loses", f.Name, w.Index, want)
				}
				if !strings.Contains(kept, want) {
					t.Errorf("%s w%d: the agent did not keep %q:\n%s", f.Name, w.Index, want, kept[:len(kept)-len(kubelet)])
				}
			}
		}
	}
}
