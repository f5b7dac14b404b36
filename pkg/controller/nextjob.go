package controller

import (
	"maps"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
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
// Job is created after the teardown rather than during it (see overlapTeardown).
const fastCreation = 50

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

// quotaRoom reports whether the namespace's resource quotas admit n more pods like pod beside
// what they count now: the next attempt's pods, created held while the old ones go, which
// the quotas count until they are gone (a pod counts until it has ended, or is gone, or its
// deletion is long overdue). Where they do not, the API server refuses the Job controller's
// creations, and the Job controller retries them after a backoff that doubles with each
// refusal (1 s to a minute): the next attempt would start seconds after the old pods are
// gone instead of at once, so the Job is better created after them. It charges a pod as
// the quota controller does: its count, and its requests and limits (cpu, memory, storage,
// hugepages, extended resources such as GPUs). Where it cannot tell, it finds no room: a
// quota that limits only some pods (scopes) is taken to limit these too, and one on cpu or
// memory that the template does not ask for, to be charged what a LimitRange would give. An
// overlap missed costs a second or two; one that runs into a quota costs more.
func quotaRoom(quotas []corev1.ResourceQuota, pod *corev1.Pod, n int) bool {
	pod = withDefaultRequests(pod)
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	for _, q := range quotas {
		for name, hard := range q.Spec.Hard {
			each, charged := quotaCharge(name, requests, limits)
			switch {
			case !charged:
				continue
			case each.IsZero() && defaultedByLimitRange(name):
				return false // a LimitRange may give the pods what the template leaves out
			case each.IsZero():
				continue
			}
			used, counted := q.Status.Used[name]
			if !counted {
				return false // the quota controller has not counted it yet: the API server refuses pods meanwhile
			}
			need := each.DeepCopy()
			need.Mul(int64(n))
			need.Add(used)
			if need.Cmp(hard) > 0 {
				return false
			}
		}
	}
	return true
}

// defaultedByLimitRange reports whether the quota name charges cpu, memory or ephemeral
// storage, which a namespace's LimitRange may give a container that asks for none (and a
// quota on them refuses a pod that asks for none and gets none).
func defaultedByLimitRange(name corev1.ResourceName) bool {
	_, bare, _ := strings.Cut(string(name), ".")
	if bare == "" {
		bare = string(name)
	}
	switch corev1.ResourceName(bare) {
	case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		return true
	}
	return false
}

// withDefaultRequests is pod with its containers' requests defaulted as the API server
// defaults a pod's: a limit without a request is the request too (a run's template, kept in
// a custom resource, is not defaulted).
func withDefaultRequests(pod *corev1.Pod) *corev1.Pod {
	pod = pod.DeepCopy()
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			res := &cs[i].Resources
			for name, limit := range res.Limits {
				if _, ok := res.Requests[name]; !ok {
					if res.Requests == nil {
						res.Requests = corev1.ResourceList{}
					}
					res.Requests[name] = limit.DeepCopy()
				}
			}
		}
	}
	return pod
}

// quotaCharge is what one pod with requests and limits counts against the quota name, and
// whether it counts against it at all.
func quotaCharge(name corev1.ResourceName, requests, limits corev1.ResourceList) (resource.Quantity, bool) {
	switch {
	case name == corev1.ResourcePods || name == "count/pods":
		return *resource.NewQuantity(1, resource.DecimalSI), true
	case strings.HasPrefix(string(name), corev1.DefaultResourceRequestsPrefix):
		return requests[corev1.ResourceName(strings.TrimPrefix(string(name), corev1.DefaultResourceRequestsPrefix))], true
	case strings.HasPrefix(string(name), "limits."):
		return limits[corev1.ResourceName(strings.TrimPrefix(string(name), "limits."))], true
	case name == corev1.ResourceCPU || name == corev1.ResourceMemory || name == corev1.ResourceEphemeralStorage ||
		strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix):
		return requests[name], true // the bare name of a standard resource is its requests
	}
	return resource.Quantity{}, false // services, claims, storage: not a pod's
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
