package controller

import (
	"context"
	"fmt"
	"maps"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/faultline-dev/faultline/api/scheme"
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/controller/admission"
	"github.com/faultline-dev/faultline/pkg/controller/episode"
	"github.com/faultline-dev/faultline/pkg/controller/plannedmove"
	"github.com/faultline-dev/faultline/pkg/controller/slim"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/maintenance"
	"github.com/faultline-dev/faultline/pkg/nodemaintenance"
	"github.com/faultline-dev/faultline/pkg/podgroup"
	"github.com/faultline-dev/faultline/pkg/runmetrics"
	"github.com/faultline-dev/faultline/pkg/tracing"
)

// Options configure the controller process.
type Options struct {
	// Namespace limits the controller to one namespace ("" watches all).
	Namespace               string
	LeaderElection          bool
	LeaderElectionNamespace string
	MetricsAddr             string
	ProbeAddr               string
	// PprofAddr serves net/http/pprof ("" or "0": off): how the benchmarks profile a restart.
	PprofAddr string
	// Workers is the number of runs reconciled concurrently (DefaultWorkers).
	Workers int
	// Frameworks, when set, replaces the framework plugin host (tests).
	Frameworks Frameworks
	// Plugins configure the framework plugin host that Run starts when Frameworks is
	// unset: where the faultline-plugin-<framework> binaries are, the call timeout.
	Plugins framework.HostOptions
	// Tracing records the spans of fault episodes (nil: none).
	Tracing *tracing.Provider
	Crash   func(point string)
	// Maintenance says which platform signals of a planned maintenance runs act on.
	Maintenance maintenance.Config
	// NodeMaintenances picks the NodeMaintenances this controller acts on (cordon, plan,
	// report); nil: none. A controller limited to one namespace sees only that namespace's
	// runs, so it must not report on a drain of the whole cluster unless told which
	// NodeMaintenances are its own (launcher controller --node-maintenance-selector).
	NodeMaintenances labels.Selector
	// BarrierImage is faultline-barrier's image (barrier.Image of the controller's version by
	// default), the init container of pods that restart in place; "": no restart in place.
	BarrierImage string
	// BarrierInWorker makes the barrier the worker container's entrypoint, from an image
	// volume of BarrierImage, in the pods whose template allows it (one container, its
	// command set) on nodes whose runtime mounts image volumes (inplacegate.BarrierInWorker):
	// one container per pod for the kubelet to restart, where the init container is two
	// (docs/in-place-restart-proof.md). That barrier stays, the worker its child
	// (`faultline-barrier supervise`): the node agent's stop ends the worker and every
	// process it left, and the barrier waits again in the same container, which the kubelet
	// never restarts. launcher controller's default.
	BarrierInWorker bool
	// NodeConditions are the node conditions of the cluster's own health checkers that are
	// infrastructure evidence for the workers of their node (exitclass.NodeConditionRule).
	NodeConditions []exitclass.NodeConditionRule
	// Kueue turns on the Kueue integration: the cluster must serve Kueue's Workloads
	// (kueue.x-k8s.io/v1beta2), which the controller then watches.
	Kueue bool
}

// The plugin host serves framework "none" itself, without a plugin, as NoPlugins does.
var _ Frameworks = (*framework.Host)(nil)

// DefaultWorkers is how many runs are reconciled at once. A reconcile that writes mostly
// waits on the API server (a status write; a teardown deletes a gang's pods), so its cost is
// latency, not CPU: 8 workers and a busy API server (a second a request, as in the
// benchmark's steady state of 10,000 pods) make at most 8 such reconciles a second for every
// run of the cluster, and a failed run's decision waits behind them.
const DefaultWorkers = 32

// DefaultKubeAPIQPS and DefaultKubeAPIBurst are the controller's client rate limit. A
// restart's teardown writes twice per worker (a finalizer dropped, a pod deleted) in one
// burst: the burst covers a 200-worker gang at once. A larger gang's teardown is held by the
// API server, not by this limit: measured at 2,048 workers on the local control plane, QPS
// 1000 (burst 2000) tore down no faster than QPS 200 (27-43 s against 27-33 s), and 128
// requests in flight instead of forEachPod's 32 made it slower (2026-11-23-s11-2048-qps200-*.md).
const (
	DefaultKubeAPIQPS   = 200
	DefaultKubeAPIBurst = 400
)

// LeaderElectionID names the Lease that controller replicas compete for.
const LeaderElectionID = "faultline-controller." + v1alpha1.GroupName

// Run runs the controller until ctx is done.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	// Only objects that carry the run label are cached: a controller in a busy cluster must
	// not hold every pod and Job in memory.
	hasRun, err := labels.NewRequirement(v1alpha1.LabelRun, selection.Exists, nil)
	if err != nil {
		return err
	}
	byRun := labels.NewSelector().Add(*hasRun)
	cacheOpts := cache.Options{
		DefaultTransform: slim.Default,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:     {Label: byRun, Transform: slim.Pod},
			&batchv1.Job{}:    {Label: byRun},
			&corev1.Service{}: {Label: byRun},
			// Nodes are only read (exitclass.FactsOfNode), for every distinct node of a run's
			// pods at every reconcile: no copy of each.
			&corev1.Node{}: {Transform: slim.Node, UnsafeDisableDeepCopy: ptr.To(true)},
			// The node agents' heartbeats (package agentlease), read with the nodes' facts:
			// whatever namespace the controller is limited to, they are in the agents'.
			&coordinationv1.Lease{}: {
				Namespaces:            map[string]cache.Config{agentlease.Namespace: {}},
				Label:                 labels.SelectorFromSet(agentlease.Labels()),
				UnsafeDisableDeepCopy: ptr.To(true),
			},
		},
	}
	// Workloads are read at every reconcile of a queued run: from the cache, which holds
	// only faultline's own (they carry the run label).
	maps.Copy(cacheOpts.ByObject, admission.CacheObjects(opts.Kueue, byRun))
	if opts.Namespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{opts.Namespace: {}}
	}
	leNS := opts.LeaderElectionNamespace
	if leNS == "" {
		leNS = opts.Namespace
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme.New(),
		Cache:                         cacheOpts,
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       leNS,
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress:        opts.ProbeAddr,
		PprofBindAddress:              opts.PprofAddr,
		// Workloads are unstructured (Kueue's Go module is no dependency, see pkg/kueue);
		// nothing else is read unstructured.
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: opts.Kueue}},
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	frameworks := opts.Frameworks
	if frameworks == nil {
		// Plugins start on first use; Close kills them when the manager stops.
		host := framework.NewHost(opts.Plugins)
		defer host.Close()
		frameworks = host
	}
	r := &Reconciler{
		Client:      mgr.GetClient(),
		APIReader:   mgr.GetAPIReader(),
		Recorder:    mgr.GetEventRecorder("faultline-controller"),
		Clock:       clock.RealClock{},
		Frameworks:  frameworks,
		Episodes:    episode.New(opts.Tracing, clock.RealClock{}),
		Crash:       opts.Crash,
		Maintenance: opts.Maintenance,

		BarrierImage:    opts.BarrierImage,
		BarrierInWorker: opts.BarrierInWorker,
		NodeConditions:  opts.NodeConditions,
	}
	// Whether the cluster gang-schedules: read once, at the start, as the Kueue integration's
	// API is; a cluster that starts serving PodGroups later is seen at the controller's next
	// start.
	if r.PodGroups, err = podgroup.Served(mgr.GetRESTMapper()); err != nil {
		return fmt.Errorf("discover %s: %w", podgroup.GroupVersion.WithKind(podgroup.Kind), err)
	}
	ctrl.Log.WithName("controller").Info("gang scheduling", "podGroups", r.PodGroups, "api", podgroup.GroupVersion.String())
	r.Admission = admission.New(admission.Config{
		Kueue: opts.Kueue, Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clock: clock.RealClock{},
		Roles: func(ctx context.Context, run *v1alpha1.TrainingRun) ([]framework.Role, error) {
			fw, err := frameworks.Resolve(r.Episodes.Context(ctx, run), run)
			return fw.Roles, err
		},
	})
	if err := metrics.Registry.Register(runsCollector{reader: mgr.GetCache()}); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	// The runs' remaining restart budgets, for dashboards: read from the cache at each scrape.
	budgets := runmetrics.Collector{List: func(ctx context.Context) ([]v1alpha1.TrainingRun, error) {
		list := &v1alpha1.TrainingRunList{}
		err := mgr.GetCache().List(ctx, list)
		return list.Items, err
	}}
	if err := metrics.Registry.Register(budgets); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	if err := indexPods(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("index pods: %w", err)
	}
	// Node facts are read at the first failure; an informer started only then would make
	// that first decision wait for its sync.
	if _, err := mgr.GetCache().GetInformer(ctx, &corev1.Node{}); err != nil {
		return fmt.Errorf("node informer: %w", err)
	}
	if _, err := mgr.GetCache().GetInformer(ctx, &coordinationv1.Lease{}); err != nil {
		return fmt.Errorf("node agent heartbeat informer: %w", err)
	}
	if err := plannedmove.Index(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("index for maintenance: %w", err)
	}
	if err := r.SetupWithManager(mgr, max(opts.Workers, 1)); err != nil {
		return err
	}
	if opts.NodeMaintenances != nil {
		m := &nodemaintenance.Reconciler{
			Client:    mgr.GetClient(),
			APIReader: mgr.GetAPIReader(),
			Recorder:  mgr.GetEventRecorder("faultline-controller"),
			Clock:     clock.RealClock{},
			Selector:  opts.NodeMaintenances,
		}
		if err := m.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	return mgr.Start(ctx)
}

// podSeen notes what a pod's change says before any reconcile of its run does (that runs
// after the work queue's wait, which is part of the latency): the agent's evidence, where the
// trace's settle phase starts, and the first failure of the run's attempt seen, where the
// decision's latency starts; the pod read as the reconciler reads it, with its node's
// barrier record (the attempt a pod restarted in place ran, which its labels do not say).
func (r *Reconciler) podSeen(ctx context.Context, o client.Object) {
	r.Episodes.SawEvidence(o)
	if p, ok := o.(*corev1.Pod); ok {
		if _, place := attempt.BarrierContainer(&p.Spec); place == attempt.BarrierInWorker {
			o = r.withNodeRecords(ctx, []*corev1.Pod{p})[0]
		}
	}
	r.failures.saw(o, r.Clock.Now())
}

// SetupWithManager registers the reconciler: it wakes on its runs, their Jobs and the pods
// of their Jobs (the first failed pod starts a decision, not the Job's terminal condition).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, workers int) error {
	runOf := func(_ context.Context, o client.Object) []reconcile.Request {
		name := o.GetLabels()[v1alpha1.LabelRun]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
	}
	podToRun := func(ctx context.Context, o client.Object) []reconcile.Request {
		r.podSeen(ctx, o)
		return runOf(ctx, o)
	}
	jobToRun := func(ctx context.Context, o client.Object) []reconcile.Request {
		// Called with the old version and then the new: the first deleted version of a
		// Job is the deletion itself (see syncedSinceDeletion).
		if j, ok := o.(*batchv1.Job); ok {
			r.deletions.saw(j)
		}
		return runOf(ctx, o)
	}
	return r.gate().Watches(ctrl.NewControllerManagedBy(mgr), runOf).
		// Every change of a run wakes it, our own status writes included: each write is a
		// step of the state machine and the next step follows from it.
		For(&v1alpha1.TrainingRun{}).
		Watches(&batchv1.Job{}, handler.EnqueueRequestsFromMapFunc(jobToRun)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToRun)).
		// A maintenance of a worker's node moves the run; its end lifts the run's exclusion.
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.runsOnNodes(ctx, []string{o.GetName()})
		}), builder.WithPredicates(plannedmove.FactsChanged(r.Maintenance))).
		// An agent's records of its node's barriers (on its heartbeat) move the runs of the
		// node's pods: a stop recorded may open a gang's barrier, an open make it Running.
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.runsOnNodes(ctx, []string{o.GetName()})
		}), builder.WithPredicates(nodeRecordsChanged())).
		Watches(&v1alpha1.NodeMaintenance{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			if nm, ok := o.(*v1alpha1.NodeMaintenance); ok {
				return r.runsOnNodes(ctx, nm.Spec.Nodes)
			}
			return nil
		})).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers, RecoverPanic: ptr.To(true)}).
		Complete(r)
}
