package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/nodeagent/inplace"
)

var _ inplace.ExitReporter = &Writer{}

// ReportWorkerExit writes report onto pod, a pod of this node (one that restarts in place,
// whose status never shows the exit, or one whose status keeps it with less of the log), as
// v1alpha1.AnnotationWorkerExit (one pods/status patch, with the pod's UID as a
// precondition); the report already there is not written again. The admission policy lets
// the agent write this annotation on its own node's pods only (deploy/admission).
//
// The message is bounded (maxReportMessage): annotations share 256 KiB per object, and a
// report is read at every judgement of the pod. termmsg keeps it near 4 KiB already (a
// termination message file's 4 KiB, or the log's lines that matter and its 2 KiB tail).
func (w *Writer) ReportWorkerExit(ctx context.Context, pod *corev1.Pod, report v1alpha1.WorkerExit) error {
	if pod.Spec.NodeName != w.cfg.Node {
		return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, ErrOtherNode)
	}
	if n := len(report.Message); n > maxReportMessage {
		// The end says how it ended: keep it, on a character boundary.
		cut := n - maxReportMessage
		for cut < n && !utf8.RuneStart(report.Message[cut]) {
			cut++
		}
		report.Message = report.Message[cut:]
	}
	raw, err := json.Marshal(report)
	if err != nil {
		return err
	}
	if pod.Annotations[v1alpha1.AnnotationWorkerExit] == string(raw) {
		return nil
	}
	data, err := podMarkPatch(pod.UID, nil, obj{v1alpha1.AnnotationWorkerExit: string(raw)})
	if err != nil {
		return err
	}
	if err := withRetry(ctx, w.cfg.Backoff, func(ctx context.Context) error {
		return w.cfg.Client.PatchPodStatus(ctx, pod.Namespace, pod.Name, types.StrategicMergePatchType, data)
	}); err != nil {
		w.cfg.Metrics.markFailed(targetPodAnnotation)
		return fmt.Errorf("report the exit of a worker of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	w.cfg.Metrics.markWritten(targetPodAnnotation, reasonWorkerExit)
	return nil
}

// maxReportMessage bounds a report's message.
const maxReportMessage = 6 * 1024

// reasonWorkerExit is the reason label of the marks metric for an exit report.
const reasonWorkerExit = "WorkerExit"
