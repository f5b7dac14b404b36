package jaxplugin

import (
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/framework/gloohints"
	"github.com/faultline-dev/faultline/pkg/framework/gpuhints"
	"github.com/faultline-dev/faultline/pkg/framework/tslhints"
)

// Hints are JAX's failure hints: CUDA errors the program caused first (an application
// cause wins over the peer messages a dying gang prints after it), then the ways a process
// learns that another one died.
//
// JAX's distributed runtime is XLA's coordination service (tslhints): when a process dies,
// every other one is ended with
//
//	F0926 17:26:32.075587 client.h:77] Terminating process because the JAX distributed
//	service detected fatal errors. This most likely indicates that another task died; ...
//	absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending
//	heartbeats):
//	/job:jax_worker/replica:0/task:3
//
// (JAX's fault tolerance guide; JAX 0.11 names the task by its process id: "... (stopped
// sending heartbeats):\n3"). The first line is not a hint by itself: it wraps whatever
// status the agent hands it, this process's own error included ("Polled an error from
// coordination service (this can be an error from this or another task)", an error it
// reported, a start-up that never reached process 0); the status it carries decides. When
// process 0, which hosts the service, dies, the status is "Failed to send RPC to
// coordination service ..." around the call gRPC lost (tslhints.Coordination,
// tslhints.GRPCPeerClosed); when its host is gone, the survivors' heartbeats go unanswered
// ("DEADLINE_EXCEEDED: Deadline Exceeded ... RPC: .../Heartbeat"), and no collective
// error comes with it: a collective waiting for a vanished host hears nothing. Collectives
// report a lost peer too: Gloo on the CPU (gloohints.PeerLoss), NCCL on the GPU
// (gpuhints.NCCLPeerLoss), and, with collective cancelling on (the fault tolerance guide),
// XLA's cancellation of a collective whose participant is gone (peerHints).
//
// The coordination service's task id is the process id, JAX_PROCESS_ID, which the plugin
// sets to the pod's completion index: a task the service names (tslhints) is the pod with
// that index. XLA aborts every process when it loses one (SIGABRT, exit 134), the failed
// one too if it is still there (a Python exception leaves it in the shutdown barrier until
// the others are ended with it): the name is what tells them apart, and the failed worker's
// own traceback lies above the abort's stack trace, where the kubelet's 2 KiB tail does not
// reach; the node agent's report keeps it.
func Hints() []framework.HintPattern {
	hints := gpuhints.CUDA()
	hints = append(hints, tslhints.Coordination()...)
	hints = append(hints, tslhints.GRPCPeerClosed()...)
	hints = append(hints, peerHints()...)
	hints = append(hints, gloohints.PeerLoss()...)
	return append(hints, gpuhints.NCCLPeerLoss()...)
}

// peerHints are JAX's own messages about a lost peer.
func peerHints() []framework.HintPattern {
	return []framework.HintPattern{{
		// JAX's fault tolerance guide (docs/fault_tolerance.rst, "Cancelling Collectives"):
		// with collective cancelling on, a collective whose participant died raises
		// "jaxlib._jax.XlaRuntimeError: FAILED_PRECONDITION: Task with incarnation id
		// 3446767950926952685 is not connected" in the live processes. The incarnation is
		// the dead process's, which is no task id: the hint names none.
		Pattern:     `Task with incarnation id \d+ is not connected`,
		Cause:       v1alpha1.CausePeerFailure,
		Description: "XLA cancelled a collective because a participating process is gone",
	}}
}
