package kueue

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apischeme "github.com/faultline-dev/faultline/api/scheme"
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/kueue"
	"github.com/faultline-dev/faultline/test/cluster"
)

// scenarioTimeout bounds one scenario.
const scenarioTimeout = 3 * time.Minute

// env is one scenario's world: its namespace, its controller and its queues.
type env struct {
	t   *testing.T
	ctx context.Context
	c   *cluster.Cluster
	ns  string
	cl  client.Client
	rc  rest.Interface
	dyn dynamic.Interface
	// queue is the LocalQueue runs name; cq its ClusterQueue, flavor its ResourceFlavor.
	queue, cq, flavor string
}

// queueSpec shapes a scenario's ClusterQueue.
type queueSpec struct {
	// gpus is the flavor's nominal quota of nvidia.com/gpu.
	gpus int
	// preemptLowerPriority lets a workload preempt lower-priority ones of the ClusterQueue.
	preemptLowerPriority bool
	// nodeLabels and tolerations are the flavor's.
	nodeLabels  map[string]string
	tolerations []corev1.Toleration
	// admissionCheck, when set, names an AdmissionCheck the ClusterQueue requires, whose
	// controller the scenario plays (setCheck).
	admissionCheck string
	// withoutQueuePolicy puts the scenario in a namespace the faultline-queue policy does
	// not cover, as in a cluster without it (noQueuePolicyLabel).
	withoutQueuePolicy bool
}

// checkController is the controllerName of the scenarios' admission checks: no controller
// of Kueue's serves it, the scenario itself does.
const checkController = "kueue-test.faultline.dev/check"

var testScheme = apischeme.New()

// scenario starts a controller (with the Kueue integration) for a new namespace and makes
// the namespace's queue: a ResourceFlavor, a ClusterQueue of q's quota and a LocalQueue.
func scenario(t *testing.T, q queueSpec) *env {
	t.Helper()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	if q.withoutQueuePolicy {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, noQueuePolicyLabel)
		if _, err := c.Client.CoreV1().Namespaces().Patch(context.Background(), ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, c: c, ns: ns, queue: "lq", cq: "cq-" + ns, flavor: "rf-" + ns}
	var err error
	if e.cl, err = client.New(c.Config, client.Options{Scheme: testScheme}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.GroupVersion = &v1alpha1.GroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(testScheme).WithoutConversion()
	if e.rc, err = rest.RESTClientFor(cfg); err != nil {
		t.Fatal(err)
	}
	if e.dyn, err = dynamic.NewForConfig(c.Config); err != nil {
		t.Fatal(err)
	}
	rf := map[string]any{}
	if len(q.nodeLabels) > 0 {
		rf["nodeLabels"] = toAny(q.nodeLabels)
	}
	if len(q.tolerations) > 0 {
		rf["tolerations"] = toAny(q.tolerations)
	}
	e.create(kueue.ResourceFlavorGVK, "", e.flavor, rf)
	cq := map[string]any{
		"namespaceSelector": map[string]any{"matchLabels": map[string]any{corev1.LabelMetadataName: ns}},
		"resourceGroups": []any{map[string]any{
			"coveredResources": []any{v1alpha1.ResourceGPU},
			"flavors": []any{map[string]any{
				"name":      e.flavor,
				"resources": []any{map[string]any{"name": v1alpha1.ResourceGPU, "nominalQuota": int64(q.gpus)}},
			}},
		}},
	}
	if q.preemptLowerPriority {
		cq["preemption"] = map[string]any{"withinClusterQueue": "LowerPriority"}
	}
	if q.admissionCheck != "" {
		e.create(kueue.AdmissionCheckGVK, "", q.admissionCheck, map[string]any{"controllerName": checkController})
		e.activateCheck(q.admissionCheck)
		cq["admissionChecksStrategy"] = map[string]any{"admissionChecks": []any{map[string]any{"name": q.admissionCheck}}}
	}
	e.create(kueue.ClusterQueueGVK, "", e.cq, cq)
	e.create(kueue.LocalQueueGVK, ns, e.queue, map[string]any{"clusterQueue": e.cq})
	startController(t, c, ns)
	t.Cleanup(func() {
		if t.Failed() {
			e.dump()
		}
	})
	return e
}

// startController starts `launcher controller` for namespace ns with the Kueue integration.
func startController(t *testing.T, c *cluster.Cluster, ns string) *cluster.Process {
	t.Helper()
	args := []string{"controller",
		"--kubeconfig", c.Kubeconfig,
		"--namespace", ns,
		"--leader-elect=false",
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", "0",
	}
	if baseline == "" {
		args = append(args, "--kueue=true")
	}
	return cluster.StartProcess(t, launcherBin, args...)
}

func toAny(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

func gvr(gvk schema.GroupVersionKind) schema.GroupVersionResource {
	return gvk.GroupVersion().WithResource(strings.ToLower(gvk.Kind) + "s")
}

// create creates a Kueue object (cluster-scoped when ns is "") and deletes it at the end.
func (e *env) create(gvk schema.GroupVersionKind, ns, name string, spec map[string]any) {
	e.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(gvk)
	u.SetName(name)
	r := e.dyn.Resource(gvr(gvk))
	var ri dynamic.ResourceInterface = r
	if ns != "" {
		u.SetNamespace(ns)
		ri = r.Namespace(ns)
	}
	if _, err := ri.Create(e.ctx, u, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create %s %s: %v", gvk.Kind, name, err)
	}
	e.t.Cleanup(func() { _ = ri.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// newRun is a run of workers one-GPU workers in the scenario's queue.
func (e *env) newRun(name string, workers int32) *v1alpha1.TrainingRun {
	gpu := resource.MustParse("1")
	return &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: map[string]string{v1alpha1.LabelQueueName: e.queue}},
		Spec: v1alpha1.TrainingRunSpec{
			Workers: workers,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name: "worker", Image: "trainer:latest",
					// Limits alone, as `launcher run --gpus-per-worker` writes them: Kueue
					// counts a missing request as the limit.
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{v1alpha1.ResourceGPU: gpu}},
				}},
			}},
		},
	}
}

func (e *env) createRun(run *v1alpha1.TrainingRun) *v1alpha1.TrainingRun {
	e.t.Helper()
	if err := e.cl.Create(e.ctx, run); err != nil {
		e.t.Fatalf("create TrainingRun %s: %v", run.Name, err)
	}
	return run
}

func (e *env) getRun(name string) *v1alpha1.TrainingRun {
	e.t.Helper()
	run := &v1alpha1.TrainingRun{}
	if err := e.cl.Get(e.ctx, types.NamespacedName{Namespace: e.ns, Name: name}, run); err != nil {
		e.t.Fatalf("get TrainingRun %s: %v", name, err)
	}
	return run
}

// updateRun changes the run as a user would (a read, the change, a write; a conflict with
// the controller's own writes is tried again) and returns what the API server answered.
func (e *env) updateRun(name string, change func(*v1alpha1.TrainingRun)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		run := &v1alpha1.TrainingRun{}
		if err := e.cl.Get(e.ctx, types.NamespacedName{Namespace: e.ns, Name: name}, run); err != nil {
			return err
		}
		change(run)
		return e.cl.Update(e.ctx, run)
	})
}

// watchRun returns as soon as cond holds for the run, with the run that satisfied it.
func (e *env) watchRun(ctx context.Context, name string, cond func(*v1alpha1.TrainingRun) bool) (*v1alpha1.TrainingRun, error) {
	lw := cache.NewListWatchFromClient(e.rc, v1alpha1.ResourceTrainingRun, e.ns, fields.OneTermEqualSelector("metadata.name", name))
	var last *v1alpha1.TrainingRun
	_, err := watchtools.UntilWithSync(ctx, lw, &v1alpha1.TrainingRun{}, nil, func(ev watch.Event) (bool, error) {
		r, ok := ev.Object.(*v1alpha1.TrainingRun)
		if !ok || ev.Type == watch.Deleted {
			return false, nil
		}
		last = r
		return cond(r), nil
	})
	return last, err
}

func (e *env) waitRun(name, what string, cond func(*v1alpha1.TrainingRun) bool) *v1alpha1.TrainingRun {
	e.t.Helper()
	start := time.Now()
	run, err := e.watchRun(e.ctx, name, cond)
	if err != nil {
		e.t.Fatalf("TrainingRun %s: %s: not observed within %s (%v); last seen: %s", name, what, time.Since(start).Round(time.Millisecond), err, describeRun(run))
	}
	return run
}

// requireRunStays watches the run for d and fails the test if bad ever holds.
func (e *env) requireRunStays(name string, d time.Duration, what string, bad func(*v1alpha1.TrainingRun) bool) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, d)
	defer cancel()
	run, err := e.watchRun(ctx, name, bad)
	switch {
	case err == nil:
		e.t.Fatalf("TrainingRun %s: %s: violated within %s: %s", name, what, d, describeRun(run))
	case ctx.Err() != nil && e.ctx.Err() == nil:
	default:
		e.t.Fatalf("TrainingRun %s: watch for %s: %v", name, what, err)
	}
}

func runningAttempt(n int32) func(*v1alpha1.TrainingRun) bool {
	return func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt == n && r.Status.Phase == v1alpha1.PhaseRunning && r.Status.ReadyWorkers == r.Spec.Workers
	}
}

func describeRun(run *v1alpha1.TrainingRun) string {
	if run == nil {
		return "<no run observed>"
	}
	s := run.Status
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%q attempt=%d restarts=%+v ready=%d/%d", s.Phase, s.Attempt, s.Restarts, s.ReadyWorkers, run.Spec.Workers)
	if q := s.Queue; q != nil {
		fmt.Fprintf(&b, " queue=%+v", *q)
	}
	for _, c := range s.Conditions {
		fmt.Fprintf(&b, " cond[%s=%s reason=%s msg=%q]", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

// ---------------------------------------------------------------------------------------
// Workloads

func (e *env) workloads() dynamic.ResourceInterface {
	return e.dyn.Resource(kueue.WorkloadGVR).Namespace(e.ns)
}

// listWorkloads lists the namespace's Workloads.
func (e *env) listWorkloads() []*kueue.Workload {
	e.t.Helper()
	list, err := e.workloads().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatalf("list workloads: %v", err)
	}
	var out []*kueue.Workload
	for i := range list.Items {
		w, err := kueue.Parse(&list.Items[i])
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, w)
	}
	return out
}

// watchWorkload returns as soon as cond holds for the named Workload.
func (e *env) watchWorkload(ctx context.Context, name string, cond func(*kueue.Workload) bool) (*kueue.Workload, error) {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return e.workloads().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return e.workloads().Watch(ctx, o)
		},
	}
	var last *kueue.Workload
	_, err := watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, nil, func(ev watch.Event) (bool, error) {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok || ev.Type == watch.Deleted {
			return false, nil
		}
		w, err := kueue.Parse(u)
		if err != nil {
			return false, err
		}
		last = w
		return cond(w), nil
	})
	return last, err
}

func (e *env) waitWorkload(name, what string, cond func(*kueue.Workload) bool) *kueue.Workload {
	e.t.Helper()
	w, err := e.watchWorkload(e.ctx, name, cond)
	if err != nil {
		e.t.Fatalf("Workload %s: %s: %v; last seen: %s", name, what, err, describeWorkload(w))
	}
	return w
}

func describeWorkload(w *kueue.Workload) string {
	if w == nil {
		return "<no workload observed>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s uid=%s active=%t", w.Name, w.UID, w.Active())
	if a := w.Status.Admission; a != nil {
		fmt.Fprintf(&b, " admission=%+v", *a)
	}
	for _, c := range w.Status.Conditions {
		fmt.Fprintf(&b, " cond[%s=%s reason=%s msg=%q]", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

func condIs(w *kueue.Workload, t string, status metav1.ConditionStatus, reason string) bool {
	c := meta.FindStatusCondition(w.Status.Conditions, t)
	return c != nil && c.Status == status && (reason == "" || c.Reason == reason)
}

// workloadRecorder watches a Workload and keeps every PodsReady reason, every eviction and
// every requeue it saw, and each distinct UID: what Kueue saw of a run.
type workloadRecorder struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	podsReady  []string // status/reason, each change once
	evicted    []string
	requeued   bool
	uids       map[types.UID]bool
	unadmitted bool // QuotaReserved was False (or gone) at some point after the first admission
	admitted   bool
}

func (e *env) recordWorkload(name string) *workloadRecorder {
	ctx, cancel := context.WithCancel(e.ctx)
	r := &workloadRecorder{cancel: cancel, done: make(chan struct{}), uids: map[types.UID]bool{}}
	started := make(chan struct{})
	go func() {
		defer close(r.done)
		once := sync.OnceFunc(func() { close(started) })
		defer once()
		_, _ = e.watchWorkload(ctx, name, func(w *kueue.Workload) bool {
			once()
			r.mu.Lock()
			defer r.mu.Unlock()
			r.uids[w.UID] = true
			if c := meta.FindStatusCondition(w.Status.Conditions, kueue.ConditionPodsReady); c != nil {
				s := string(c.Status) + "/" + c.Reason
				if len(r.podsReady) == 0 || r.podsReady[len(r.podsReady)-1] != s {
					r.podsReady = append(r.podsReady, s)
				}
			}
			if c := w.Eviction(); c != nil {
				r.evicted = append(r.evicted, c.Reason+": "+c.Message)
			}
			if condIs(w, kueue.ConditionRequeued, metav1.ConditionTrue, "") {
				r.requeued = true
			}
			reserved := condIs(w, kueue.ConditionQuotaReserved, metav1.ConditionTrue, "")
			if reserved {
				r.admitted = true
			} else if r.admitted {
				r.unadmitted = true
			}
			return false
		})
	}()
	<-started
	e.t.Cleanup(r.stop)
	return r
}

func (r *workloadRecorder) stop() {
	r.cancel()
	<-r.done
}

// ---------------------------------------------------------------------------------------
// Pods

func attemptSelector(run string, n int32) labels.Selector {
	return labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run, v1alpha1.LabelAttempt: strconv.Itoa(int(n))})
}

// waitWorkers waits until every index of the attempt has one Running pod, and returns them.
func (e *env) waitWorkers(run string, n int32, workers int) map[int]*corev1.Pod {
	e.t.Helper()
	var byIndex map[int]*corev1.Pod
	pods, err := e.c.WaitPods(e.ctx, e.ns, attemptSelector(run, n), func(pods []*corev1.Pod) (bool, error) {
		byIndex = map[int]*corev1.Pod{}
		for _, p := range pods {
			if !cluster.PodLive(p) || attempt.Spare(p) {
				continue // a warm spare is no worker
			}
			if !cluster.PodRunning(p) {
				return false, nil
			}
			i := attempt.IndexOrNone(p)
			if _, dup := byIndex[i]; dup || i < 0 || i >= workers {
				return false, nil
			}
			byIndex[i] = p
		}
		return len(byIndex) == workers, nil
	})
	if err != nil {
		e.t.Fatalf("all %d workers of %s attempt %d Running: %v (%d pods)", workers, run, n, err, len(pods))
	}
	return byIndex
}

// infraFault does what a node shutdown does to a worker: the node agent's mark, then exit 143.
func (e *env) infraFault(pod *corev1.Pod) {
	e.t.Helper()
	ev := v1alpha1.FaultEvidence{Source: "test-agent", Cause: v1alpha1.CauseNodeShutdown, Detail: "the node agent's mark"}
	if err := e.c.MarkAsAgent(e.ctx, pod, ev); err != nil {
		e.t.Fatal(err)
	}
	if err := e.c.FailPod(e.ctx, e.ns, pod.Name, cluster.Failure{ExitCode: 143, Reason: "Error"}); err != nil {
		e.t.Fatal(err)
	}
}

// holdPod makes the pod stay, Running, after its deletion until the returned function lets
// it go, as a kubelet slow to stop it would (cluster.HoldStopping).
func (e *env) holdPod(pod *corev1.Pod) (release func()) {
	e.t.Helper()
	let, err := e.c.HoldStopping(e.ctx, e.ns, pod.Name)
	if err != nil {
		e.t.Fatalf("hold pod %s: %v", pod.Name, err)
	}
	released := false
	release = func() {
		if released {
			return
		}
		released = true
		if err := let(context.Background()); err != nil {
			e.t.Errorf("release pod %s: %v", pod.Name, err)
		}
	}
	e.t.Cleanup(release)
	return release
}

// dump logs what the scenario's runs and Workloads looked like, on failure.
func (e *env) dump() {
	runs := &v1alpha1.TrainingRunList{}
	if err := e.cl.List(context.Background(), runs, client.InNamespace(e.ns)); err == nil {
		for i := range runs.Items {
			e.t.Logf("run %s: %s", runs.Items[i].Name, describeRun(&runs.Items[i]))
		}
	}
	list, err := e.workloads().List(context.Background(), metav1.ListOptions{})
	if err == nil {
		for i := range list.Items {
			w, _ := kueue.Parse(&list.Items[i])
			e.t.Logf("workload %s", describeWorkload(w))
		}
	}
}

// reservationRecorder watches the scenario's ClusterQueue and keeps every distinct count of
// GPUs it reports reserved (status.flavorsReservation), in order: the quota Kueue counts.
type reservationRecorder struct {
	cancel context.CancelFunc
	done   chan struct{}
	// seen is final after stop.
	seen []int64
}

// recordReservation starts recording once the ClusterQueue reports want GPUs reserved: Kueue
// writes a ClusterQueue's status a moment after the admissions it counts.
func (e *env) recordReservation(want int64) *reservationRecorder {
	e.t.Helper()
	lw := e.clusterQueueWatch()
	wctx, wcancel := context.WithCancel(e.ctx)
	defer wcancel()
	var last int64 = -1
	if _, err := watchtools.UntilWithSync(wctx, lw, &unstructured.Unstructured{}, nil, func(ev watch.Event) (bool, error) {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if ok {
			last = reservedGPUs(u)
		}
		return last == want, nil
	}); err != nil {
		e.t.Fatalf("ClusterQueue %s reserves %d GPUs, want %d: %v", e.cq, last, want, err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	r := &reservationRecorder{cancel: cancel, done: make(chan struct{})}
	started := make(chan struct{})
	go func() {
		defer close(r.done)
		once := sync.OnceFunc(func() { close(started) })
		defer once()
		_, _ = watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, nil, func(ev watch.Event) (bool, error) {
			once()
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				return false, nil
			}
			if total := reservedGPUs(u); len(r.seen) == 0 || r.seen[len(r.seen)-1] != total {
				r.seen = append(r.seen, total)
			}
			return false, nil
		})
	}()
	<-started
	e.t.Cleanup(r.stop)
	return r
}

// reservedGPUs is the GPUs a ClusterQueue reports reserved (status.flavorsReservation).
func reservedGPUs(u *unstructured.Unstructured) int64 {
	var total int64
	flavors, _, _ := unstructured.NestedSlice(u.Object, "status", "flavorsReservation")
	for _, f := range flavors {
		fm, _ := f.(map[string]any)
		resources, _, _ := unstructured.NestedSlice(fm, "resources")
		for _, x := range resources {
			m, _ := x.(map[string]any)
			if m["name"] != v1alpha1.ResourceGPU {
				continue
			}
			if s, ok := m["total"].(string); ok {
				q := resource.MustParse(s)
				total += q.Value()
			}
		}
	}
	return total
}

func (e *env) clusterQueueWatch() *cache.ListWatch {
	res := e.dyn.Resource(gvr(kueue.ClusterQueueGVK))
	sel := fields.OneTermEqualSelector("metadata.name", e.cq).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return res.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return res.Watch(ctx, o)
		},
	}
}

func (r *reservationRecorder) stop() {
	r.cancel()
	<-r.done
}

// activateCheck says, as the check's controller would, that the AdmissionCheck is Active:
// Kueue keeps a ClusterQueue whose checks are not active from admitting anything.
func (e *env) activateCheck(name string) {
	e.t.Helper()
	r := e.dyn.Resource(gvr(kueue.AdmissionCheckGVK))
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := r.Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{
			"type": "Active", "status": "True", "reason": "Active", "message": "the scenario plays the controller",
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		}}, "status", "conditions")
		_, err = r.UpdateStatus(e.ctx, u, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("activate AdmissionCheck %s: %v", name, err)
	}
}

// setCheck writes, as the check's controller would, the state of check on the Workload and
// what it asks of the workers' pods (labels, nodeSelector: podSetUpdates of the workers).
func (e *env) setCheck(workload, check, state string, labels map[string]string) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := e.workloads().Get(e.ctx, workload, metav1.GetOptions{})
		if err != nil {
			return err
		}
		checks, _, _ := unstructured.NestedSlice(u.Object, "status", "admissionChecks")
		found := false
		for i, c := range checks {
			m, _ := c.(map[string]any)
			if m["name"] != check {
				continue
			}
			found = true
			m["state"] = state
			m["message"] = "set by the scenario"
			m["lastTransitionTime"] = time.Now().UTC().Format(time.RFC3339)
			if len(labels) > 0 {
				m["podSetUpdates"] = []any{map[string]any{"name": v1alpha1.PodSetWorkers, "labels": toAny(labels)}}
			}
			checks[i] = m
		}
		if !found {
			return fmt.Errorf("workload %s has no admission check %s yet", workload, check)
		}
		if err := unstructured.SetNestedSlice(u.Object, checks, "status", "admissionChecks"); err != nil {
			return err
		}
		_, err = e.workloads().UpdateStatus(e.ctx, u, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("set admission check %s of %s to %s: %v", check, workload, state, err)
	}
}
