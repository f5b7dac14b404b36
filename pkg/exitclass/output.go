package exitclass

import "strings"

// outputLines are evidence lines about what the pod's own output says beyond its hint: the
// first error in it (a Python traceback's exception line, which the node agent's report
// keeps from above the kubelet's tail), and, when its message names the pod itself as the
// worker that failed, that its PeerFailure words are its own failure.
func (f *podFailure) outputLines() []string {
	var ev []string
	pod := "pod " + f.pod.Name + ": "
	if e := firstError(f.msg); e != "" {
		ev = append(ev, pod+"the first error in its output"+quote(e))
	}
	if f.selfNamed {
		ev = append(ev, pod+"its own termination message names it as the worker that failed ("+f.hint.Source+
			" hint): the coordination service ended it with the others; not a peer's failure")
	}
	return ev
}

const tracebackHeader = "Traceback (most recent call last):"

// firstError is the exception line of the first Python traceback in msg (without the
// traceback's own prefix, such as torchrun's "[rank2]: "), "" if msg has none.
func firstError(msg string) string {
	at := strings.Index(msg, tracebackHeader)
	if at < 0 {
		return ""
	}
	lineStart := strings.LastIndexByte(msg[:at], '\n') + 1
	prefix := msg[lineStart:at]
	rest := msg[at+len(tracebackHeader):]
	for rest != "" {
		var line string
		line, rest, _ = strings.Cut(strings.TrimPrefix(rest, "\n"), "\n")
		body, ok := strings.CutPrefix(line, prefix)
		switch {
		case !ok || body == "":
			return ""
		case body[0] == ' ' || body[0] == '\t':
			continue // a frame
		}
		return strings.TrimSpace(body)
	}
	return ""
}
