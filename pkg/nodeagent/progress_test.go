package nodeagent

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/barrier"
)

// worker makes the pod a run's worker with a progress deadline, its container "worker"
// running since started.
func (b *podBuilder) worker(deadline string, started time.Time) *podBuilder {
	b.run("r")
	if deadline != "" {
		b.p.Annotations = map[string]string{v1alpha1.AnnotationProgressDeadline: deadline}
	}
	b.p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}}}}
	return b
}

// writeLog makes pod's worker log, last written at t, in the kubelet's layout under dir.
func writeLog(t *testing.T, dir string, pod *corev1.Pod, at time.Time) {
	t.Helper()
	f := logFile(t, dir, pod, "2026-03-01T12:00:00Z stdout F step 1\n", at)
	// A rotated log is older and does not count.
	old := f + ".20260301-115900"
	if err := os.WriteFile(old, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(old, at.Add(time.Hour), at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
}

// emptyLog makes pod's worker log as the runtime makes it at the container's start, at at,
// before the worker writes anything.
func emptyLog(t *testing.T, dir string, pod *corev1.Pod, at time.Time) {
	t.Helper()
	logFile(t, dir, pod, "", at)
}

// logFile writes pod's worker's current log (content, modified at at) and returns its path.
func logFile(t *testing.T, dir string, pod *corev1.Pod, content string, at time.Time) string {
	t.Helper()
	d := filepath.Join(dir, pod.Namespace+"_"+pod.Name+"_"+string(pod.UID), "worker")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(d, "0.log")
	if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(f, at, at); err != nil {
		t.Fatal(err)
	}
	return f
}

func noProgressCond(p *corev1.Pod) *corev1.PodCondition {
	return podCond(p, v1alpha1.PodConditionNoProgress)
}

// podCond is the pod's condition of type typ, nil if it has none.
func podCond(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// newTestWatch is a progress watch of the writer w over pods, with the logs under dir, its
// clock at start.
func newTestWatch(t *testing.T, w *Writer, dir string, start time.Time, pods ...*corev1.Pod) (*ProgressWatch, *clocktesting.FakePassiveClock) {
	t.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, p := range pods {
		if err := indexer.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	clock := clocktesting.NewFakePassiveClock(start)
	watch, err := NewProgressWatch(ProgressConfig{Node: node, Pods: corelisters.NewPodLister(indexer), Writer: w, LogDir: dir,
		Clock: clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return watch, clock
}

// The watch says once that a worker has been silent for its deadline, with when it last
// wrote, and takes it back when it writes again; a worker that writes, a pod without a
// deadline and a pod of another node are never written.
func TestProgressWatch(t *testing.T) {
	dir := t.TempDir()
	silent := makePod("silent").worker("60", t0).obj()
	chatty := makePod("chatty").worker("60", t0).obj()
	mute := makePod("mute").worker("60", t0.Add(15*time.Second)).obj() // never wrote a line
	off := makePod("off").worker("", t0).obj()
	other := makePod("other").worker("60", t0).onNode("gpu-8").obj()
	w, client := newTestWriter(t, false, silent, chatty, mute, off, other)
	watch, clock := newTestWatch(t, w, dir, t0, silent, chatty, mute, off, other)
	check := func(at time.Time) {
		t.Helper()
		clock.SetTime(at)
		writeLog(t, dir, chatty, at.Add(-time.Second))
		if err := watch.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	writeLog(t, dir, silent, t0.Add(10*time.Second))
	writeLog(t, dir, off, t0)
	writeLog(t, dir, other, t0)
	emptyLog(t, dir, mute, t0.Add(15*time.Second)) // the runtime makes it as it starts the container

	check(t0.Add(69 * time.Second)) // 59 s after the silent one's last line
	if n := len(patches(client)); n != 0 {
		t.Fatalf("%d writes before any deadline, want none", n)
	}
	check(t0.Add(70 * time.Second))
	if n := len(patches(client)); n != 1 {
		t.Fatalf("%d writes once the silent worker's deadline passed, want 1", n)
	}
	c := noProgressCond(getPod(t, client, "silent"))
	if c == nil || c.Status != corev1.ConditionTrue || c.Reason != v1alpha1.ProgressSignalLog || !c.LastTransitionTime.Time.Equal(t0.Add(10*time.Second).Truncate(time.Second)) ||
		!strings.Contains(c.Message, "no output in the log of container worker since 2026-03-01T12:00:10.123456789Z: the run's progress deadline is 1m0s") {
		t.Fatalf("the silent worker's condition: %+v", c)
	}
	check(t0.Add(80 * time.Second)) // said already; the worker that never wrote is silent 65 s
	if n := len(patches(client)); n != 2 {
		t.Fatalf("%d writes, want 2 (the silent one once, the mute one once)", n)
	}
	if c := noProgressCond(getPod(t, client, "mute")); c == nil || !strings.Contains(c.Message, "since it started at 2026-03-01T12:00:15") {
		t.Errorf("the worker that never wrote: %+v", c)
	}
	check(t0.Add(90 * time.Second))
	if n := len(patches(client)); n != 2 {
		t.Fatalf("%d writes while nothing changed, want 2", n)
	}
	// The silent worker writes again: the condition goes, once.
	writeLog(t, dir, silent, t0.Add(95*time.Second))
	check(t0.Add(96 * time.Second))
	check(t0.Add(97 * time.Second))
	if n := len(patches(client)); n != 3 {
		t.Fatalf("%d writes after the silent worker wrote again, want 3", n)
	}
	if c := noProgressCond(getPod(t, client, "silent")); c != nil {
		t.Errorf("the condition stayed on a worker that writes again: %+v", c)
	}
	for _, name := range []string{"chatty", "off", "other"} {
		if c := noProgressCond(getPod(t, client, name)); c != nil {
			t.Errorf("pod %s was marked: %+v", name, c)
		}
	}
}

// A worker's last progress is its last output or its start, whichever is later: a worker
// restarted in place has not been silent since its predecessor's last line.
func TestProgressOf(t *testing.T) {
	pod := makePod("p").obj()
	for name, tc := range map[string]struct {
		running  map[string]time.Time
		output   time.Time
		now      time.Time
		since    time.Time
		silent   bool
		fromLogs bool
	}{
		"its last line":                {running: map[string]time.Time{"w": t0}, output: t0.Add(time.Minute), now: t0.Add(2 * time.Minute), since: t0.Add(time.Minute), silent: true, fromLogs: true},
		"within the deadline":          {running: map[string]time.Time{"w": t0}, output: t0.Add(time.Minute), now: t0.Add(119 * time.Second), since: t0.Add(time.Minute), fromLogs: true},
		"no line yet: its start":       {running: map[string]time.Time{"w": t0}, now: t0.Add(time.Minute), since: t0, silent: true},
		"restarted after its last one": {running: map[string]time.Time{"w": t0.Add(3 * time.Minute)}, output: t0.Add(time.Minute), now: t0.Add(4 * time.Minute), since: t0.Add(3 * time.Minute), silent: true},
		"two containers: the later":    {running: map[string]time.Time{"w": t0, "x": t0.Add(90 * time.Second)}, output: t0.Add(time.Minute), now: t0.Add(2 * time.Minute), since: t0.Add(90 * time.Second)},
	} {
		t.Run(name, func(t *testing.T) {
			p := progressOf(pod, tc.running, tc.output, time.Minute, tc.now)
			if !p.Since.Equal(tc.since) || p.Silent != tc.silent || p.Output != tc.fromLogs {
				t.Errorf("progress %+v, want since %s silent %v from the logs %v", p, tc.since, tc.silent, tc.fromLogs)
			}
		})
	}
}

// Only a worker of a run on the agent's node is written.
func TestNoProgressWritesOnlyItsNodesRunPods(t *testing.T) {
	w, client := newTestWriter(t, false, makePod("p").worker("60", t0).onNode("gpu-8").obj(), makePod("q").obj())
	if err := w.MarkNoProgress(context.Background(), makePod("p").worker("60", t0).onNode("gpu-8").obj(), t0, "x"); err == nil {
		t.Error("a pod of another node was marked")
	}
	if err := w.MarkNoProgress(context.Background(), makePod("q").obj(), t0, "x"); err == nil {
		t.Error("a pod of no run was marked")
	}
	if n := len(patches(client)); n != 0 {
		t.Errorf("%d writes, want none", n)
	}
}

// newProgressWatch is a watch of pods on node with its clock at t0, over logs in dir.
func newProgressWatch(t *testing.T, dir string, pods ...*corev1.Pod) (*ProgressWatch, *clocktesting.FakePassiveClock, *fake.Clientset) {
	t.Helper()
	objs := make([]runtime.Object, len(pods))
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for i, p := range pods {
		objs[i] = p
		if err := indexer.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	w, client := newTestWriter(t, false, objs...)
	clock := clocktesting.NewFakePassiveClock(t0)
	watch, err := NewProgressWatch(ProgressConfig{Node: node, Pods: corelisters.NewPodLister(indexer), Writer: w, LogDir: dir,
		Clock: clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return watch, clock, client
}

// A running worker whose log the agent cannot read (its --pod-log-dir not the kubelet's, or
// not mounted) has progress Unknown, said once with the node and the path: never silence,
// however long it lasts. Once the log can be read, the condition goes.
func TestUnreadableLogIsUnknownNotSilence(t *testing.T) {
	dir := t.TempDir()
	pod := makePod("unread").worker("60", t0).obj()
	watch, clock, client := newProgressWatch(t, dir, pod)
	for _, at := range []time.Duration{70 * time.Second, 10 * time.Minute} {
		clock.SetTime(t0.Add(at))
		if err := watch.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(patches(client)); n != 1 {
		t.Fatalf("%d writes, want 1 (Unknown, once)", n)
	}
	c := noProgressCond(getPod(t, client, "unread"))
	if c == nil || c.Status != corev1.ConditionUnknown || c.Reason != v1alpha1.ProgressUnknownLog ||
		!strings.Contains(c.Message, "node "+node+": cannot read the log of container worker") || !strings.Contains(c.Message, dir) {
		t.Fatalf("condition %+v, want Unknown naming the node and the path", c)
	}
	writeLog(t, dir, pod, t0.Add(599*time.Second))
	if err := watch.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := noProgressCond(getPod(t, client, "unread")); c != nil {
		t.Errorf("the condition stayed once the log could be read: %+v", c)
	}
}

// A supervised worker waiting at its barrier runs no worker: however long the wait, it is
// never marked; once its barrier opens, its progress counts from the recorded open, not
// from the container's start (attempt 1's).
func TestProgressWatchReadsTheIncarnation(t *testing.T) {
	dir := t.TempDir()
	pod := makePod("kept").worker("60", t0).obj()
	pod.Spec.Volumes = []corev1.Volume{{Name: v1alpha1.BarrierVolume, VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "b:1"}}}}
	pod.Spec.Containers = []corev1.Container{{Name: "worker", Command: []string{v1alpha1.BarrierBinary, barrier.CommandSupervise, "--", "train"}}}
	pod.Status.ContainerStatuses[0].ContainerID = "containerd://c0"
	// Stopped for attempt 2 after attempt 1's last line at t0+10s: it waits again.
	rec := v1alpha1.BarrierRecord{ContainerID: "c0", Attempt: 1, StoppedFor: 2, OpenedAt: t0.Format(time.RFC3339Nano)}
	setRecord(t, pod, rec)
	writeLog(t, dir, pod, t0.Add(10*time.Second))
	watch, clock, client := newProgressWatch(t, dir, pod)
	clock.SetTime(t0.Add(10 * time.Minute))
	if err := watch.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(patches(client)); n != 0 {
		t.Fatalf("%d writes on a worker waiting at its barrier, want none", n)
	}
	// Opened for attempt 2 at t0+9m: silent from then, not from t0+10s.
	rec.Attempt, rec.OpenedAt = 2, t0.Add(9*time.Minute).Format(time.RFC3339Nano)
	setRecord(t, pod, rec)
	clock.SetTime(t0.Add(9*time.Minute + 59*time.Second))
	if err := watch.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(patches(client)); n != 0 {
		t.Fatalf("%d writes within a minute (its deadline) of the open, want none", n)
	}
	clock.SetTime(t0.Add(10*time.Minute + time.Second))
	if err := watch.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := noProgressCond(getPod(t, client, "kept"))
	if c == nil || c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Time.Equal(t0.Add(9*time.Minute).Truncate(time.Second)) {
		t.Fatalf("condition %+v, want True since the open of attempt 2 (%s)", c, t0.Add(9*time.Minute))
	}
}

func setRecord(t *testing.T, pod *corev1.Pod, rec v1alpha1.BarrierRecord) {
	t.Helper()
	raw, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[v1alpha1.AnnotationBarrierRecord] = string(raw)
}
