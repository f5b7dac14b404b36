// Package hinttest runs a plugin's failure hints against real messages of its framework,
// as the host would match them, for the tests of plugins and of the shared hint packages.
package hinttest

import (
	"regexp"
	"strings"
	"testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/nodeagent/termmsg"
)

// Case is one message and the cause the hints must give it.
type Case struct {
	// Source names the upstream file (and function) that prints the message, so that a
	// reader can check the text against it when the framework changes.
	Source string
	// Message is the text as the framework prints it; it is matched as the kubelet keeps
	// it (framework.TerminationMessageTail).
	Message string
	// Want is the cause of the first hint that must match; empty means no hint may match.
	Want v1alpha1.Cause
	// Named is the task the matching hint names as the one that failed (its named groups
	// role and peer, exitclass.HintGroupPeer): "2", or "worker:1" with a role; empty when
	// it names none.
	Named string
}

// Run checks every case against hints, in their order, and that every hint of mustCover
// (the hints the caller owns: a plugin's own, not the shared packages' it appends, which
// their packages cover) is matched first by at least one case: a hint without a real
// message is a guess.
func Run(t *testing.T, fw string, hints []framework.HintPattern, cases map[string]Case, mustCover []framework.HintPattern) {
	t.Helper()
	m, err := framework.NewHintMatcher(fw, hints)
	if err != nil {
		t.Fatalf("the host would refuse these hints: %v", err)
	}
	used := map[string]bool{}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.Source == "" {
				t.Fatal("case names no upstream source")
			}
			msg := framework.TerminationMessageTail(tc.Message)
			h, ok := m.Match(msg)
			switch {
			case tc.Want == "" && ok:
				t.Errorf("matched the %s hint /%s/ (%s); want no hint to match (source: %s)", h.Cause, h.Pattern, h.Description, tc.Source)
			case tc.Want != "" && !ok:
				t.Errorf("no hint matched; want %s (source: %s)", tc.Want, tc.Source)
			case ok && h.Cause != tc.Want:
				t.Errorf("matched the %s hint /%s/; want %s (source: %s)", h.Cause, h.Pattern, tc.Want, tc.Source)
			}
			if ok {
				used[h.Pattern] = true
				if got := Named(h, msg); got != tc.Named {
					t.Errorf("the hint /%s/ names %q as the task that failed; want %q (source: %s)", h.Pattern, got, tc.Named, tc.Source)
				}
			}
		})
	}
	for _, h := range mustCover {
		if !used[h.Pattern] {
			t.Errorf("hint /%s/ (%s) is matched first by no case: add the real message it is for", h.Pattern, h.Cause)
		}
	}
}

// Named is the task that msg, matched by h, names as the one that failed: the hint's named
// groups (exitclass.HintGroupRole and HintGroupPeer) as "role:peer", or "peer" without a
// role; "" when it names none.
func Named(h framework.HintPattern, msg string) string {
	re := regexp.MustCompile(h.Pattern)
	m := re.FindStringSubmatch(msg)
	pi := re.SubexpIndex(exitclass.HintGroupPeer)
	if m == nil || pi < 0 || m[pi] == "" {
		return ""
	}
	if ri := re.SubexpIndex(exitclass.HintGroupRole); ri >= 0 && m[ri] != "" {
		return m[ri] + ":" + m[pi]
	}
	return m[pi]
}

// KubeletCut is what the kubelet keeps of a failed container's log as its termination
// message (FallbackToLogsOnError): the last 80 lines, 2 KiB of them.
func KubeletCut(log string) string { return framework.TerminationMessageTail(log) }

// AgentKept is what the node agent's exit report keeps of the same log: the kubelet's tail,
// and before it the lines that matter from further up (termmsg.Kept).
func AgentKept(log string) string {
	text := strings.TrimSuffix(log, "\n")
	if text == "" {
		return ""
	}
	return termmsg.Kept(strings.Split(text, "\n"))
}
