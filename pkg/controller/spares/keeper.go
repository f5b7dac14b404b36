package spares

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// Keeper writes what this package decides, and remembers, per controller process, what it
// wrote that the cache may not show yet: the spares handed an index, each run's last
// published addresses, and the attempts told they get no spare. The zero value is ready.
type Keeper struct {
	mu        sync.Mutex
	handed    map[types.UID]time.Time
	published map[types.UID]string
	warned    map[string]bool
}

// handedMemory is how long a hand-over is remembered: far longer than any cache lag.
const handedMemory = 10 * time.Minute

// Make creates run's spares of slots (Keep) for job. An attempt whose barrier cannot be its
// worker's entrypoint gets none: unavailable says why, once per attempt.
func (k *Keeper) Make(ctx context.Context, c client.Client, run *v1alpha1.TrainingRun, job *batchv1.Job, slots []int, o attempt.PodOptions) (unavailable, err error) {
	for _, slot := range slots {
		pod, err := attempt.SparePod(job, slot, o)
		if errors.Is(err, attempt.ErrSpareNeedsSupervisingBarrier) {
			key := fmt.Sprintf("%s/%d", run.UID, run.Status.Attempt)
			k.mu.Lock()
			defer k.mu.Unlock()
			if k.warned[key] {
				return nil, nil
			}
			if k.warned == nil {
				k.warned = map[string]bool{}
			}
			k.warned[key] = true
			return err, nil
		}
		if err != nil {
			return nil, err
		}
		if err := c.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create spare %s of run %s: %w", pod.Name, run.Name, err)
		}
	}
	return nil, nil
}

// HandOver gives the indexes of missing (those without a pod, none created a moment ago) to
// run's ready spares (Assign), among spares: first the indexes' addresses (Publish, holders
// and the handed spares), then, side by side, one patch per spare that makes it the index's
// pod, made for the current attempt (attempt.HandOver). It returns the hand-overs written.
func (k *Keeper) HandOver(ctx context.Context, c client.Client, run *v1alpha1.TrainingRun, spares, holders []*corev1.Pod, missing []int,
	nodes map[string]exitclass.NodeFacts, excluded []string, now time.Time) ([]HandOver, error) {
	hs := Assign(missing, spares, nodes, excluded, func(p *corev1.Pod) bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		at, ok := k.handed[p.UID]
		return ok && now.Sub(at) < handedMemory
	})
	if len(hs) == 0 {
		return nil, nil
	}
	handed := make([]*corev1.Pod, len(hs))
	for i, h := range hs {
		handed[i] = attempt.HandOver(h.Pod, h.Index, run.Status.Attempt)
	}
	if err := k.Publish(ctx, c, run, append(append([]*corev1.Pod{}, holders...), handed...)); err != nil {
		return nil, err
	}
	// A node's worth of indexes moves at once, and each patch waits on the API server.
	errs := make([]error, len(hs))
	var wg sync.WaitGroup
	for i, h := range hs {
		wg.Go(func() {
			if errs[i] = c.Patch(ctx, handed[i], client.MergeFrom(h.Pod)); errs[i] != nil {
				errs[i] = fmt.Errorf("hand index %d to spare %s: %w", h.Index, h.Pod.Name, errs[i])
				return
			}
			k.mu.Lock()
			defer k.mu.Unlock()
			if k.handed == nil {
				k.handed = map[types.UID]time.Time{}
			}
			maps.DeleteFunc(k.handed, func(_ types.UID, at time.Time) bool { return now.Sub(at) >= handedMemory })
			k.handed[h.Pod.UID] = now
		})
	}
	wg.Wait()
	var done []HandOver
	for i, h := range hs {
		if errs[i] == nil {
			done = append(done, h)
		}
	}
	return done, errors.Join(errs...)
}

// Publish applies run's EndpointSlice of the indexes its spares hold (Endpoints) from pods,
// when it differs from what this process last applied for the run: a server-side apply, so
// that no read comes before it.
func (k *Keeper) Publish(ctx context.Context, c client.Client, run *v1alpha1.TrainingRun, pods []*corev1.Pod) error {
	slice := Endpoints(run, pods)
	key := Key(slice)
	k.mu.Lock()
	last, ok := k.published[run.UID]
	k.mu.Unlock()
	if ok && last == key {
		return nil
	}
	if err := c.Apply(ctx, slice, client.FieldOwner(v1alpha1.JobManagedBy), client.ForceOwnership); err != nil {
		return fmt.Errorf("publish the addresses of run %s's spares: %w", run.Name, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.published == nil {
		k.published = map[types.UID]string{}
	}
	k.published[run.UID] = key
	return nil
}

// Named says which spare took which index, for the run's event.
func Named(hs []HandOver) string {
	names := make([]string, len(hs))
	for i, h := range hs {
		names[i] = fmt.Sprintf("%d to %s on %s", h.Index, h.Pod.Name, h.Pod.Spec.NodeName)
	}
	return exitclass.Named(names)
}
