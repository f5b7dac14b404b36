package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/barrier"
	"github.com/faultline-dev/faultline/pkg/envexpand"
	"github.com/faultline-dev/faultline/pkg/framework/expansion"
	"github.com/faultline-dev/faultline/test/cluster"
)

// sparesOnKwok starts a scenario whose runs restart in place with the barrier in their
// worker containers on n kwok nodes that can (the node agents' decisions simulated, their
// records on the nodes' heartbeats), and returns what it needs.
func sparesOnKwok(t *testing.T, n int) (context.Context, *cluster.Cluster, string, runOption) {
	t.Helper()
	ctx, c, ns, _ := scenario(t, "--barrier-image", kwokBarrierImage, "--barrier-in-worker=true")
	nodes, onPool := nodePool(ctx, t, c, ns, n)
	for _, node := range nodes {
		if err := c.MakeInPlaceCapable(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.SimulateInPlaceWith(ctx, ns, cluster.InPlaceSim{RecordsOnHeartbeat: true}); err != nil {
		t.Fatal(err)
	}
	return ctx, c, ns, onPool
}

// spareSelector selects run's pods made as warm spares.
func spareSelector(run string) labels.Selector {
	isSpare, err := labels.NewRequirement(v1alpha1.LabelSpare, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run}).Add(*isSpare)
}

// waitSpares waits until run has n Running spares that hold no index, and returns them.
func waitSpares(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, run string, n int) []*corev1.Pod {
	t.Helper()
	var out []*corev1.Pod
	_, err := c.WaitPods(ctx, ns, spareSelector(run), func(ps []*corev1.Pod) (bool, error) {
		out = slices.DeleteFunc(ps, func(p *corev1.Pod) bool { return !attempt.Spare(p) || p.Status.Phase != corev1.PodRunning })
		return len(out) == n, nil
	})
	if err != nil {
		t.Fatalf("run %s: %d Running spares without an index, want %d: %v", run, len(out), n, err)
	}
	return out
}

// TestE2ESparesNeverRunUserCodeWithoutAnIndex: a run with a warm spare gets it once its
// attempt runs: a pod of its Job with no index (no completion-index label or annotation, no
// hostname of its own), which the node agents never open (its barrier record stays empty
// while the gang's workers are opened). Its barrier, the real faultline-barrier run here as
// the worker container's entrypoint with the environment and command the kubelet makes of
// the spare as the API server stored it, refuses an open that names no index, and the
// worker's program does not start; handed index 1, it starts the program as index 1:
// FAULTLINE_INDEX, JOB_COMPLETION_INDEX, a variable of the template that refers to the
// index, and the command's $(FAULTLINE_INDEX), all 1.
func TestE2ESparesNeverRunUserCodeWithoutAnIndex(t *testing.T) {
	t.Parallel()
	bin, err := cluster.BuildBinary(t.TempDir(), "./cmd/faultline-barrier", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, c, ns, onPool := sparesOnKwok(t, 2)
	script := `echo "$RANK $FAULTLINE_INDEX $JOB_COMPLETION_INDEX $0" > "$OUT"; exec sleep 60`
	run, pods := runningRun(ctx, t, c, ns, newRun("spare", 2, withoutGPUs(), onPool, func(r *v1alpha1.TrainingRun) {
		r.Spec.Spares = 1
		r.Spec.FailurePolicy.RestartMode = v1alpha1.RestartModeInPlace
		w := &r.Spec.Template.Spec.Containers[0]
		w.Command = []string{"/bin/sh", "-c", script, "--rank=$(FAULTLINE_INDEX)"}
		w.Env = append(w.Env, corev1.EnvVar{Name: "RANK", Value: "$(FAULTLINE_INDEX)"})
	}))
	sp := waitSpares(ctx, t, c, ns, run.Name, 1)[0]
	if _, ok := sp.Annotations["batch.kubernetes.io/job-completion-index"]; ok || sp.Spec.Hostname != "" || sp.Labels[v1alpha1.LabelAttempt] != "1" {
		t.Errorf("spare %s: annotations %v hostname %q attempt %s; want no index, no hostname, made during attempt 1", sp.Name, sp.Annotations, sp.Spec.Hostname, sp.Labels[v1alpha1.LabelAttempt])
	}
	for _, p := range pods {
		if !strings.Contains(p.Name, run.Name+"-") || p.Spec.Hostname == "" {
			t.Errorf("worker %s has no hostname", p.Name)
		}
	}
	// The simulated agents open the gang's workers and never the spare.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		recorded, err := c.WithNodeRecords(ctx, []*corev1.Pod{sp})
		if err != nil {
			t.Fatal(err)
		}
		if rec := attempt.BarrierRecord(recorded[0]); rec != nil {
			t.Fatalf("spare %s has a barrier record %+v: its agent opened a pod without an index", sp.Name, rec)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The spare's worker container as its kubelet would start it.
	w := sp.Spec.Containers[0]
	env, err := expansion.Pod(w.Env, sp)
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(name string) (string, bool) { v, ok := env[name]; return v, ok }
	var argv []string
	for _, a := range slices.Concat(w.Command, w.Args) {
		argv = append(argv, envexpand.Expand(a, lookup))
	}
	if len(argv) < 3 || argv[0] != v1alpha1.BarrierBinary || argv[1] != barrier.CommandSupervise {
		t.Fatalf("the spare's command %q: want the barrier supervising the worker", argv)
	}
	dir := t.TempDir()
	out, socket := filepath.Join(dir, "out"), filepath.Join(dir, "b.sock")
	argv = slices.Concat([]string{bin, barrier.CommandSupervise, "--socket", socket, "--attempt-file", filepath.Join(dir, "attempt"),
		"--checkpoint-dir", filepath.Join(dir, "checkpoint")}, argv[2:])
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "OUT=" + out}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		err := barrier.Open(octx, socket, 2, barrier.NoIndex)
		if err == nil {
			t.Fatalf("the spare's barrier opened without an index; its log:\n%s", logs.String())
		}
		if !errors.Is(err, barrier.ErrNotWaiting) {
			if !strings.Contains(err.Error(), "no index") {
				t.Errorf("the spare's barrier refused an open without an index with %v, want it to say there is no index", err)
			}
			break
		}
		if octx.Err() != nil {
			t.Fatalf("the spare's barrier never listened: %v; its log:\n%s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the worker's program ran in a spare without an index (%v); the barrier's log:\n%s", err, logs.String())
	}
	if err := barrier.Open(octx, socket, 2, 1); err != nil {
		t.Fatalf("open the spare with index 1: %v; its log:\n%s", err, logs.String())
	}
	var said string
	for octx.Err() == nil {
		if b, err := os.ReadFile(out); err == nil && strings.HasSuffix(string(b), "\n") {
			said = strings.TrimSpace(string(b))
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if said != "1 1 1 --rank=1" {
		t.Errorf("the spare's worker, handed index 1, says %q (RANK FAULTLINE_INDEX JOB_COMPLETION_INDEX and its argument), want \"1 1 1 --rank=1\"; the barrier's log:\n%s", said, logs.String())
	}
}

// TestE2EOneLiveWorkerPerIndexWithSpares: an index whose old pod still terminates (its
// kubelet slow to stop it: cluster.HoldStopping) is handed to no spare and no new pod until
// that pod is gone, while an index whose old pod ended goes to a spare at once; once the old
// pod is gone, the second spare takes its index and the attempt runs on the two spares, the
// third index in place. A
// watch of every pod of the run sees no moment where two pods that may run hold one index.
func TestE2EOneLiveWorkerPerIndexWithSpares(t *testing.T) {
	t.Parallel()
	ctx, c, ns, onPool := sparesOnKwok(t, 3)
	// Three workers: index 2 restarts in place (a gang whose every index moves recreates).
	run, pods := runningRun(ctx, t, c, ns, newRun("onelive", 3, withoutGPUs(), onPool, func(r *v1alpha1.TrainingRun) {
		r.Spec.Spares = 2
		r.Spec.FailurePolicy.RestartMode = v1alpha1.RestartModeInPlace
		r.Spec.Template.Spec.Containers[0].Command = []string{"/train"}
	}))
	spares := waitSpares(ctx, t, c, ns, run.Name, 2)
	isSpare := map[string]bool{spares[0].Name: true, spares[1].Name: true}

	// Every pod of the run, as the API server has it, event by event.
	wctx, stop := context.WithCancel(ctx)
	var mu sync.Mutex
	var twice []string
	live := map[string]*corev1.Pod{}
	w, err := c.Client.CoreV1().Pods(ns).Watch(wctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRun + "=" + run.Name})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.ResultChan() {
			p, ok := e.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			mu.Lock()
			if e.Type == watch.Deleted || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
				delete(live, p.Name)
			} else {
				live[p.Name] = p
			}
			byIndex := map[int][]string{}
			for _, q := range live {
				if i, ok := attempt.Index(q); ok {
					byIndex[i] = append(byIndex[i], q.Name)
				}
			}
			for i, names := range byIndex {
				if len(names) > 1 {
					twice = append(twice, fmt.Sprintf("index %d: %v", i, names))
				}
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { stop(); <-done })

	release, err := c.HoldStopping(ctx, ns, pods[1].Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, pods[1].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	failWorker(ctx, t, c, pods[0], cluster.Failure{ExitCode: 143, Reason: "Error", Message: "terminated"})
	// Index 0's old pod ended: a spare takes it. Index 1's still terminates: nobody does.
	holders := func(ps []*corev1.Pod) map[int][]*corev1.Pod {
		out := map[int][]*corev1.Pod{}
		for _, p := range ps {
			if i, ok := attempt.Index(p); ok && p.DeletionTimestamp == nil {
				out[i] = append(out[i], p)
			}
		}
		return out
	}
	if _, err := c.WaitPods(ctx, ns, labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run.Name}), func(ps []*corev1.Pod) (bool, error) {
		h := holders(ps)[0]
		return len(h) == 1 && isSpare[h[0].Name], nil
	}); err != nil {
		t.Fatalf("index 0 not handed to a spare: %v", err)
	}
	requireRunStays(ctx, t, c, ns, run.Name, 3*time.Second, "index 1 handed on, or the gang's barrier open, while its old pod terminates", func(r *v1alpha1.TrainingRun) bool {
		ps, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRun + "=" + run.Name})
		if err != nil {
			return false
		}
		n := 0
		for _, p := range ps.Items {
			if i, ok := attempt.Index(&p); ok && i == 1 && p.Name != pods[1].Name {
				n++
			}
		}
		rec := attempt.Record(r)
		return n > 0 || r.Status.Attempt >= 2 && rec != nil && rec.BarrierOpenedAt != nil
	})
	gone := time.Now()
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
	running := waitRun(ctx, t, c, ns, run.Name, "the attempt Running on the spares", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt >= 2 && runningAttempt(r.Status.Attempt)(r)
	})
	t.Logf("index 1's old pod let go → attempt %d Running in %s", running.Status.Attempt, time.Since(gone).Round(time.Millisecond))
	list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRun + "=" + run.Name})
	if err != nil {
		t.Fatal(err)
	}
	ps := make([]*corev1.Pod, len(list.Items))
	for k := range list.Items {
		ps[k] = &list.Items[k]
	}
	ps, err = c.WithNodeRecords(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	h := holders(ps)
	if len(h[2]) != 1 || h[2][0].UID != pods[2].UID {
		t.Errorf("index 2 held by %v, want attempt 1's %s restarted in place", h[2], pods[2].Name)
	}
	for i := range 2 {
		if len(h[i]) != 1 || !isSpare[h[i][0].Name] {
			t.Errorf("index %d held by %d pods (%v), want one of the spares", i, len(h[i]), h[i])
			continue
		}
		if n, _ := attempt.Running(h[i][0]); n != running.Status.Attempt {
			t.Errorf("index %d's spare %s runs attempt %d, want %d", i, h[i][0].Name, n, running.Status.Attempt)
		}
	}
	if _, err := c.Client.CoreV1().Pods(ns).Get(ctx, pods[1].Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("index 1's old pod %s: %v, want gone", pods[1].Name, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(twice) > 0 {
		t.Errorf("two live pods held one index: %v", twice)
	}
}
