package framework

import (
	"strings"

	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// HintMatcher matches messages against a plugin's hints as the host does: the hints are
// checked as the host checks them when it loads a plugin of the current API version, and
// the first hint, in order, whose pattern matches anywhere in the message wins. Plugins use
// it in their tests, with real messages of their framework.
type HintMatcher struct {
	hints    []HintPattern
	compiled []exitclass.Hint
}

// NewHintMatcher checks and compiles hints; an error is what the host would refuse the
// plugin for.
func NewHintMatcher(framework string, hints []HintPattern) (*HintMatcher, error) {
	compiled, _, err := compileHints(framework, APIVersion, hints)
	if err != nil {
		return nil, err
	}
	return &HintMatcher{hints: hints, compiled: compiled}, nil
}

// Match returns the first hint that matches message.
func (m *HintMatcher) Match(message string) (HintPattern, bool) {
	for i, h := range m.compiled {
		if h.Pattern.MatchString(message) {
			return m.hints[i], true
		}
	}
	return HintPattern{}, false
}

// The kubelet's bounds on a termination message read from the log (terminationMessagePolicy
// FallbackToLogsOnError): its last 80 lines, and of those the last 2048 bytes
// (MaxContainerTerminationMessageLogLines and MaxContainerTerminationMessageLogLength).
const (
	terminationLogLines = 80
	terminationLogBytes = 2048
)

// TerminationMessageTail is what the kubelet keeps of a failed container's log as its
// termination message under FallbackToLogsOnError, the text hints are matched against: a
// hint whose line a program prints long before it exits never sees it.
func TerminationMessageTail(log string) string {
	trimmed := strings.TrimSuffix(log, "\n")
	if lines := strings.Split(trimmed, "\n"); len(lines) > terminationLogLines {
		log = strings.Join(lines[len(lines)-terminationLogLines:], "\n") + log[len(trimmed):]
	}
	if len(log) > terminationLogBytes {
		log = log[len(log)-terminationLogBytes:]
	}
	return log
}
