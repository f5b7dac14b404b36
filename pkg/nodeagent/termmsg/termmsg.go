// Package termmsg reads the termination message of a container that exited, as the kubelet
// reads it into the pod's status (kuberuntime's getTerminationMessage and its fallback to
// the log): the file the container wrote at its terminationMessagePath, which the kubelet
// mounts from the host (the runtime's status names the mount), and, for a container whose
// policy is FallbackToLogsOnError, that exited non-zero and wrote no message, the tail of
// its log (the runtime's log path, in the CRI log format).
//
// The node agent needs it for a worker of a pod that restarts in place: the kubelet removes
// every container of the pod at once, so the pod's status never shows the real exit and its
// message (the framework hints are read from it); the agent's exit report carries them.
package termmsg

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet's limits (kubecontainer.MaxContainerTerminationMessageLength,
// MaxContainerTerminationMessageLogLength and kuberuntime's
// maxContainerTerminationMessageLogLines): the file is read to 4 KiB; from the log, the last
// 80 lines, at most 2 KiB of them.
const (
	MaxFileBytes = 4 * 1024
	MaxLogBytes  = 2 * 1024
	MaxLogLines  = 80
)

// The annotations the kubelet puts on every container it creates (kuberuntime's labels),
// which it reads back for an exited container: where its termination message is, and
// whether to fall back to its log.
const (
	AnnotationPath   = "io.kubernetes.container.terminationMessagePath"
	AnnotationPolicy = "io.kubernetes.container.terminationMessagePolicy"
)

// Read is the termination message of the exited container st: what the kubelet would add
// to the runtime's message in the container's terminated state (Message joins them). Where
// it is and whether to fall back to the log are the container's own (its annotations), as
// the kubelet reads them. A file that is not there is no message, and falls back to the log as an
// empty one does: the node agent's DaemonSet does not mount the kubelet's pod directories
// (every pod's Secrets are there), only the logs. A file or log it cannot read otherwise is
// an error.
func Read(st *runtimeapi.ContainerStatus) (string, error) {
	msg, useLog, err := fileMessage(st)
	if err != nil || !useLog {
		return msg, err
	}
	msg, err = logTail(st.GetLogPath())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("log of container %s: %w", st.GetMetadata().GetName(), err)
	}
	return msg, nil
}

// fileMessage is the message in st's termination message file, and whether the kubelet
// would read st's log instead (useLog): its policy falls back, it exited non-zero, and the
// file is empty or not there.
func fileMessage(st *runtimeapi.ContainerStatus) (msg string, useLog bool, err error) {
	path, policy := st.GetAnnotations()[AnnotationPath], st.GetAnnotations()[AnnotationPolicy]
	name := st.GetMetadata().GetName()
	// A container that could not even start has no log to fall back to.
	fallback := policy == string(corev1.TerminationMessageFallbackToLogsOnError) && st.GetExitCode() != 0 && st.GetReason() != "ContainerCannotRun"
	if path != "" {
		for _, m := range st.GetMounts() {
			if m.GetContainerPath() != path {
				continue
			}
			b, err := readAtMost(m.GetHostPath(), MaxFileBytes)
			switch {
			case errors.Is(err, os.ErrNotExist):
			case err != nil:
				return "", false, fmt.Errorf("termination message of container %s: %w", name, err)
			case len(b) > 0 || !fallback:
				return string(b), false, nil
			}
			break
		}
	}
	return "", fallback && st.GetLogPath() != "", nil
}

// logWindow is how much of a log's end logTail reads: the last MaxLogLines lines' last
// MaxLogBytes, with a CRI prefix (~45 bytes) a line and the runtime's 16 KiB records, are in
// it. A training run's log can be gigabytes; its start is never read.
const logWindow = 64 * 1024

// logTail is LogTail of the log file at path, read from its last logWindow bytes (the line
// cut at the window's start is dropped).
func logTail(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	r := bufio.NewReader(f)
	if off := fi.Size() - logWindow; off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return "", err
		}
		r.Reset(f)
		if _, err := r.ReadBytes('\n'); err != nil {
			return "", nil // a window without a line's end: no whole line in it
		}
	}
	return LogTail(r, MaxLogLines, MaxLogBytes)
}

// readAtMost is the last max bytes of the file at path.
func readAtMost(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if off := fi.Size() - max; off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// LogTail is the last lines lines of a container log in the CRI format ("<time> <stream>
// <tag> <content>" a line, the tag P for a line the runtime split, F for its last part), at
// most maxBytes of them, both streams together as the kubelet's fallback reads them.
// Malformed lines are skipped.
func LogTail(r io.Reader, lines, maxBytes int) (string, error) {
	var tail [][]byte // the last complete lines, each with its newline
	var partial []byte
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		l, ok := ParseCRILine(sc.Bytes())
		if !ok {
			continue
		}
		partial = append(partial, l.Content...)
		if l.Partial {
			continue
		}
		tail = append(tail, append(partial, '\n'))
		partial = nil
		if len(tail) > lines {
			tail = tail[1:]
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	out := joined(tail)
	if len(out) > maxBytes {
		out = out[len(out)-maxBytes:]
	}
	return string(out), nil
}

func joined(lines [][]byte) []byte {
	var b []byte
	for _, l := range lines {
		b = append(b, l...)
	}
	return b
}

// CRILine is one line of a container log in the CRI format, as the kubelet keeps it
// ("<time> <stream> <tags> <content>"): its time as written (RFC 3339 with nanoseconds, left
// unparsed: the tail readers need none), stream, whether the runtime split it (tag P: more of
// it follows) and content. Its slices are the line's.
type CRILine struct {
	Time    []byte
	Stream  string
	Partial bool
	Content []byte
}

// ParseCRILine splits one CRI log line; false for a malformed one.
func ParseCRILine(line []byte) (CRILine, bool) {
	fields := bytes.SplitN(line, []byte{' '}, 4)
	if len(fields) < 3 {
		return CRILine{}, false
	}
	l := CRILine{Time: fields[0]}
	switch s := string(fields[1]); s {
	case "stdout", "stderr":
		l.Stream = s
	default:
		return CRILine{}, false
	}
	// Tags are colon-separated; the first says full or partial.
	switch {
	case bytes.HasPrefix(fields[2], []byte("P")):
		l.Partial = true
	case bytes.HasPrefix(fields[2], []byte("F")):
	default:
		return CRILine{}, false
	}
	if len(fields) == 4 {
		l.Content = fields[3]
	}
	return l, true
}

// Message is the terminated state's message the kubelet writes: the runtime's, then the
// termination message.
func Message(runtime, termination string) string {
	switch {
	case termination == "":
		return runtime
	case runtime == "":
		return termination
	}
	return runtime + ": " + termination
}
