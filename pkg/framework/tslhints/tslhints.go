// Package tslhints holds the failure hints of the coordination service that TensorFlow and
// JAX share (XLA's TSL: xla/tsl/distributed_runtime/coordination/), and of the gRPC layer
// both speak to their peers over. Process 0 (JAX) or the chief (TensorFlow) runs the
// service; every task registers with it, sends it heartbeats and polls it for errors, and
// the service ends every task when one is lost.
//
// Only messages that name another task's loss are hints. Left out on purpose, because a
// task's own error or a start-up problem produces them too:
//   - "Terminating process because the JAX distributed service detected fatal errors" and
//     "Polled an error from coordination service (this can be an error from this or another
//     task)": wrappers around whatever status the service propagated, this task's own
//     reported error included; the status inside decides.
//   - "Failed to send RPC to coordination service. Either the leader task was
//     preempted/died/restarted unexpectedly or this task is experiencing network issues"
//     (coordination_service_error_util.cc, TrimCoordinationErrorMessage): its own words
//     allow a local cause, and it also ends a start-up that never reached the leader
//     ("failed to connect to all addresses"). When the leader died, the gRPC detail after it
//     says "Socket closed", which GRPCPeerClosed matches.
//   - "Barrier timed out": this task may be the slow one.
package tslhints

import (
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
)

// Coordination returns hints for the coordination service's messages about a lost or
// restarted task. The texts are those of coordination_service.cc and
// coordination_service_agent.cc:
//
//	Task /job:jax_worker/replica:0/task:3 heartbeat timeout. This indicates that the remote
//	task has failed, got preempted, or crashed unexpectedly. ...       (CheckHeartbeatTimeout)
//	The following tasks are unhealthy (stopped sending heartbeats):
//	/job:jax_worker/replica:0/task:3 ...                               (CheckHeartbeatTimeout)
//	Coordination service has stopped. RegisterTask() from task: ... failed. ...
//	                                        (RegisterTaskAsync, and every other RPC handler)
//	/job:worker/replica:0/task:1 unexpectedly tried to connect with a different incarnation.
//	It has likely restarted.                                           (RegisterTaskAsync)
//	... Heartbeat: Incarnation ID mismatch: expecting 1 but got 2. The task has restarted
//	and likely crashed earlier ...                        (TaskState::RecordHeartbeat)
//	Leader incarnation ID mismatch: the coordination  leader (usually slice 0 task 0) has
//	restarted. ...                              (the agent's heartbeat loop; two spaces sic)
//
// The incarnation messages replaced "Duplicate task registration" of older TensorFlow: a
// task's new process met the old one's registration, i.e. its predecessor died. A heartbeat
// timeout may reach the stale task itself when it was frozen or cut off rather than dead;
// that is no fault of its program either.
func Coordination() []framework.HintPattern {
	return []framework.HintPattern{
		{
			Pattern:     `/task:\d+ heartbeat timeout\. This indicates that the remote task has failed`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "the coordination service stopped hearing from a task: it died, froze or was cut off",
		},
		{
			Pattern:     `The following tasks are unhealthy \(stopped sending heartbeats\)`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "the coordination service lost other tasks and ended this one",
		},
		{
			Pattern:     `Coordination service has stopped\.`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "the task hosting the coordination service (process 0, the chief) ended first",
		},
		{
			Pattern:     `unexpectedly tried to connect with a different incarnation|[Ii]ncarnation ID mismatch`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "a task or the coordination leader restarted: its earlier process died",
		},
	}
}

// GRPCPeerClosed returns the hint for gRPC's UNAVAILABLE "Socket closed", the detail a
// call carries when the connection to its peer closed under it: the peer's process (a
// TensorFlow server, JAX's coordination service) went away. TensorFlow and XLA print the
// detail as gRPC's debug string, {grpc_message:"Socket closed", grpc_status:14} in current
// gRPC and "grpc_message":"Socket closed" (JSON) in older releases; only that form is
// matched, so that a program's own "socket closed" elsewhere does not count.
//
// gRPC's "failed to connect to all addresses" is deliberately not a hint: it is what a
// start-up with a wrong address or port says, as well as a peer not up yet.
func GRPCPeerClosed() []framework.HintPattern {
	return []framework.HintPattern{
		{
			Pattern:     `grpc_message"?:\s?"Socket closed"`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "gRPC: the peer closed the connection under a call (its process went away)",
		},
	}
}
