package nodeagent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/barrier"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/nodeagent/termmsg"
)

// A worker's first progress: the goodput ledger counts an attempt as starting until its
// gang's first progress (issue: "start until the gang's first progress"), and the one
// definition of progress the product has is the worker's own output. Where progress is
// watched, the watch finds, once per incarnation, the worker's first line in its log after
// the incarnation began (the container runtime stamps each line to the nanosecond) and says
// so on the pod (the Progressing condition): one status patch per worker and attempt, none
// before the worker writes. A supervising barrier's own lines are not the worker's: in its
// container's log only what follows the marker of the attempt counts (barrier.AttemptMarker).

// firstLook is what the watch knows of a pod's first progress.
type firstLook struct {
	// start is the incarnation it is about; written, whether its Progressing condition is
	// written; scanned, the logs' last growth when they were last read for it (the logs are
	// read again only once they grew since).
	start   time.Time
	written bool
	scanned time.Time
}

// maxFirstOutputScan bounds what one look reads of a log: the kubelet rotates a container's
// log at its containerLogMaxSize (10 MiB by default), so this reads every current log whole.
const maxFirstOutputScan = 64 << 20

// firstProgress writes pod's Progressing condition once its worker's incarnation that began
// at start has written a line (lastOutput is when its logs last grew).
func (w *ProgressWatch) firstProgress(ctx context.Context, pod *corev1.Pod, running map[string]time.Time, start, lastOutput time.Time) error {
	w.mu.Lock()
	look, known := w.first[pod.UID]
	w.mu.Unlock()
	if !known || !look.start.Equal(start) {
		_, written := exitclass.FirstProgress(pod, start)
		look = firstLook{start: start, written: written}
	}
	if look.written || !lastOutput.After(start) || look.scanned.Equal(lastOutput) {
		w.rememberFirst(pod.UID, look)
		return nil
	}
	at, found, err := firstOutput(w.cfg.LogDir, pod, running)
	if err != nil {
		return err
	}
	look.scanned = lastOutput
	if found {
		if err := w.cfg.Writer.MarkProgressing(ctx, pod, at); err != nil {
			return err
		}
		look.written = true
		w.log.Info("a worker's incarnation shows its first progress", "pod", pod.Namespace+"/"+pod.Name,
			"started", formatTime(start), "firstOutput", formatTime(at))
	}
	w.rememberFirst(pod.UID, look)
	return nil
}

func (w *ProgressWatch) rememberFirst(uid types.UID, look firstLook) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.first[uid] = look
}

// firstOutput is the earliest first line of the running containers' incarnations (name →
// when it began) in their current logs; false while none has written one.
func firstOutput(dir string, pod *corev1.Pod, running map[string]time.Time) (time.Time, bool, error) {
	podDir := filepath.Join(dir, pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))
	var first time.Time
	for name, since := range running {
		entries, err := os.ReadDir(filepath.Join(podDir, name))
		if err != nil {
			return time.Time{}, false, fmt.Errorf("cannot read the log of container %s: %w", name, err)
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".log") || e.IsDir() {
				continue // a rotated log holds what came before the current one
			}
			at, ok, err := firstLineIn(filepath.Join(podDir, name, e.Name()), since)
			if err != nil {
				return time.Time{}, false, err
			}
			if ok && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
	}
	return first, !first.IsZero(), nil
}

func firstLineIn(path string, since time.Time) (time.Time, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("cannot read log %s: %w", path, err)
	}
	defer f.Close()
	at, ok, err := FirstLine(io.LimitReader(f, maxFirstOutputScan), since)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("log %s: %w", path, err)
	}
	return at, ok, nil
}

// FirstLine reads a container log in the CRI format ("<RFC 3339 time> <stream> <tag>
// <text>", what the kubelet keeps under /var/log/pods) and returns the time of the worker's
// first line at or after since: on each stream, after the last attempt marker of a
// supervising barrier where there is one (its own lines before it are not the worker's), and
// the earliest of the two streams. False when there is none yet. Pure.
func FirstLine(r io.Reader, since time.Time) (time.Time, bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	first := map[string]time.Time{}
	marked := map[string]bool{}
	anyMarker := false
	for sc.Scan() {
		l, ok := termmsg.ParseCRILine(sc.Bytes())
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, string(l.Time))
		if err != nil {
			continue
		}
		stream := l.Stream
		if _, marker := barrier.ParseAttemptMarker(string(l.Content)); marker {
			anyMarker, marked[stream] = true, true
			delete(first, stream) // what came before was an earlier attempt's, or the barrier's
			continue
		}
		if at.Before(since) || (anyMarker && !marked[stream]) {
			continue
		}
		if _, seen := first[stream]; !seen {
			first[stream] = at
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
		return time.Time{}, false, err
	}
	var out time.Time
	for stream, at := range first {
		if anyMarker && !marked[stream] {
			continue // the barrier's line on a stream whose marker had not come yet
		}
		if out.IsZero() || at.Before(out) {
			out = at
		}
	}
	return out, !out.IsZero(), nil
}

// MarkProgressing puts the Progressing condition on pod (see ProgressWriter): its
// incarnation's first output at at. One status patch, with the pod's UID as its precondition.
func (w *Writer) MarkProgressing(ctx context.Context, pod *corev1.Pod, at time.Time) error {
	if err := w.ownRunPod(pod); err != nil {
		return err
	}
	return w.patchPod(ctx, pod, podMark{cond: obj{
		"type":               v1alpha1.PodConditionProgressing,
		"status":             corev1.ConditionTrue,
		"reason":             v1alpha1.ProgressSignalOutput,
		"message":            "first output of the worker's incarnation at " + formatTime(at),
		"lastTransitionTime": metav1.NewTime(at),
	}}, "progressing")
}
