package jaxplugin

import (
	"github.com/faultline-dev/faultline/pkg/framework"
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
// (JAX's fault tolerance guide). The first line is not a hint by itself: it wraps whatever
// status the service propagated, this process's own error included ("Polled an error from
// coordination service (this can be an error from this or another task)"); the status it
// carries decides. When process 0, which hosts the service, dies, the status is "Failed to
// send RPC to coordination service ..." with gRPC's "Socket closed" detail
// (tslhints.GRPCPeerClosed). NCCL collectives report a lost peer too
// (gpuhints.NCCLPeerLoss).
func Hints() []framework.HintPattern {
	hints := gpuhints.CUDA()
	hints = append(hints, tslhints.Coordination()...)
	hints = append(hints, tslhints.GRPCPeerClosed()...)
	return append(hints, gpuhints.NCCLPeerLoss()...)
}
