package controller

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// TestStuck: what the run waits on and does not go by itself is named, with what would free
// it; what ends by itself (a pod within its grace period, a pod on a node gone or out of
// service, a pod that has ended) is not.
func TestStuck(t *testing.T) {
	now := t0.Add(time.Hour)
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "llm", UID: "uid-job-1", DeletionTimestamp: ptr.To(metav1.NewTime(now.Add(-time.Minute)))}}
	pod := func(name, node string, phase corev1.PodPhase, deleting time.Duration, finalizers ...string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Finalizers: finalizers,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
			Spec:   corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: phase},
		}
		if deleting != 0 {
			p.DeletionTimestamp = ptr.To(metav1.NewTime(now.Add(-deleting)))
			p.DeletionGracePeriodSeconds = ptr.To[int64](30)
		}
		return p
	}
	since := now.Add(-5 * time.Minute)
	nodes := map[string]exitclass.NodeFacts{
		"ok": {}, "lost": {NotReady: true, Unreachable: true, UnreachableSince: &since},
		"fenced": {NotReady: true, Unreachable: true, OutOfService: true}, "gone": {Gone: true},
	}
	for name, tc := range map[string]struct {
		obs        *observed
		wantReason string
		wantSays   []string
	}{
		"a pod stopping within its grace period": {
			obs: &observed{older: []*corev1.Pod{pod("a", "ok", corev1.PodRunning, 10*time.Second)}},
		},
		"a pod stopping long past it, held by a finalizer": {
			obs:        &observed{older: []*corev1.Pod{pod("a", "ok", corev1.PodRunning, 2*time.Minute, "example.com/backup")}},
			wantReason: v1alpha1.ReasonPodsStuck,
			wantSays:   []string{"pod a on node ok (stopping since", "held by finalizers example.com/backup"},
		},
		"a pod that has ended, whatever holds it": {
			obs: &observed{older: []*corev1.Pod{pod("a", "ok", corev1.PodFailed, 2*time.Minute, "example.com/backup")}},
		},
		"a pod on an unreachable node": {
			obs:        &observed{older: []*corev1.Pod{pod("a", "lost", corev1.PodRunning, 0)}},
			wantReason: v1alpha1.ReasonNodeUnreachable,
			wantSays:   []string{"pod a on node lost (unreachable since", "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute", "delete the Node"},
		},
		"a pod on a node tainted out of service": {
			obs: &observed{older: []*corev1.Pod{pod("a", "fenced", corev1.PodRunning, 0)}},
		},
		"a pod on a node that is gone": {
			obs: &observed{older: []*corev1.Pod{pod("a", "gone", corev1.PodRunning, 2*time.Minute)}},
		},
		"a leftover of an earlier run of the same name": {
			obs:        &observed{leftovers: []*corev1.Pod{pod("a", "lost", corev1.PodRunning, 0)}},
			wantReason: v1alpha1.ReasonNodeUnreachable,
		},
		"a Job the Job controller has not seen deleted": {
			obs:        &observed{job: &batchv1.Job{ObjectMeta: job.ObjectMeta, Status: batchv1.JobStatus{Active: 2}}},
			wantReason: v1alpha1.ReasonJobNotReleased,
			wantSays:   []string{"Job llm", "2 active", "kube-controller-manager"},
		},
		"a Job whose pods still go": {
			obs: func() *observed {
				p := pod("a", "ok", corev1.PodRunning, 10*time.Second)
				return &observed{job: &batchv1.Job{ObjectMeta: job.ObjectMeta, Status: batchv1.JobStatus{Active: 1}}, all: []*corev1.Pod{p}}
			}(),
		},
	} {
		tc.obs.nodes = nodes
		reason, msg := stuck(tc.obs, now)
		if reason != tc.wantReason {
			t.Errorf("%s: reason %q (%s), want %q", name, reason, msg, tc.wantReason)
		}
		for _, w := range tc.wantSays {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: message %q does not say %q", name, msg, w)
			}
		}
	}
}

// TestPodsNotCreated: a Job with fewer pods than workers that has created none for
// stuckAfter says why, in the Job controller's words when it has any.
func TestPodsNotCreated(t *testing.T) {
	created := t0
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "llm", CreationTimestamp: metav1.NewTime(created)}}
	worker := func(at time.Time) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(at)}}
	}
	quota := `pods "llm-0-x" is forbidden: exceeded quota: gpus`
	for name, tc := range map[string]struct {
		workers []*corev1.Pod
		now     time.Time
		event   string
		want    string
	}{
		"every worker there":      {workers: []*corev1.Pod{worker(created), worker(created)}, now: created.Add(time.Hour)},
		"creating, not for long":  {workers: []*corev1.Pod{worker(created.Add(20 * time.Second))}, now: created.Add(40 * time.Second)},
		"none for half a minute":  {now: created.Add(31 * time.Second), event: quota, want: "Job llm has 0 of 2 workers and has created none for 31s: the Job controller reports: " + quota},
		"one, then none for long": {workers: []*corev1.Pod{worker(created.Add(time.Second))}, now: created.Add(time.Minute), want: "has 1 of 2 workers and has created none for 59s, and reports no failed creation"},
	} {
		if got := podsNotCreated(job, tc.workers, 2, tc.event, tc.now); !strings.Contains(got, tc.want) || (tc.want == "") != (got == "") {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
}

// TestLeaderSucceeded: under successPolicy Leader, index 0's exit 0 is the run's success,
// whatever its peers did; under AllWorkers it is not.
func TestLeaderSucceeded(t *testing.T) {
	pod := func(index string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: index}}, Status: corev1.PodStatus{Phase: phase}}
	}
	leader := &v1alpha1.TrainingRun{Spec: v1alpha1.TrainingRunSpec{SuccessPolicy: v1alpha1.SuccessPolicyLeader}}
	all := &v1alpha1.TrainingRun{Spec: v1alpha1.TrainingRunSpec{SuccessPolicy: v1alpha1.SuccessPolicyAllWorkers}}
	done := []*corev1.Pod{pod("0", corev1.PodSucceeded), pod("1", corev1.PodFailed)}
	if !leaderSucceeded(leader, done) {
		t.Error("Leader: index 0 succeeded, a peer failed after: not a success")
	}
	if leaderSucceeded(all, done) {
		t.Error("AllWorkers: index 0's success alone taken for the run's")
	}
	if leaderSucceeded(leader, []*corev1.Pod{pod("0", corev1.PodRunning), pod("1", corev1.PodSucceeded)}) {
		t.Error("Leader: another index's success taken for the leader's")
	}
}
