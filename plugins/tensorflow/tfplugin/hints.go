package tfplugin

import (
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/framework/gpuhints"
	"github.com/faultline-dev/faultline/pkg/framework/tslhints"
)

// Hints are TensorFlow's failure hints: CUDA errors the program caused first (an
// application cause wins over the peer messages a dying gang prints after it), then the
// ways a worker learns that it was stopped from outside or that a peer is gone. They match
// a failed container's termination message, or its log tail with terminationMessagePolicy
// FallbackToLogsOnError.
//
// Termination notices. tf.distribute.experimental.PreemptionCheckpointHandler
// (tensorflow/python/distribute/failure_handling/failure_handling.py) watches for a
// termination notice: SIGTERM by default, the GCE maintenance event on GCE GPU VMs. The
// worker that receives it logs "Member <id> has received termination notice." and, in the
// training loop, "Termination caught in main thread on preempted worker"; every worker then
// saves a checkpoint, logs "PreemptionCheckpointHandler: checkpoint saved. Exiting." and
// exits with the platform's restart code (42 by default, 143 on GCE:
// failure_handling_util.py). None of these workers failed by its own fault, and none of
// the messages proves what stopped them (a preemption, a drain, or faultline ending a gang
// whose other worker failed all send SIGTERM): they are PeerFailure, which blames nobody,
// and the node's evidence (the agent's InfrastructureFault condition, the pod's
// DisruptionTarget) or another pod's failure says why.
//
// Peers. TensorFlow's multi-worker runtime uses XLA's coordination service
// (tslhints.Coordination: a heartbeat timeout, a task restarted, the chief's service
// stopped, a barrier one task missed) and gRPC between tasks (tslhints.GRPCPeerClosed), and
// NCCL for collectives (gpuhints.NCCLPeerLoss); MultiWorkerMirroredStrategy also checks its
// peers itself (clusterCheck). Where these name the task that failed
// ("/job:worker/replica:0/task:1"), the hints name it (exitclass.HintGroupPeer and
// HintGroupRole): a task of MultiWorkerMirroredStrategy's worker job is the pod with that
// completion index, a task of a parameter-server run's role is that role's pod with that
// role index (the run's layout, v1alpha1.AnnotationRoles). Deliberately not hints:
//   - "Collective ops is aborted by: <error>": TensorFlow aborts collectives for any error,
//     this worker's own included; the error after the colon decides.
//   - gRPC's "failed to connect to all addresses": a wrong address or port at start-up says
//     it as well as a peer not up yet.
//   - "Duplicate task registration": gone from current TensorFlow, whose coordination
//     service now says a task "unexpectedly tried to connect with a different
//     incarnation" (tslhints.Coordination).
func Hints() []framework.HintPattern {
	hints := gpuhints.CUDA()
	hints = append(hints, terminationHints()...)
	hints = append(hints, clusterCheck())
	hints = append(hints, tslhints.Coordination()...)
	hints = append(hints, tslhints.GRPCPeerClosed()...)
	return append(hints, gpuhints.NCCLPeerLoss()...)
}

// terminationHints are the hints for PreemptionCheckpointHandler's messages, TensorFlow's
// own (the others come from the shared packages).
func terminationHints() []framework.HintPattern {
	return []framework.HintPattern{
		{
			Pattern:     `Member \S+ has received termination notice|Termination caught in main thread on preempted worker`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "PreemptionCheckpointHandler on this worker received a termination notice from outside the program",
		},
		{
			Pattern:     `PreemptionCheckpointHandler: checkpoint saved\. Exiting`,
			Cause:       v1alpha1.CausePeerFailure,
			Description: "the worker checkpointed and exited because a termination notice reached the cluster",
		},
	}
}

// clusterCheck is MultiWorkerMirroredStrategy's own health check of its peers
// (tensorflow/python/distribute/collective_all_reduce_strategy.py, _check_health): when a
// peer stops answering it logs "Cluster check alive failed, /job:worker/replica:0/task:1 is
// down, aborting collectives: <the RPC's error>" and aborts every collective with "cluster
// check alive failed, /job:worker/replica:0/task:1 is down", which the training step
// raises (inside "Collective ops is aborted by: ..."). Both name the peer.
func clusterCheck() framework.HintPattern {
	return framework.HintPattern{
		Pattern:     `[Cc]luster check alive failed, /job:(?P<role>[\w-]+)/replica:\d+/task:(?P<peer>\d+) is down`,
		Cause:       v1alpha1.CausePeerFailure,
		Description: "MultiWorkerMirroredStrategy's health check found a peer down and aborted the collectives",
	}
}
