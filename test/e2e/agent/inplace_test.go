package agent

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// noEventsRuntime is a container runtime that answers the CRI's Version and implements
// nothing else, the container events (GetContainerEvents) included: a runtime older than
// the events, as far as the node agent can tell.
type noEventsRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (noEventsRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "no-events", RuntimeVersion: "0.0.1", RuntimeApiVersion: "v1"}, nil
}

// TestE2EAgentWithoutContainerEventsCannotRestartInPlace: the node agent reaches a container
// runtime that sends no container events. It could stop and start workers in place, but not
// report the exit of a worker that restarts by itself (its run would wait at its barriers
// for good), so its node says InPlaceReady False, NoExitEvents, and the controller recreates
// that node's pods instead. First, with faultline's CRD not installed yet (this package's
// cluster has none), the agent cannot list the runs: it takes its inhibitor lock all the
// same, and its node says why it cannot restart in place.
//
// It runs alone, first of the package (its file comes first, and the others' tests are
// parallel or come after): it installs the CRD, which this package's cluster has none of
// until then (or since it deleted it, run again: go test -count), and which stays.
func TestE2EAgentWithoutContainerEventsCannotRestartInPlace(t *testing.T) {
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := cluster.NodeName(8)
	crds := filepath.Join(c.Tools.Root, "deploy", "crd")
	if err := c.DeleteCRDs(ctx, crds); err != nil {
		t.Fatal(err)
	}

	sock := serveRuntime(t, noEventsRuntime{})
	waitInPlaceReady := func(reason, says string) {
		t.Helper()
		var cond *corev1.NodeCondition
		if _, err := c.WaitNode(ctx, node, func(n *corev1.Node) (bool, error) {
			cond = cluster.NodeCondition(n, v1alpha1.NodeConditionInPlaceReady)
			return cond != nil && cond.Status == corev1.ConditionFalse && cond.Reason == reason && strings.Contains(cond.Message, says), nil
		}); err != nil {
			t.Fatalf("node %s: %s %+v, want False %s saying %q: %v", node, v1alpha1.NodeConditionInPlaceReady, cond, reason, says, err)
		}
		t.Logf("%s: %s", cond.Reason, cond.Message)
	}

	// startAgent returns once the agent holds its inhibitor lock.
	a := startAgent(t, c, node, "--cri-endpoint", "unix://"+sock)
	waitInPlaceReady(v1alpha1.InPlaceReasonNoRuntime, "CRD")
	a.Stop()

	if err := c.InstallCRDs(ctx, crds); err != nil {
		t.Fatal(err)
	}
	startAgent(t, c, node, "--cri-endpoint", "unix://"+sock)
	waitInPlaceReady(v1alpha1.InPlaceReasonNoExitEvents, "GetContainerEvents")
}
