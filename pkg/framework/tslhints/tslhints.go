// Package tslhints holds the failure hints of the coordination service that TensorFlow and
// JAX share (XLA's TSL: xla/tsl/distributed_runtime/coordination/, which JAX 0.11 runs from
// xla/pjrt/distributed/coordination/), and of the gRPC layer both speak to their peers over.
// Process 0 (JAX) or the chief (TensorFlow) runs the service; every task registers with it,
// sends it heartbeats and polls it for errors, and the service ends every task when one is
// lost: XLA aborts each process (SIGABRT, exit 134) in the same second, the lost one too when
// it is still there.
//
// Where the service names the task it lost, the hint names it too (the named groups peer
// and role, exitclass.HintGroupPeer): TensorFlow and older XLA write a task
// "/job:worker/replica:0/task:1", JAX 0.11 "1", its process id, which is the pod's
// completion index (the jax plugin sets JAX_PROCESS_ID to it); a TensorFlow job that the
// run lays out as a role numbers within the role. The verdict then takes the worker every
// failed pod names as the root, and a message that names the worker printing it is that
// worker's own failure.
//
// Only messages that name another task's loss are hints. Left out on purpose, because a
// task's own error or a start-up problem produces them too:
//   - "Terminating process because the JAX distributed service detected fatal errors" and
//     "Polled an error from coordination service (this can be an error from this or another
//     task)": wrappers around whatever status the service propagated, this task's own
//     reported error included; the status inside decides. So are "Shutdown barrier has
//     failed", "Failed to disconnect from coordination service with status" and "All tasks
//     were set to error because coordination service encountered an error".
//   - "Failed to send RPC to coordination service ..." on RegisterTask
//     (coordination_service_error_util.cc, TrimCoordinationErrorMessage): it ends a start-up
//     that never reached the leader ("failed to connect to all addresses") as well. On any
//     call made after registration it means the leader went away (Coordination).
//   - "Barrier timed out" and "Shutdown barrier has failed" that name no single task: this
//     task may be the slow one.
//   - "Task (N) is already in error before the barrier was called" and "Barrier failed
//     because: task is set to ERROR: ... Task: N": once the service has set every task to
//     error (a failed shutdown barrier, an error it could not propagate, a failed
//     registration), N is whichever task its map yields first, a healthy one as likely as
//     not. The status they carry decides instead ("Task N heartbeat timeout").
//   - "WatchJobStateAsync failed for task N" (xla/python/pjrt_ifrt/pjrt_client.cc): N is
//     the task printing it, and a clean shutdown prints it too.
package tslhints

import (
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
)

// taskName matches a task as the coordination service names it, capturing the hint's named
// groups: TensorFlow's and older XLA's "/job:jax_worker/replica:0/task:3" (GetTaskName),
// current XLA's bare task id "3".
const taskName = `(?:/job:(?P<role>[\w-]+)/replica:\d+/task:)?(?P<peer>\d+)`

// Coordination returns hints for the coordination service's messages about a lost or
// restarted task. The texts are those of coordination_service.cc,
// coordination_service_agent.cc and coordination_service_rpc_handler.cc (TSL's, and XLA's
// pjrt copy that JAX 0.11 runs):
//
//	Task 3 heartbeat timeout. This indicates that the remote task has failed, got
//	preempted, or crashed unexpectedly. ...                           (CheckHeartbeatTimeout)
//	The following tasks are unhealthy (stopped sending heartbeats):
//	3
//	The tasks have crashed. ...                                       (CheckHeartbeatTimeout)
//	Barrier timed out. Id: Shutdown::<id>::0. ...
//	# of tasks that reached the barrier: 1/4.
//	The first task at the barrier: 2. Some timed out task names:
//	1
//	0                                                                   (CheckBarrierTimeout)
//	Barrier failed because: task disconnected. Barrier Id: sync::0, Task: 3
//	                                                (DisconnectTask, LeaveOngoingBarriers)
//	Coordination service has stopped. RegisterTask() from task: ... failed. ...
//	                                        (RegisterTaskAsync, and every other RPC handler)
//	PollForError requested after coordination service has shut down.  (PollForErrorAsync)
//	Barrier <id> requested after coordination service has shut down.  (BarrierAsyncLocked)
//	Barrier failed because service is shutting down. Barrier_id: <id>            (Stop)
//	/job:worker/replica:0/task:1 unexpectedly tried to connect with a different incarnation.
//	It has likely restarted.                                           (RegisterTaskAsync)
//	... Heartbeat: Incarnation ID mismatch: expecting 1 but got 2. The task has restarted
//	and likely crashed earlier ...                        (TaskState::RecordHeartbeat)
//	Leader incarnation ID mismatch: the coordination  leader (usually slice 0 task 0) has
//	restarted. ...                              (the agent's heartbeat loop; two spaces sic)
//	wrong service incarnation: requested 5, currently 7       (ValidateRequest, XLA's pjrt)
//	Failed to send RPC to coordination service. Either the leader task ...
//	Additional GRPC error information from remote target coordination_service while
//	calling /xla.coordination.CoordinationService/Heartbeat: ...
//	                    (TrimCoordinationErrorMessage, around a call's gRPC UNAVAILABLE)
//	DEADLINE_EXCEEDED: Deadline Exceeded
//
//	RPC: /xla.coordination.CoordinationService/Heartbeat
//	        (the same, around a heartbeat or a shutdown whose deadline passed unanswered)
//
// The heartbeat messages name the task the service stopped hearing from (it died, froze or
// was cut off: no fault of this task's program either way); the unhealthy list names it
// when it is the only one. A barrier that timed out names the odd task out: the only one
// that reached the shutdown barrier left the program early (JAX's atexit shutdown after an
// exception: the fixtures' raising worker 2), and the only one that did not reach a barrier
// the others reached is the one that hung or never started; so does a barrier a task left
// by disconnecting. The incarnation messages replaced "Duplicate task registration" of
// older TensorFlow: a task's new process met the old one's registration, i.e. its
// predecessor died; the service's own incarnation changed when the leader restarted.
//
// The leader (process 0, the chief) hosts the service; when it or its host goes away, the
// other tasks hear no error from the service, only their own calls failing: a heartbeat
// unanswered within its deadline (half the heartbeat timeout, grpc_coordination_client.cc;
// the agent gives up on the first one, so this is what a survivor of a lost leader host
// prints), a shutdown unanswered past the shutdown barrier's timeout, or gRPC's
// UNAVAILABLE on any call made after the task registered (the connection reset or timed
// out, the leader's address refusing or unreachable when gRPC reconnects). Its words allow
// "this task is experiencing network issues" too: a local network fault, which is the
// infrastructure's and no fault of this program either. RegisterTask is left out: a
// start-up with a wrong address fails there.
func Coordination() []framework.HintPattern {
	const afterRegistration = `(?:Heartbeat|PollForError|ShutdownTask|\w*Barrier|\w*KeyValue\w*|Watch\w+|GetAliveTasks|GetTaskState|ReportErrorToService|ResetTask):`
	return []framework.HintPattern{
		{
			Pattern:     `Task ` + taskName + ` heartbeat timeout\. This indicates that the remote task has failed`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "the coordination service stopped hearing from a task: it died, froze or was cut off",
		},
		{
			Pattern:     `The following tasks are unhealthy \(stopped sending heartbeats\):\n(?:` + taskName + `\nThe tasks have crashed)?`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "the coordination service lost other tasks and ended this one",
		},
		{
			Pattern:     `Barrier timed out\. Id: Shutdown[^\n]*\n# of tasks that reached the barrier: 1/\d+\.\nThe first task at the barrier: ` + taskName + `\.`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "one task reached the shutdown barrier alone: it left the program early (an exception, its end) and the service ended the others",
		},
		{
			Pattern:     `Barrier timed out\. Id: [^\n]*\n# of tasks that reached the barrier: \d+/\d+\.\nThe first task at the barrier: [^\n]*Some timed out task names:\n` + taskName + `\n(?:[^/\d\n]|\n|$)`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "every task but one reached a barrier: the one that did not hung, died or never started",
		},
		{
			Pattern:     `Barrier failed because: task disconnected\. Barrier Id: [^\n]*?, Task: ` + taskName,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "a task disconnected from the service while the others waited for it at a barrier: it left the program early",
		},
		{
			Pattern:     `Coordination service has stopped\.|requested after coordination service has shut down|Barrier failed because service is shutting down`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "the task hosting the coordination service (process 0, the chief) ended first",
		},
		{
			Pattern:     `unexpectedly tried to connect with a different incarnation|[Ii]ncarnation ID mismatch|wrong service incarnation: requested \d+, currently \d+`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "a task or the coordination leader restarted: its earlier process died",
		},
		{
			Pattern:     `Failed to send RPC to coordination service\.[^\n]*\nAdditional GRPC error information from remote target [^\n]*? while calling /[\w.]*CoordinationService/` + afterRegistration,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "the coordination service (process 0, the chief) became unreachable after this task registered: the leader or its host went away",
		},
		{
			Pattern:     `Deadline Exceeded\s*\nRPC: /[\w.]*CoordinationService/(?:Heartbeat|ShutdownTask)`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "the coordination service (process 0, the chief) left a heartbeat or a shutdown unanswered: the leader or its host went away",
		},
	}
}

// GRPCPeerClosed returns the hints for gRPC's UNAVAILABLE details that a call carries when
// the connection to its peer went away under it: "Socket closed" (the peer closed it),
// "Stream removed" (its stream was reset), "Connection reset by peer" and "Broken pipe"
// (the peer's kernel reset it: the process died with the call open) and "keepalive
// watchdog timeout" (the peer's host stopped answering pings: it is gone or cut off). The
// peer's process (a TensorFlow server, JAX's coordination service) or host went away.
// TensorFlow and XLA print the detail as gRPC's debug string,
// {grpc_message:"Socket closed", grpc_status:14} in current gRPC and
// "grpc_message":"Socket closed" (JSON) in older releases; only that form is matched, so
// that a program's own "socket closed" elsewhere (a dataset download's reset connection)
// does not count. TensorFlow names the peer the call went to ("Additional GRPC error
// information from remote target /job:worker/replica:0/task:2", grpc_util.h): the first
// hint names it.
//
// gRPC's "failed to connect to all addresses" is deliberately not a hint: it is what a
// start-up with a wrong address or port says, as well as a peer not up yet.
func GRPCPeerClosed() []framework.HintPattern {
	const closed = `grpc_message"?:\s?"(?:Socket closed|Stream removed|Connection reset by peer|Broken pipe|keepalive watchdog timeout)"`
	return []framework.HintPattern{
		{
			Pattern:     `Additional GRPC error information from remote target /job:(?P<role>[\w-]+)/replica:\d+/task:(?P<peer>\d+)[^\n]*\n[^\n]*` + closed,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "gRPC: a task's server went away under a call (its process or host)",
		},
		{
			Pattern:     closed,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "gRPC: the peer went away under a call (its process or host)",
		},
	}
}
