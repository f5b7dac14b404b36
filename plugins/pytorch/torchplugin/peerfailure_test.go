package torchplugin

import (
	"testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework/hinttest"
)

// The upstream files a surviving PyTorch process's words come from (repository and path).
const (
	tcpStore     = "pytorch/pytorch torch/csrc/distributed/c10d/TCPStore.cpp (TCPClient: C10D_WARNING \"... failed on {}: {}\")"
	socketUtils  = "pytorch/pytorch torch/csrc/distributed/c10d/Utils.hpp (SYSCHECK, recvBytes: strerror(errno))"
	pgNCCL       = "pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
	pgGloo       = "pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupGloo.cpp (monitoredBarrier)"
	agentAPI     = "pytorch/pytorch torch/distributed/elastic/agent/server/api.py (SimpleElasticAgent._invoke_run)"
	dynamicRdzv  = "pytorch/pytorch torch/distributed/elastic/rendezvous/dynamic_rendezvous.py"
	glooPairCC   = "pytorch/gloo gloo/transport/tcp/pair.cc"
	glooUnboundC = "pytorch/gloo gloo/transport/tcp/unbound_buffer.cc (UnboundBuffer::waitRecv)"
	ncclSocket   = "NVIDIA/nccl src/misc/socket.cc (socketProgress); pytorch/pytorch torch/csrc/distributed/c10d/NCCLUtils.cpp"
)

// The TCPStore client of a rank in pod 1, and pod 0's store it talks to.
const storeSocket = "SocketImpl(fd=64, addr=[gpt-1.gpt.team-c.svc.cluster.local]:35986, remote=[gpt-0.gpt.team-c.svc.cluster.local]:29500)"

// TestHintsOnEveryPeerFailureMessage: every message upstream prints in a PyTorch process
// (a rank or torchrun's elastic agent) when another process or its host dies, built from
// the format strings of the files each case names, as the hints (in the host's order) must
// take it: PeerFailure. No hint names a rank (Hints: a global rank is no completion index
// in general). The words of a process about its own failure or its own hang, and of a
// start-up, take no peer hint.
func TestHintsOnEveryPeerFailureMessage(t *testing.T) {
	hinttest.Run(t, Name, Hints(), map[string]hinttest.Case{
		// NCCL.
		"the NCCL watchdog: a collective timed out": {
			Source: pgNCCL + " (Watchdog::runLoop, WorkNCCL::checkTimeout)",
			Message: "[rank1]:[E1127 02:41:21.433063423 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5321, OpType=ALLREDUCE, " +
				"NumelIn=4096, NumelOut=4096, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.",
			Want: v1alpha1.CausePeerFailure,
		},
		"the NCCL watchdog's exception ends the process": {
			Source: pgNCCL + " (WorkNCCL::handleException)",
			Message: "terminate called after throwing an instance of 'c10::DistBackendError'\n  what():  [PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread terminated with exception: " +
				"[Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5321, OpType=ALLREDUCE, NumelIn=4096, NumelOut=4096, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.",
			Want: v1alpha1.CausePeerFailure,
		},
		"NCCL: the peer closed its connection": {
			Source: ncclSocket,
			Message: "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3690, remote process exited or there was a network error, NCCL version 2.27.5\n" +
				"ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\nLast error:\nsocketProgress: Connection closed by remote peer gpt-2.gpt.team-c.svc.cluster.local<56154>",
			Want: v1alpha1.CausePeerFailure,
		},

		// The c10d store, which pod 0's torchrun hosts.
		"the store's host exited: end of file": {
			Source: tcpStore + "; " + socketUtils,
			Message: "[rank1]:[W1127 02:41:19.968570826 TCPStore.cpp:125] [c10d] recvValue failed on " + storeSocket + ": Failed to recv, got 0 bytes. " +
				"Connection was likely closed. Did the remote server shutdown or crash?\nException raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:682 (most recent call first):",
			Want: v1alpha1.CausePeerFailure,
		},
		"the store's host was killed: the connection reset": {
			Source: tcpStore + "; " + socketUtils,
			Message: "[rank1]:[W1127 02:41:19.886560089 TCPStore.cpp:125] [c10d] recvValue failed on " + storeSocket + ": Connection reset by peer\n" +
				"Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:675 (most recent call first):",
			Want: v1alpha1.CausePeerFailure,
		},
		"the store's host was killed: a broken pipe": {
			Source: tcpStore + " (sendRaw); " + socketUtils + " (sendBytes)",
			Message: "[rank3]:[W1127 02:41:19.886560089 TCPStore.cpp:106] [c10d] sendBytes failed on " + storeSocket + ": Broken pipe\n" +
				"Exception raised from sendBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:653 (most recent call first):",
			Want: v1alpha1.CausePeerFailure,
		},
		"the store's connection lost, as the exception says it": {
			Source:  socketUtils + " (C10_THROW_ERROR(DistNetworkError, ...))",
			Message: "[rank3]: torch.distributed.DistNetworkError: Connection reset by peer",
			Want:    v1alpha1.CausePeerFailure,
		},
		"issue 56's shape in PyTorch: pod 0's host is gone, and a survivor hears only the store time out": {
			Source: pgNCCL + " (HeartbeatMonitor::runLoop: the \"should dump\" poll); " + tcpStore + "; " + socketUtils,
			Message: "[rank2]:[W1127 02:56:40.000112020 TCPStore.cpp:125] [c10d] recvValue failed on " + storeSocket + ": Connection timed out\n" +
				"[rank2]:[W1127 02:56:40.000229733 ProcessGroupNCCL.cpp:1771] [PG ID 0 PG GUID 0(default_pg) Rank 2] Failed to check the \"should dump\" flag on TCPStore, " +
				"(maybe TCPStore server has shut down too early), with error: Connection timed out",
			Want: v1alpha1.CausePeerFailure,
		},
		"the NCCL heartbeat monitor's poll of the store reset": {
			Source: pgNCCL + " (HeartbeatMonitor::runLoop: the \"should dump\" poll)",
			Message: "[rank2]:[W1127 02:41:20.574839167 ProcessGroupNCCL.cpp:1771] [PG ID 0 PG GUID 0(default_pg) Rank 2] Failed to check the \"should dump\" flag on TCPStore, " +
				"(maybe TCPStore server has shut down too early), with error: Connection reset by peer",
			Want: v1alpha1.CausePeerFailure,
		},
		"rank 0 died while the others fetched the NCCL id: end of file": {
			Source: pgNCCL + " (broadcastUniqueNCCLID); " + socketUtils,
			Message: "torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', " +
				"but store->get('0') got error: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?",
			Want: v1alpha1.CausePeerFailure,
		},
		"rank 0 was killed while the others fetched the NCCL id: the connection reset": {
			Source: pgNCCL + " (broadcastUniqueNCCLID); " + socketUtils,
			Message: "torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', " +
				"but store->get('0') got error: Connection reset by peer",
			Want: v1alpha1.CausePeerFailure,
		},

		// Gloo.
		"gloo: the peer's process exited (fixture torch-2.11-gloo-rank0-crashes)": {
			Source:  glooPairCC + " (Pair::read: end of file)",
			Message: "[rank1]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer [127.0.0.1]:33429",
			Want:    v1alpha1.CausePeerFailure,
		},
		"gloo: the peer's process was killed, the connection reset": {
			Source: glooPairCC + " (Pair::read: recv's errno)",
			Message: "[rank1]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:539] Read error [10.244.0.9]:37264: Connection reset by peer. " +
				"This is typically caused by a remote worker hanging or bugs in the application. Check the logs of the remote worker before reporting an error. GLHF! 🏖️",
			Want: v1alpha1.CausePeerFailure,
		},
		"gloo: the peer's host is gone, the kernel gives up on the connection": {
			Source:  glooPairCC + " (Pair::read: recv's errno)",
			Message: "[rank1]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:539] Read error [10.244.0.9]:37264: Connection timed out. This is typically caused by a remote worker hanging or bugs in the application.",
			Want:    v1alpha1.CausePeerFailure,
		},
		"gloo: the peer's host is gone, the collective times out": {
			Source:  glooUnboundC,
			Message: "[rank1]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete",
			Want:    v1alpha1.CausePeerFailure,
		},
		"gloo: writing to a dead peer": {
			Source:  glooPairCC + " (Pair::write: writev's errno)",
			Message: "[rank3]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:339] writev [10.244.0.9]:37264: Broken pipe",
			Want:    v1alpha1.CausePeerFailure,
		},
		"gloo: a connection an earlier loss closed": {
			Source:  glooPairCC + " (Pair::verifyConnected)",
			Message: "[rank3]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:812] Socket closed [10.244.0.9]:37264",
			Want:    v1alpha1.CausePeerFailure,
		},
		"monitored barrier: rank 0 names the rank that did not come": {
			Source: pgGloo,
			Message: "RuntimeError: [Rank 0]: Rank 2 failed to pass monitoredBarrier in 30000 ms\n Original exception: \n" +
				"[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 30000ms for recv operation to complete",
			Want: v1alpha1.CausePeerFailure,
		},
		"monitored barrier: rank 0 names all that did not come": {
			Source:  pgGloo + " (wait_all_ranks)",
			Message: "RuntimeError: [Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 30000 ms",
			Want:    v1alpha1.CausePeerFailure,
		},
		"monitored barrier: rank 0 is gone": {
			Source: pgGloo,
			Message: "RuntimeError: Rank 1 successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.\n" +
				" Original exception: \n[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer [10.244.0.9]:21340",
			Want: v1alpha1.CausePeerFailure,
		},

		// This process's own words, its own hang, and a start-up's: no peer hint.
		"the NCCL watchdog itself is stuck (this process's own hang)": {
			Source: pgNCCL + " (HeartbeatMonitor::runLoop)",
			Message: "[rank1]:[E1127 02:49:21.000000000 ProcessGroupNCCL.cpp:1685] [PG ID 0 PG GUID 0(default_pg) Rank 1] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making " +
				"progress in monitoring enqueued collectives. This typically indicates a NCCL/CUDA API (e.g., CudaEventDestroy) hang blocking the watchdog, and could be triggered by another " +
				"thread holding the GIL inside a CUDA api (for example, CudaEventDestroy), or other deadlock-prone behaviors.",
		},
		"another rank's dump signal (the rank that hung outside the collective hears it too)": {
			Source: pgNCCL + " (HeartbeatMonitor::getNCCLWatchdogTimeoutErrorMsg)",
			Message: "[rank3]:[E1127 02:41:22.000000000 ProcessGroupNCCL.cpp:1618] [PG ID 0 PG GUID 0(default_pg) Rank 3] Received a dump signal due to a collective timeout from  rank 0 " +
				"and we will try our best to dump the debug info. Last enqueued NCCL work: 5320, last completed NCCL work: 5320.This is most likely caused by incorrect usages of collectives, " +
				"e.g., wrong sizes used across ranks, the order of collectives is not same for all ranks or the scheduled collective, for some reason, didn't run.\n" +
				"[rank3]:[F1127 02:49:22.000000000 ProcessGroupNCCL.cpp:1830] [PG ID 0 PG GUID 0(default_pg) Rank 3] [PG ID 0 PG GUID 0(default_pg) Rank 3] Terminating the process after " +
				"attempting to dump debug info, due to collective timeout or exception.",
		},
		"another rank's error, propagated (the same ambiguity)": {
			Source:  pgNCCL + " (Watchdog::checkAndSetRemoteError)",
			Message: "[rank3]:[E1127 02:41:22.000000000 ProcessGroupNCCL.cpp:2031] [PG ID 0 PG GUID 0(default_pg) Rank 3]  remote error detected from rank: 2",
		},
		"a store key nobody set in time": {
			Source:  tcpStore + " (doWait)",
			Message: "torch.distributed.DistStoreError: wait timeout after 600000ms, keys: /default_pg//cuda//0",
		},
		"start-up: pod 0's store not reachable": {
			Source: tcpStore + " (the constructor's connect loop); pytorch/pytorch torch/csrc/distributed/c10d/socket.cpp",
			Message: "[W1127 02:20:19.000000000 TCPStore.cpp:347] [c10d] TCP client failed to connect/validate to host gpt-0.gpt.team-c.svc:29500 - retrying (try=3, timeout=900000ms, delay=1496ms): " +
				"The client socket has failed to connect to [gpt-0.gpt.team-c.svc]:29500 (errno: 111 - Connection refused).",
		},
		"the elastic agent's own worker group failed": {
			Source:  agentAPI,
			Message: "[default] Worker group FAILED. 3/3 attempts left; will restart worker group",
		},
		"the rendezvous closed under an agent restarting its own workers": {
			Source: dynamicRdzv + " (_DistributedRendezvousOpExecutor.run: ERROR_CLOSED)",
			Message: "Traceback (most recent call last):\n  File \"/usr/lib/python3.12/site-packages/torch/distributed/elastic/agent/server/api.py\", line 712, in _invoke_run\n" +
				"    self._restart_workers(self._worker_group)\ntorch.distributed.elastic.rendezvous.api.RendezvousClosedError",
		},
	}, peerHints())
}
