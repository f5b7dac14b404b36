package realnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/barrier"
	"github.com/faultline-dev/faultline/test/cluster"
)

// BenchmarkRealNodeRestartAllContainers: what the kubelet itself takes to restart pods in
// place (RestartAllContainers), by where a barrier sits. 16 pods on one real node, their
// workers killed at once; the time until every pod's worker runs again in a new container.
// No faultline controller or agent takes part: this measures the kubelet and the runtime,
// with the benchmark giving each barrier its go signal through its socket the moment it
// listens, as the node agent does (docs/benchmarks.md, "The floor under a restart that moves
// pods"). The shapes:
//
//   - containers=worker: the worker alone, no barrier (what recreating's pods have);
//
//   - containers=worker+image-volume: the same with the barrier's image volume mounted in the
//     worker, and no barrier: what the image volume alone costs;
//
//   - containers=init+worker: an init container that exits 0 at once (the test worker's
//     --exit-at-once), a barrier already open: what an init container alone costs;
//
//   - barrier=init: faultline-barrier as the init container, as a restart in place's pod
//     has it today;
//
//   - barrier=in-worker: faultline-barrier as the worker container's entrypoint from an
//     image volume of its image (`faultline-barrier supervise -- /worker`), which starts
//     the worker as its child on its go signal: one container per pod, nothing for the
//     kubelet between the open and the worker. (Until issue 56 the barrier became the
//     worker, `faultline-barrier exec`; the kubelet's restart of the container is the same.)
//
//     go test -run '^$' -bench RealNodeRestartAllContainers -benchtime 1x ./test/e2e/realnode/
func BenchmarkRealNodeRestartAllContainers(b *testing.B) {
	const pods = 16
	took := map[string]time.Duration{}
	shapes := []restartShape{shapeWorkerAlone, shapeImageVolume, shapeInitAtOnce, shapeBarrierInit, shapeBarrierInWorker}
	for _, s := range shapes {
		b.Run(s.name, func(b *testing.B) {
			var sum time.Duration
			for i := range b.N {
				sum += restartAll(b, fmt.Sprintf("restart-all-%d-%s", i, s.group), pods, s)
			}
			took[s.name] = sum / time.Duration(b.N)
			b.ReportMetric(took[s.name].Seconds(), "s/restart")
		})
	}
	if alone := took[shapeWorkerAlone.name]; alone > 0 {
		for _, s := range shapes[1:] {
			if took[s.name] > 0 {
				b.Logf("%d pods, %s: %.2f× the kubelet's restart of the worker alone", pods, s.name, took[s.name].Seconds()/alone.Seconds())
			}
		}
	}
}

// restartShape is where a BenchmarkRealNodeRestartAllContainers pod's barrier sits.
type restartShape struct {
	name, group string
	// barrier: the pod's barrier waits for a go signal (the benchmark gives it).
	barrier bool
	shape   func(*corev1.Pod)
}

// The image volume that holds faultline-barrier in the worker's container, and where.
const (
	barrierVolume = "faultline-barrier"
	barrierMount  = "/faultline"
)

var (
	shapeWorkerAlone = restartShape{name: "containers=worker", group: "worker", shape: func(p *corev1.Pod) {}}
	shapeImageVolume = restartShape{name: "containers=worker+image-volume", group: "image-volume", shape: withBarrierVolume}
	shapeInitAtOnce  = restartShape{name: "containers=init+worker", group: "init", shape: func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "barrier", Image: cluster.WorkerImage, ImagePullPolicy: corev1.PullNever, Args: []string{"--exit-at-once"}}}
	}}
	shapeBarrierInit = restartShape{name: "barrier=init", group: "barrier-init", barrier: true, shape: func(p *corev1.Pod) {
		withRunVolume(p, true)
		p.Spec.InitContainers = []corev1.Container{{Name: v1alpha1.BarrierContainer, Image: cluster.BarrierImage, ImagePullPolicy: corev1.PullNever,
			VolumeMounts: []corev1.VolumeMount{{Name: v1alpha1.RunVolume, MountPath: v1alpha1.RunDir}}}}
	}}
	shapeBarrierInWorker = restartShape{name: "barrier=in-worker", group: "barrier-in-worker", barrier: true, shape: func(p *corev1.Pod) {
		withRunVolume(p, false)
		withBarrierVolume(p)
		p.Spec.Containers[0].Command = []string{barrierMount + barrier.Binary, barrier.CommandSupervise, "--", cluster.WorkerProgram}
	}}
)

// withBarrierVolume mounts the barrier's image in pod's worker, as an image volume.
func withBarrierVolume(p *corev1.Pod) {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: barrierVolume, VolumeSource: corev1.VolumeSource{
		Image: &corev1.ImageVolumeSource{Reference: cluster.BarrierImage, PullPolicy: corev1.PullNever}}})
	w := &p.Spec.Containers[0]
	w.VolumeMounts = append(w.VolumeMounts, corev1.VolumeMount{Name: barrierVolume, MountPath: barrierMount, ReadOnly: true})
}

// withRunVolume gives pod the barrier's run volume, mounted in its worker read-only when
// the barrier is another container. Not in memory, as faultline's is: the benchmark reaches
// the barrier's socket through the kubelet's directory of the volume.
func withRunVolume(p *corev1.Pod, readOnly bool) {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: v1alpha1.RunVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	w := &p.Spec.Containers[0]
	w.VolumeMounts = append(w.VolumeMounts, corev1.VolumeMount{Name: v1alpha1.RunVolume, MountPath: v1alpha1.RunDir, ReadOnly: readOnly})
}

// restartAll measures one round of BenchmarkRealNodeRestartAllContainers.
func restartAll(b *testing.B, group string, n int, s restartShape) time.Duration {
	b.StopTimer()
	defer b.StartTimer()
	ctx, c, ns := scenario(b, 5*time.Minute)
	node := c.Real.Nodes[0]
	const labelGroup = "test.faultline.dev/restart-all"
	sel := labels.SelectorFromSet(labels.Set{labelGroup: group})
	var uids []types.UID
	for i := range n {
		p := inPlacePod(fmt.Sprintf("%s-%d", group, i), node.Name)
		p.Labels[labelGroup] = group
		p.Spec.InitContainers = nil
		s.shape(p)
		p, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		uids = append(uids, p.UID)
	}
	// up holds once every pod's worker runs in a container that is not one of old; seen
	// keeps when the API first showed each.
	up := func(old map[string]bool, seen map[string]time.Time) func([]*corev1.Pod) (bool, error) {
		return func(pods []*corev1.Pod) (bool, error) {
			for _, p := range pods {
				if _, ok := seen[p.Name]; ok {
					continue
				}
				if ws := containerStatus(p, "worker"); running(ws) && !old[ws.ContainerID] {
					seen[p.Name] = time.Now()
				}
			}
			return len(seen) == n, nil
		}
	}
	opened := func(attempt int) <-chan []time.Time {
		if !s.barrier {
			return nil
		}
		return openBarriers(ctx, b, node, uids, attempt)
	}
	first := opened(1)
	pods, err := c.WaitPods(ctx, ns, sel, up(nil, map[string]time.Time{}))
	if err != nil {
		b.Fatalf("the %d pods' workers are not running: %v", n, err)
	}
	if first != nil {
		<-first
		if b.Failed() {
			b.FailNow()
		}
	}
	// What is measured is the kill's restart of running workers: a barrier whose worker
	// could not start (as one that named the wrong program did) must fail the benchmark,
	// not be measured as a restart.
	workersStarted(ctx, b, c, ns, pods)
	list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		b.Fatal(err)
	}
	old := map[string]bool{}
	for i := range list.Items {
		p := &list.Items[i]
		ws := containerStatus(p, "worker")
		if ws.RestartCount > 0 || !running(ws) {
			b.Fatalf("pod %s's worker restarted before the kill (%d times, its last state %s)", p.Name, ws.RestartCount, stateOf(ws.LastTerminationState))
		}
		old[ws.ContainerID] = true
	}

	b.StartTimer()
	start := time.Now()
	for i := range list.Items {
		killWorker(ctx, b, c, node, &list.Items[i], "SIGKILL")
	}
	again := opened(2)
	seen := map[string]time.Time{}
	if _, err := c.WaitPods(ctx, ns, sel, up(old, seen)); err != nil {
		b.Fatalf("the %d pods' workers did not run again: %v", n, err)
	}
	shown := sinceAll(start, slices.Collect(maps.Values(seen)))
	took := shown[n-1]
	if again != nil {
		at := <-again
		if b.Failed() {
			b.FailNow() // a barrier not opened: its time is none
		}
		opens := sinceAll(start, at)
		took = max(took, opens[n-1])
		b.Logf("%d pods, %s: barriers opened %s at the median, the last %s after the kill; the API showed the new worker containers running %s at the median, the last %s",
			n, s.name, opens[n/2].Round(time.Millisecond), opens[n-1].Round(time.Millisecond), shown[n/2].Round(time.Millisecond), shown[n-1].Round(time.Millisecond))
	}
	b.StopTimer()
	workersStarted(ctx, b, c, ns, pods)
	b.Logf("%d pods, %s: every worker killed and running again in %s", n, s.name, took.Round(time.Millisecond))

	deletePods(ctx, b, c, ns, sel)
	return took
}

// workerStartLine is what the test worker logs first (test/worker).
const workerStartLine = "worker start:"

// workersStarted returns once the current worker container of each of pods has logged its
// start (followed, not polled), and fails the benchmark at ctx's end.
func workersStarted(ctx context.Context, b *testing.B, c *cluster.Cluster, ns string, pods []*corev1.Pod) {
	var wg sync.WaitGroup
	for _, p := range pods {
		wg.Go(func() {
			logs, err := c.Client.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "worker", Follow: true}).Stream(ctx)
			if err != nil {
				b.Errorf("the log of pod %s: %v", p.Name, err)
				return
			}
			defer logs.Close()
			var seen []string
			for sc := bufio.NewScanner(logs); sc.Scan(); {
				if strings.Contains(sc.Text(), workerStartLine) {
					return
				}
				seen = append(seen, sc.Text())
			}
			b.Errorf("the worker of pod %s never logged its start; it logged:\n%s", p.Name, strings.Join(seen, "\n"))
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// openBarriers gives the barrier of each pod (by UID, on node) the go signal of attempt as
// soon as it listens, through its socket in the pod's run volume, as the node agent does;
// the channel yields when each opened, once the last one did. A barrier that never listens
// fails the benchmark at ctx's end.
func openBarriers(ctx context.Context, b *testing.B, node *cluster.RealNode, uids []types.UID, attempt int) <-chan []time.Time {
	var wg sync.WaitGroup
	at := make([]time.Time, len(uids))
	for i, uid := range uids {
		dir := filepath.Join(node.RootDir, "pods", string(uid), "volumes", "kubernetes.io~empty-dir", v1alpha1.RunVolume)
		wg.Go(func() {
			for {
				err := openThrough(ctx, dir, attempt)
				if err == nil {
					at[i] = time.Now()
					return
				}
				if !errors.Is(err, barrier.ErrNotWaiting) && !errors.Is(err, unix.ENOENT) {
					b.Errorf("open the barrier of pod %s for attempt %d: %v", uid, attempt, err)
					return
				}
				select {
				case <-ctx.Done():
					b.Errorf("the barrier of pod %s never listened for attempt %d: %v", uid, attempt, err)
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		})
	}
	done := make(chan []time.Time, 1)
	go func() { wg.Wait(); done <- at }()
	return done
}

// sinceAll is how long after start each of ts came, in order.
func sinceAll(start time.Time, ts []time.Time) []time.Duration {
	d := make([]time.Duration, len(ts))
	for i, t := range ts {
		d[i] = t.Sub(start)
	}
	slices.Sort(d)
	return d
}

// openThrough opens the barrier whose socket is in dir, through a descriptor of dir
// (barrier.SocketAt): the kubelet's path of a pod's volume is longer than a socket address
// may be.
func openThrough(ctx context.Context, dir string, attempt int) error {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("the run volume %s: %w", dir, err)
	}
	defer unix.Close(fd)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return barrier.Open(ctx, barrier.SocketAt(fd), attempt, barrier.NoIndex)
}
