package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/controller/spares"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// keepSpares makes run's missing warm spares once its attempt runs (spares.Due), and removes
// those that ended; an attempt whose barrier cannot be its worker's entrypoint gets none,
// which an event says (attempt.SparePod). It keeps the address of every index a spare holds
// (publishSpares) as the attempt's pods change.
func (r *Reconciler) keepSpares(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed, o attempt.PodOptions) error {
	if run.Spec.Spares == 0 || !attempt.Managed(obs.job) || obs.job.DeletionTimestamp != nil {
		return nil
	}
	if err := r.publishSpares(ctx, run, obs.workers()); err != nil {
		return err
	}
	if !spares.Due(run) {
		return nil
	}
	slots, ended := spares.Keep(run, obs.spares, obs.nodes)
	if err := r.removePods(ctx, ended, true); err != nil {
		return err
	}
	for _, slot := range slots {
		pod, err := attempt.SparePod(obs.job, slot, o)
		if errors.Is(err, attempt.ErrSpareNeedsSupervisingBarrier) {
			// Said once per attempt: every reconcile of the attempt would find the same.
			if key := types.UID(fmt.Sprintf("%s/%d", run.UID, run.Status.Attempt)); !r.sparesWarned.has(key) {
				r.sparesWarned.add(key, r.Clock.Now())
				r.event(run, corev1.EventTypeWarning, v1alpha1.ReasonSparesUnavailable, v1alpha1.ActionCreateAttempt,
					"spec.spares: attempt %d makes no spare: %v", run.Status.Attempt, err)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if err := r.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create spare %s of run %s: %w", pod.Name, run.Name, err)
		}
	}
	return nil
}

// handOver gives the indexes of run's current attempt that have no pod among holders (and
// none created a moment ago) to its ready spares (spares.Assign), before any pod is created
// for them: first the indexes' addresses (publishSpares), then, per spare, one patch that
// makes it the index's pod, made for the current attempt (attempt.HandOver). It is called
// exactly where those indexes would get new pods: once their old pods can run nothing.
func (r *Reconciler) handOver(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed, holders []*corev1.Pod, o attempt.PodOptions) error {
	if run.Spec.Spares == 0 || len(obs.spares) == 0 || !attempt.Managed(obs.job) {
		return nil
	}
	now := r.Clock.Now()
	missing := r.creations.missing(obs.job, holders, int(run.Spec.Workers), now)
	hs := spares.Assign(missing, obs.spares, obs.nodes, o.ExcludedNodes, func(p *corev1.Pod) bool { return r.handed.has(p.UID) })
	if len(hs) == 0 {
		return nil
	}
	handed := make([]*corev1.Pod, len(hs))
	for k, h := range hs {
		handed[k] = attempt.HandOver(h.Pod, h.Index, run.Status.Attempt)
	}
	if err := r.publishSpares(ctx, run, slices.Concat(holders, handed)); err != nil {
		return err
	}
	// Side by side, as createPods makes pods: a node's worth of indexes moves at once, and
	// each patch waits on the API server.
	errs := make([]error, len(hs))
	var wg sync.WaitGroup
	for k, h := range hs {
		wg.Go(func() {
			if err := r.Patch(ctx, handed[k], client.MergeFrom(h.Pod)); err != nil {
				errs[k] = fmt.Errorf("hand index %d to spare %s: %w", h.Index, h.Pod.Name, err)
				return
			}
			r.handed.add(h.Pod.UID, now)
			r.creations.created(obs.job.UID, h.Index, now)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	names := make([]string, len(hs))
	for k, h := range hs {
		names[k] = fmt.Sprintf("%d to %s on %s", h.Index, h.Pod.Name, h.Pod.Spec.NodeName)
	}
	r.event(run, corev1.EventTypeNormal, v1alpha1.ReasonSpareTookIndex, v1alpha1.ActionCreateAttempt,
		"attempt %d: spares take indexes %s", run.Status.Attempt, exitclass.Named(names))
	return nil
}

// publishSpares writes run's EndpointSlice of the indexes its spares hold (spares.Endpoints)
// from pods, when it differs from what this process last wrote for the run: a server-side
// apply, so that no read comes before it.
func (r *Reconciler) publishSpares(ctx context.Context, run *v1alpha1.TrainingRun, pods []*corev1.Pod) error {
	if run.Spec.Spares == 0 {
		return nil
	}
	slice := spares.Endpoints(run, pods)
	key := spares.Key(slice)
	if r.published.same(run.UID, key) {
		return nil
	}
	if err := r.Apply(ctx, slice, client.FieldOwner(v1alpha1.JobManagedBy), client.ForceOwnership); err != nil {
		return fmt.Errorf("publish the addresses of run %s's spares: %w", run.Name, err)
	}
	r.published.set(run.UID, key)
	return nil
}

// publications remembers, per run, what publishSpares last wrote.
type publications struct {
	mu   sync.Mutex
	last map[types.UID]string
}

func (p *publications) same(run types.UID, key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.last[run]
	return ok && v == key
}

func (p *publications) set(run types.UID, key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = map[types.UID]string{}
	}
	p.last[run] = key
}
