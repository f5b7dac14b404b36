package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apischeme "github.com/faultline-dev/faultline/api/scheme"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/test/cluster"
)

// launcherBin is the launcher binary that TestMain builds once for the package.
var launcherBin string

// startController starts `launcher controller` for namespace ns with args appended (see
// cluster.StartProcess for its log and its end).
func startController(t *testing.T, ns string, args ...string) *cluster.Process {
	t.Helper()
	if launcherBin == "" {
		t.Fatal("launcher binary not built: TestMain must build it")
	}
	c := cluster.Shared(t)
	full := append([]string{"controller",
		"--kubeconfig", c.Kubeconfig,
		"--namespace", ns,
		"--leader-elect=false",
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", "0",
	}, args...)
	return cluster.StartProcess(t, launcherBin, full...)
}

// ---------------------------------------------------------------------------------------
// Clients

var (
	clientsMu sync.Mutex
	clients   = map[*cluster.Cluster]*runClients{}
)

type runClients struct {
	cl   client.Client  // typed CRUD for TrainingRuns and core objects
	rest rest.Interface // REST client of faultline.dev/v1alpha1, for list+watch
}

// testScheme knows the built-in types and faultline's, as the controller and launcher do.
var testScheme = apischeme.New()

func clientsFor(t testing.TB, c *cluster.Cluster) *runClients {
	t.Helper()
	clientsMu.Lock()
	defer clientsMu.Unlock()
	if rc, ok := clients[c]; ok {
		return rc
	}
	cl, err := client.New(c.Config, client.Options{Scheme: testScheme})
	if err != nil {
		t.Fatalf("controller-runtime client: %v", err)
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.GroupVersion = &v1alpha1.GroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(testScheme).WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatalf("REST client for %s: %v", v1alpha1.GroupVersion, err)
	}
	out := &runClients{cl: cl, rest: rc}
	clients[c] = out
	return out
}

// runClient is a controller-runtime client of the cluster whose scheme knows TrainingRuns.
func runClient(t testing.TB, c *cluster.Cluster) client.Client { return clientsFor(t, c).cl }

// ---------------------------------------------------------------------------------------
// Building and creating runs

// runOption changes a run built by newRun.
type runOption func(*v1alpha1.TrainingRun)

// newRun is a TrainingRun of workers workers, each asking for one GPU. Its namespace is set
// by createRun.
func newRun(name string, workers int32, opts ...runOption) *v1alpha1.TrainingRun {
	run := &v1alpha1.TrainingRun{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.KindTrainingRun},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TrainingRunSpec{
			Workers: workers,
			Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{
						Name:  "worker",
						Image: "trainer:latest",
						Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
							corev1.ResourceName(v1alpha1.ResourceGPU): resource.MustParse("1"),
						}},
					}},
				},
			},
		},
	}
	for _, o := range opts {
		o(run)
	}
	return run
}

func withSettleSeconds(s int32) runOption {
	return func(r *v1alpha1.TrainingRun) { r.Spec.FailurePolicy.SettleSeconds = ptr.To(s) }
}

func withMaxRestarts(b v1alpha1.RestartBudgets) runOption {
	return func(r *v1alpha1.TrainingRun) { r.Spec.FailurePolicy.MaxRestarts = b }
}

func withRules(rules ...v1alpha1.FailurePolicyRule) runOption {
	return func(r *v1alpha1.TrainingRun) {
		r.Spec.FailurePolicy.Rules = append(r.Spec.FailurePolicy.Rules, rules...)
	}
}

func withRestartScope(s v1alpha1.RestartScope) runOption {
	return func(r *v1alpha1.TrainingRun) { r.Spec.RestartScope = s }
}

// withoutGPUs leaves the workers without a GPU, so that a run can be larger than the
// shared cluster's GPUs.
func withoutGPUs() runOption {
	return func(r *v1alpha1.TrainingRun) {
		r.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	}
}

// withPreferredNode makes the scheduler prefer a node (a soft affinity), so that a test can
// show that a required exclusion overrides where the run would otherwise go.
func withPreferredNode(node string) runOption {
	return func(r *v1alpha1.TrainingRun) {
		r.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight: 100,
				Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node},
				}}},
			}},
		}}
	}
}

// createRun creates the run in namespace ns.
func createRun(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string, run *v1alpha1.TrainingRun) *v1alpha1.TrainingRun {
	t.Helper()
	run = run.DeepCopy()
	run.Namespace = ns
	if err := runClient(t, c).Create(ctx, run); err != nil {
		t.Fatalf("create TrainingRun %s/%s: %v", ns, run.Name, err)
	}
	return run
}

// runningRun creates run and waits until its first attempt is Running, every worker with
// it: where most scenarios start. It returns the run and attempt 1's workers by index.
func runningRun(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string, run *v1alpha1.TrainingRun) (*v1alpha1.TrainingRun, map[int]*corev1.Pod) {
	t.Helper()
	run = createRun(ctx, t, c, ns, run)
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	return run, waitWorkers(ctx, t, c, ns, run.Name, 1, int(run.Spec.Workers))
}

// getRun reads the run from the API server.
func getRun(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string) *v1alpha1.TrainingRun {
	t.Helper()
	run := &v1alpha1.TrainingRun{}
	if err := runClient(t, c).Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, run); err != nil {
		t.Fatalf("get TrainingRun %s/%s: %v", ns, name, err)
	}
	return run
}

// patchRunSpec merge-patches the run's spec.
func patchRunSpec(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string, spec map[string]any) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		t.Fatal(err)
	}
	run := &v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := runClient(t, c).Patch(ctx, run, client.RawPatch(types.MergePatchType, body)); err != nil {
		t.Fatalf("patch TrainingRun %s/%s with %s: %v", ns, name, body, err)
	}
}

// ---------------------------------------------------------------------------------------
// Watching runs

// watchRun runs a watch on one TrainingRun (list+watch with a field selector on its name)
// and returns as soon as cond holds, with the run that satisfied it. On error (e.g. the
// context expired) it returns the last run it saw, which may be nil.
func watchRun(ctx context.Context, t testing.TB, c *cluster.Cluster, ns, name string, cond func(*v1alpha1.TrainingRun) bool) (*v1alpha1.TrainingRun, error) {
	rc := clientsFor(t, c).rest
	lw := cache.NewListWatchFromClient(rc, v1alpha1.ResourceTrainingRun, ns, fields.OneTermEqualSelector("metadata.name", name))
	var last *v1alpha1.TrainingRun
	_, err := watchtools.UntilWithSync(ctx, lw, &v1alpha1.TrainingRun{}, nil, func(e watch.Event) (bool, error) {
		r, ok := e.Object.(*v1alpha1.TrainingRun)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		last = r
		return cond(r), nil
	})
	return last, err
}

// waitRun waits (watch-based) until cond holds for the run and returns it; it fails the
// test with what it saw last if ctx ends first.
func waitRun(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string, what string, cond func(*v1alpha1.TrainingRun) bool) *v1alpha1.TrainingRun {
	t.Helper()
	start := time.Now()
	run, err := watchRun(ctx, t, c, ns, name, cond)
	if err != nil {
		t.Fatalf("TrainingRun %s/%s: %s: not observed within %s (%v); last seen: %s",
			ns, name, what, time.Since(start).Round(time.Millisecond), err, describeRun(run))
	}
	return run
}

// requireRunStays watches the run for d and fails the test if bad ever holds for it (e.g. a
// second restart), instead of sleeping and reading once.
func requireRunStays(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string, d time.Duration, what string, bad func(*v1alpha1.TrainingRun) bool) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	run, err := watchRun(wctx, t, c, ns, name, bad)
	switch {
	case err == nil:
		t.Fatalf("TrainingRun %s/%s: %s: violated within %s: %s", ns, name, what, d, describeRun(run))
	case wctx.Err() != nil && ctx.Err() == nil:
		// Watched for the whole window; bad never held.
	default:
		t.Fatalf("TrainingRun %s/%s: watch for %s: %v", ns, name, what, err)
	}
}

// runRecorder watches a run in the background and remembers what it saw.
type runRecorder struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	maxAttempt int32
	phases     []v1alpha1.Phase
}

func recordRun(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string) *runRecorder {
	ctx, cancel := context.WithCancel(ctx)
	r := &runRecorder{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		_, _ = watchRun(ctx, t, c, ns, name, func(run *v1alpha1.TrainingRun) bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.maxAttempt = max(r.maxAttempt, run.Status.Attempt)
			if p := run.Status.Phase; p != "" && (len(r.phases) == 0 || r.phases[len(r.phases)-1] != p) {
				r.phases = append(r.phases, p)
			}
			return false
		})
	}()
	t.Cleanup(r.stop)
	return r
}

// stop ends the watch; the recorder's fields are final afterwards.
func (r *runRecorder) stop() {
	r.cancel()
	<-r.done
}

func (r *runRecorder) sawPhase(p v1alpha1.Phase) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range r.phases {
		if q == p {
			return true
		}
	}
	return false
}

// describeRun is a one-line summary of a run's status for failure messages.
func describeRun(run *v1alpha1.TrainingRun) string {
	if run == nil {
		return "<no run observed>"
	}
	s := run.Status
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%q attempt=%d restarts={infra:%d app:%d unknown:%d} ready=%d/%d",
		s.Phase, s.Attempt, s.Restarts.Infrastructure, s.Restarts.Application, s.Restarts.Unknown, s.ReadyWorkers, run.Spec.Workers)
	if len(s.ExcludedNodes) > 0 {
		fmt.Fprintf(&b, " excludedNodes=%v", s.ExcludedNodes)
	}
	if f := s.LastFailure; f != nil {
		fmt.Fprintf(&b, " lastFailure={class:%s cause:%s rule:%s action:%s pod:%s index:%s node:%s exit:%s explanation:%q}",
			f.Class, f.Cause, f.Rule, f.Action, f.Pod, fmtPtr(f.Index), f.Node, fmtPtr(f.ExitCode), f.Explanation)
	}
	for _, cond := range s.Conditions {
		fmt.Fprintf(&b, " cond[%s=%s reason=%s msg=%q]", cond.Type, cond.Status, cond.Reason, cond.Message)
	}
	return b.String()
}

func fmtPtr(p *int32) string {
	if p == nil {
		return "<nil>"
	}
	return strconv.Itoa(int(*p))
}

// runCondition returns the run's condition of that type, or nil.
func runCondition(run *v1alpha1.TrainingRun, condType string) *metav1.Condition {
	return meta.FindStatusCondition(run.Status.Conditions, condType)
}

func phaseIs(p v1alpha1.Phase) func(*v1alpha1.TrainingRun) bool {
	return func(r *v1alpha1.TrainingRun) bool { return r.Status.Phase == p }
}

// runningAttempt holds when attempt n has every worker Running.
func runningAttempt(n int32) func(*v1alpha1.TrainingRun) bool {
	return func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Attempt == n && r.Status.Phase == v1alpha1.PhaseRunning && r.Status.ReadyWorkers == r.Spec.Workers
	}
}

// requireRestarts fails the test unless the run's restart counts are exactly want.
func requireRestarts(t *testing.T, run *v1alpha1.TrainingRun, want v1alpha1.RestartCounts) {
	t.Helper()
	if run.Status.Restarts != want {
		t.Errorf("status.restarts = %+v, want %+v (%s)", run.Status.Restarts, want, describeRun(run))
	}
}

// ---------------------------------------------------------------------------------------
// Pods and Jobs of a run

func runSelector(run string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run})
}

func attemptSelector(run string, attempt int32) labels.Selector {
	return labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run, v1alpha1.LabelAttempt: strconv.Itoa(int(attempt))})
}

// waitWorkers waits until every index 0..workers-1 of the attempt has exactly one Running pod
// and no other live pod, and returns them by index.
func waitWorkers(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, run string, attemptN int32, workers int) map[int]*corev1.Pod {
	t.Helper()
	var byIndex map[int]*corev1.Pod
	pods, err := c.WaitPods(ctx, ns, attemptSelector(run, attemptN), func(pods []*corev1.Pod) (bool, error) {
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
		t.Fatalf("all %d workers of %s attempt %d Running: %v; pods: %s", workers, run, attemptN, err, describePods(pods))
	}
	return byIndex
}

// podsOfAttempt lists the pods of one attempt of a run.
func podsOfAttempt(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, run string, attempt int32) []corev1.Pod {
	t.Helper()
	list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: attemptSelector(run, attempt).String()})
	if err != nil {
		t.Fatalf("list pods of %s attempt %d: %v", run, attempt, err)
	}
	return list.Items
}

func describePods(pods []*corev1.Pod) string {
	var parts []string
	for _, p := range pods {
		del := ""
		if p.DeletionTimestamp != nil {
			del = ",deleting"
		}
		parts = append(parts, fmt.Sprintf("%s(attempt=%s,index=%d,%s%s,node=%s)",
			p.Name, p.Labels[v1alpha1.LabelAttempt], attempt.IndexOrNone(p), p.Status.Phase, del, p.Spec.NodeName))
	}
	if len(parts) == 0 {
		return "<none>"
	}
	return strings.Join(parts, " ")
}

// failWorker fails a Running pod as f says.
func failWorker(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod, f cluster.Failure) {
	t.Helper()
	if err := c.FailPod(ctx, pod.Namespace, pod.Name, f); err != nil {
		t.Fatal(err)
	}
}

// completeWorker makes a Running pod exit 0 through the harness's pod-complete stage.
func completeWorker(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod) {
	t.Helper()
	if err := c.CompletePod(ctx, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
}

// infraFault does what a node shutdown does to a worker: the node agent marks the pod with
// the InfrastructureFault condition, then the program gets SIGTERM and exits 143.
func infraFault(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod, cause v1alpha1.Cause) {
	t.Helper()
	markInfrastructureFault(ctx, t, c, pod, cause)
	failWorker(ctx, t, c, pod, cluster.Failure{ExitCode: 143, Reason: "Error"})
}

// markInfrastructureFault writes onto pod what the node agent of its node writes for cause
// (see markAsAgent).
func markInfrastructureFault(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod, cause v1alpha1.Cause) {
	t.Helper()
	markAsAgent(ctx, t, c, pod, v1alpha1.FaultEvidence{Source: "test-agent", Cause: cause, Detail: "test: the node agent's mark"})
}

// markAsAgent writes what the node agent writes onto a pod of its node
// (cluster.MarkAsAgent). These scenarios play the agent; test/e2e/agent runs the real one.
func markAsAgent(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod, ev v1alpha1.FaultEvidence) {
	t.Helper()
	if err := c.MarkAsAgent(ctx, pod, ev); err != nil {
		t.Fatal(err)
	}
}

// annotateFaultEvidence writes the fault-evidence annotation onto the pod through the pods
// resource, as anyone who may edit the pod can (not as the agent: see markAsAgent).
func annotateFaultEvidence(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod, ev v1alpha1.FaultEvidence) {
	t.Helper()
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		v1alpha1.AnnotationFaultEvidence: string(raw),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotate pod %s with fault evidence: %v", pod.Name, err)
	}
}

// overlapMonitor watches every pod of a run and records each moment at which one completion
// index had more than one pod that may run (present, not terminal, not held by a scheduling
// gate, which the scheduler never binds): the duplicate task registration that TensorFlow
// and JAX cannot survive.
type overlapMonitor struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	violations []string
	events     int
	err        error
}

// monitorOverlaps starts the watch and returns once its initial list is in, so that every
// later change is seen.
func monitorOverlaps(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, run string) *overlapMonitor {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	m := &overlapMonitor{cancel: cancel, done: make(chan struct{})}
	synced := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(m.done)
		_, err := c.WaitPods(ctx, ns, runSelector(run), func(pods []*corev1.Pod) (bool, error) {
			once.Do(func() { close(synced) })
			m.mu.Lock()
			defer m.mu.Unlock()
			m.events++
			live := map[int][]*corev1.Pod{}
			for _, p := range pods {
				if cluster.PodLive(p) && len(p.Spec.SchedulingGates) == 0 {
					live[attempt.IndexOrNone(p)] = append(live[attempt.IndexOrNone(p)], p)
				}
			}
			for i, ps := range live {
				if len(ps) > 1 {
					m.violations = append(m.violations, fmt.Sprintf("index %d: %d live pods at once: %s", i, len(ps), describePods(ps)))
				}
			}
			return false, nil
		})
		if ctx.Err() == nil {
			m.mu.Lock()
			m.err = err
			m.mu.Unlock()
		}
	}()
	t.Cleanup(m.stop)
	select {
	case <-synced:
	case <-m.done:
		t.Fatalf("pod monitor for %s ended before it synced: %v", run, m.err)
	case <-ctx.Done():
		t.Fatalf("pod monitor for %s did not sync: %v", run, ctx.Err())
	}
	return m
}

func (m *overlapMonitor) stop() {
	m.cancel()
	<-m.done
}

// check stops the monitor and fails the test if any index ever had two live pods.
func (m *overlapMonitor) check(t *testing.T) {
	t.Helper()
	m.stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		t.Errorf("pod monitor ended early: %v", m.err)
	}
	for i, v := range m.violations {
		if i == 10 {
			t.Errorf("… and %d more overlapping moments", len(m.violations)-i)
			break
		}
		t.Errorf("overlap: %s", v)
	}
	t.Logf("pod monitor saw %d pod changes, %d overlaps", m.events, len(m.violations))
}

// jobMonitor counts, by attempt label, the Jobs of a run that were created (ADDED events,
// counted by UID so that a relist never counts a Job twice) while it ran.
type jobMonitor struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	created map[string]map[types.UID]bool
	err     error
}

func monitorJobs(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, run string) *jobMonitor {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	m := &jobMonitor{cancel: cancel, done: make(chan struct{}), created: map[string]map[types.UID]bool{}}
	sel := runSelector(run).String()
	list, err := c.Client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		cancel()
		t.Fatalf("list jobs: %v", err)
	}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return c.Client.BatchV1().Jobs(ns).Watch(ctx, o)
		},
	})
	if err != nil {
		cancel()
		t.Fatalf("watch jobs: %v", err)
	}
	go func() {
		defer close(m.done)
		defer rw.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-rw.ResultChan():
				if !ok {
					if ctx.Err() == nil {
						m.mu.Lock()
						m.err = errors.New("job watch closed")
						m.mu.Unlock()
					}
					return
				}
				if e.Type == watch.Error {
					m.mu.Lock()
					m.err = fmt.Errorf("job watch error: %v", e.Object)
					m.mu.Unlock()
					continue
				}
				j, ok := e.Object.(*batchv1.Job)
				if !ok || e.Type != watch.Added {
					continue
				}
				a := j.Labels[v1alpha1.LabelAttempt]
				m.mu.Lock()
				if m.created[a] == nil {
					m.created[a] = map[types.UID]bool{}
				}
				m.created[a][j.UID] = true
				m.mu.Unlock()
			}
		}
	}()
	t.Cleanup(m.stop)
	return m
}

func (m *jobMonitor) stop() {
	m.cancel()
	<-m.done
}

// counts stops the monitor and returns how many Jobs were created per attempt label.
func (m *jobMonitor) counts(t *testing.T) map[string]int {
	t.Helper()
	m.stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		t.Errorf("job monitor: %v", m.err)
	}
	out := map[string]int{}
	for a, uids := range m.created {
		out[a] = len(uids)
	}
	return out
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// dumpOnFailure registers a cleanup that, if the test failed, logs the namespace's Jobs,
// pods and events: what a reader needs to tell a controller bug from a test bug.
func dumpOnFailure(t *testing.T, c *cluster.Cluster, ns string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var b strings.Builder
		if jobs, err := c.Client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{}); err != nil {
			fmt.Fprintf(&b, "list jobs: %v\n", err)
		} else {
			for _, j := range jobs.Items {
				var conds []string
				for _, jc := range j.Status.Conditions {
					conds = append(conds, fmt.Sprintf("%s=%s(%s)", jc.Type, jc.Status, jc.Reason))
				}
				fmt.Fprintf(&b, "job %s uid=%s attempt=%s created=%s deleting=%v active=%d ready=%d succeeded=%d failed=%d conds=%v\n",
					j.Name, j.UID, j.Labels[v1alpha1.LabelAttempt], j.CreationTimestamp.Format(time.RFC3339), j.DeletionTimestamp != nil,
					j.Status.Active, ptrInt(j.Status.Ready), j.Status.Succeeded, j.Status.Failed, conds)
			}
		}
		if pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
			fmt.Fprintf(&b, "list pods: %v\n", err)
		} else {
			for i := range pods.Items {
				p := &pods.Items[i]
				owner := ""
				if ref := metav1.GetControllerOf(p); ref != nil {
					owner = string(ref.UID)
				}
				fmt.Fprintf(&b, "pod %s uid=%s attempt=%s index=%d phase=%s deleting=%v node=%s owner=%s created=%s\n",
					p.Name, p.UID, p.Labels[v1alpha1.LabelAttempt], attempt.IndexOrNone(p), p.Status.Phase, p.DeletionTimestamp != nil,
					p.Spec.NodeName, owner, p.CreationTimestamp.Format(time.RFC3339))
			}
		}
		if evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err != nil {
			fmt.Fprintf(&b, "list events: %v\n", err)
		} else {
			sort.Slice(evs.Items, func(i, j int) bool { return evs.Items[i].LastTimestamp.Before(&evs.Items[j].LastTimestamp) })
			for _, e := range evs.Items {
				fmt.Fprintf(&b, "event %s %s/%s %s: %s\n", e.LastTimestamp.Format("15:04:05"), e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
		t.Logf("namespace %s at the end of the failed test:\n%s", ns, b.String())
	})
}

func ptrInt(p *int32) int32 {
	if p == nil {
		return -1
	}
	return *p
}

// requireNodeExcluded fails the test unless every term of the pod template's required node
// affinity keeps pods off node, by its name.
func requireNodeExcluded(t *testing.T, tmpl *corev1.PodTemplateSpec, node string) {
	t.Helper()
	aff := tmpl.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
		len(aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		t.Fatalf("job template has no required node affinity; want %s NotIn [%s]", attempt.NodeNameField, node)
	}
	for i, term := range aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		found := false
		for _, req := range term.MatchFields {
			if req.Key == attempt.NodeNameField && req.Operator == corev1.NodeSelectorOpNotIn {
				found = found || slices.Contains(req.Values, node)
			}
		}
		if !found {
			t.Errorf("required node affinity term %d does not exclude %s by name: %+v", i, node, term.MatchFields)
		}
	}
}
