package jaxplugin

import (
	"testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/framework/gloohints"
	"github.com/faultline-dev/faultline/pkg/framework/gpuhints"
	"github.com/faultline-dev/faultline/pkg/framework/hinttest"
	"github.com/faultline-dev/faultline/pkg/framework/tslhints"
)

// The upstream files a surviving JAX process's words come from (repository and path).
const (
	pjrtService = "openxla/xla xla/pjrt/distributed/coordination/coordination_service.cc"
	tslService  = "openxla/xla xla/tsl/distributed_runtime/coordination/coordination_service.cc"
	pjrtAgent   = "openxla/xla xla/pjrt/distributed/coordination/coordination_service_agent.cc"
	rpcHandler  = "openxla/xla xla/pjrt/distributed/coordination/coordination_service_rpc_handler.cc (ValidateRequest)"
	grpcClient  = "openxla/xla xla/pjrt/distributed/coordination/grpc_coordination_client.cc (HeartbeatAsync: the deadline is half the heartbeat timeout)"
	errorUtil   = "openxla/xla xla/tsl/distributed_runtime/coordination/coordination_service_error_util.cc (TrimCoordinationErrorMessage)"
	clientH     = "openxla/xla xla/pjrt/distributed/client.h (missed_heartbeat_callback: the fatal termination)"
	grpcUtil    = "openxla/xla xla/tsl/distributed_runtime/rpc/grpc_util.h (FromGrpcStatus)"
	pjrtClient  = "openxla/xla xla/python/pjrt_ifrt/pjrt_client.cc (WatchGlobalProcessInfo)"
	glooPair    = "pytorch/gloo gloo/transport/tcp/pair.cc"
	glooUnbound = "pytorch/gloo gloo/transport/tcp/unbound_buffer.cc (UnboundBuffer::waitRecv)"
	faultGuide  = "jax-ml/jax docs/fault_tolerance.rst"
)

// What JAX 0.11.2 prints when the coordination agent hands it an error
// (hinttest/realoutput's fixtures): the fatal termination, the status after it, the abort.
const (
	polledLine = "E1127 02:31:10.731775    2348 coordination_service_agent.cc:288] Polled an error from coordination service (this can be an error from this or another task).\n"
	fatalLine  = "F1127 02:31:10.731976    2348 client.h:86] Terminating process because the JAX distributed service detected fatal errors. This most likely indicates that another task died; " +
		"see the other task logs for more details. Disable Python buffering, i.e. `python -u`, to be sure to see all the previous output. absl::Status: "
	abortTrace = "*** Check failure stack trace: ***\n" +
		"    @     0x7fab3102d7d4  absl::lts_20260526::log_internal::LogMessage::SendToLog()\n" +
		"    @     0x7fab3102d756  absl::lts_20260526::log_internal::LogMessage::Flush()\n" +
		"    @     0x7fab3108c1be  std::_Function_handler<>::_M_invoke()\n" +
		"    @     0x7fab2d3ab715  std::_Function_handler<>::_M_invoke()\n" +
		"    @     0x7fab2d3c52c4  xla::CoordinationServiceAgent::SetError()\n" +
		"    @     0x7fab2d3cdceb  std::_Function_handler<>::_M_invoke()\n" +
		"    @     0x7fab2d3ce10b  std::_Function_handler<>::_M_invoke()\n" +
		"    @     0x7fab2d3b0822  tsl::RPCState<>::OnCompleted()\n" +
		"    @     0x7fab2d3aec19  absl::lts_20260526::internal_any_invocable::LocalInvoker<>()\n" +
		"    @     0x7fab30e9d28f  tsl::(anonymous namespace)::PThread::ThreadFn()\n" +
		"    @     0x7fab63a9cb84  (unknown)\n" +
		"    @     0x7fab63b29ecc  (unknown)\n"
	trimmedTrace = "=== Source Location Trace: ===\nexternal/xla+/xla/pjrt/distributed/coordination/coordination_service_error_util.cc:64\n\n"
	leaderLost   = "UNAVAILABLE: Failed to send RPC to coordination service. Either the leader task was preempted/died/restarted unexpectedly or this task is experiencing network issues. " +
		"Check earlier logs from 1) this task, 2) the leader (usually slice 0 task 0), and 3) cluster scheduler to debug further.\n" +
		"Additional GRPC error information from remote target coordination_service while calling "
)

// TestHintsOnEveryPeerFailureMessage: every message upstream prints in a JAX process when
// another process or its host dies, built from the format strings of the files each case
// names, as the hints (in the host's order) must take it: PeerFailure, naming the task where
// the message names the one that failed (its process id: the pod's completion index).
// The words of a process about its own failure, and of a start-up, take no peer hint.
//
// A message that names the very process printing it (the worker the service lost reads
// the same words as the others) still names it here: the classifier then takes it as that
// worker's own failure (exitclass named.go, doc.go rule 9).
func TestHintsOnEveryPeerFailureMessage(t *testing.T) {
	hinttest.Run(t, Name, Hints(), map[string]hinttest.Case{
		// The coordination service lost a task (CheckHeartbeatTimeout).
		"a task's heartbeats stopped": {
			Source: pjrtService + " (CheckHeartbeatTimeout)",
			Message: "jaxlib._jax.XlaRuntimeError: UNAVAILABLE: Task 3 heartbeat timeout. This indicates that the remote task has failed, got preempted, or crashed unexpectedly. " +
				"Check the task logs for an earlier error or scheduler events (e.g. preemption, eviction) to debug further.",
			Want:  v1alpha1.CausePeerFailure,
			Named: "3",
		},
		"a task's heartbeats stopped (TSL's task name)": {
			Source: tslService + " (CheckHeartbeatTimeout)",
			Message: "UNAVAILABLE: Task /job:jax_worker/replica:0/task:1 heartbeat timeout. This indicates that the remote task has failed, got preempted, or crashed unexpectedly. " +
				"Check the task logs for an earlier error or scheduler events (e.g. preemption, eviction) to debug further.",
			Want:  v1alpha1.CausePeerFailure,
			Named: "jax_worker:1",
		},
		"issue 56: task 3's host is gone, and a survivor prints only the fatal termination": {
			Source: pjrtService + " (CheckHeartbeatTimeout, PropagateError); " + pjrtAgent + " (StartPollingForError); " + clientH,
			Message: polledLine + fatalLine + "UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n3\n" +
				"The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to debug further. " +
				"[type.googleapis.com/tensorflow.CoordinationServiceError='']\n=== Source Location Trace: === \n" +
				"external/xla+/xla/pjrt/distributed/coordination/coordination_service.cc:232\n\n" +
				"RPC: /xla.coordination.CoordinationService/PollForError [type.googleapis.com/tensorflow.CoordinationServiceError='']\n" + trimmedTrace + abortTrace,
			Want:  v1alpha1.CausePeerFailure,
			Named: "3",
		},
		"several tasks lost at once: none named": {
			Source: pjrtService + " (CheckHeartbeatTimeout: up to three ids)",
			Message: fatalLine + "UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n2\n3\n" +
				"The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to debug further.",
			Want: v1alpha1.CausePeerFailure,
		},

		// Process 0, which hosts the service, or its host went away: the survivors' own calls
		// fail (the agent ends the process on its first failed heartbeat).
		"issue 56: process 0's host is gone, and a survivor's heartbeat goes unanswered": {
			Source:  grpcClient + "; " + pjrtAgent + " (StartSendingHeartbeats); " + grpcUtil + "; " + errorUtil + "; " + clientH,
			Message: fatalLine + "DEADLINE_EXCEEDED: Deadline Exceeded\n\nRPC: /xla.coordination.CoordinationService/Heartbeat\n" + trimmedTrace + abortTrace,
			Want:    v1alpha1.CausePeerFailure,
		},
		"issue 56: process 0's host is gone, and gRPC finds no route to it": {
			Source: pjrtAgent + " (StartSendingHeartbeats); " + errorUtil + "; " + clientH,
			Message: fatalLine + leaderLost + "/xla.coordination.CoordinationService/Heartbeat:\n" +
				":UNKNOWN:failed to connect to all addresses; last error: UNKNOWN: ipv4:10.244.1.7:1234: Failed to connect to remote host: No route to host " +
				"{grpc_status:14, created_time:\"2026-11-27T02:31:10.113220187+00:00\"}\n" + abortTrace,
			Want: v1alpha1.CausePeerFailure,
		},
		"issue 56: process 0's host is gone, and the error poll's connection stops answering pings": {
			Source: pjrtAgent + " (StartPollingForError); " + errorUtil + "; grpc/grpc src/core/ext/transport/chttp2/transport/chttp2_transport.cc (keepalive watchdog)",
			Message: polledLine + fatalLine + leaderLost + "/xla.coordination.CoordinationService/PollForError:\n" +
				":UNKNOWN:Error received from peer  {grpc_message:\"keepalive watchdog timeout\", grpc_status:14}\n" + abortTrace,
			Want: v1alpha1.CausePeerFailure,
		},
		"process 0 died under a call (JAX's fault tolerance guide)": {
			Source: faultGuide + "; " + errorUtil,
			Message: polledLine + fatalLine + leaderLost + "/tensorflow.CoordinationService/PollForError:\n" +
				":UNKNOWN:Error received from peer  {grpc_message:\"Socket closed\", grpc_status:14}",
			Want: v1alpha1.CausePeerFailure,
		},
		"process 0 was killed with the call open: the connection reset": {
			Source: errorUtil + "; " + grpcUtil,
			Message: fatalLine + leaderLost + "/xla.coordination.CoordinationService/PollForError:\n" +
				":UNKNOWN:Error received from peer ipv4:10.244.0.5:1234 {grpc_message:\"Connection reset by peer\", grpc_status:14}",
			Want: v1alpha1.CausePeerFailure,
		},
		"process 0 is gone, the address refuses": {
			Source: errorUtil + "; " + pjrtAgent + " (WaitAtBarrierAsync)",
			Message: "jaxlib._jax.XlaRuntimeError: " + leaderLost + "/xla.coordination.CoordinationService/Barrier:\n" +
				":UNKNOWN:failed to connect to all addresses; last error: UNKNOWN: ipv4:10.244.0.5:1234: Failed to connect to remote host: Connection refused {grpc_status:14}",
			Want: v1alpha1.CausePeerFailure,
		},
		"process 0's service stopped under a heartbeat": {
			Source: pjrtService + " (RecordHeartbeat)",
			Message: fatalLine + "INTERNAL: Coordination service has stopped. RecordHeartbeat() from task: 1 failed. This usually implies an earlier error that caused coordination " +
				"service to shut down before the workers disconnect gracefully. Check the task leader's logs for an earlier error or scheduler events (e.g. preemption, eviction) " +
				"to debug the root cause.\n\nRPC: /xla.coordination.CoordinationService/Heartbeat",
			Want: v1alpha1.CausePeerFailure,
		},
		"process 0's service stopped under the error poll": {
			Source:  pjrtService + " (PollForErrorAsync)",
			Message: polledLine + fatalLine + "INTERNAL: PollForError requested after coordination service has shut down.\n\nRPC: /xla.coordination.CoordinationService/PollForError",
			Want:    v1alpha1.CausePeerFailure,
		},
		"process 0's service stopped under a barrier": {
			Source:  pjrtService + " (Stop)",
			Message: "jaxlib._jax.XlaRuntimeError: ABORTED: Barrier failed because service is shutting down. Barrier_id: sync_global_devices_7::0",
			Want:    v1alpha1.CausePeerFailure,
		},
		"a barrier asked of a stopped service": {
			Source:  pjrtService + " (BarrierAsyncLocked)",
			Message: "jaxlib._jax.XlaRuntimeError: INTERNAL: Barrier sync_global_devices_8::0 requested after coordination service has shut down.",
			Want:    v1alpha1.CausePeerFailure,
		},
		"process 0 restarted: a request to the new service": {
			Source:  rpcHandler + "; " + pjrtAgent + " (GetServiceMismatchError)",
			Message: fatalLine + "INTERNAL: wrong service incarnation: requested 1529413470372386390, currently 8357309125311455270\n\nRPC: /xla.coordination.CoordinationService/Heartbeat",
			Want:    v1alpha1.CausePeerFailure,
		},
		"process 0 restarted: its heartbeat answer": {
			Source: pjrtAgent + " (StartSendingHeartbeats; two spaces sic)",
			Message: fatalLine + "ABORTED: Leader incarnation ID mismatch: the coordination  leader (usually slice 0 task 0) has restarted. Check for earlier errors or any " +
				"scheduler events (e.g. preemption, eviction) to debug further.",
			Want: v1alpha1.CausePeerFailure,
		},

		// Barriers: the odd task out.
		"the shutdown barrier failed because task 2's heartbeats stopped (fixture jax-0.11.2-cpu-worker2-exits)": {
			Source: pjrtService + " (SetTaskError, LeaveOngoingBarriers, MakeShutdownBarrierError)",
			Message: fatalLine + "INTERNAL: Shutdown barrier has failed.\nBarrier result: 'INTERNAL: Barrier failed because: task is set to ERROR: UNAVAILABLE: Task 2 heartbeat timeout. " +
				"This indicates that the remote task has failed, got preempted, or crashed unexpectedly. Check the task logs for an earlier error or scheduler events " +
				"(e.g. preemption, eviction) to debug further. [type.googleapis.com/tensorflow.CoordinationServiceError='']. Barrier Id: Shutdown::6071502456883559662::0, Task: 2",
			Want:  v1alpha1.CausePeerFailure,
			Named: "2",
		},
		"task 2 alone at the shutdown barrier (fixture jax-0.11.2-cpu-worker2-raises)": {
			Source: pjrtService + " (CheckBarrierTimeout, MakeShutdownBarrierError)",
			Message: fatalLine + "INTERNAL: Shutdown barrier has failed.\nBarrier result: 'DEADLINE_EXCEEDED: Barrier timed out. Id: Shutdown::11599707994269862077::0. " +
				"This usually happens because a task triggered the barrier too early or too slowly. Please look at the task logs (both timed out and first task) to debug further.\n" +
				"# of tasks that reached the barrier: 1/4.\nThe first task at the barrier: 2. Some timed out task names:\n1\n0\n",
			Want:  v1alpha1.CausePeerFailure,
			Named: "2",
		},
		"every task but task 1 reached a barrier": {
			Source: pjrtService + " (CheckBarrierTimeout)",
			Message: "jaxlib._jax.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Id: sync_global_devices_7::0. This usually happens because a task triggered the barrier " +
				"too early or too slowly. Please look at the task logs (both timed out and first task) to debug further.\n# of tasks that reached the barrier: 3/4.\n" +
				"The first task at the barrier: 0. Some timed out task names:\n1\n",
			Want:  v1alpha1.CausePeerFailure,
			Named: "1",
		},
		"task 3 left a barrier by disconnecting": {
			Source:  pjrtService + " (DisconnectTask, LeaveOngoingBarriers)",
			Message: "jaxlib._jax.XlaRuntimeError: INTERNAL: Barrier failed because: task disconnected. Barrier Id: sync_global_devices_7::0, Task: 3",
			Want:    v1alpha1.CausePeerFailure,
			Named:   "3",
		},
		"the worker the service lost reads its own name (named.go: its own failure)": {
			Source: pjrtService + " (CheckBarrierTimeout); fixture jax-0.11.2-cpu-worker2-raises, worker 2's own output",
			Message: "Traceback (most recent call last):\n  File \"/app/train.py\", line 114, in <module>\n    step(state, batch)\n" +
				"ValueError: loss is NaN at step 812\n" + fatalLine + "INTERNAL: Shutdown barrier has failed.\nBarrier result: 'DEADLINE_EXCEEDED: Barrier timed out. Id: Shutdown::11599707994269862077::0. " +
				"This usually happens because a task triggered the barrier too early or too slowly. Please look at the task logs (both timed out and first task) to debug further.\n" +
				"# of tasks that reached the barrier: 1/4.\nThe first task at the barrier: 2. Some timed out task names:\n1\n0\n",
			Want:  v1alpha1.CausePeerFailure,
			Named: "2",
		},

		// A task restarted: its earlier process died.
		"task 2 came back with a new incarnation": {
			Source:  pjrtService + " (RegisterTaskAsync)",
			Message: "jaxlib._jax.XlaRuntimeError: ABORTED: 2 unexpectedly tried to connect with a different incarnation. It has likely restarted.",
			Want:    v1alpha1.CausePeerFailure,
		},
		"task 2's heartbeat from a new incarnation": {
			Source: pjrtService + " (TaskState::RecordHeartbeat)",
			Message: "ABORTED: 2 Heartbeat: Incarnation ID mismatch: expecting 8357309125311455270 but got 1529413470372386390. The task has restarted and likely " +
				"crashed earlier - check for any earlier errors or any scheduler events (e.g. preemption, eviction) to debug further.",
			Want: v1alpha1.CausePeerFailure,
		},

		// Collectives.
		"gloo: the peer's process exited (fixture jax-0.11.2-cpu-worker2-exits)": {
			Source:  glooPair + " (Pair::read: end of file)",
			Message: "ValueError: UNKNOWN: Gloo AllGather failed: [external/xla++third_party_ext+gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer [127.0.0.1]:6051",
			Want:    v1alpha1.CausePeerFailure,
		},
		"gloo: the peer's process was killed, the connection reset": {
			Source: glooPair + " (Pair::read: recv's errno)",
			Message: "ValueError: UNKNOWN: Gloo AllGather failed: [external/xla++third_party_ext+gloo/gloo/transport/tcp/pair.cc:539] Read error [10.244.1.7]:6051: Connection reset by peer. " +
				"This is typically caused by a remote worker hanging or bugs in the application. Check the logs of the remote worker before reporting an error. GLHF! 🏖️",
			Want: v1alpha1.CausePeerFailure,
		},
		"gloo: the peer's host is gone, the collective times out": {
			Source:  glooUnbound,
			Message: "ValueError: UNKNOWN: Gloo AllGather failed: [external/xla++third_party_ext+gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete",
			Want:    v1alpha1.CausePeerFailure,
		},
		"NCCL: the peer closed its connection": {
			Source: "NVIDIA/nccl src/misc/socket.cc (socketProgress); openxla/xla xla/backends/gpu/collectives (the NCCL status)",
			Message: "jaxlib._jax.XlaRuntimeError: INTERNAL: NCCL operation ncclGroupEnd() failed: remote process exited or there was a network error. " +
				"Last NCCL warning(error) log entry (may be unrelated) 'socketProgress: Connection closed by remote peer 10.244.1.7<53422>'.",
			Want: v1alpha1.CausePeerFailure,
		},
		"a collective cancelled because a participant is gone (collective cancelling on)": {
			Source:  faultGuide + " (Cancelling Collectives)",
			Message: "jaxlib._jax.XlaRuntimeError: FAILED_PRECONDITION: Task with incarnation id 3446767950926952685 is not connected",
			Want:    v1alpha1.CausePeerFailure,
		},

		// This process's own words, and a start-up's: no peer hint.
		"this process's own error, wrapped by the fatal termination": {
			Source: pjrtAgent + " (StartPollingForError: \"this can be an error from this or another task\"); " + pjrtService + " (CheckBarrierTimeout)",
			Message: polledLine + fatalLine + "DEADLINE_EXCEEDED: Barrier timed out. Id: checkpoint::0. This usually happens because a task triggered the barrier too early or too slowly. " +
				"Please look at the task logs (both timed out and first task) to debug further.\n# of tasks that reached the barrier: 2/4.\n" +
				"The first task at the barrier: 0. Some timed out task names:\n2\n3\n",
		},
		"after the service set every task to error, a barrier names an arbitrary one": {
			Source: pjrtService + " (CompleteShutdownAfterBarrier, SetAllTasksError, LeaveOngoingBarriers)",
			Message: "jaxlib._jax.XlaRuntimeError: INTERNAL: Barrier failed because: task is set to ERROR: INTERNAL: Shutdown barrier has failed.\nBarrier result: " +
				"'DEADLINE_EXCEEDED: Barrier timed out. Id: Shutdown::7::0. This usually happens because a task triggered the barrier too early or too slowly. " +
				"Please look at the task logs (both timed out and first task) to debug further.\n# of tasks that reached the barrier: 2/4.\n" +
				"The first task at the barrier: 0. Some timed out task names:\n2\n3\n'. Barrier Id: checkpoint::0, Task: 0",
		},
		"start-up: process 0 never answered the registration": {
			Source:  pjrtAgent + " (Connect); " + errorUtil + "; " + clientH,
			Message: fatalLine + "DEADLINE_EXCEEDED: Deadline Exceeded\n\nRPC: /xla.coordination.CoordinationService/RegisterTask\n" + trimmedTrace + abortTrace,
		},
		"start-up: a wrong coordinator port": {
			Source: errorUtil + ", around gRPC's connection failure on RegisterTask",
			Message: "jaxlib._jax.XlaRuntimeError: " + leaderLost + "/xla.coordination.CoordinationService/RegisterTask:\n" +
				":UNKNOWN:failed to connect to all addresses; last error: UNKNOWN: ipv4:10.96.4.17:1235: Failed to connect to remote host: Connection refused {grpc_status:14}",
		},
		"the job watch names the task printing it (a clean shutdown prints it too)": {
			Source: pjrtClient,
			Message: "W1127 02:31:10.920461    2348 pjrt_client.cc:1604] WatchJobStateAsync failed for task 1: UNAVAILABLE: Cancelling all calls\n" +
				"Additional GRPC error information from remote target coordination_service while calling /xla.coordination.CoordinationService/WatchJobState:\n" +
				":UNKNOWN:Error received from peer  {grpc_message:\"Cancelling all calls\", grpc_status:14}",
		},
	}, ownHints())
}

// ownHints are the hints of Hints that the plugin adds to the shared packages' (whose own
// tests cover them): each needs a case above.
func ownHints() []framework.HintPattern {
	shared := map[string]bool{}
	for _, set := range [][]framework.HintPattern{gpuhints.CUDA(), tslhints.Coordination(), tslhints.GRPCPeerClosed(), gloohints.PeerLoss(), gpuhints.NCCLPeerLoss()} {
		for _, h := range set {
			shared[h.Pattern] = true
		}
	}
	var own []framework.HintPattern
	for _, h := range Hints() {
		if !shared[h.Pattern] {
			own = append(own, h)
		}
	}
	return own
}
