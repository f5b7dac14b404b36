package nodeagent

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/nodeagent/inplace"
)

// MarkPodStopped adds to the NodeShutdown evidence on a pod of this node when the runtime
// stopped the pod (v1alpha1.FaultEvidence.PodStoppedAt): its sandbox down and none of its
// containers running (inplace.PodStopped), after the announcement. Then no process of the
// pod runs on the node, whatever its status shows, and the controller may remove it at once
// where its index moves, instead of waiting for its kubelet, busy ending every pod of the
// node, to write the pod's end (one pod after another). It reports whether it wrote.
//
// Only evidence an agent of this node wrote counts (see previous), and only a stop after its
// announcement: a pod whose sandbox went down on its own before is no pod the shutdown
// ended. The first stop stays.
func (w *Writer) MarkPodStopped(ctx context.Context, stop inplace.SandboxStop) (bool, error) {
	ref := types.NamespacedName{Namespace: stop.Namespace, Name: stop.Name}
	unlock := w.lockPod(ref)
	defer unlock()
	pod, err := w.getPod(ctx, ref)
	if err != nil {
		return false, err
	}
	prev, known, _, withdrawn := w.previous(pod)
	if pod.UID != stop.UID || !known || withdrawn || prev.Cause != v1alpha1.CauseNodeShutdown || prev.PodStoppedAt != "" {
		return false, nil
	}
	announced, err := time.Parse(time.RFC3339Nano, prev.DetectedAt)
	if err != nil || stop.At.Before(announced) {
		return false, nil
	}
	ev := prev
	ev.PodStoppedAt = formatTime(stop.At)
	annotations, err := evidenceAnnotations(ev, "")
	if err != nil {
		return false, err
	}
	if err := w.patchPod(ctx, pod, podMark{annotations: annotations}, ev.Cause); err != nil {
		return false, err
	}
	w.mu.Lock()
	w.written[pod.UID] = ev
	w.mu.Unlock()
	w.log.Info("the shutdown stopped a pod at the runtime", "pod", ref, "stoppedAt", ev.PodStoppedAt, "announced", prev.DetectedAt)
	return true, nil
}

// podStopsParallelism bounds the writes of MarkPodStopped in flight: the kubelet stops a
// node's pods together at a shutdown, and each write waits on the API server.
const podStopsParallelism = 16

// podStops hands each stop the runtime reports to MarkPodStopped off the event stream, a
// write of its own per pod: the stops of a node's pods come within a second, and the
// controller waits for each.
func podStops(w *Writer) func(context.Context, inplace.SandboxStop) {
	sem := make(chan struct{}, podStopsParallelism)
	return func(ctx context.Context, stop inplace.SandboxStop) {
		go func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			if _, err := w.MarkPodStopped(ctx, stop); err != nil && !apierrors.IsNotFound(err) {
				w.log.Warn("record the shutdown's stop of a pod", "pod", stop.Namespace+"/"+stop.Name, "error", err)
			}
		}()
	}
}
