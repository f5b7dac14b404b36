package agent

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
	"github.com/faultline-dev/faultline/test/procstat"
)

// The agent's latency benchmarks measure, through the API server, from the simulated signal
// to the mark being visible to a watcher (what the controller sees). They report p50/p99
// over b.N rounds and the agent's resident memory; run them with
//
//	go test -run '^$' -bench . -benchtime 20x ./test/e2e/agent/

// BenchmarkXIDToCondition: a fatal XID on a GPU held by a run pod → the pod's
// InfrastructureFault condition seen through a watch.
func BenchmarkXIDToCondition(b *testing.B) {
	c := cluster.Shared(b)
	ns := c.Namespace(b)
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	node := xidBenchNode
	a := startAgent(b, c, node)
	var lat []time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		run := fmt.Sprintf("xid-%d", i)
		pod := createPods(ctx, b, c, ns, node, run, 1, 8)[0]
		sel := labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run})
		seen := watchFor(ctx, b, c, ns, sel, func(p []*corev1.Pod) bool {
			return len(p) == 1 && infraCondition(p[0]) != nil
		})
		b.StartTimer()
		// A fault repeated on the same GPU within the agent's repeat window is only counted:
		// every round uses a GPU and fatal XID of its own.
		start := a.injectXID(b, i%8, fatalXIDs[(i/8)%len(fatalXIDs)])
		at, ok := <-seen
		if !ok {
			b.Fatalf("round %d: pod %s never marked after the XID", i, pod.Name)
		}
		lat = append(lat, at.Sub(start))
		b.StopTimer()
		// Free the GPUs for the next round: the simulated allocation follows live pods.
		if err := c.FailPod(ctx, ns, pod.Name, cluster.Failure{ExitCode: 1}); err != nil {
			b.Fatal(err)
		}
		waitPhase(ctx, b, c, ns, sel, corev1.PodFailed)
		b.StartTimer()
	}
	reportLatency(b, lat)
	reportRSS(b, a)
}

// BenchmarkShutdownMarks110Pods: PrepareForShutdown on a node with 110 run pods (kubelet's
// default pod limit) → every pod's condition seen through a watch.
func BenchmarkShutdownMarks110Pods(b *testing.B) {
	c := cluster.Shared(b)
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	node := shutdownBenchNode
	a := startAgent(b, c, node)
	var lat []time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		ns := c.Namespace(b)
		run := fmt.Sprintf("sd-%d", i)
		pods := createPods(ctx, b, c, ns, node, run, 109, 0) // + the agent's own DaemonSet pod
		sel := labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run})
		seen := watchFor(ctx, b, c, ns, sel, func(p []*corev1.Pod) bool {
			return countMarked(p) == len(pods)
		})
		b.StartTimer()
		start := time.Now()
		if err := a.logind.PrepareForShutdown(true); err != nil {
			b.Fatal(err)
		}
		at, ok := <-seen
		if !ok {
			b.Fatalf("round %d: the %d pods were never all marked after PrepareForShutdown", i, len(pods))
		}
		lat = append(lat, at.Sub(start))
		b.StopTimer()
		// Cancel the shutdown, as logind does when it is called off; the agent takes its lock
		// again and withdraws the marks of the still-running pods.
		if err := a.logind.PrepareForShutdown(false); err != nil {
			b.Fatal(err)
		}
		<-a.logind.Locks()
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"`+v1alpha1.AnnotationShutdownDetectedAt+`":null}}}`), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		deletePods(ctx, b, c, ns, sel, pods)
		b.Logf("round %d: %d pods marked in %s", i, len(pods), lat[len(lat)-1].Round(time.Millisecond))
		b.StartTimer()
	}
	reportLatency(b, lat)
	reportRSS(b, a)
}

// BenchmarkMark110PodsFloor is BenchmarkShutdownMarks110Pods without the agent: the same
// 109 marks (one pods/status patch each, as the agent writes them) sent by a plain client
// with an agent's own pod-bound token (so the admission policy runs as for the agent), the
// agent's client rate limit and its parallelism, seen through the same watch. It is the
// floor of the control plane; the shutdown benchmark's ratio to it is the agent's share.
func BenchmarkMark110PodsFloor(b *testing.B) {
	c := cluster.Shared(b)
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	node := floorBenchNode
	_, rc, err := c.PodBoundKubeconfig(ctx, dsPods[node], b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	rc.QPS, rc.Burst = 200, 400 // as cmd/nodeagent
	asAgent, err := kubernetes.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	patch := markPatch(v1alpha1.CauseNodeShutdown, `{"cause":"NodeShutdown","source":"logind"}`)
	var lat []time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		ns := c.Namespace(b)
		run := fmt.Sprintf("floor-%d", i)
		pods := createPods(ctx, b, c, ns, node, run, 109, 0)
		sel := labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run})
		seen := watchFor(ctx, b, c, ns, sel, func(p []*corev1.Pod) bool {
			return countMarked(p) == len(pods)
		})
		b.StartTimer()
		start := time.Now()
		var g errgroup.Group
		g.SetLimit(markParallelism)
		for _, p := range pods {
			g.Go(func() error {
				_, err := asAgent.CoreV1().Pods(ns).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
				return err
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		at, ok := <-seen
		if !ok {
			b.Fatalf("round %d: the %d pods were never all seen marked", i, len(pods))
		}
		lat = append(lat, at.Sub(start))
		b.StopTimer()
		deletePods(ctx, b, c, ns, sel, pods)
		b.StartTimer()
	}
	reportLatency(b, lat)
}

// markParallelism is pkg/nodeagent's bound on concurrent pod writes.
const markParallelism = 64

func countMarked(pods []*corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if infraCondition(p) != nil {
			n++
		}
	}
	return n
}

// deletePods deletes pods and waits until they are gone, so that the next round starts on
// a node whose only pods are its own (and the agent's).
func deletePods(ctx context.Context, b *testing.B, c *cluster.Cluster, ns string, sel labels.Selector, pods []*corev1.Pod) {
	b.Helper()
	for _, p := range pods {
		if err := c.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := c.WaitPods(ctx, ns, sel, func(p []*corev1.Pod) (bool, error) { return len(p) == 0, nil }); err != nil {
		b.Fatal(err)
	}
}

// benchTimeout bounds a whole benchmark: a mark that never comes fails it instead of
// hanging the package until go test's own timeout.
const benchTimeout = 10 * time.Minute

// fatalXIDs are infrastructure XIDs that make a GPU unusable (exitclass's table).
var fatalXIDs = []uint64{79, 48, 74, 94, 95, 119, 120}

// watchFor starts watching the pods, returns once the watch is established, and delivers
// the time at which cond first held: the latency is measured from the watcher's side
// without the cost of setting up a watch after the fact.
func watchFor(ctx context.Context, b *testing.B, c *cluster.Cluster, ns string, sel labels.Selector, cond func([]*corev1.Pod) bool) <-chan time.Time {
	b.Helper()
	synced, seen := make(chan struct{}), make(chan time.Time, 1)
	go func() {
		first := true
		_, err := c.WaitPods(ctx, ns, sel, func(p []*corev1.Pod) (bool, error) {
			if first {
				first = false
				close(synced)
			}
			if cond(p) {
				seen <- time.Now()
				return true, nil
			}
			return false, nil
		})
		if err != nil {
			b.Error(err)
			close(seen)
		}
	}()
	<-synced
	return seen
}

func waitPhase(ctx context.Context, b *testing.B, c *cluster.Cluster, ns string, sel labels.Selector, phase corev1.PodPhase) {
	b.Helper()
	if _, err := c.WaitPods(ctx, ns, sel, func(p []*corev1.Pod) (bool, error) {
		return len(p) == 1 && p[0].Status.Phase == phase, nil
	}); err != nil {
		b.Fatal(err)
	}
}

func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}

// reportRSS reports the agent process's resident set size.
func reportRSS(b *testing.B, a *agentHandle) {
	m, err := procstat.ReadMemory(a.Pid())
	if err != nil {
		b.Logf("agent RSS: %v", err)
		return
	}
	b.ReportMetric(procstat.MiB(m.RSS), "agent-RSS-MiB")
	// The heap and stacks; the rest of the RSS is the binary's mapped pages.
	b.ReportMetric(procstat.MiB(m.Anon), "agent-anon-MiB")
}
