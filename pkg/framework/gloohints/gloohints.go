// Package gloohints holds the failure hints of Gloo, the collective library that PyTorch's
// gloo backend and JAX's CPU collectives use, for a peer that went away: both frameworks
// raise Gloo's own text inside their error (PyTorch: "RuntimeError:
// [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer
// [127.0.0.1]:45759"; JAX: "ValueError: UNKNOWN: Gloo AllGather failed:
// [external/...gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer
// [127.0.0.1]:6051"). Gloo names the peer by its address and port, which is no worker's
// index, so no hint names one.
package gloohints

import (
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
)

// PeerLoss returns the hints for Gloo's TCP transport losing a peer. Gloo prints a peer as
// "[<address>]:<port>" (GLOO_ERROR_MSG prefixes its own "[file:line] "):
//
//	Connection closed by peer [10.4.2.7]:37264 (older: ". This is typically caused by
//	a remote worker crashing. ...")                  pair.cc, Pair::read: end of file
//	Read error [10.4.2.7]:37264: Connection reset by peer. ...
//	                                                 pair.cc, Pair::read: recv's errno
//	writev [10.4.2.7]:37264: Broken pipe             pair.cc, Pair::write: writev's errno
//	Socket closed [10.4.2.7]:37264                   pair.cc, Pair::verifyConnected
//	Socket unexpectedly closed [10.4.2.7]:37264      pair.cc, Pair::setSync
//	Timed out waiting 1800000ms for recv operation to complete
//	                                                 unbound_buffer.cc, waitRecv/waitSend
//	Read timeout [10.4.2.7]:37264                    buffer.cc, pair.cc (sync mode)
//
// The peer's process exited or was killed (end of file, a reset, a broken pipe), its host
// went away (the connection timed out or has no route: a vanished host sends nothing, not
// even a reset), or it never took part in the collective in time (a timeout: it died, hung
// or never came, which this process's own program did not cause; PyTorch's NCCL watchdog
// timeout is taken the same way). A pair closed earlier fails every later operation on it
// with "Socket closed".
//
// Deliberately not hints: "Connect timeout" and connection refusals, which a start-up with
// a peer not up yet or a wrong address prints; a bare "Connection reset by peer", which any
// client prints (a dataset download whose server hung up).
func PeerLoss() []framework.HintPattern {
	const peer = `\[[^\]\n]*\]:\d+`
	return []framework.HintPattern{
		{
			Pattern:     `Connection closed by peer \[`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "a peer closed its gloo connection: it exited or was killed",
		},
		{
			Pattern:     `(?:Read error|writev) ` + peer + `: (?:Connection reset by peer|Broken pipe|Connection timed out|No route to host)`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "a peer's gloo connection was reset, broken or timed out: its process was killed or its host went away",
		},
		{
			Pattern:     `Socket (?:unexpectedly )?closed ` + peer,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "gloo used a connection an earlier peer loss had closed",
		},
		{
			Pattern:     `Timed out waiting \d+ms for (?:recv|send) operation to complete|(?:Read|Write) timeout ` + peer,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "a gloo collective timed out: a peer died, hung, lost its host or never joined it",
		},
	}
}
