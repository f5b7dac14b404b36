package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// These tests use client-go's fake clientset for what it is good at: the shape of the
// writes and the retry decisions. Whether the API server, the kubelet and the Job
// controller honour them is for the e2e tests on a real control plane.

const node = "gpu-7"

// podBuilder builds test pods: makePod("r-0").run("r").obj().
type podBuilder struct{ p *corev1.Pod }

func makePod(name string) *podBuilder {
	return &podBuilder{p: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}}
}

func (b *podBuilder) obj() *corev1.Pod { return b.p }

func (b *podBuilder) run(r string) *podBuilder {
	b.p.Labels = map[string]string{v1alpha1.LabelRun: r}
	return b
}

// spare makes the pod a warm spare that holds no index.
func (b *podBuilder) spare() *podBuilder {
	b.p.Labels[v1alpha1.LabelSpare] = "0"
	return b
}

func (b *podBuilder) onNode(n string) *podBuilder {
	b.p.Spec.NodeName = n
	return b
}

func (b *podBuilder) failedAt(t time.Time) *podBuilder {
	b.p.Status.Phase = corev1.PodFailed
	b.p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "trainer", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, FinishedAt: metav1.NewTime(t)},
	}}}
	return b
}

func (b *podBuilder) deleting() *podBuilder {
	now := metav1.NewTime(t0)
	b.p.DeletionTimestamp = &now
	return b
}

func (b *podBuilder) evidence(ev v1alpha1.FaultEvidence) *podBuilder {
	raw, err := json.Marshal(ev)
	if err != nil {
		panic(err)
	}
	if b.p.Annotations == nil {
		b.p.Annotations = map[string]string{}
	}
	b.p.Annotations[v1alpha1.AnnotationFaultEvidence] = string(raw)
	if isInfrastructure(ev.Cause) {
		b.p.Status.Conditions = append(b.p.Status.Conditions, corev1.PodCondition{
			Type: v1alpha1.PodConditionInfrastructureFault, Status: corev1.ConditionTrue, Reason: string(ev.Cause),
		})
	}
	return b
}

// annotate writes the evidence annotation alone, as anyone who may edit the pod can.
func (b *podBuilder) annotate(ev v1alpha1.FaultEvidence) *podBuilder {
	raw, err := json.Marshal(ev)
	if err != nil {
		panic(err)
	}
	if b.p.Annotations == nil {
		b.p.Annotations = map[string]string{}
	}
	b.p.Annotations[v1alpha1.AnnotationFaultEvidence] = string(raw)
	return b
}

func ptrTo[T any](v T) *T { return &v }

func makeNode() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, ResourceVersion: "7"}}
}

func newTestWriter(t *testing.T, taint bool, objs ...runtime.Object) (*Writer, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objs...)
	w, err := NewWriter(WriterConfig{
		Client: clientsetKube{client}, Node: node, TaintUnhealthyGPU: taint,
		Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 4},
		Clock:   clocktesting.NewFakePassiveClock(t0.Add(50 * time.Millisecond)),
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return w, client
}

// patches returns the patch actions recorded on the clientset, as "resource/subresource type".
func patches(client *fake.Clientset) []k8stesting.PatchAction {
	var out []k8stesting.PatchAction
	for _, a := range client.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetVerb() == "patch" {
			out = append(out, p)
		}
	}
	return out
}

func getPod(t *testing.T, client *fake.Clientset, name string) *corev1.Pod {
	t.Helper()
	p, err := client.CoreV1().Pods("ml").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ref(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ml", Name: name} }

func TestMarkPodWritesConditionAndAnnotation(t *testing.T) {
	w, client := newTestWriter(t, false, makePod("r-0").run("r").obj())
	ev := xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault)

	wrote, err := w.MarkPod(context.Background(), ref("r-0"), ev)
	if err != nil || !wrote {
		t.Fatalf("MarkPod = %v, %v", wrote, err)
	}
	// One write carries both: pods/status keeps metadata changes, so the condition and its
	// evidence land together.
	ps := patches(client)
	if len(ps) != 1 {
		t.Fatalf("%d patches, want 1", len(ps))
	}
	if ps[0].GetSubresource() != "status" || ps[0].GetPatchType() != types.StrategicMergePatchType {
		t.Errorf("mark written as %s %q, want a strategic merge patch on status", ps[0].GetPatchType(), ps[0].GetSubresource())
	}
	pod := getPod(t, client, "r-0")
	if !hasInfraCondition(pod, v1alpha1.CauseGPUFault) {
		t.Errorf("no InfrastructureFault=True/GPUFault: %+v", pod.Status.Conditions)
	}
	if got := v1alpha1.EvidenceOf(pod.Annotations); got == nil || !sameEvidence(*got, ev) {
		t.Errorf("evidence annotation %+v", got)
	}

	// The same fault again (an XID storm), and a later one: nothing more is written.
	for _, again := range []v1alpha1.FaultEvidence{ev, xidEvidence("GPU-a", 48, v1alpha1.CauseGPUFault)} {
		if wrote, err := w.MarkPod(context.Background(), ref("r-0"), again); err != nil || wrote {
			t.Errorf("repeat MarkPod = %v, %v; want nothing written", wrote, err)
		}
	}
	if n := len(patches(client)); n != 1 {
		t.Errorf("%d patches after repeats, want 1", n)
	}
}

func TestMarkPodDecisions(t *testing.T) {
	app := xidEvidence("GPU-a", 13, v1alpha1.CauseAppGPUError)
	for name, tc := range map[string]struct {
		pod            *corev1.Pod
		ev             v1alpha1.FaultEvidence
		wantErr        error
		wantPatches    int
		wantCondition  v1alpha1.Cause // "" = none
		wantAnnotation *v1alpha1.FaultEvidence
	}{
		"program XID: annotation only": {
			pod: makePod("p").run("r").obj(), ev: app,
			wantPatches: 1, wantAnnotation: &app,
		},
		"pod of another node: refused": {
			pod: makePod("p").run("r").onNode("gpu-8").obj(), ev: xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault),
			wantErr: ErrOtherNode,
		},
		"pod of no run: left alone": {
			pod: makePod("p").obj(), ev: xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault),
		},
		"a warm spare, which holds no index: left alone": {
			pod: makePod("p").run("r").spare().obj(), ev: ShutdownEvidence(node, t0),
		},
		"pod that failed before the fault: left alone": {
			pod: makePod("p").run("r").failedAt(t0.Add(-time.Minute)).obj(), ev: xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault),
		},
		"pod that failed with the fault: marked": {
			pod: makePod("p").run("r").failedAt(t0).obj(), ev: xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault),
			wantPatches: 1, wantCondition: v1alpha1.CauseGPUFault,
		},
		"earlier evidence stays (written by a previous agent)": {
			pod: makePod("p").run("r").evidence(ShutdownEvidence(node, t0)).obj(), ev: xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault),
			wantCondition: v1alpha1.CauseNodeShutdown,
		},
		"an annotation planted without the condition does not hide the agent's evidence": {
			pod: makePod("p").run("r").annotate(ShutdownEvidence(node, t0)).obj(), ev: xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault),
			wantPatches: 1, wantCondition: v1alpha1.CauseGPUFault, wantAnnotation: ptrTo(xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault)),
		},
		"an annotation of another node is not this agent's": {
			pod: makePod("p").run("r").evidence(ShutdownEvidence("gpu-8", t0)).obj(), ev: xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault),
			wantPatches: 1, wantCondition: v1alpha1.CauseGPUFault, wantAnnotation: ptrTo(xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault)),
		},
		"secondary XID superseded: condition added, annotation rewritten": {
			pod: makePod("p").run("r").evidence(xidEvidence("GPU-a", 45, v1alpha1.CauseAppGPUError)).obj(), ev: xidEvidence("GPU-a", 48, v1alpha1.CauseGPUFault),
			wantPatches: 1, wantCondition: v1alpha1.CauseGPUFault,
		},
	} {
		t.Run(name, func(t *testing.T) {
			w, client := newTestWriter(t, false, tc.pod)
			_, err := w.MarkPod(context.Background(), ref("p"), tc.ev)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("MarkPod error %v, want %v", err, tc.wantErr)
			}
			if n := len(patches(client)); n != tc.wantPatches {
				t.Errorf("%d patches, want %d", n, tc.wantPatches)
			}
			pod := getPod(t, client, "p")
			for _, c := range v1alpha1.AllCauses {
				if hasInfraCondition(pod, c) != (c == tc.wantCondition) {
					t.Errorf("condition with reason %s: %v", c, !(c == tc.wantCondition))
				}
			}
			if tc.wantAnnotation != nil {
				if got := v1alpha1.EvidenceOf(pod.Annotations); got == nil || !sameEvidence(*got, *tc.wantAnnotation) {
					t.Errorf("annotation %+v, want %+v", got, tc.wantAnnotation)
				}
			}
		})
	}
}

func TestMarkPodRetries(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	for name, tc := range map[string]struct {
		err       error
		failures  int
		wantCalls int
		wantErr   func(error) bool
	}{
		"conflicts are retried": {err: apierrors.NewConflict(gr, "p", errors.New("busy")), failures: 2, wantCalls: 3},
		"5xx is retried":        {err: apierrors.NewServiceUnavailable("etcd leader election"), failures: 3, wantCalls: 4},
		"throttling is retried": {err: apierrors.NewTooManyRequests("slow down", 1), failures: 1, wantCalls: 2},
		"a lost connection too": {err: errors.New("connection refused"), failures: 1, wantCalls: 2},
		"404 gives up at once":  {err: apierrors.NewNotFound(gr, "p"), failures: 100, wantCalls: 1, wantErr: apierrors.IsNotFound},
		"403 gives up at once":  {err: apierrors.NewForbidden(gr, "p", errors.New("rbac")), failures: 100, wantCalls: 1, wantErr: apierrors.IsForbidden},
		"retries are bounded":   {err: apierrors.NewInternalError(errors.New("boom")), failures: 100, wantCalls: 4, wantErr: apierrors.IsInternalError},
	} {
		t.Run(name, func(t *testing.T) {
			w, client := newTestWriter(t, false, makePod("p").run("r").obj())
			calls := 0
			client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				calls++
				if calls <= tc.failures {
					return true, nil, tc.err
				}
				return false, nil, nil
			})
			_, err := w.MarkPod(context.Background(), ref("p"), xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault))
			if tc.wantErr == nil && err != nil {
				t.Fatalf("MarkPod: %v", err)
			}
			if tc.wantErr != nil && !tc.wantErr(err) {
				t.Fatalf("MarkPod error %v, want %T", err, tc.err)
			}
			// One patch (condition and annotation) after the failures.
			if calls != tc.wantCalls {
				t.Errorf("%d patch calls, want %d", calls, tc.wantCalls)
			}
		})
	}
}

func TestWithdrawPod(t *testing.T) {
	shutdown := ShutdownEvidence(node, t0)
	for name, tc := range map[string]struct {
		pod      *corev1.Pod
		withdraw bool
	}{
		"running pod: shutdown evidence withdrawn": {pod: makePod("p").run("r").evidence(shutdown).obj(), withdraw: true},
		"failed pod keeps it":                      {pod: makePod("p").run("r").evidence(shutdown).failedAt(t0.Add(time.Second)).obj()},
		"terminating pod keeps it":                 {pod: makePod("p").run("r").evidence(shutdown).deleting().obj()},
		"GPU evidence stays":                       {pod: makePod("p").run("r").evidence(xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault)).obj()},
		"no evidence":                              {pod: makePod("p").run("r").obj()},
	} {
		t.Run(name, func(t *testing.T) {
			w, client := newTestWriter(t, false, tc.pod)
			got, err := w.WithdrawPod(context.Background(), ref("p"))
			if err != nil || got != tc.withdraw {
				t.Fatalf("WithdrawPod = %v, %v; want %v", got, err, tc.withdraw)
			}
			pod := getPod(t, client, "p")
			_, annotated := pod.Annotations[v1alpha1.AnnotationFaultEvidence]
			if tc.withdraw && (annotated || hasInfraCondition(pod, v1alpha1.CauseNodeShutdown)) {
				t.Errorf("evidence left: %v %+v", pod.Annotations, pod.Status.Conditions)
			}
			if !tc.withdraw && len(patches(client)) != 0 {
				t.Errorf("%d patches, want none", len(patches(client)))
			}
		})
	}
}

func TestRunPods(t *testing.T) {
	w, _ := newTestWriter(t, false,
		makePod("r-0").run("r").obj(), makePod("r-1").run("r").obj(),
		makePod("other").obj(), makePod("elsewhere").run("r").onNode("gpu-8").obj())
	got, err := w.RunPods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The fake clientset ignores field selectors; the writer filters by node as well.
	if len(got) != 2 || got[0] != ref("r-0") && got[1] != ref("r-0") {
		t.Errorf("RunPods = %v, want r-0 and r-1", got)
	}
}

func TestMarkGPUUnhealthy(t *testing.T) {
	for _, taint := range []bool{false, true} {
		w, client := newTestWriter(t, taint, makeNode())
		ctx := context.Background()
		if err := w.MarkGPUUnhealthy(ctx, "Xid79", "GPU 3 fell off the bus", t0); err != nil {
			t.Fatal(err)
		}
		if err := w.MarkGPUUnhealthy(ctx, "DoubleBitECC", "GPU 4", t0); err != nil { // first reason stays
			t.Fatal(err)
		}
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var cond *corev1.NodeCondition
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == v1alpha1.NodeConditionGPUHealthy {
				cond = &n.Status.Conditions[i]
			}
		}
		if cond == nil || cond.Status != corev1.ConditionFalse || cond.Reason != "Xid79" {
			t.Errorf("taint=%v: GPUHealthy condition %+v, want False/Xid79", taint, cond)
		}
		wantPatches := 1
		if taint {
			wantPatches = 2
			if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != v1alpha1.TaintGPUUnhealthy || n.Spec.Taints[0].Effect != corev1.TaintEffectNoSchedule {
				t.Errorf("taints %+v", n.Spec.Taints)
			}
		} else if len(n.Spec.Taints) != 0 {
			t.Errorf("tainted without the option: %+v", n.Spec.Taints)
		}
		ps := patches(client)
		if len(ps) != wantPatches || ps[0].GetSubresource() != "status" || ps[0].GetPatchType() != types.StrategicMergePatchType {
			t.Errorf("taint=%v: patches %v", taint, ps)
		}
	}
}

func TestTaintConflictRereadsTheNode(t *testing.T) {
	w, client := newTestWriter(t, true, makeNode())
	gr := schema.GroupResource{Resource: "nodes"}
	conflicts := 0
	client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "" && conflicts == 0 {
			conflicts++
			return true, nil, apierrors.NewConflict(gr, node, errors.New("resourceVersion changed"))
		}
		return false, nil, nil
	})
	if err := w.MarkGPUUnhealthy(context.Background(), "Xid79", "m", t0); err != nil {
		t.Fatal(err)
	}
	gets := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "nodes" {
			gets++
		}
	}
	if conflicts != 1 || gets != 2 {
		t.Errorf("%d conflicts, %d node reads; want the node read again after the conflict", conflicts, gets)
	}
}

func TestShutdownAnnotation(t *testing.T) {
	w, client := newTestWriter(t, false, makeNode())
	ctx := context.Background()
	if err := w.ClearShutdown(ctx); err != nil || len(patches(client)) != 0 {
		t.Fatalf("ClearShutdown without annotation: %v, %d patches", err, len(patches(client)))
	}
	if err := w.AnnotateShutdown(ctx, t0); err != nil {
		t.Fatal(err)
	}
	n, _ := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if got := n.Annotations[v1alpha1.AnnotationShutdownDetectedAt]; got != "2026-03-01T12:00:00.123456789Z" {
		t.Errorf("annotation %q", got)
	}
	if err := w.ClearShutdown(ctx); err != nil {
		t.Fatal(err)
	}
	n, _ = client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if _, ok := n.Annotations[v1alpha1.AnnotationShutdownDetectedAt]; ok {
		t.Error("annotation not cleared")
	}
}

func TestNewWriterNeedsClientAndNode(t *testing.T) {
	if _, err := NewWriter(WriterConfig{Node: node}); err == nil {
		t.Error("no error without a client")
	}
	if _, err := NewWriter(WriterConfig{Client: clientsetKube{fake.NewClientset()}}); err == nil {
		t.Error("no error without a node")
	}
}

// A cache that lags behind the agent's own writes must not make it skip or repeat marks.
func TestMarkAndWithdrawWithALaggingCache(t *testing.T) {
	pod := makePod("r-0").run("r").obj()
	w, client := newTestWriter(t, false, pod)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := indexer.Add(pod.DeepCopy()); err != nil { // never updated: the cache lags forever
		t.Fatal(err)
	}
	w.cfg.Pods = corelisters.NewPodLister(indexer)
	ctx := context.Background()
	step := func(what string, fn func() (bool, error), wantWrote bool, wantPatches int) {
		t.Helper()
		before := len(patches(client))
		wrote, err := fn()
		if err != nil || wrote != wantWrote {
			t.Fatalf("%s = %v, %v; want %v", what, wrote, err, wantWrote)
		}
		if n := len(patches(client)) - before; n != wantPatches {
			t.Errorf("%s: %d patches, want %d", what, n, wantPatches)
		}
	}
	first, second := ShutdownEvidence(node, t0), ShutdownEvidence(node, t0.Add(time.Minute))
	step("mark", func() (bool, error) { return w.MarkPod(ctx, ref("r-0"), first) }, true, 1)
	step("mark again", func() (bool, error) { return w.MarkPod(ctx, ref("r-0"), first) }, false, 0)
	step("withdraw", func() (bool, error) { return w.WithdrawPod(ctx, ref("r-0")) }, true, 1)
	step("mark after withdrawal", func() (bool, error) { return w.MarkPod(ctx, ref("r-0"), second) }, true, 1)
	got := getPod(t, client, "r-0")
	if ev := v1alpha1.EvidenceOf(got.Annotations); ev == nil || *ev != second || !hasInfraCondition(got, v1alpha1.CauseNodeShutdown) {
		t.Errorf("after re-mark: evidence %+v, conditions %+v", ev, got.Status.Conditions)
	}
}
