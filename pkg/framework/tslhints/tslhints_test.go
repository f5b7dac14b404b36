package tslhints

import (
	"testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework/hinttest"
)

const (
	service = "xla/tsl/distributed_runtime/coordination/coordination_service.cc"
	agent   = "xla/tsl/distributed_runtime/coordination/coordination_service_agent.cc"
	errutil = "xla/tsl/distributed_runtime/coordination/coordination_service_error_util.cc (TrimCoordinationErrorMessage)"
	jaxDoc  = "jax docs/fault_tolerance.rst (the example output of a killed process)"

	pjrtService = "xla/pjrt/distributed/coordination/coordination_service.cc"
)

func TestHints(t *testing.T) {
	hints := append(Coordination(), GRPCPeerClosed()...)
	hinttest.Run(t, "tsl", hints, map[string]hinttest.Case{
		"heartbeat timeout": {
			Source: service + " (CheckHeartbeatTimeout)",
			Message: "jaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: Task /job:jax_worker/replica:0/task:1 heartbeat timeout. " +
				"This indicates that the remote task has failed, got preempted, or crashed unexpectedly. Check the task logs for an " +
				"earlier error or scheduler events (e.g. preemption, eviction) to debug further.",
			Want:  v1alpha1.CausePeerFailure,
			Named: "jax_worker:1",
		},
		"unhealthy tasks, propagated to the survivors": {
			Source: jaxDoc + "; " + service + " (CheckHeartbeatTimeout)",
			Message: "E0926 17:26:32.075402  157988 coordination_service_agent.cc:332] Polled an error from coordination service (this can be an error from this or another task).\n" +
				"F0926 17:26:32.075587  157988 client.h:77] Terminating process because the JAX distributed service detected fatal errors. " +
				"This most likely indicates that another task died; see the other task logs for more details. Disable Python buffering, " +
				"i.e. `python -u`, to be sure to see all the previous output. absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n" +
				"/job:jax_worker/replica:0/task:3\n" +
				"The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to debug further.\n\n" +
				"RPC: /tensorflow.CoordinationService/PollForError",
			Want:  v1alpha1.CausePeerFailure,
			Named: "jax_worker:3",
		},
		"the leader's service stopped": {
			Source: service + " (RegisterTaskAsync)",
			Message: "INTERNAL: Coordination service has stopped. RegisterTask() from task: /job:worker/replica:0/task:1 failed. This usually " +
				"implies an earlier error that caused coordination service to shut down before the workers disconnect gracefully. Check the " +
				"task leader's logs for an earlier error or scheduler events (e.g. preemption, eviction) to debug the root cause.",
			Want: v1alpha1.CausePeerFailure,
		},
		"a task came back with a new incarnation": {
			Source:  service + " (RegisterTaskAsync), which replaced TensorFlow's \"Duplicate task registration\"",
			Message: "tensorflow.python.framework.errors_impl.AbortedError: /job:worker/replica:0/task:1 unexpectedly tried to connect with a different incarnation. It has likely restarted.",
			Want:    v1alpha1.CausePeerFailure,
		},
		"a task's heartbeat from a new incarnation": {
			Source: service + " (TaskState::RecordHeartbeat)",
			Message: "ABORTED: /job:jax_worker/replica:0/task:2 Heartbeat: Incarnation ID mismatch: expecting 8357309125311455270 but got " +
				"1529413470372386390. The task has restarted and likely crashed earlier - check for any earlier errors or any scheduler " +
				"events (e.g. preemption, eviction) to debug further.",
			Want: v1alpha1.CausePeerFailure,
		},
		"the leader restarted": {
			Source: agent + " (StartSendingHeartbeats)",
			Message: "ABORTED: Leader incarnation ID mismatch: the coordination  leader (usually slice 0 task 0) has restarted. Check for " +
				"earlier errors or any scheduler events (e.g. preemption, eviction) to debug further.",
			Want: v1alpha1.CausePeerFailure,
		},
		"process 0 died under a call (current gRPC)": {
			Source: jaxDoc + "; " + errutil,
			Message: "F0929 17:42:48.594200 1044529 client.h:77] Terminating process because the JAX distributed service detected fatal errors. " +
				"This most likely indicates that another task died; see the other task logs for more details. Disable Python buffering, " +
				"i.e. `python -u`, to be sure to see all the previous output. absl::Status: UNAVAILABLE: Failed to send RPC to coordination service. " +
				"Either the leader task was preempted/died/restarted unexpectedly or this task is experiencing network issues. Check earlier logs " +
				"from 1) this task, 2) the leader (usually slice 0 task 0), and 3) cluster scheduler to debug further.\n" +
				"Additional GRPC error information from remote target coordination_service while calling /tensorflow.CoordinationService/PollForError:\n" +
				":UNKNOWN:Error received from peer  {grpc_message:\"Socket closed\", grpc_status:14}",
			Want: v1alpha1.CausePeerFailure,
		},
		"a TensorFlow peer's server went away (older gRPC's JSON detail)": {
			Source: "tensorflow/core/distributed_runtime/rpc/grpc_util.h (FromGrpcStatus appends gRPC's debug error string)",
			Message: "tensorflow.python.framework.errors_impl.UnavailableError: Socket closed\n" +
				"Additional GRPC error information from remote target /job:worker/replica:0/task:2:\n" +
				":{\"created\":\"@1700000000.123456789\",\"description\":\"Error received from peer ipv4:10.4.2.7:2222\"," +
				"\"file\":\"external/com_github_grpc_grpc/src/core/lib/surface/call.cc\",\"file_line\":1056,\"grpc_message\":\"Socket closed\",\"grpc_status\":14}",
			Want:  v1alpha1.CausePeerFailure,
			Named: "worker:2",
		},

		// JAX 0.11 (XLA's pjrt copy of the service, xla/pjrt/distributed/coordination), which
		// names a task by its id, as the fixtures recorded it (hinttest testdata/frameworks).
		"JAX 0.11: a task's heartbeats stopped, in the shutdown barrier's result": {
			Source: pjrtService + " (CheckHeartbeatTimeout, SetTaskError, MakeShutdownBarrierError); fixture jax-0.11.2-cpu-worker2-exits",
			Message: "F1127 02:27:02.731976    2348 client.h:86] Terminating process because the JAX distributed service detected fatal errors. This most likely " +
				"indicates that another task died; see the other task logs for more details. Disable Python buffering, i.e. `python -u`, to be sure to see all " +
				"the previous output. absl::Status: INTERNAL: Shutdown barrier has failed.\n" +
				"Barrier result: 'INTERNAL: Barrier failed because: task is set to ERROR: UNAVAILABLE: Task 2 heartbeat timeout. This indicates that the remote " +
				"task has failed, got preempted, or crashed unexpectedly. Check the task logs for an earlier error or scheduler events (e.g. preemption, eviction) " +
				"to debug further. [type.googleapis.com/tensorflow.CoordinationServiceError='']. Barrier Id: Shutdown::6071502456883559662::0, Task: 2",
			Want:  v1alpha1.CausePeerFailure,
			Named: "2",
		},
		"JAX 0.11: the unhealthy task, as the service propagates it": {
			Source: pjrtService + " (CheckHeartbeatTimeout); fixture jax-0.11.2-cpu-worker2-exits",
			Message: "E1127 02:27:02.731576    2306 coordination_service.cc:1518] [6071502456883559662] Use error polling to propagate the following error to all " +
				"tasks: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n2\nThe tasks have crashed. Check the task logs for an " +
				"earlier error, or scheduler events (e.g. preemption, eviction) to debug further. [type.googleapis.com/tensorflow.CoordinationServiceError='']",
			Want:  v1alpha1.CausePeerFailure,
			Named: "2",
		},
		"several unhealthy tasks: none named": {
			Source: service + " (CheckHeartbeatTimeout: up to three names)",
			Message: "UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n/job:worker/replica:0/task:2\n/job:worker/replica:0/task:3\n" +
				"The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to debug further.",
			Want: v1alpha1.CausePeerFailure,
		},
		"JAX 0.11: one task alone reached the shutdown barrier": {
			Source: pjrtService + " (CheckBarrierTimeout, MakeShutdownBarrierError); fixture jax-0.11.2-cpu-worker2-raises",
			Message: "F1127 02:26:50.167439    1750 client.h:86] Terminating process because the JAX distributed service detected fatal errors. This most likely " +
				"indicates that another task died; see the other task logs for more details. Disable Python buffering, i.e. `python -u`, to be sure to see all " +
				"the previous output. absl::Status: INTERNAL: Shutdown barrier has failed.\n" +
				"Barrier result: 'DEADLINE_EXCEEDED: Barrier timed out. Id: Shutdown::11599707994269862077::0. This usually happens because a task triggered the " +
				"barrier too early or too slowly. Please look at the task logs (both timed out and first task) to debug further.\n" +
				"# of tasks that reached the barrier: 1/4.\nThe first task at the barrier: 2. Some timed out task names:\n1\n0\n" +
				" [type.googleapis.com/tensorflow.BarrierError='\\n\\x1eShutdown::11599707994269862077'] [type.googleapis.com/tensorflow.CoordinationServiceError='']",
			Want:  v1alpha1.CausePeerFailure,
			Named: "2",
		},
		"TensorFlow: every task but one reached a barrier": {
			Source: service + " (CheckBarrierTimeout: the first two pending tasks are listed)",
			Message: "DEADLINE_EXCEEDED: Barrier timed out. Id: [Init]Wait_for_all_tasks_to_register::0. This usually happens because a task triggered the barrier " +
				"too early or too slowly. Please look at the task logs (both timed out and first task) to debug further.\n" +
				"# of tasks that reached the barrier: 3/4.\nThe first task at the barrier: /job:worker/replica:0/task:0. Some timed out task names:\n" +
				"/job:worker/replica:0/task:3\n",
			Want:  v1alpha1.CausePeerFailure,
			Named: "worker:3",
		},
		"gRPC reset the stream to the leader": {
			Source: errutil + "; grpc src/core/ext/transport/chttp2/transport/chttp2_transport.cc (\"Stream removed\")",
			Message: "UNAVAILABLE: Failed to send RPC to coordination service. Either the leader task was preempted/died/restarted unexpectedly or this task is " +
				"experiencing network issues. Check earlier logs from 1) this task, 2) the leader (usually slice 0 task 0), and 3) cluster scheduler to debug further.\n" +
				"Additional GRPC error information from remote target coordination_service while calling /tensorflow.CoordinationService/PollForError:\n" +
				":UNKNOWN:Error received from peer ipv4:10.4.0.12:1234 {grpc_message:\"Stream removed\", grpc_status:14}",
			Want: v1alpha1.CausePeerFailure,
		},

		"a task left a barrier by disconnecting": {
			Source:  pjrtService + " (DisconnectTask, LeaveOngoingBarriers)",
			Message: "INTERNAL: Barrier failed because: task disconnected. Barrier Id: sync_global_devices_7::0, Task: 3",
			Want:    v1alpha1.CausePeerFailure,
			Named:   "3",
		},
		"TensorFlow: a task left a barrier by disconnecting": {
			Source:  service + " (DisconnectTask, LeaveOngoingBarriers)",
			Message: "InternalError: Barrier failed because: task disconnected. Barrier Id: checkpoint::0, Task: /job:worker/replica:0/task:1",
			Want:    v1alpha1.CausePeerFailure,
			Named:   "worker:1",
		},
		"the leader's service stopped under the error poll": {
			Source:  pjrtService + " (PollForErrorAsync)",
			Message: "INTERNAL: PollForError requested after coordination service has shut down.\n\nRPC: /xla.coordination.CoordinationService/PollForError",
			Want:    v1alpha1.CausePeerFailure,
		},
		"the leader's service stopped under a barrier": {
			Source:  pjrtService + " (Stop)",
			Message: "ABORTED: Barrier failed because service is shutting down. Barrier_id: checkpoint::0",
			Want:    v1alpha1.CausePeerFailure,
		},
		"JAX 0.11: the leader restarted, a request reached its new service": {
			Source:  "xla/pjrt/distributed/coordination/coordination_service_rpc_handler.cc (ValidateRequest)",
			Message: "INTERNAL: wrong service incarnation: requested 1529413470372386390, currently 8357309125311455270\n\nRPC: /xla.coordination.CoordinationService/Heartbeat",
			Want:    v1alpha1.CausePeerFailure,
		},
		"JAX 0.11: the leader's host is gone, a heartbeat goes unanswered": {
			Source:  "xla/pjrt/distributed/coordination/grpc_coordination_client.cc (HeartbeatAsync's deadline); " + agent + " (StartSendingHeartbeats); " + errutil,
			Message: "DEADLINE_EXCEEDED: Deadline Exceeded\n\nRPC: /xla.coordination.CoordinationService/Heartbeat",
			Want:    v1alpha1.CausePeerFailure,
		},
		"JAX 0.11: the leader's host is gone, this task's shutdown goes unanswered": {
			Source: agent + " (Shutdown: \"Failed to disconnect from coordination service with status: \", no separator sic); " + errutil,
			Message: "DEADLINE_EXCEEDED: Failed to disconnect from coordination service with status: DEADLINE_EXCEEDED: Deadline Exceeded\n\n" +
				"RPC: /xla.coordination.CoordinationService/ShutdownTaskProceeding with agent shutdown anyway. This is usually caused by an earlier error during execution.",
			Want: v1alpha1.CausePeerFailure,
		},
		"the leader's host is gone, gRPC finds no route to it": {
			Source: errutil + ", around gRPC's connection failure on a heartbeat",
			Message: "UNAVAILABLE: Failed to send RPC to coordination service. Either the leader task was preempted/died/restarted unexpectedly or this task is " +
				"experiencing network issues. Check earlier logs from 1) this task, 2) the leader (usually slice 0 task 0), and 3) cluster scheduler to debug further.\n" +
				"Additional GRPC error information from remote target coordination_service while calling /xla.coordination.CoordinationService/Heartbeat:\n" +
				":UNKNOWN:failed to connect to all addresses; last error: UNKNOWN: ipv4:10.244.1.7:1234: Failed to connect to remote host: No route to host {grpc_status:14}",
			Want: v1alpha1.CausePeerFailure,
		},
		"the leader died during registration: the start-up's call, the peer's words": {
			Source: errutil + "; grpc (\"Socket closed\")",
			Message: "UNAVAILABLE: Failed to send RPC to coordination service. Either the leader task was preempted/died/restarted unexpectedly or this task is " +
				"experiencing network issues. Check earlier logs from 1) this task, 2) the leader (usually slice 0 task 0), and 3) cluster scheduler to debug further.\n" +
				"Additional GRPC error information from remote target coordination_service while calling /xla.coordination.CoordinationService/RegisterTask:\n" +
				":UNKNOWN:Error received from peer  {grpc_message:\"Socket closed\", grpc_status:14}",
			Want: v1alpha1.CausePeerFailure,
		},
		"a TensorFlow peer's process was killed (older gRPC's JSON detail)": {
			Source: "tensorflow/core/distributed_runtime/rpc/grpc_util.h (FromGrpcStatus)",
			Message: "tensorflow.python.framework.errors_impl.UnavailableError: Connection reset by peer\n" +
				"Additional GRPC error information from remote target /job:worker/replica:0/task:2:\n" +
				":{\"created\":\"@1700000000.123456789\",\"description\":\"Error received from peer ipv4:10.4.2.7:2222\",\"file\":\"external/com_github_grpc_grpc/src/core/lib/surface/call.cc\"," +
				"\"file_line\":1056,\"grpc_message\":\"Connection reset by peer\",\"grpc_status\":14}",
			Want:  v1alpha1.CausePeerFailure,
			Named: "worker:2",
		},

		// A local error or a start-up problem: never a peer failure.
		"this task's own error, wrapped by the fatal-errors line": {
			Source: agent + " (StartPollingForError: \"this can be an error from this or another task\"); " + service + " (CheckBarrierTimeout)",
			Message: "E1121 10:00:00.000000 1 coordination_service_agent.cc:332] Polled an error from coordination service (this can be an error from this or another task).\n" +
				"F1121 10:00:00.000100 1 client.h:77] Terminating process because the JAX distributed service detected fatal errors. This most likely " +
				"indicates that another task died; see the other task logs for more details. absl::Status: DEADLINE_EXCEEDED: Barrier timed out. " +
				"Id: checkpoint_save::0. This usually happens because a task triggered the barrier too early or too slowly. Please look at the task " +
				"logs (both timed out and first task) to debug further.\n# of tasks that reached the barrier: 3/4.",
		},
		"start-up: the coordinator's address or port is wrong": {
			Source: errutil + ", around gRPC's connection failure",
			Message: "jaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: Failed to send RPC to coordination service. Either the leader task was " +
				"preempted/died/restarted unexpectedly or this task is experiencing network issues. Check earlier logs from 1) this task, 2) the " +
				"leader (usually slice 0 task 0), and 3) cluster scheduler to debug further.\n" +
				"Additional GRPC error information from remote target coordination_service while calling /tensorflow.CoordinationService/RegisterTask:\n" +
				":UNKNOWN:failed to connect to all addresses; last error: UNKNOWN: ipv4:10.96.4.17:1235: Failed to connect to remote host: Connection refused {grpc_status:14}",
		},
		"a collective aborted by this worker's own shape error": {
			Source:  "tensorflow/core/common_runtime/base_collective_executor.cc (StartAbort: \"Collective ops is aborted by: \")",
			Message: "tensorflow.python.framework.errors_impl.InvalidArgumentError: Collective ops is aborted by: Shape mismatch in the collective instance 100. Op at device /job:worker/replica:0/task:1/device:CPU:0 expected shape [10] but another member in the group expected the same key 100 with shape [20]",
		},
		"several tasks did not reach the shutdown barrier": {
			Source: service + " (CheckBarrierTimeout)",
			Message: "INTERNAL: Shutdown barrier has failed.\nBarrier result: 'DEADLINE_EXCEEDED: Barrier timed out. Id: Shutdown::7::0. This usually " +
				"happens because a task triggered the barrier too early or too slowly. Please look at the task logs (both timed out and first task) to debug further.\n" +
				"# of tasks that reached the barrier: 2/4.\nThe first task at the barrier: 0. Some timed out task names:\n2\n3\n",
		},
		"start-up: the leader never answered the registration": {
			Source:  agent + " (Connect); " + errutil,
			Message: "DEADLINE_EXCEEDED: Deadline Exceeded\n\nRPC: /xla.coordination.CoordinationService/RegisterTask",
		},
		"after every task was set to error, a barrier names an arbitrary one": {
			Source: service + " (CompleteShutdownAfterBarrier, SetAllTasksError, LeaveOngoingBarriers)",
			Message: "INTERNAL: Barrier failed because: task is set to ERROR: INTERNAL: Shutdown barrier has failed.\nBarrier result: 'DEADLINE_EXCEEDED: Barrier timed out. " +
				"Id: Shutdown::7::0. This usually happens because a task triggered the barrier too early or too slowly.\n# of tasks that reached the barrier: 2/4.\n" +
				"The first task at the barrier: 0. Some timed out task names:\n2\n3\n'. Barrier Id: checkpoint::0, Task: 0",
		},
		"the shutdown barrier timed out": {
			Source: service + " (ShutdownTaskAsync: MakeShutdownBarrierError)",
			Message: "INTERNAL: Shutdown barrier has failed.\nBarrier result: 'DEADLINE_EXCEEDED: Barrier timed out. Id: Shutdown::0. This usually " +
				"happens because a task triggered the barrier too early or too slowly.",
		},
	}, hints)
}
