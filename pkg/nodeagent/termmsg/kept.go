package termmsg

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// What the kubelet keeps of a failed worker's log (the last 80 lines, 2 KiB) is often not
// what says why it failed. A JAX worker that raises is aborted by the coordination service
// ten seconds later with the rest of its gang, and the last 2 KiB of its output are the
// abort's C++ stack trace; its Python traceback, and the lines where the service names the
// task it lost, lie above. The node agent reads the log anyway (for a pod that restarts in
// place, whose status never shows the exit): its report keeps, before the kubelet's tail,
// the lines that matter from further up. The agent does not know the run's framework hints
// (the controller holds them), so it keeps by the shape every framework's fatal output has:
//
//   - the first Python traceback: its header, its last frame and the exception line (the
//     first error; the others follow from it);
//   - the error and fatal records of glog and absl logging (XLA, TensorFlow, JAX's
//     coordination service, PyTorch's c10d and elastic agent): "E1127 02:26:50.166867 ...]"
//     and "F..." with their continuation lines, where the coordination service says which
//     task it lost and why it ends this one;
//   - NCCL's warnings ("NCCL WARN"), where NCCL says which connection broke.
//
// Records come before the traceback's later duplicates: fatal ones first, then errors, in
// the order printed, as many whole records as fit in MaxKeptBytes.

// MaxKeptBytes bounds the lines kept from before the tail: with the tail's 2 KiB, a report's
// message stays near 4 KiB.
const MaxKeptBytes = 2 * 1024

// maxKeptLine bounds one kept line: the facts are at a record's start ("Task 2 heartbeat
// timeout" comes 90 bytes into its line), and a 4 KiB line would take the whole budget.
const maxKeptLine = 320

// maxRecordLines bounds a record's continuation lines.
const maxRecordLines = 8

// keptMark separates the kept lines from the tail in a report's message.
const keptMark = "[faultline: the lines above are kept from earlier in the log; its tail follows]"

// reportWindow is how much of a log's end the agent reads for its report: the failure and
// what led to it are at the end of a log that can be gigabytes.
const reportWindow = 1024 * 1024

// ReadReport is what the node agent reports as the termination message of the exited
// container st: Read's, and, when that is the tail of its log, the lines that matter from
// before the tail too (Kept). A file the program wrote is its own message, kept as it is.
func ReadReport(st *runtimeapi.ContainerStatus) (string, error) {
	msg, useLog, err := fileMessage(st)
	if err != nil || !useLog {
		return msg, err
	}
	lines, err := logLines(st.GetLogPath(), reportWindow)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("log of container %s: %w", st.GetMetadata().GetName(), err)
	}
	return Kept(lines), nil
}

// logLines is the whole lines of the CRI log at path, from its last window bytes (the line
// the window cuts is dropped).
func logLines(path string, window int64) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	r := bufio.NewReader(f)
	if off := fi.Size() - window; off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return nil, err
		}
		r.Reset(f)
		if _, err := r.ReadBytes('\n'); err != nil {
			return nil, nil
		}
	}
	var lines []string
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
		lines = append(lines, string(partial))
		partial = partial[:0]
	}
	return lines, sc.Err()
}

// Kept is what the agent keeps of a log given as its lines: the kubelet's tail (its last
// MaxLogLines lines, MaxLogBytes of them), and before it, when the lines before the tail
// hold any, the lines that matter from there (see the top of this file), then keptMark.
func Kept(lines []string) string {
	tail, first := tailOf(lines)
	kept := keepLines(lines[:first])
	if len(kept) == 0 {
		return tail
	}
	return strings.Join(kept, "\n") + "\n" + keptMark + "\n" + tail
}

// tailOf is the kubelet's tail of lines and the index of the first line (whole or cut) in it.
func tailOf(lines []string) (string, int) {
	first := max(0, len(lines)-MaxLogLines)
	var b strings.Builder
	for _, l := range lines[first:] {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	tail := b.String()
	if len(tail) <= MaxLogBytes {
		return tail, first
	}
	cut := len(tail) - MaxLogBytes
	for n := 0; first < len(lines) && n+len(lines[first])+1 <= cut; first++ {
		n += len(lines[first]) + 1
	}
	return tail[cut:], first
}

var (
	// glogRecord is a glog or absl log line's prefix, "E1127 02:26:50.166867    1790 file.cc:12] ",
	// also as PyTorch prints it behind its rank ("[rank1]:[E1218 20:27:21.433063423 ...]").
	glogRecord = regexp.MustCompile(`^(?:\[rank\d+\]:)?\[?([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+ `)
	ncclWarn   = regexp.MustCompile(` NCCL WARN `)
)

const tracebackHeader = "Traceback (most recent call last):"

// keepLines picks the lines that matter from lines, in their order, within MaxKeptBytes.
func keepLines(lines []string) []string {
	// Candidates in priority order, each a set of line indexes kept whole or not at all.
	var candidates [][]int
	if tb := firstTraceback(lines); tb != nil {
		candidates = append(candidates, tb)
	}
	var fatal, errs, warns [][]int
	for i := 0; i < len(lines); i++ {
		if m := glogRecord.FindStringSubmatch(lines[i]); m != nil {
			end := recordEnd(lines, i)
			switch m[1] {
			case "F":
				fatal = append(fatal, span(i, end))
			case "E":
				errs = append(errs, span(i, end))
			}
			i = end - 1
			continue
		}
		if ncclWarn.MatchString(lines[i]) {
			warns = append(warns, []int{i})
		}
	}
	candidates = append(candidates, fatal...)
	candidates = append(candidates, errs...)
	candidates = append(candidates, warns...)

	keep := make([]bool, len(lines))
	seen := map[string]bool{}
	budget := MaxKeptBytes
	for _, c := range candidates {
		size, dup := 0, true
		for _, i := range c {
			if !keep[i] {
				size += len(clip(lines[i])) + 1
			}
			if !seen[recordText(lines[i])] {
				dup = false
			}
		}
		if dup || size > budget {
			continue // the same words again, or too big for what is left: a smaller one may fit
		}
		budget -= size
		for _, i := range c {
			keep[i] = true
			seen[recordText(lines[i])] = true
		}
	}
	var out []string
	for i, k := range keep {
		if k {
			out = append(out, clip(lines[i]))
		}
	}
	return out
}

func span(from, to int) []int {
	s := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// firstTraceback is the lines to keep of the first Python traceback in lines, nil if there
// is none: its header, its last frame (the "File" line and the source under it) and the
// exception line. A traceback may be prefixed (torchrun's "[rank2]: "): its frames are the
// lines with that prefix and more indentation, its exception line the first with the prefix
// and none.
func firstTraceback(lines []string) []int {
	for h, l := range lines {
		at := strings.Index(l, tracebackHeader)
		if at < 0 {
			continue
		}
		prefix := l[:at]
		lastFile, exc := -1, -1
		for i := h + 1; i < len(lines); i++ {
			rest, ok := strings.CutPrefix(lines[i], prefix)
			if !ok {
				break
			}
			if strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "\t") {
				if strings.HasPrefix(strings.TrimLeft(rest, " \t"), "File ") {
					lastFile = i
				}
				continue
			}
			if rest != "" {
				exc = i
			}
			break
		}
		keep := []int{h}
		if lastFile >= 0 {
			keep = append(keep, lastFile)
			// The source line under the frame, not the carets under it.
			if next := lastFile + 1; next < len(lines) && next != exc && strings.HasPrefix(lines[next], prefix) &&
				strings.Trim(strings.TrimPrefix(lines[next], prefix), " \t^~") != "" {
				keep = append(keep, next)
			}
		}
		if exc >= 0 {
			keep = append(keep, exc)
		}
		return keep
	}
	return nil
}

// recordEnd is the end (exclusive) of the log record that starts at line i: its continuation
// lines run up to the next record, a blank line, a stack trace or source-location trace
// that follows it, or maxRecordLines.
func recordEnd(lines []string, i int) int {
	end := i + 1
	for end < len(lines) && end-i <= maxRecordLines {
		l := lines[end]
		if l == "" || glogRecord.MatchString(l) || strings.HasPrefix(l, "=== Source Location Trace") ||
			strings.HasPrefix(l, "*** Check failure stack trace") || strings.HasPrefix(l, "    @ ") ||
			strings.Contains(l, tracebackHeader) {
			break
		}
		end++
	}
	return end
}

// recordText is a line without its glog prefix's time and thread: the same words logged
// twice count once.
func recordText(l string) string {
	if loc := glogRecord.FindStringIndex(l); loc != nil {
		if _, after, found := strings.Cut(l[loc[1]:], "] "); found {
			return after
		}
	}
	return l
}

func clip(l string) string {
	if len(l) <= maxKeptLine {
		return l
	}
	return l[:maxKeptLine] + "…"
}
