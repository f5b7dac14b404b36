// Package hinttest runs a plugin's failure hints against real messages of its framework,
// as the host would match them, for the tests of plugins and of the shared hint packages.
package hinttest

import (
	"testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
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
			h, ok := m.Match(framework.TerminationMessageTail(tc.Message))
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
			}
		})
	}
	for _, h := range mustCover {
		if !used[h.Pattern] {
			t.Errorf("hint /%s/ (%s) is matched first by no case: add the real message it is for", h.Pattern, h.Cause)
		}
	}
}
