package controller

import (
	"maps"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

// When the next attempt's Job is created, during a restart's teardown: the pure decisions,
// and what this process remembers of the old Job's pod creations for them.

// quietAfterCreation is how long the Job controller must have created no pod of an earlier
// attempt before the next attempt's Job is created. It keys what it expects by the Job's
// namespace and name, which the next Job shares (DESIGN.md: stable addresses). A sync of a
// Job goes on creating its pods (up to 500, at the Job controller's rate limit) after the Job
// is deleted; once the Job has left the Job controller's cache, those pods are never counted
// as seen, and a new Job of the same name inherits the expectation: it creates no pod until
// the expectation expires (5 minutes) and something syncs it again. Measured on the local
// control plane: a 600-worker Job deleted 4 s after its creation, while it was creating pods,
// and created again at once: the new Job had no pod after 5 minutes. One sync's creations
// come a few hundred milliseconds apart at most; creation times are whole seconds.
const quietAfterCreation = 3 * time.Second

// jobMayCreate reports whether the Job controller could still create a pod for job, given
// the pods the cache shows now and those whose finalizers retireJob dropped: job has not
// finished, and an index has no pod that stops a replacement. Every pod does while it has
// not ended (podReplacementPolicy Failed waits for it); once it has, the Job replaces it
// unless it counted it, which it does through its tracking finalizer: only the Job
// controller drops that of a pod that has ended, after counting it, except retireJob, which
// drops it from running pods.
func jobMayCreate(job *batchv1.Job, pods, stripped []*corev1.Pod) bool {
	if jobFinished(job) {
		return false
	}
	dropped := make(map[types.UID]bool, len(stripped))
	for _, p := range stripped {
		dropped[p.UID] = true
	}
	covered := make([]bool, ptr.Deref(job.Spec.Completions, 0))
	for _, p := range pods {
		i, ok := attempt.Index(p)
		if !ok || i >= len(covered) || !metav1.IsControlledBy(p, job) {
			continue
		}
		covered[i] = covered[i] || podLive(p) || !dropped[p.UID]
	}
	return slices.Contains(covered, false)
}

// fastCreation is the rate of pod creation, in pods a second, from which the next attempt's
// Job is created after the teardown rather than during it (see overlapTeardown). Holding
// hides the creations behind the teardown, but only what creating takes beyond binding, which
// follows it either way (kube-scheduler binds 50 pods a second by default), and it adds to the
// teardown three writes a pod (the creation, its event, the release) on an API server that
// takes 200-250 a second here. So it pays while 1/rate > 1/50 + 3/220: below about 30 pods a
// second. Measured: at the default rate limit (20 a second) held is the faster (256 workers:
// 14.2-14.5 s against 16 s); at controller-manager QPS 50 (48-64 a second) after is, by
// 9-10 s at 2,048 workers (69.8-73.1 s against 80.4-82.1 s, 2026-11-23-s11-2048-qps50*.md)
// and by nothing at 256 (6.2-6.9 s held, 6.6-7.4 s after); at QPS 100 after is, at 256
// (5.9-6.8 s against 6.5-7.8 s, 2026-11-23-s11-256-qps50-100-*.md).
const fastCreation = 30

// overlapTeardown decides whether the next attempt's Job is created while the old pods go,
// its pods held by the scheduling gate until they are gone, or once they are gone. Holding
// pays when the Job controller creates pods slowly: at its default rate limit (20 a second)
// 256 pods take it 12-13 s, which then run beside the teardown. It costs a write per pod to
// release them, and the creations compete with the teardown for the API server. Measured at
// 256 workers on the local control plane: at the default rate limit, 14.2-14.5 s held
// against 16 s created after (2026-11-23-s9-256-qps-default-quiet*.md); at QPS 200, 7.3-7.4 s
// created after against 9.6-12.4 s held. The first pod of each index of the newest earlier
// attempt tells how fast the Job controller created the gang (a replacement, made later,
// does not); creation times are whole seconds, hence the second added to their span.
// A namespace quota with room for one gang only does not change the decision: the API server
// refuses the held pods until old ones go, but the Job controller's retries fill the room as
// it frees, still during the teardown. Measured at 2,048 workers with a quota of 2,048 GPUs:
// 136 s held against 162 s created after the teardown (2026-11-23-s10-2048-quota-*.md; 115 s
// without a quota); at 256, 16 s either way.
func overlapTeardown(older []*corev1.Pod) bool {
	var newest int32
	firsts := map[int]time.Time{}
	for _, p := range older {
		a, ok := attempt.Number(p)
		i, indexed := attempt.Index(p)
		if !ok || !indexed || a < newest {
			continue
		}
		if a > newest {
			newest, firsts = a, map[int]time.Time{}
		}
		if t, seen := firsts[i]; !seen || p.CreationTimestamp.Time.Before(t) {
			firsts[i] = p.CreationTimestamp.Time
		}
	}
	if len(firsts) == 0 {
		return true
	}
	times := slices.Collect(maps.Values(firsts))
	span := slices.MaxFunc(times, time.Time.Compare).Sub(slices.MinFunc(times, time.Time.Compare)) + time.Second
	return float64(len(times))/span.Seconds() < fastCreation
}

// lastLateCreation is when the last of pods, of earlier attempts, was created by a Job that
// was still creating pods when its attempt was over (zero if none): created in a later second
// than its attempt ended (creation times are whole seconds; the end is in the run's status,
// so a controller that restarts still sees it), or a second pod of its index in its attempt,
// which a Gang attempt's Job creates only to replace a worker it did not count.
func lastLateCreation[P metav1.Object](run *v1alpha1.TrainingRun, pods []P) time.Time {
	type slot struct {
		attempt int32
		index   int
	}
	ended := map[int32]time.Time{}
	for _, rec := range run.Status.Attempts {
		if rec.EndTime != nil {
			ended[rec.Attempt] = rec.EndTime.Truncate(time.Second)
		}
	}
	var last time.Time
	late := func(p P) {
		if t := p.GetCreationTimestamp().Time; t.After(last) {
			last = t
		}
	}
	seen := map[slot]P{}
	for _, p := range pods {
		n, ok := attempt.Number(p)
		if !ok {
			continue
		}
		if end, ok := ended[n]; ok && p.GetCreationTimestamp().After(end) {
			late(p)
		}
		if i, ok := attempt.Index(p); ok {
			if first, dup := seen[slot{n, i}]; dup { // the later of the two is the replacement
				late(first)
				late(p)
			}
			seen[slot{n, i}] = p
		}
	}
	return last
}

// olderPodCreated notes that the Job controller created a pod of an earlier attempt at t,
// after the attempt ended, or may create one from t on.
func (sg *sighting) olderPodCreated(t time.Time) {
	if t.After(sg.olderCreated) {
		sg.olderCreated = t
	}
}

// quietAt is when the next attempt's Job may be created: once the Job controller has created
// no pod of an earlier attempt for quietAfterCreation (see there).
func (sg *sighting) quietAt() time.Time {
	if sg.olderCreated.IsZero() {
		return time.Time{}
	}
	return sg.olderCreated.Add(quietAfterCreation)
}
