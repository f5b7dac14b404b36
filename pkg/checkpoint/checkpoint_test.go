package checkpoint

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

var t0 = time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)

func run(workers int32, policy *v1alpha1.CheckpointPolicy) *v1alpha1.TrainingRun {
	r := &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "uid-1"},
		Spec: v1alpha1.TrainingRunSpec{Workers: workers, Checkpoint: policy, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "worker", Image: "train", Command: []string{"python", "train.py"}}},
		}}},
	}
	r.Status.Attempt = 2
	return r
}

// worker is index i of run's attempt 2 as its node agent recorded it: its barrier in the
// worker container (inWorker; else an init container's), opened for attempt 2 and running,
// with the answer ck on its record (nil: none yet).
func worker(r *v1alpha1.TrainingRun, i int, inWorker bool, ck *v1alpha1.BarrierCheckpoint) *corev1.Pod {
	job := attempt.Job(r, attempt.Options{Attempt: 2, BarrierImage: "barrier:v1", BarrierInWorker: inWorker})
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "llm-" + strconv.Itoa(i), Namespace: "ml", Labels: map[string]string{v1alpha1.LabelAttempt: "2"},
			Annotations: map[string]string{"batch.kubernetes.io/job-completion-index": strconv.Itoa(i)}},
		Spec: job.Spec.Template.Spec,
	}
	started := metav1.NewTime(t0.Add(-time.Hour))
	id := "c" + strconv.Itoa(i)
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", ContainerID: "containerd://" + id,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}}
	if !inWorker {
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: v1alpha1.BarrierContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: "attempt=2"}}}}
		return p
	}
	rec := v1alpha1.BarrierRecord{ContainerID: id, Attempt: 2, OpenedAt: started.Format(time.RFC3339Nano), Checkpoint: ck}
	raw, _ := json.Marshal(rec)
	p.Annotations[v1alpha1.AnnotationBarrierRecord] = string(raw)
	return p
}

func TestPolicyDefaults(t *testing.T) {
	if _, _, ok := Policy(run(2, nil)); ok {
		t.Error("a run without spec.checkpoint has a policy")
	}
	if sig, timeout, ok := Policy(run(2, &v1alpha1.CheckpointPolicy{})); !ok || sig != "SIGUSR1" || timeout != 300*time.Second {
		t.Errorf("defaults: %s %s %t, want SIGUSR1 5m0s", sig, timeout, ok)
	}
	if sig, timeout, _ := Policy(run(2, &v1alpha1.CheckpointPolicy{Signal: "SIGTERM", TimeoutSeconds: 20})); sig != "SIGTERM" || timeout != 20*time.Second {
		t.Errorf("set: %s %s, want SIGTERM 20s", sig, timeout)
	}
}

// A request's deadline is the policy's timeout, or the notice's bound if sooner; it is the
// current attempt's, and an older attempt's is not current.
func TestRequest(t *testing.T) {
	r := run(4, &v1alpha1.CheckpointPolicy{TimeoutSeconds: 60})
	req := Request(r, "drain", []string{"n2", "n1", "n2"}, t0, time.Time{})
	if !req.Deadline.Time.Equal(t0.Add(time.Minute)) || req.Attempt != 2 || !cmp.Equal(req.Nodes, []string{"n1", "n2"}) {
		t.Errorf("request %+v: want attempt 2, deadline a minute on, nodes n1, n2", req)
	}
	if req := Request(r, "shutdown", nil, t0, t0.Add(10*time.Second)); !req.Deadline.Time.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("deadline %s, want the notice's bound, 10 s on", req.Deadline)
	}
	r.Status.Checkpoint = req
	if Current(r) != req {
		t.Error("the attempt's request is not current")
	}
	r.Status.Attempt = 3
	if Current(r) != nil {
		t.Error("attempt 2's request is current in attempt 3")
	}
}

// Gather counts each worker by what its agent recorded for this request: saved (with its
// step), an answer that says it did not, none yet; a worker whose barrier cannot be asked is
// missing at once. The move goes on when nobody is left to answer, or at the deadline; End
// closes the request with every index that did not say it saved.
func TestGatherAndEnd(t *testing.T) {
	r := run(4, &v1alpha1.CheckpointPolicy{TimeoutSeconds: 60})
	req := Request(r, "drain", []string{"n1"}, t0, time.Time{})
	key := Key(req)
	saved := &v1alpha1.BarrierCheckpoint{RequestedAt: key, At: t0.Add(2 * time.Second).Format(time.RFC3339Nano), Saved: true, Step: ptr.To[int64](1200)}
	timedOut := &v1alpha1.BarrierCheckpoint{RequestedAt: key, At: t0.Add(time.Minute).Format(time.RFC3339Nano), Reason: "it did not say it saved within the timeout"}
	stale := &v1alpha1.BarrierCheckpoint{RequestedAt: t0.Add(-time.Hour).Format(time.RFC3339Nano), Saved: true}

	workers := []*corev1.Pod{worker(r, 0, true, saved), worker(r, 1, true, nil), worker(r, 2, true, stale), worker(r, 3, false, nil)}
	p := Gather(req, workers)
	if len(p.Acks) != 1 || p.Acks[0].Index != 0 || *p.Acks[0].Step != 1200 || !p.Acks[0].At.Time.Equal(t0.Add(2*time.Second)) {
		t.Errorf("acks %+v, want index 0's, step 1200", p.Acks)
	}
	if !cmp.Equal(p.Waiting, []int32{1, 2}) || !cmp.Equal(p.Missing, []int32{3}) || p.Why[3] == "" {
		t.Errorf("waiting %v, missing %v (%v): want 1 and 2 waiting (2's answer is an older request's), 3 missing (an init container's barrier)", p.Waiting, p.Missing, p.Why)
	}
	if p.Done(req, t0.Add(30*time.Second)) {
		t.Error("done with two workers waiting before the deadline")
	}
	if !p.Done(req, t0.Add(time.Minute)) {
		t.Error("not done at the deadline")
	}
	if !p.Update(req) || p.Update(req) {
		t.Error("Update reports no change with a new answer, or a change with none")
	}

	workers[1], workers[2] = worker(r, 1, true, timedOut), worker(r, 2, true, saved)
	p = Gather(req, workers)
	if !p.Done(req, t0.Add(5*time.Second)) {
		t.Errorf("not done with every worker answered: waiting %v", p.Waiting)
	}
	p.End(req, t0.Add(61*time.Second))
	if len(req.Acks) != 2 || !cmp.Equal(req.Missing, []int32{1, 3}) || req.EndedAt == nil {
		t.Errorf("closed request: acks %+v, missing %v, ended %v; want 0 and 2 saved, 1 and 3 missing", req.Acks, req.Missing, req.EndedAt)
	}
	if got, want := Summary(req, 4), "2 of 4 workers saved (step 1200 at least); not indexes [1 3]"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
}

// The budget counts every worker of the run's (by its UID) and allows none to be evicted.
func TestBudget(t *testing.T) {
	b := Budget(run(8, &v1alpha1.CheckpointPolicy{}))
	if b.Name != "llm" || b.Namespace != "ml" || b.Spec.MinAvailable.IntValue() != 8 || b.Spec.MaxUnavailable != nil ||
		!cmp.Equal(b.Spec.Selector.MatchLabels, map[string]string{v1alpha1.LabelRunUID: "uid-1"}) {
		t.Errorf("budget %+v: want llm in ml, minAvailable 8 over the run's UID", b)
	}
}

func TestGracePeriod(t *testing.T) {
	p := &corev1.Pod{}
	if got := GracePeriod(p); got != 30*time.Second {
		t.Errorf("default: %s, want Kubernetes' 30 s", got)
	}
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](600)
	if got := GracePeriod(p); got != 10*time.Minute {
		t.Errorf("set: %s, want 10m", got)
	}
}

// stoppedWith is pod with its record stopped for attempt n, its worker's last save save (nil:
// none).
func stoppedWith(t *testing.T, p *corev1.Pod, n int32, save *v1alpha1.BarrierSave) *corev1.Pod {
	t.Helper()
	rec := attempt.BarrierRecord(p)
	rec.StoppedFor, rec.LastSave = n, save
	raw, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[v1alpha1.AnnotationBarrierRecord] = string(raw)
	return p
}

// The gang resumes from the oldest of its stopped workers' last saves (to the microsecond);
// a worker that said none, or stopped for another attempt, is not counted; none at all: no
// save.
func TestResume(t *testing.T) {
	r := run(4, &v1alpha1.CheckpointPolicy{})
	save := func(step int64, at time.Time) *v1alpha1.BarrierSave {
		return &v1alpha1.BarrierSave{Step: &step, At: at.Format(time.RFC3339Nano)}
	}
	older := t0.Add(-30*time.Second + 1234*time.Nanosecond)
	pods := []*corev1.Pod{
		stoppedWith(t, worker(r, 0, true, nil), 3, save(400, t0)),
		stoppedWith(t, worker(r, 1, true, nil), 3, save(300, older)), // it had not finished 400
		stoppedWith(t, worker(r, 2, true, nil), 3, nil),              // a barrier younger than the saves
		stoppedWith(t, worker(r, 3, true, nil), 4, save(100, t0.Add(-time.Hour))),
	}
	got, ok := Resume(pods, 3)
	want := &v1alpha1.SavedStatus{Step: ptr.To[int64](300), At: metav1.NewMicroTime(older.Truncate(time.Microsecond)), Workers: 2}
	if diff := cmp.Diff(want, got); !ok || diff != "" {
		t.Errorf("Resume (-want +got), ok %v:\n%s", ok, diff)
	}
	if got, ok := Resume(pods[2:3], 3); ok || got != nil {
		t.Errorf("Resume of workers that said no save: %+v", got)
	}
}
