package torchplugin

import (
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/framework/gloohints"
	"github.com/faultline-dev/faultline/pkg/framework/gpuhints"
)

// Hints are PyTorch's failure hints: the program's own faults first (a CUDA out-of-memory
// error, CUDA errors it caused), because an application cause must win over the peer
// messages that other processes of the same pod print while torchrun stops them; then the
// ways a process learns that another one died.
//
// With several processes per pod (torchrun's nproc_per_node), the pod's termination
// message is the tail of all of their output and torchrun's summary. Decorate the
// program's entry point with torch.distributed.elastic.multiprocessing.errors.record so
// that the summary carries the failing process's own error, not only its exit code.
//
// Deliberately not hints, because a start-up problem or this process's own error prints
// them too:
//   - "The client socket has timed out after ...s while trying to connect to (host, port)"
//     and RendezvousConnectionError's "The connection to the C10d store has failed": a wrong
//     address says it as well as a pod 0 that is not up yet;
//   - "Some NCCL operations have failed or timed out": the watchdog's wrapper around any
//     NCCL failure, this process's own included.
//
// No hint names the peer that failed (the named groups of exitclass.HintGroupPeer), although
// PyTorch sometimes says a rank ("Rank 2 failed to pass monitoredBarrier"): a global rank is
// the pod's completion index only with one process per pod under the static rendezvous
// (node rank r runs ranks r*nproc .. r*nproc+nproc-1), and under the c10d rendezvous node
// ranks follow the order the pods joined. Neither the plugin, whose hints serve every run,
// nor the classifier knows which holds for a message, and a wrong name would blame a
// healthy worker. A torch gang's survivors learn of a death through their collective or the
// store, seconds after it (the fixtures: torchrun's exits follow the failed rank's), so the
// order of exits and the survivors' PeerFailure find the root.
func Hints() []framework.HintPattern {
	hints := []framework.HintPattern{cudaOOM()}
	hints = append(hints, gpuhints.CUDA()...)
	hints = append(hints, peerHints()...)
	hints = append(hints, gloohints.PeerLoss()...)
	return append(hints, gpuhints.NCCLPeerLoss()...)
}

// cudaOOM is PyTorch's CUDA caching allocator giving up (c10/cuda/CUDACachingAllocator.cpp:
// "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of ..."),
// raised as torch.OutOfMemoryError: the program asked for more GPU memory than there is.
func cudaOOM() framework.HintPattern {
	return framework.HintPattern{
		Pattern:     `CUDA out of memory\. Tried to allocate`,
		Cause:       v1alpha1.CauseAppExit,
		Description: "the program ran out of GPU memory (torch.OutOfMemoryError): a larger batch or model than the GPU holds",
	}
}

// peerHints are PyTorch's own messages about a lost peer.
func peerHints() []framework.HintPattern {
	return []framework.HintPattern{
		{
			// torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, the watchdog: "[Rank 1] Watchdog
			// caught collective operation timeout: WorkNCCL(SeqNum=..., OpType=ALLREDUCE, ...)
			// ran for 600081 milliseconds before timing out." A collective every rank must
			// join did not complete: a peer died, hung or never came, which this rank's own
			// program did not cause.
			Pattern:     `Watchdog caught collective operation timeout`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "an NCCL collective timed out: another rank died, hung or never joined it",
		},
		{
			// torch/csrc/distributed/c10d/Utils.hpp (recvBytes), the TCPStore client when the
			// store's host closed the connection: "Failed to recv, got 0 bytes. Connection was
			// likely closed. Did the remote server shutdown or crash?" (older releases: "failed
			// to recv, got 0 bytes"). The store lives in pod 0's torchrun (or rank 0).
			Pattern:     `(?i)failed to recv, got 0 bytes`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "the c10d store's host (pod 0) closed the connection: it exited",
		},
	}
}
