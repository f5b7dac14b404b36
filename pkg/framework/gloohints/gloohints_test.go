package gloohints

import (
	"testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework/hinttest"
)

const pair = "gloo/transport/tcp/pair.cc (Pair::read)"

func TestHints(t *testing.T) {
	hinttest.Run(t, "gloo", PeerLoss(), map[string]hinttest.Case{
		"PyTorch's gloo backend (torch 2.11, fixture torch-2.11-gloo-rank2-raises)": {
			Source:  pair + "; torch/distributed/distributed_c10d.py (all_reduce)",
			Message: "[rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer [127.0.0.1]:45759",
			Want:    v1alpha1.CausePeerFailure,
		},
		"JAX's CPU collectives (JAX 0.11.2, fixture jax-0.11.2-cpu-worker2-exits)": {
			Source:  pair + "; jax/experimental/multihost_utils.py (process_allgather)",
			Message: "ValueError: UNKNOWN: Gloo AllGather failed: [external/xla++third_party_ext+gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer [127.0.0.1]:6051",
			Want:    v1alpha1.CausePeerFailure,
		},
		"older gloo's longer words": {
			Source: pair,
			Message: "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:538] Connection closed by peer [10.4.2.7]:37264. " +
				"This is typically caused by a remote worker crashing. Check the logs of the remote worker before reporting an error. GLHF!",
			Want: v1alpha1.CausePeerFailure,
		},
		"a peer's process was killed: the connection reset": {
			Source: pair + ", recv's errno",
			Message: "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:539] Read error [10.4.2.7]:37264: Connection reset by peer. " +
				"This is typically caused by a remote worker hanging or bugs in the application. Check the logs of the remote worker before reporting an error. GLHF! 🏖️",
			Want: v1alpha1.CausePeerFailure,
		},
		"writing to a dead peer": {
			Source:  "gloo/transport/tcp/pair.cc (Pair::write, writev's errno)",
			Message: "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:339] writev [10.4.2.7]:37264: Broken pipe",
			Want:    v1alpha1.CausePeerFailure,
		},
		"a connection an earlier peer loss closed": {
			Source:  "gloo/transport/tcp/pair.cc (Pair::verifyConnected)",
			Message: "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:812] Socket closed [10.4.2.7]:37264",
			Want:    v1alpha1.CausePeerFailure,
		},
		"a peer's host is gone: the collective times out": {
			Source:  "gloo/transport/tcp/unbound_buffer.cc (UnboundBuffer::waitRecv)",
			Message: "ValueError: UNKNOWN: Gloo AllGather failed: [external/xla++third_party_ext+gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete",
			Want:    v1alpha1.CausePeerFailure,
		},
		"start-up: a peer not up yet": {
			Source:  "gloo/transport/tcp/pair.h (connect timeout)",
			Message: "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.h:311] Connect timeout [10.4.2.7]:37264",
		},
		"a client that is no peer of the gang": {
			Source:  "urllib3 (a dataset download whose server hung up)",
			Message: "urllib3.exceptions.ProtocolError: ('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))",
		},
	}, PeerLoss())
}
