package exitclass

import (
	"strconv"
	"strings"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// Explain renders the verdict as one paragraph a person can act on, e.g.
//
//	index 3 (pod r-3) on node gpu-7 exited 143 (SIGTERM) while the node was shutting down
//	(logind PrepareForShutdown at 12:01:03.120); 255 peers failed after it with coordination
//	errors → infrastructure: NodeShutdown
//
// Times are UTC, as 15:04:05.000.
func (v Verdict) Explain() string {
	if v.RootPod == "" {
		return "no pod of this attempt has failed"
	}
	var b strings.Builder
	if v.Index >= 0 {
		b.WriteString("index " + strconv.Itoa(v.Index) + " (pod " + v.RootPod + ")")
	} else {
		b.WriteString("pod " + v.RootPod)
	}
	if v.Node != "" {
		b.WriteString(" on node " + v.Node)
	}
	switch {
	case v.StillRunning:
		// The basis says it: "was still running 2.0 s after XID 79 …".
	case v.Container == "":
		b.WriteString(" failed without a container exit")
	default:
		b.WriteString(" exited " + strconv.Itoa(int(v.ExitCode)))
		if v.Signal != 0 {
			b.WriteString(" (" + signalName(v.Signal) + ")")
		}
	}
	if v.Basis != "" {
		b.WriteString(" " + v.Basis)
	}
	switch {
	case v.NamedBy == 1:
		b.WriteString(" (1 failed worker's output names it as the one that failed)")
	case v.NamedBy > 1:
		b.WriteString(" (" + strconv.Itoa(v.NamedBy) + " failed workers' output names it as the one that failed)")
	}
	b.WriteString("; " + v.peersPhrase())
	b.WriteString(" → " + strings.ToLower(string(v.Class)) + ": " + string(v.Cause))
	if !v.Final {
		b.WriteString("; not final: waiting for node evidence until " + clock(v.WaitUntil))
	}
	return b.String()
}

func (v Verdict) peersPhrase() string {
	n := len(v.Peers)
	if v.Cause == v1alpha1.CauseNoProgress {
		switch n {
		case 0:
			return "it is the only worker"
		case 1:
			return "its peer showed no progress either"
		}
		return "none of its " + strconv.Itoa(n) + " peers showed progress either"
	}
	if n == 0 {
		return "no other worker failed"
	}
	var before, coordination, own int
	for _, p := range v.Peers {
		if !v.FailedAt.IsZero() && !p.FailedAt.IsZero() && p.FailedAt.Before(v.FailedAt) {
			before++
		}
		switch {
		case p.OwnCause == v1alpha1.CausePeerFailure:
			coordination++
		case p.OwnCause == "":
		case p.OwnCause.Class() == v1alpha1.ClassApplication || p.OwnCause != v.Cause || p.Node != v.Node:
			// Workers sharing the root's fault on the root's node are not news.
			own++
		}
	}
	s := plural(n, "peer") + " failed"
	switch {
	case v.FailedAt.IsZero():
	case before == 0:
		s += " after it"
	case before == n:
		s += " before it"
	default:
		s += " (" + strconv.Itoa(before) + " before it)"
	}
	switch {
	case coordination == n:
		s += " with coordination errors"
	case coordination > 0:
		s += ", " + strconv.Itoa(coordination) + " with coordination errors"
	}
	if own > 0 {
		s += ", " + strconv.Itoa(own) + " with evidence of their own"
	}
	return s
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
