package exitclass

import (
	"time"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// Verdict says who is to blame for an attempt's failure and which pod failed first.
// Class is always Cause.Class().
type Verdict struct {
	Class     v1alpha1.Class
	Cause     v1alpha1.Cause
	RootPod   string
	Index     int // completion index of the root; -1 if unknown
	Node      string
	Container string
	ExitCode  int32
	Signal    int32     // 0 if the exit code is not 128+signal
	XID       uint64    // set when a GPU XID is part of the root's evidence
	FailedAt  time.Time // the root's termination time (zero if unknown)
	// Basis is the deciding fact as a phrase that completes "exited 143 (SIGTERM) …", e.g.
	// "while the node was shutting down (logind PrepareForShutdown at 12:01:03.120)".
	Basis string
	// Evidence holds human-readable lines, one fact each.
	Evidence []string
	// NamedBy is how many failed pods' messages (the root's own included) name the root as
	// the worker that failed (a PeerFailure hint's named group); 0 when none does.
	NamedBy int
	// AwaitsNamed: every failed pod's message names one worker as the one that failed, and
	// no pod of its index has failed yet: its own exit, which the survivors saw, has not
	// reached the API (a kubelet's status write can come a second or two after its peers'),
	// and would change the root. A caller that can wait a little does (the controller).
	AwaitsNamed bool
	// Peers are the other failed pods, all attributed to the root (cause PeerFailure), sorted
	// by index (unknown indexes last).
	Peers []PeerFailure
	// Conclusive: the root's evidence settles the verdict without waiting (infrastructure
	// evidence, or explicit application evidence: OOMKilled, a program-caused XID, an
	// application-cause hint). Never true for class Unknown.
	Conclusive bool
	// StillRunning: the root had not exited at Now: a worker that runs on fatal
	// infrastructure evidence (its GPU, its node's shutdown), or a gang that stopped making
	// progress (cause NoProgress). FailedAt is then when the evidence came (the gang's last
	// progress), RunningFor how long the root had run on since, and Container its running
	// container (ExitCode means nothing).
	StillRunning bool
	RunningFor   time.Duration
	// Final is false while the controller should wait for evidence: it is Conclusive, or
	// Now has reached the settle deadline.
	Final bool
	// WaitUntil is the settle deadline while the verdict is not Final (zero once it is): when
	// to classify again at the latest.
	WaitUntil time.Time
}

// PeerFailure is a failed pod that is not the root.
type PeerFailure struct {
	Pod      string
	Index    int // -1 if unknown
	ExitCode int32
	// Reason says in a few words how it failed ("exit 143 (SIGTERM)", "jax hint: peer failure").
	Reason   string
	Node     string
	FailedAt time.Time
	// OwnCause is what the pod's own evidence says, "" when it has none; PeerFailure when its
	// termination message matched a PeerFailure hint. A second infrastructure cause here (a
	// second faulty node) is worth the controller's attention; it never changes the root.
	OwnCause v1alpha1.Cause
}
