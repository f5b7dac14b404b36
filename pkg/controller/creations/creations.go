// Package creations is what the TrainingRun reconciler remembers of the pods it created that
// its cache does not show yet (per managed Job, by index), so that a gang's pods are not asked
// for twice while the cache catches up (pkg/controller's createPods, and a hand-over to a
// warm spare, which stands for a creation).
package creations

import (
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/pkg/attempt"
)

// TTL is how long a pod created by this process is taken to exist while the cache does
// not show it. Past it, the index is asked for again: the API server answers AlreadyExists if
// the pod is there, and creates it if it is gone (deleted before the cache saw it).
const TTL = 30 * time.Second

// Creations remembers, per managed Job, the indexes whose pod this process created and
// the cache did not show yet.
type Creations struct {
	mu   sync.Mutex
	jobs map[types.UID]map[int]time.Time
}

func (c *Creations) Created(job types.UID, i int, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jobs == nil {
		c.jobs = map[types.UID]map[int]time.Time{}
	}
	if c.jobs[job] == nil {
		c.jobs[job] = map[int]time.Time{}
	}
	c.jobs[job][i] = at
}

// Missing are the indexes below n of job that have no pod among workers, nor one created
// less than TTL ago; the indexes the cache shows are forgotten.
func (c *Creations) Missing(job *batchv1.Job, workers []*corev1.Pod, n int, now time.Time) []int {
	have := make([]bool, n)
	for _, p := range workers {
		if i, ok := attempt.Index(p); ok && i < n {
			have[i] = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	pending := c.jobs[job.UID]
	var out []int
	for i := range n {
		at, recent := pending[i]
		switch {
		case have[i]:
			delete(pending, i)
		case recent && now.Sub(at) < TTL:
		default:
			out = append(out, i)
		}
	}
	if len(pending) == 0 {
		delete(c.jobs, job.UID)
	}
	return out
}

// Forget drops what is remembered of a Job that is gone.
func (c *Creations) Forget(job types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.jobs, job)
}
