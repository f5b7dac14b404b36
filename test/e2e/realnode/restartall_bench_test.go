package realnode

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/faultline-dev/faultline/test/cluster"
)

// BenchmarkRealNodeRestartAllContainers: what the kubelet itself takes to restart pods in
// place (RestartAllContainers), with and without an init container before the worker, as a
// restart in place's barrier is today. 16 pods on one real node, their workers killed at
// once; the time until every pod's worker runs again in a new container. The init container
// exits 0 at once (the test worker's --exit-at-once): a barrier already open, so what it adds
// is the kubelet's alone (a container to remove, create and start, and the relist that sees
// it exit), a lower bound of what the barrier costs. No faultline component takes part: this
// measures the kubelet and the runtime, the part of a restart in place that a barrier in the
// worker's own container would take out (docs/benchmarks.md, "The floor under a restart that
// moves pods").
//
//	go test -run '^$' -bench RealNodeRestartAllContainers -benchtime 1x ./test/e2e/realnode/
func BenchmarkRealNodeRestartAllContainers(b *testing.B) {
	const pods = 16
	took := map[bool]time.Duration{}
	for _, withInit := range []bool{false, true} {
		name := "containers=worker"
		if withInit {
			name = "containers=init+worker"
		}
		b.Run(name, func(b *testing.B) {
			var sum time.Duration
			for i := range b.N {
				sum += restartAll(b, fmt.Sprintf("restart-all-%d-%t", i, withInit), pods, withInit)
			}
			took[withInit] = sum / time.Duration(b.N)
			b.ReportMetric(took[withInit].Seconds(), "s/restart")
		})
	}
	if took[false] > 0 {
		b.Logf("%d pods: with an init container %.2f× the kubelet's restart of the worker alone", pods, took[true].Seconds()/took[false].Seconds())
	}
}

// restartAll measures one round of BenchmarkRealNodeRestartAllContainers.
func restartAll(b *testing.B, group string, n int, withInit bool) time.Duration {
	b.StopTimer()
	defer b.StartTimer()
	ctx, c, ns := scenario(b, 5*time.Minute)
	node := c.Real.Nodes[0]
	const labelGroup = "test.faultline.dev/restart-all"
	sel := labels.SelectorFromSet(labels.Set{labelGroup: group})
	for i := range n {
		p := inPlacePod(fmt.Sprintf("%s-%d", group, i), node.Name)
		p.Labels[labelGroup] = group
		p.Spec.InitContainers = nil
		if withInit {
			p.Spec.InitContainers = []corev1.Container{{Name: "barrier", Image: cluster.WorkerImage, ImagePullPolicy: corev1.PullNever, Args: []string{"--exit-at-once"}}}
		}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	// up holds once every pod's worker runs in a container that is not one of old.
	up := func(old map[string]bool) func([]*corev1.Pod) (bool, error) {
		return func(pods []*corev1.Pod) (bool, error) {
			k := 0
			for _, p := range pods {
				if ws := containerStatus(p, "worker"); running(ws) && !old[ws.ContainerID] {
					k++
				}
			}
			return k == n, nil
		}
	}
	first, err := c.WaitPods(ctx, ns, sel, up(nil))
	if err != nil {
		b.Fatalf("the %d pods' workers are not running: %v", n, err)
	}
	old := map[string]bool{}
	for _, p := range first {
		old[containerStatus(p, "worker").ContainerID] = true
	}

	b.StartTimer()
	start := time.Now()
	for _, p := range first {
		killWorker(ctx, b, c, node, p, "SIGKILL")
	}
	if _, err := c.WaitPods(ctx, ns, sel, up(old)); err != nil {
		b.Fatalf("the %d pods' workers did not run again: %v", n, err)
	}
	took := time.Since(start)
	b.StopTimer()
	b.Logf("%d pods, init container %t: every worker killed and running again in %s", n, withInit, took.Round(time.Millisecond))

	deletePods(ctx, b, c, ns, sel)
	return took
}
