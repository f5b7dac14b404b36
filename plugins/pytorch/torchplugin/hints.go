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
// Deliberately not hints, because a start-up problem, this process's own error or its own
// hang prints them too:
//   - "The client socket has timed out after ...s while trying to connect to (host, port)",
//     "TCP client failed to connect/validate to host" and RendezvousConnectionError's "The
//     connection to the C10d store has failed": a wrong address says it as well as a pod 0
//     that is not up yet (mid-run, the store's own error inside it is matched);
//   - the store's "wait timeout after ...ms, keys: ...", "Socket Timeout" and "Timed out
//     initializing process group in store based barrier": a key a peer never set, which a
//     slow start-up or a world size larger than the pods that run says as well;
//   - "Some NCCL operations have failed or timed out": the watchdog's wrapper around any
//     NCCL failure, this process's own included;
//   - "ProcessGroupNCCL's watchdog got stuck for ...s": this process's own NCCL/CUDA call
//     or GIL is stuck;
//   - "Received a dump signal due to a collective timeout from  rank N" and "remote error
//     detected from rank: N" (ProcessGroupNCCL.cpp, the heartbeat monitor and the watchdog):
//     another rank's collective failed, which a rank that hung outside any collective (its
//     own fault) hears the same way as one stuck in it; a victim prints the watchdog
//     timeout as well;
//   - the elastic agent's "Worker group FAILED. 3/3 attempts left; will restart worker
//     group" and "failed (exitcode: 1) local_rank: 0": its own workers' failure, whatever
//     caused it; RendezvousClosedError and the keep-alive or shutdown failures of the
//     rendezvous, which an agent restarting (or ending) after its own workers' failure
//     meets once another agent has given up.
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
	// A connection's errno, as c10d's socket code reports it (Utils.hpp, strerror): the
	// other end's process died (a reset, a broken pipe) or its host went away (the kernel
	// gave up: timed out, no route).
	const netError = `(?:Connection reset by peer|Broken pipe|Connection timed out|No route to host)`
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
		{
			// The TCPStore client's other losses of the store, on a connection it had:
			// TCPStore.cpp (TCPClient: "[c10d] recvValue failed on SocketImpl(fd=64, addr=...,
			// remote=...): Connection reset by peer", also recvVector and sendBytes), the
			// exception it raises (torch.distributed.DistNetworkError), the NCCL heartbeat
			// monitor's poll of the store (ProcessGroupNCCL.cpp: "Failed to check the "should
			// dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with
			// error: ...") and the NCCL id's fetch from rank 0 (broadcastUniqueNCCLID: "...
			// but store->get('0') got error: ..."). A reset while the store validates a new
			// connection at start-up says it too: the store's host's doing either way.
			Pattern: `(?:\[c10d\] (?:recvValue|recvVector|sendBytes) failed on SocketImpl\([^)\n]*\)|DistNetworkError|` +
				`TCPStore server has shut down too early\), with error|store->get\('[^'\n]*'\) got error): ` + netError,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "the c10d store's host (pod 0) reset the connection or went away",
		},
		{
			// torch/csrc/distributed/c10d/ProcessGroupGloo.cpp (monitoredBarrier): rank 0 says
			// which ranks did not reach the barrier in time ("[Rank 0]: Rank 2 failed to pass
			// monitoredBarrier in 30000 ms", with wait_all_ranks "Ranks 1, 3 failed ..."), the
			// others that rank 0 is gone or failed ("Rank 1 successfully reached
			// monitoredBarrier, but received errors while waiting for send/recv from rank 0").
			Pattern:     `Ranks? [\d, ]+ failed to pass monitoredBarrier|successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "another rank did not reach a monitored barrier: it died or hung",
		},
	}
}
