package controller

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/policy"
)

// maxEvidenceLines bounds the evidence kept in status (the CRD allows 20).
const maxEvidenceLines = 20

// verdictStatus is the verdict and decision as stored in status.
func verdictStatus(v exitclass.Verdict, d policy.Decision, now metav1.Time) *v1alpha1.FailureVerdict {
	out := &v1alpha1.FailureVerdict{
		Class:        v.Class,
		Cause:        v.Cause,
		Rule:         d.Rule,
		Action:       d.Action,
		Pod:          v.RootPod,
		Node:         v.Node,
		Container:    v.Container,
		Signal:       v.Signal,
		XID:          int64(v.XID),
		PeerFailures: int32(len(v.Peers)),
		StillRunning: v.StillRunning,
		DecidedAt:    &now,
		Explanation:  v.Explain(),
	}
	if v.Index >= 0 {
		out.Index = ptr.To(int32(v.Index))
	}
	if v.Container != "" && !v.StillRunning { // a worker that still runs has no exit code
		out.ExitCode = ptr.To(v.ExitCode)
	}
	if !v.FailedAt.IsZero() {
		out.FailedAt = ptr.To(metav1.NewTime(v.FailedAt))
	}
	out.Evidence = v.Evidence
	if len(out.Evidence) > maxEvidenceLines {
		out.Evidence = out.Evidence[:maxEvidenceLines]
	}
	return out
}
