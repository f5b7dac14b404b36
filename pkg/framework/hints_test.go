package framework

import (
	"fmt"
	"strings"
	"testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

func TestHintMatcher(t *testing.T) {
	peer := HintPattern{Pattern: `peer (died|left)`, Cause: v1alpha1.CausePeerFailure, Description: "a peer"}
	oom := HintPattern{Pattern: `out of memory`, Cause: v1alpha1.CauseAppExit, Description: "mine"}
	m, err := NewHintMatcher("fw", []HintPattern{oom, peer})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		msg  string
		want HintPattern
		ok   bool
	}{
		"first in hint order, not in text order": {msg: "peer left\nout of memory", want: oom, ok: true},
		"second":                                 {msg: "x: peer died", want: peer, ok: true},
		"none":                                   {msg: "ValueError: bad shape"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := m.Match(tc.msg)
			if ok != tc.ok || got != tc.want {
				t.Errorf("Match(%q) = %+v, %v; want %+v, %v", tc.msg, got, ok, tc.want, tc.ok)
			}
		})
	}
	if _, err := NewHintMatcher("fw", []HintPattern{{Pattern: "ECC", Cause: v1alpha1.CauseGPUFault}}); err == nil {
		t.Error("NewHintMatcher accepted an infrastructure cause, which the host refuses")
	}
}

func TestTerminationMessageTail(t *testing.T) {
	var lines []string
	for i := range 100 {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	log := strings.Join(lines, "\n") + "\n"
	got := TerminationMessageTail(log)
	if !strings.HasPrefix(got, "line 20\n") || !strings.HasSuffix(got, "line 99\n") {
		t.Errorf("tail of 100 short lines = %q..., want lines 20-99", got[:min(len(got), 20)])
	}
	long := strings.Repeat("x", 3000) + "\nlast line\n"
	if got := TerminationMessageTail(long); len(got) != 2048 || !strings.HasSuffix(got, "last line\n") {
		t.Errorf("tail of a long line is %d bytes ending %q, want the last 2048", len(got), got[max(0, len(got)-12):])
	}
	if got := TerminationMessageTail("short"); got != "short" {
		t.Errorf("tail of a short log = %q", got)
	}
}
