// Package gloohints holds the failure hint of Gloo, the collective library that PyTorch's
// gloo backend and JAX's CPU collectives use, for a peer that closed its connection: both
// frameworks raise Gloo's own text inside their error (PyTorch: "RuntimeError:
// [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer
// [127.0.0.1]:45759"; JAX: "ValueError: UNKNOWN: Gloo AllGather failed:
// [external/...gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer
// [127.0.0.1]:6051"). Gloo names the peer by its address and port, which is no worker's
// index, so the hint names none.
package gloohints

import (
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
)

// PeerLoss returns the hint for Gloo's TCP transport reading end-of-file from a peer
// (gloo/transport/tcp/pair.cc, Pair::read: "Connection closed by peer [<address>]:<port>",
// in older releases followed by ". This is typically caused by a remote worker
// crashing."): the peer's process exited or was killed.
func PeerLoss() []framework.HintPattern {
	return []framework.HintPattern{{
		Pattern:     `Connection closed by peer \[`,
		Cause:       v1alpha1.CausePeerFailure,
		Description: "a peer closed its gloo connection: it exited or was killed",
	}}
}
