package gang

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apischeme "github.com/faultline-dev/faultline/api/scheme"
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestE2EGangRunPodsAreGangScheduled: on a control plane that serves PodGroups, a gang run's
// workers carry the run's PodGroup (spec.schedulingGroup), whose gang policy asks for all of
// them, and the scheduler binds all or none: with one node too few, no worker holds a node;
// when the node comes, all bind. A restart's new workers are held the same way: a GPU fault
// excludes its node, the next attempt is one node short again, and none of its workers
// binds until a node more comes. Without the PodGroup, the scheduler binds the workers
// that fit one by one, and the test fails at the first one bound.
func TestE2EGangRunPodsAreGangScheduled(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cluster.StartProcess(t, launcherBin, "controller",
		"--kubeconfig", c.Kubeconfig,
		"--namespace", ns,
		"--leader-elect=false",
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", "0",
	)
	cl, err := client.New(c.Config, client.Options{Scheme: apischeme.New()})
	if err != nil {
		t.Fatal(err)
	}

	// Each worker asks for a whole node's GPUs: one worker more than the cluster has nodes.
	const workers = nodes + 1
	run := wholeNodeRun(ns, "gang", workers)
	if err := cl.Create(ctx, run); err != nil {
		t.Fatalf("create TrainingRun: %v", err)
	}

	// Attempt 1, one node short: every worker is in the group, and none binds.
	heldWhole(ctx, t, c, run, 1, workers)
	pg := waitPodGroup(ctx, t, c, ns, run.Name, "condition PodGroupInitiallyScheduled False (Unschedulable)", func(pg *schedulingv1beta1.PodGroup) bool {
		cond := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == schedulingv1beta1.PodGroupReasonUnschedulable
	})
	if g := pg.Spec.SchedulingPolicy.Gang; g == nil || g.MinCount != workers {
		t.Errorf("PodGroup %s: schedulingPolicy %+v, want gang with minCount %d", pg.Name, pg.Spec.SchedulingPolicy, workers)
	}
	if !metav1.IsControlledBy(pg, run) {
		t.Errorf("PodGroup %s is not controlled by run %s (ownerReferences %+v): the garbage collector would not delete it with the run", pg.Name, run.Name, pg.OwnerReferences)
	}
	if err := c.AddNodes(ctx, cluster.DefaultNode, nodes, 1); err != nil {
		t.Fatal(err)
	}
	first := allRunning(ctx, t, c, run, 1, workers)

	// A GPU fault on one worker's node: the default rule restarts the gang and excludes the
	// node. The next attempt is one node short again.
	victim := first[0]
	gpuFault(ctx, t, c, victim)
	heldWhole(ctx, t, c, run, 2, workers)
	if err := c.AddNodes(ctx, cluster.DefaultNode, nodes+1, 1); err != nil {
		t.Fatal(err)
	}
	for _, p := range allRunning(ctx, t, c, run, 2, workers) {
		if p.Spec.NodeName == victim.Spec.NodeName {
			t.Errorf("attempt 2's worker %s is on %s, the node of the GPU fault", p.Name, p.Spec.NodeName)
		}
	}
	after := &schedulingv1beta1.PodGroup{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(pg), after); err != nil {
		t.Fatal(err)
	}
	if after.UID != pg.UID {
		t.Errorf("PodGroup %s was replaced (uid %s, then %s): every attempt gathers in the run's one group", pg.Name, pg.UID, after.UID)
	}
}

// wholeNodeRun is a run of workers workers that each ask for all 8 GPUs of a node.
func wholeNodeRun(ns, name string, workers int32) *v1alpha1.TrainingRun {
	return &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.TrainingRunSpec{
			Workers: workers,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name:  "worker",
					Image: "trainer:latest",
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
						corev1.ResourceName(v1alpha1.ResourceGPU): resource.MustParse(fmt.Sprint(cluster.DefaultNode.GPUs)),
					}},
				}},
			}},
		},
	}
}

func attemptSelector(run *v1alpha1.TrainingRun, attempt int32) labels.Selector {
	return labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run.Name, v1alpha1.LabelAttempt: fmt.Sprint(attempt)})
}

// heldWhole waits until every worker of the attempt exists, names the run's PodGroup and has
// been found unschedulable by the scheduler; it fails the test at once if any is bound.
func heldWhole(ctx context.Context, t *testing.T, c *cluster.Cluster, run *v1alpha1.TrainingRun, attempt int32, workers int) {
	t.Helper()
	pods, err := c.WaitPods(ctx, run.Namespace, attemptSelector(run, attempt), func(pods []*corev1.Pod) (bool, error) {
		held := 0
		for _, p := range pods {
			if p.Spec.NodeName != "" {
				return false, fmt.Errorf("worker %s was bound to %s while the gang of %d cannot fit whole", p.Name, p.Spec.NodeName, workers)
			}
			if g := p.Spec.SchedulingGroup; g == nil || g.PodGroupName == nil || *g.PodGroupName != run.Name {
				return false, fmt.Errorf("worker %s has spec.schedulingGroup %s, want podGroupName %s", p.Name, describe(g), run.Name)
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
					held++
				}
			}
		}
		return held == workers, nil
	})
	if err != nil {
		t.Fatalf("attempt %d: all %d workers held unbound: %v; pods: %s", attempt, workers, err, describePods(pods))
	}
	t.Logf("attempt %d: all %d workers held, none bound: %s", attempt, workers, describePods(pods))
}

// allRunning waits until every worker of the attempt runs, and returns them.
func allRunning(ctx context.Context, t *testing.T, c *cluster.Cluster, run *v1alpha1.TrainingRun, attempt int32, workers int) []*corev1.Pod {
	t.Helper()
	var running []*corev1.Pod
	pods, err := c.WaitPods(ctx, run.Namespace, attemptSelector(run, attempt), func(pods []*corev1.Pod) (bool, error) {
		running = running[:0]
		for _, p := range pods {
			if cluster.PodRunning(p) {
				running = append(running, p)
			}
		}
		return len(running) == workers, nil
	})
	if err != nil {
		t.Fatalf("attempt %d: all %d workers Running: %v; pods: %s", attempt, workers, err, describePods(pods))
	}
	return running
}

// waitPodGroup watches the PodGroup until cond holds for it.
func waitPodGroup(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name, what string, cond func(*schedulingv1beta1.PodGroup) bool) *schedulingv1beta1.PodGroup {
	t.Helper()
	lw := cache.NewListWatchFromClient(c.Client.SchedulingV1beta1().RESTClient(), "podgroups", ns, fields.OneTermEqualSelector("metadata.name", name))
	var last *schedulingv1beta1.PodGroup
	_, err := watchtools.UntilWithSync(ctx, lw, &schedulingv1beta1.PodGroup{}, nil, func(e watch.Event) (bool, error) {
		pg, ok := e.Object.(*schedulingv1beta1.PodGroup)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		last = pg
		return cond(pg), nil
	})
	if err != nil {
		t.Fatalf("PodGroup %s/%s %s: %v; last seen: %s", ns, name, what, err, describe(last))
	}
	return last
}

// gpuFault is what the node agent writes onto a worker whose GPU fell off the bus (XID 79),
// then the worker's CUDA error exit.
func gpuFault(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod) {
	t.Helper()
	if err := c.MarkAsAgent(ctx, pod, v1alpha1.FaultEvidence{
		Source: "nodeagent", Cause: v1alpha1.CauseGPUFault,
		GPU:    &v1alpha1.GPUEvidence{UUID: "GPU-5f1c2a7e-0d8b-4c1e-9a51-3b2f6d7e8a90", XID: 79},
		Detail: "Xid 79: GPU has fallen off the bus",
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.FailPod(ctx, pod.Namespace, pod.Name, cluster.Failure{ExitCode: 1, Reason: "Error", Message: "CUDA error: unspecified launch failure"}); err != nil {
		t.Fatal(err)
	}
}

func describePods(pods []*corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "\n  %s node=%q phase=%s", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled {
				fmt.Fprintf(&b, " scheduled=%s/%s %q", cond.Status, cond.Reason, cond.Message)
			}
		}
	}
	return b.String()
}

func describe(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
