// Package gpuhints holds the failure hints that every GPU framework plugin shares: CUDA
// errors that the program itself caused, and the messages of NCCL's socket transport when
// an established connection to a peer process is closed from the other end. Frameworks
// put their own, more specific hints around these.
//
// Every hint says "a peer died, not me" (PeerFailure) or "my program's own fault" (an
// application cause); none claims infrastructure, since program output cannot prove a node
// fault. An uncorrectable ECC error, for instance, is left to the node agent, which sees it
// through NVML (XIDs 48, 63, 64, 94, 95) and attests it on the pod; the program's
// "uncorrectable ECC error encountered" alone proves nothing, and calling it the program's
// fault would be false, so there is no hint for it.
package gpuhints

import (
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
)

// CUDA returns hints for CUDA errors that the program caused. The messages are
// cudaGetErrorString's and cuGetErrorName's, which frameworks print as they are (XLA:
// "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"; TensorFlow and
// PyTorch: "CUDA error: an illegal memory access was encountered").
func CUDA() []framework.HintPattern {
	return []framework.HintPattern{
		{
			Pattern:     `an illegal memory access was encountered|CUDA_ERROR_ILLEGAL_ADDRESS`,
			Cause:       v1alpha1.CauseAppGPUError,
			Description: "a kernel accessed memory it must not (a program bug, like XID 13/31)",
		},
		{
			Pattern:     `device-side assert triggered|CUDA_ERROR_ASSERT`,
			Cause:       v1alpha1.CauseAppGPUError,
			Description: "an assertion in a kernel failed, e.g. an index out of range in an embedding or a loss (a program bug)",
		},
	}
}

// NCCLPeerLoss returns hints for the messages of NCCL's socket code when a peer closes an
// established connection: the peer process exited (or was killed), so this one is a peer
// failure.
//
// Current NCCL (src/misc/socket.cc, socketProgress) reports a peer's orderly close, a reset
// (ECONNRESET on recv) and a broken pipe (EPIPE on send) alike as "socketProgress:
// Connection closed by remote peer <addr>", which frameworks repeat in their errors
// ("Last error: ..." in PyTorch, "Last NCCL warning(error) log entry" in XLA). Older NCCL
// logged a reset as "socketProgressOpt: Call to recv from <addr> failed : Connection reset
// by peer".
//
// Deliberately not hints:
//   - ncclRemoteError's own string, "remote process exited or there was a network error":
//     NCCL returns it as well when a communicator cannot be set up at all (a wrong
//     NCCL_SOCKET_IFNAME, a firewall, two programs sharing a GPU), a local or configuration
//     error that a restart would not fix. A real peer loss over sockets also carries the
//     line above; over InfiniBand it does not, and such a failure is left to the exit code
//     and to the peers' own messages (e.g. PyTorch's watchdog timeout).
//   - a bare "unhandled system error" (ncclSystemError): as often local (a container's
//     /dev/shm too small for NCCL's shared memory) as a lost peer.
//   - a bare "Connection reset by peer": any client prints it, e.g. for a dataset download
//     whose server hung up, which is no peer of the gang.
func NCCLPeerLoss() []framework.HintPattern {
	return []framework.HintPattern{
		{
			Pattern:     `Connection closed by remote peer`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "a peer closed its NCCL connection: it exited or was killed (NCCL socketProgress)",
		},
		{
			Pattern:     `socketProgressOpt: Call to (?:recv from|send to) \S+ failed ?: (?:Connection reset by peer|Broken pipe)`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "a peer reset its NCCL connection (older NCCL's socketProgressOpt)",
		},
	}
}
