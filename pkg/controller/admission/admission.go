// Package admission is the TrainingRun reconciler's gate of Kueue admission (docs/kueue.md).
// A run that names a LocalQueue (the kueue.x-k8s.io/queue-name label) is one Kueue Workload,
// which the gate creates and owns, as Kueue's own job reconciler does for the jobs it
// integrates: Kueue (integrations.externalFrameworks: TrainingRun.v1alpha1.faultline.dev)
// knows the attempts' Jobs for children of the run, and the Workload, not the Jobs, is what
// it queues, admits, preempts and counts against quota. The run starts no attempt until the
// Workload is admitted; every attempt's pods get the admitted flavors' node selectors and
// tolerations; a restart stays inside the admission; an eviction suspends the run, which
// spends nothing, gives the quota back once its last worker is gone, and resumes with a
// fresh attempt when admitted again.
//
// The gate writes only its own objects (the Workload). What the run shows of its admission
// it changes in the run's status in memory; the reconciler writes that, and tells the
// gate's events after the write: the run's status is the reconciler's alone.
package admission

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
)

// Gate admits runs.
type Gate interface {
	// Sync brings the run's Workload in step with the run (creates it, sets it active or not,
	// mirrors the workers' readiness, says the run finished) and the run's status in step
	// with the Workload, in memory.
	Sync(ctx context.Context, run *v1alpha1.TrainingRun) (Admission, error)
	// ReleaseQuota gives back the quota of a run that Sync holds (Hold.ReleaseQuota), once
	// no worker of it is left: before, two gangs would hold the nodes.
	ReleaseQuota(ctx context.Context, run *v1alpha1.TrainingRun) error
	// Place puts the run's admission onto an attempt's Job, whose pods have roles: the node
	// labels and tolerations of each pod set's flavors and what its admission checks ask,
	// on every attempt, so that no attempt lands outside what was admitted.
	Place(ctx context.Context, run *v1alpha1.TrainingRun, job *batchv1.Job, roles []framework.Role) (Placement, error)
	// Watches adds what wakes a run for its admission: runOf maps an object to its run.
	Watches(b *builder.Builder, runOf handler.MapFunc) *builder.Builder
}

// Admission is what Sync found.
type Admission struct {
	// Proceed: the run's own steps go on (it needs no admission, is admitted, or finished).
	Proceed bool
	// Stall: the run cannot be queued as it is, and says so (the Stalled condition).
	Stall *Stall
	// PluginErr: the framework's plugin cannot lay out the run's roles for its Workload.
	PluginErr error
	// Hold: the run is not admitted (any more): its workers are stopped, as Hold says.
	Hold *Hold
	// Events are the run's events of what Sync changed, told once the status is written.
	Events []Event
}

// Stall is why a run cannot be queued: the Stalled condition's reason and message.
type Stall struct{ Reason, Message string }

// Hold says why a run that is not admitted does not run: the reason and message of its
// suspension (empty before its first attempt, which Sync marks suspended itself), and
// whether its Workload still holds quota that ReleaseQuota must give back.
type Hold struct {
	Reason, Message string
	ReleaseQuota    bool
}

// Event is an event of the run.
type Event struct{ Type, Reason, Action, Message string }

// Placement is what Place found: Ready, the Job carries the admission; otherwise the attempt
// waits (Stall says why, or nothing: the Workload lost its admission, and its change brings
// the run back).
type Placement struct {
	Ready bool
	Stall *Stall
}

// Config configures a Gate.
type Config struct {
	// Kueue turns on the Kueue integration: the cluster must serve Kueue's Workloads
	// (kueue.x-k8s.io/v1beta2). Off, a run that names a queue stalls rather than bypass it.
	Kueue bool
	// Client reads Workloads from the cache (faultline's own, see CacheObjects) and writes
	// them; APIReader reads what the cache does not hold (flavors, priority classes, the
	// Workloads of other namespaces that preempted a run).
	Client    client.Client
	APIReader client.Reader
	Clock     clock.PassiveClock
	// Roles lays out a run with spec.roles as its framework does (its pod sets are per role).
	Roles func(ctx context.Context, run *v1alpha1.TrainingRun) ([]framework.Role, error)
}

// New is the gate cfg describes.
func New(cfg Config) Gate {
	if !cfg.Kueue {
		return off{}
	}
	return &kueueGate{cfg: cfg}
}

// CacheObjects are the objects the gate reads from the manager's cache, with what selects
// them: the Workloads that carry the run label (byRun), when Kueue is on.
func CacheObjects(on bool, byRun labels.Selector) map[client.Object]cache.ByObject {
	if !on {
		return nil
	}
	return map[client.Object]cache.ByObject{newWorkloadObject(): {Label: byRun}}
}
