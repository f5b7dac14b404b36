package exitclass

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// maxEvidenceLines bounds the evidence kept in status (the CRD allows 20).
const maxEvidenceLines = 20

// Status is the verdict as the run's status keeps it, decided by rule with action at
// decidedAt.
func (v Verdict) Status(rule string, action v1alpha1.Action, decidedAt metav1.Time) *v1alpha1.FailureVerdict {
	out := &v1alpha1.FailureVerdict{
		Class:        v.Class,
		Cause:        v.Cause,
		Rule:         rule,
		Action:       action,
		Pod:          v.RootPod,
		Node:         v.Node,
		Container:    v.Container,
		Signal:       v.Signal,
		XID:          int64(v.XID),
		PeerFailures: int32(len(v.Peers)),
		StillRunning: v.StillRunning,
		DecidedAt:    &decidedAt,
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
