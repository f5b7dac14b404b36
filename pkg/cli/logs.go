package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	attemptpkg "github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/barrier"
)

// AnnotationKwokNode marks a node simulated by kwok: it has no kubelet to serve logs.
const AnnotationKwokNode = "kwok.x-k8s.io/node"

// LogsOptions select the pods of a run whose logs to show.
type LogsOptions struct {
	// Index is the completion index, -1 for every worker.
	Index int
	// Attempt is the attempt, 0 for the current one.
	Attempt int32
	// Container defaults to the pod's first container (the worker).
	Container string
	Follow    bool
	// Tail is the number of lines from the end, -1 for all.
	Tail int64
	// Since shows only the lines written this long ago or later; 0 shows all.
	Since time.Duration
	// Timestamps starts each line with the time the runtime read it (RFC 3339).
	Timestamps bool
	// Previous reads each worker container's previous instance: for a worker restarted in
	// place, the process of the attempt before (kubectl logs --previous).
	Previous bool
	// MaxStreams caps the log streams open at once (one per worker): without --follow the
	// workers are read that many at a time; with it, more workers than that is an error,
	// since every stream stays open.
	MaxStreams int
}

// DefaultMaxStreams is --max-streams' default.
const DefaultMaxStreams = 32

// Logs streams the logs of a run's workers to out, each line prefixed with its index when
// there are several. Pods whose logs cannot be read are reported on errOut; Logs fails
// only if no pod's logs could be read.
func Logs(ctx context.Context, kube kubernetes.Interface, runs *Runs, name string, o LogsOptions, out, errOut io.Writer) error {
	run, err := runs.Get(ctx, name)
	if err != nil {
		return err
	}
	attempt := o.Attempt
	if attempt == 0 {
		attempt = run.Status.Attempt
	}
	set := labels.Set{v1alpha1.LabelRun: name}
	if o.Index >= 0 {
		set[batchv1.JobCompletionIndexAnnotation] = strconv.Itoa(o.Index)
	}
	sel := set.AsSelector()
	made, err := labels.NewRequirement(v1alpha1.LabelAttempt, selection.In, madeFor(run, attempt))
	if err != nil {
		return err
	}
	sel = sel.Add(*made)
	list, err := kube.CoreV1().Pods(runs.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return fmt.Errorf("list pods of trainingrun %s: %w", name, err)
	}
	pods := list.Items
	if len(pods) == 0 {
		which := fmt.Sprintf("attempt %d", attempt)
		if o.Index >= 0 {
			which = fmt.Sprintf("index %d of attempt %d", o.Index, attempt)
		}
		return fmt.Errorf("trainingrun %s has no pods for %s: they are gone (a restart deletes the pods of the attempt before) or not created yet", name, which)
	}
	sort.Slice(pods, func(i, j int) bool {
		if a, b := podIndex(&pods[i]), podIndex(&pods[j]); a != b {
			return a < b
		}
		return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp)
	})
	maxStreams := o.MaxStreams
	if maxStreams <= 0 {
		maxStreams = DefaultMaxStreams
	}
	if o.Follow && len(pods) > maxStreams {
		return UsageError("--follow keeps one stream open per worker: %d workers, but --max-streams is %d: raise it, or follow one worker with --index", len(pods), maxStreams)
	}
	simulated := map[string]bool{}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ok   int
		slot = make(chan struct{}, maxStreams)
	)
	prefix := len(pods) > 1
	for i := range pods {
		if o.Follow && o.Tail >= 0 && attemptpkg.BarrierOf(&pods[i]).Place == attemptpkg.BarrierInWorker {
			return UsageError("--tail with --follow: the workers of %s share their container's log with the run's other attempts (their barrier supervises them), so the last lines of one attempt are known only at the end: drop --tail or --follow", name)
		}
	}
	for i := range pods {
		pod := &pods[i]
		if why := logsUnavailable(ctx, kube, pod, simulated); why != "" {
			fmt.Fprintf(errOut, "%s: %s\n", podLabel(pod), why)
			continue
		}
		wg.Add(1)
		slot <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slot }()
			err := streamPod(ctx, kube, pod, o, attempt, out, &mu, prefix)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fmt.Fprintf(errOut, "%s: logs unavailable: %s\n", podLabel(pod), logError(err))
				return
			}
			ok++
		}()
	}
	wg.Wait()
	if ok == 0 {
		return errors.New("no logs could be read")
	}
	return nil
}

// madeFor are the values of the attempt label of the pods that ran attempt n: n itself, and,
// for an attempt that restarted in place, the attempts since its Job's whose pods restarted
// where they stood (a pod keeps the attempt it was made for).
func madeFor(run *v1alpha1.TrainingRun, n int32) []string {
	first := n
	for _, rec := range run.Status.Attempts {
		if rec.Attempt == n && rec.JobAttempt > 0 && rec.JobAttempt < n {
			first = rec.JobAttempt
		}
	}
	var out []string
	for k := first; k <= n; k++ {
		out = append(out, strconv.Itoa(int(k)))
	}
	return out
}

func podLabel(p *corev1.Pod) string {
	if i := podIndex(p); i >= 0 {
		return fmt.Sprintf("index %d (pod %s)", i, p.Name)
	}
	return "pod " + p.Name
}

// logsUnavailable says why a pod's logs cannot be read, before asking for them.
func logsUnavailable(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, simulated map[string]bool) string {
	node := pod.Spec.NodeName
	if node == "" {
		return "not scheduled to a node yet: no logs"
	}
	sim, seen := simulated[node]
	if !seen {
		if n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
			_, sim = n.Annotations[AnnotationKwokNode]
		}
		simulated[node] = sim
	}
	if sim {
		return fmt.Sprintf("runs on node %s, which is simulated (kwok): it has no container runtime, so there are no logs to show", node)
	}
	if pod.Status.Phase == corev1.PodPending {
		return "still Pending: no logs yet"
	}
	return ""
}

func streamPod(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, o LogsOptions, n int32, out io.Writer, mu *sync.Mutex, prefix bool) error {
	container := o.Container
	if container == "" && len(pod.Spec.Containers) > 0 {
		container = pod.Spec.Containers[0].Name
	}
	var keep *attemptLines
	opts := podLogOptions(o, container)
	if b := attemptpkg.BarrierOf(pod); b.Place == attemptpkg.BarrierInWorker && container == b.Container && !o.Previous {
		// Every attempt the pod ran is in this container's log: the kubelet is asked for
		// all of it, with timestamps, and the lines of attempt n are picked here.
		keep = &attemptLines{attempt: int(n), o: o, now: time.Now()}
		opts.Timestamps, opts.TailLines, opts.SinceSeconds = true, nil, nil
	}
	rc, err := kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, opts).Stream(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	tag := ""
	if prefix {
		tag = fmt.Sprintf("[index %d] ", podIndex(pod))
	}
	err = copyLines(rc, keep, func(line string) {
		mu.Lock()
		fmt.Fprintf(out, "%s%s\n", tag, line)
		mu.Unlock()
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// copyLines writes each line of r, or only those keep picks (keep nil: every line), the last
// --tail of them at the end.
func copyLines(r io.Reader, keep *attemptLines, write func(string)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if keep == nil {
			write(sc.Text())
			continue
		}
		line, ok, over := keep.take(sc.Text())
		if over {
			break
		}
		if ok && !keep.tailing() {
			write(line)
		}
	}
	if keep != nil {
		for _, line := range keep.tail {
			write(line)
		}
	}
	return sc.Err()
}

// attemptLines picks one attempt's lines out of the log of a container whose barrier
// supervises its worker (attempt.BarrierInWorker): the barrier writes a marker on stdout
// and on stderr as it starts each attempt's worker (barrier.AttemptMarker), and an
// attempt's lines run from the first of its markers to the first of the next attempt's (the
// runtime copies the two streams into the log apart: a worker's line on one may come before
// the marker on the other, never before the marker on its own). The log is read with the
// kubelet's timestamps; --since and --tail apply to the attempt's lines here, and the
// timestamps are shown only if asked for.
type attemptLines struct {
	attempt int
	o       LogsOptions
	now     time.Time
	current int      // the attempt of the lines read, by the last marker (0: before any)
	tail    []string // with --tail, the last lines kept
}

// take reads one line of the log: the line to show and whether to show it, or over once
// a later attempt's lines begin.
func (a *attemptLines) take(raw string) (line string, ok, over bool) {
	ts, text, _ := strings.Cut(raw, " ")
	if n, marker := barrier.ParseAttemptMarker(text); marker {
		if n == a.current {
			return "", false, false // the marker's copy on the other stream: shown once
		}
		a.current = n
	}
	if a.current > a.attempt {
		return "", false, true
	}
	if a.current != a.attempt {
		return "", false, false
	}
	if a.o.Since > 0 {
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil && t.Before(a.now.Add(-a.o.Since)) {
			return "", false, false
		}
	}
	line = text
	if a.o.Timestamps {
		line = raw
	}
	if a.tailing() {
		a.tail = append(a.tail, line)
		if int64(len(a.tail)) > a.o.Tail {
			a.tail = a.tail[1:]
		}
	}
	return line, true, false
}

// tailing: only the last --tail lines are shown, at the end (never with --follow: Logs
// refuses the two together for such a log).
func (a *attemptLines) tailing() bool { return a.o.Tail >= 0 && !a.o.Follow }

// podLogOptions is what the kubelet is asked for one worker's container.
func podLogOptions(o LogsOptions, container string) *corev1.PodLogOptions {
	opts := &corev1.PodLogOptions{Container: container, Follow: o.Follow, Timestamps: o.Timestamps, Previous: o.Previous}
	if o.Tail >= 0 {
		opts.TailLines = ptr.To(o.Tail)
	}
	if o.Since > 0 {
		// The kubelet counts whole seconds: round up, so that nothing asked for is left out.
		opts.SinceSeconds = ptr.To(int64((o.Since + time.Second - 1) / time.Second))
	}
	return opts
}

func logError(err error) string {
	msg, _ := Message(err, "")
	return msg
}
