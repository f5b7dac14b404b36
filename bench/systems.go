package main

import (
	"context"
	"fmt"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/test/cluster"
)

// A system is one way a user can run a gang of n workers: faultline, a bare Indexed Job, or
// JobSet. Every scenario drives each system through the same faults, and measures it by the
// same yardsticks: its pods (from the API server) and its own terminal condition.
type system interface {
	// name is the system's column in the report.
	name() string
	// create submits a gang of n workers, each asking for one GPU.
	create(ctx context.Context, name string, n int) error
	// selector matches every pod of the gang, of every generation.
	selector(name string) labels.Selector
	// current reports whether a pod belongs to the generation after restarts generations
	// (a restart replaces the gang, or for a bare Job, one index).
	current(p *corev1.Pod, restarts int) bool
	// failed reports whether the gang has ended as failed; the object is the system's own.
	failed(obj runtime.Object) bool
	// watchOwner lists and watches the gang's own object (run, Job or JobSet).
	watchOwner(ctx context.Context, name string) (runtime.Object, watch.Interface, error)
	// remove deletes the gang.
	remove(ctx context.Context, name string) error
}

// Systems by report name.
const (
	sysFaultline        = "faultline"
	sysFaultlineKueue   = "faultline (Kueue)"
	sysFaultlineInPlace = "faultline (in place)"
	sysFaultlineSpares  = "faultline (spares)"
	sysJob              = "Indexed Job"
	sysJobSet           = "JobSet (FailJobSet)"
	sysJobSetDefault    = "JobSet (default)"
)

// faultline: a TrainingRun with the default failure policy.
type faultline struct {
	runs client.WithWatch
	// mode is the runs' restartMode: Recreate unless said (a session that also measures the
	// in-place restart runs a controller with a barrier image on nodes that can, where Auto
	// would restart in place).
	mode v1alpha1.RestartMode
}

func (faultline) name() string { return sysFaultline }

func (s faultline) create(ctx context.Context, name string, n int) error {
	return s.runs.Create(ctx, s.run(name, n))
}

// run is the gang's TrainingRun: n workers of one GPU each, restarting as s.mode says.
func (s faultline) run(name string, n int) *v1alpha1.TrainingRun {
	mode := s.mode
	if mode == "" {
		mode = v1alpha1.RestartModeRecreate
	}
	return &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: v1alpha1.TrainingRunSpec{Workers: int32(n), Template: corev1.PodTemplateSpec{Spec: gpuWorker()},
			FailurePolicy: v1alpha1.FailurePolicy{RestartMode: mode}},
	}
}

func (faultline) selector(name string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: name})
}

func (faultline) current(p *corev1.Pod, restarts int) bool {
	return p.Labels[v1alpha1.LabelAttempt] == strconv.Itoa(restarts+1)
}

func (faultline) failed(obj runtime.Object) bool {
	r, ok := obj.(*v1alpha1.TrainingRun)
	return ok && r.Status.Phase == v1alpha1.PhaseFailed
}

func (s faultline) watchOwner(ctx context.Context, name string) (runtime.Object, watch.Interface, error) {
	list := &v1alpha1.TrainingRunList{}
	opts := &client.ListOptions{Namespace: namespace, FieldSelector: byName(name)}
	if err := s.runs.List(ctx, list, opts); err != nil {
		return nil, nil, err
	}
	w, err := s.runs.Watch(ctx, &v1alpha1.TrainingRunList{}, &client.ListOptions{
		Namespace: namespace, FieldSelector: byName(name), Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion},
	})
	if err != nil || len(list.Items) == 0 {
		return nil, w, err
	}
	return &list.Items[0], w, nil
}

func (s faultline) remove(ctx context.Context, name string) error {
	return client.IgnoreNotFound(s.runs.Delete(ctx, &v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}},
		client.PropagationPolicy(metav1.DeletePropagationBackground)))
}

// faultlineKueue: the same TrainingRun in a Kueue LocalQueue (docs/kueue.md): admitted by a
// real Kueue through its Workload, its restarts inside that admission.
type faultlineKueue struct{ faultline }

func (faultlineKueue) name() string { return sysFaultlineKueue }

func (s faultlineKueue) create(ctx context.Context, name string, n int) error {
	run := s.run(name, n)
	run.Labels = map[string]string{v1alpha1.LabelQueueName: benchQueue}
	return s.runs.Create(ctx, run)
}

// faultlineInPlace: the same TrainingRun with restartMode InPlace (docs/in-place-restart.md)
// on nodes that can: the workers on healthy nodes restart in their pods, the shut-down node's
// indexes get new pods. kwok plays the kubelet's part and the bench the node agent's
// (cluster.SimulateInPlace: the agent's own decisions, its runtime calls as labels).
type faultlineInPlace struct {
	faultline
	// supervise: the workers have a command, so their barrier is its entrypoint, and it
	// supervises them; the simulated agents keep their records on their nodes' heartbeats
	// (bench -inplace-supervise).
	supervise bool
}

func (faultlineInPlace) name() string { return sysFaultlineInPlace }

func (s faultlineInPlace) create(ctx context.Context, name string, n int) error {
	run := s.run(name, n)
	if s.supervise {
		run.Spec.Template.Spec.Containers[0].Command = []string{"/train"}
	}
	return s.runs.Create(ctx, run)
}

// current: a pod restarted in place keeps the label of the attempt it was made for; it runs
// the attempt its barrier last opened for.
func (faultlineInPlace) current(p *corev1.Pod, restarts int) bool {
	n, ok := attempt.Running(p)
	return ok && int(n) == restarts+1
}

// faultlineSpares: faultline (in place) with warm spares (spec.spares, docs/in-place-restart.md):
// as many as a node holds workers, made once the gang runs; the lost node's indexes go to
// them. The measurement starts once they all wait.
type faultlineSpares struct{ faultlineInPlace }

func (faultlineSpares) name() string { return sysFaultlineSpares }

func (s faultlineSpares) create(ctx context.Context, name string, n int) error {
	run := s.run(name, n)
	run.Spec.Template.Spec.Containers[0].Command = []string{"/train"}
	run.Spec.Spares = int32(s.sparesOf(n))
	return s.runs.Create(ctx, run)
}

// sparesOf is a gang of n's spares: what a node holds.
func (faultlineSpares) sparesOf(n int) int { return min(n, gpusPerNode) }

// current: a spare that holds no index is no worker of any generation.
func (s faultlineSpares) current(p *corev1.Pod, restarts int) bool {
	return !attempt.Spare(p) && s.faultlineInPlace.current(p, restarts)
}

// isFaultline: the faultline systems run the node agent and report their restarts' phases.
func isFaultline(s system) bool {
	return s.name() == sysFaultline || s.name() == sysFaultlineKueue || s.name() == sysFaultlineInPlace || s.name() == sysFaultlineSpares
}

// bareJob: an Indexed Job as the Kubernetes documentation suggests for this workload: at
// most one pod per index (podReplacementPolicy Failed), a disruption (the kubelet's
// DisruptionTarget condition) is ignored and the index's pod replaced, exit code 1 fails the
// Job at once, and anything else is retried per index (backoffLimitPerIndex).
type bareJob struct{ c *cluster.Cluster }

func (bareJob) name() string { return sysJob }

func (s bareJob) create(ctx context.Context, name string, n int) error {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: batchv1.JobSpec{
			CompletionMode: ptr.To(batchv1.IndexedCompletion),
			Completions:    ptr.To(int32(n)), Parallelism: ptr.To(int32(n)),
			PodReplacementPolicy: ptr.To(batchv1.Failed),
			BackoffLimitPerIndex: ptr.To(int32(3)),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}},
				{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1}}},
			}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{labelGang: name}}, Spec: gpuWorker()},
		},
	}
	_, err := s.c.Client.BatchV1().Jobs(namespace).Create(ctx, job, metav1.CreateOptions{})
	return err
}

// labelGang marks the pods of the benchmark's bare Jobs.
const labelGang = "bench.faultline.dev/gang"

func (bareJob) selector(name string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{labelGang: name})
}

// current: a bare Job replaces only the failed index, so a pod of the next generation is
// any pod that is not one of the failed ones (the caller tracks those by UID).
func (bareJob) current(*corev1.Pod, int) bool { return true }

func (bareJob) failed(obj runtime.Object) bool {
	j, ok := obj.(*batchv1.Job)
	if !ok {
		return false
	}
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func (s bareJob) watchOwner(ctx context.Context, name string) (runtime.Object, watch.Interface, error) {
	opts := metav1.ListOptions{FieldSelector: byName(name).String()}
	list, err := s.c.Client.BatchV1().Jobs(namespace).List(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	opts.ResourceVersion = list.ResourceVersion
	w, err := s.c.Client.BatchV1().Jobs(namespace).Watch(ctx, opts)
	if err != nil || len(list.Items) == 0 {
		return nil, w, err
	}
	return &list.Items[0], w, nil
}

func (s bareJob) remove(ctx context.Context, name string) error {
	err := s.c.Client.BatchV1().Jobs(namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	return client.IgnoreNotFound(err)
}

// jobSet: JobSet v0.12.0 with one replicated Job of n indexed workers, backoffLimit 0 (a
// failed worker fails its Job, and JobSet restarts the whole gang) and maxRestarts 3. With
// best set, it is configured at its best for application errors: a FailJob rule on exit
// code 1 in the Job and a FailJobSet rule on the PodFailurePolicy reason, so that such an
// error fails the JobSet instead of restarting it.
type jobSet struct {
	dyn  dynamic.Interface
	best bool
}

func (s jobSet) name() string {
	if s.best {
		return sysJobSet
	}
	return sysJobSetDefault
}

func (s jobSet) create(ctx context.Context, name string, n int) error {
	spec := cluster.JobSetSpec{Name: name, Namespace: namespace, Workers: n, MaxRestarts: 3,
		PodTemplate: corev1.PodTemplateSpec{Spec: gpuWorker()}}
	if s.best {
		spec.FailJobSetOnPodFailurePolicy = true
		spec.FailJobOnExitCodes = []int32{1}
	}
	_, err := s.dyn.Resource(cluster.JobSetGVR).Namespace(namespace).Create(ctx, cluster.NewJobSet(spec), metav1.CreateOptions{})
	return err
}

// JobSet's labels on its pods.
const (
	labelJobSetName     = "jobset.sigs.k8s.io/jobset-name"
	labelJobSetRestarts = "jobset.sigs.k8s.io/restart-attempt"
)

func (jobSet) selector(name string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{labelJobSetName: name})
}

func (jobSet) current(p *corev1.Pod, restarts int) bool {
	return p.Labels[labelJobSetRestarts] == strconv.Itoa(restarts)
}

func (jobSet) failed(obj runtime.Object) bool {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var cs []metav1.Condition
	for _, c := range conds {
		m, _ := c.(map[string]any)
		t, _ := m["type"].(string)
		st, _ := m["status"].(string)
		cs = append(cs, metav1.Condition{Type: t, Status: metav1.ConditionStatus(st)})
	}
	return meta.IsStatusConditionTrue(cs, "Failed")
}

func (s jobSet) watchOwner(ctx context.Context, name string) (runtime.Object, watch.Interface, error) {
	r := s.dyn.Resource(cluster.JobSetGVR).Namespace(namespace)
	opts := metav1.ListOptions{FieldSelector: byName(name).String()}
	list, err := r.List(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	opts.ResourceVersion = list.GetResourceVersion()
	w, err := r.Watch(ctx, opts)
	if err != nil || len(list.Items) == 0 {
		return nil, w, err
	}
	return &list.Items[0], w, nil
}

func (s jobSet) remove(ctx context.Context, name string) error {
	err := s.dyn.Resource(cluster.JobSetGVR).Namespace(namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	return client.IgnoreNotFound(err)
}

// waitOwner watches a gang's own object until cond holds.
func waitOwner(ctx context.Context, s system, name string, cond func(runtime.Object) bool) (runtime.Object, error) {
	obj, w, err := s.watchOwner(ctx, name)
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	if obj != nil && cond(obj) {
		return obj, nil
	}
	for e := range w.ResultChan() {
		if e.Type == watch.Error {
			return nil, fmt.Errorf("watch of %s %s: %v", s.name(), name, e.Object)
		}
		if cond(e.Object) {
			return e.Object, nil
		}
	}
	return nil, fmt.Errorf("watch of %s %s ended: %w", s.name(), name, ctx.Err())
}
