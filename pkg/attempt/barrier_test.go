package attempt

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/barrier"
)

const barrierImage = "ghcr.io/faultline-dev/faultline-barrier:v1.0.0"

// TestBarrierInWorkerShape: with BarrierInWorker, a template of one container with a command
// gets the barrier as that container's entrypoint, from an image volume, and the run volume
// writable (the barrier writes the attempt file and listens there); no init container. Any
// other template keeps the init container.
func TestBarrierInWorkerShape(t *testing.T) {
	run := makeRun(func(r *v1alpha1.TrainingRun) {
		r.Spec.Template.Spec.Containers[0].Command = []string{"python3", "train.py"}
		r.Spec.Template.Spec.Containers[0].Args = []string{"--rank=$(FAULTLINE_INDEX)"}
	})
	job := Job(run, Options{Attempt: 1, BarrierImage: barrierImage, BarrierInWorker: true})
	spec := job.Spec.Template.Spec
	if name, place := BarrierContainer(&spec); place != BarrierInWorker || name != "worker" || !InPlaceShape(job) {
		t.Fatalf("BarrierContainer = %q, %v (in place %v): want the worker's entrypoint", name, place, InPlaceShape(job))
	}
	if len(spec.InitContainers) != 0 {
		t.Errorf("init containers %v: want none", spec.InitContainers)
	}
	w := spec.Containers[0]
	if want := []string{v1alpha1.BarrierBinary, barrier.CommandSupervise, "--", "python3", "train.py"}; !cmp.Equal(w.Command, want) || !cmp.Equal(w.Args, []string{"--rank=$(FAULTLINE_INDEX)"}) {
		t.Errorf("command %q args %q: want %q and the args unchanged", w.Command, w.Args, want)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range w.VolumeMounts {
		mounts[m.Name] = m
	}
	if m := mounts[v1alpha1.RunVolume]; m.MountPath != v1alpha1.RunDir || m.ReadOnly {
		t.Errorf("run volume mount %+v: want it writable at %s", m, v1alpha1.RunDir)
	}
	if m := mounts[v1alpha1.BarrierVolume]; m.MountPath != v1alpha1.BarrierMount || !m.ReadOnly {
		t.Errorf("barrier volume mount %+v: want it read-only at %s", m, v1alpha1.BarrierMount)
	}
	if got := BarrierImage(&spec); got != barrierImage {
		t.Errorf("BarrierImage = %q, want %q", got, barrierImage)
	}
	if len(w.RestartPolicyRules) != 1 || w.RestartPolicyRules[0].Action != corev1.ContainerRestartRuleActionRestartAllContainers {
		t.Errorf("rules %v: want RestartAllContainers", w.RestartPolicyRules)
	}
	if len(run.Spec.Template.Spec.Containers[0].Command) != 2 {
		t.Error("Job() modified the run's template")
	}

	for what, mut := range map[string]func(*v1alpha1.TrainingRun){
		"no command (the image's entrypoint)": func(*v1alpha1.TrainingRun) {},
		"two containers": func(r *v1alpha1.TrainingRun) {
			r.Spec.Template.Spec.Containers[0].Command = []string{"train"}
			r.Spec.Template.Spec.Containers = append(r.Spec.Template.Spec.Containers, corev1.Container{Name: "side", Command: []string{"side"}})
		},
	} {
		spec := Job(makeRun(mut), Options{Attempt: 1, BarrierImage: barrierImage, BarrierInWorker: true}).Spec.Template.Spec
		if name, place := BarrierContainer(&spec); place != BarrierInit || name != v1alpha1.BarrierContainer || spec.Containers[0].Command != nil && spec.Containers[0].Command[0] == v1alpha1.BarrierBinary {
			t.Errorf("%s: BarrierContainer = %q, %v: want the init container", what, name, place)
		}
	}
}

// TestKeepBarrier: the caches that slim pods down still see where the barrier is.
func TestKeepBarrier(t *testing.T) {
	spec := Job(makeRun(func(r *v1alpha1.TrainingRun) { r.Spec.Template.Spec.Containers[0].Command = []string{"train"} }),
		Options{Attempt: 1, BarrierImage: barrierImage, BarrierInWorker: true}).Spec.Template.Spec
	slim := corev1.PodSpec{Containers: []corev1.Container{{Name: "worker"}}}
	if _, place := BarrierContainer(&slim); place != NoBarrier {
		t.Fatal("a slim spec with nothing kept has a barrier")
	}
	KeepBarrier(&spec, &slim)
	if name, place := BarrierContainer(&slim); place != BarrierInWorker || name != "worker" || !cmp.Equal(slim.Containers[0].Command, []string{v1alpha1.BarrierBinary}) {
		t.Errorf("kept command %q: BarrierContainer = %q, %v; want the barrier's binary alone, the worker's entrypoint", slim.Containers[0].Command, name, place)
	}
}

// inWorker is a pod whose barrier is its worker's entrypoint: the worker's status (restart
// count, runtime ID, state; none when st is nil) and the agent's record (none when nil).
func inWorker(restarts int32, id string, st *corev1.ContainerState, rec *v1alpha1.BarrierRecord) *corev1.Pod {
	spec := Job(makeRun(func(r *v1alpha1.TrainingRun) { r.Spec.Template.Spec.Containers[0].Command = []string{"train"} }),
		Options{Attempt: 1, BarrierImage: barrierImage, BarrierInWorker: true}).Spec.Template.Spec
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1alpha1.LabelAttempt: "1"}}, Spec: spec}
	if st != nil {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", ContainerID: "containerd://" + id, RestartCount: restarts, State: *st}}
	}
	if rec != nil {
		raw, _ := json.Marshal(rec)
		p.Annotations = map[string]string{v1alpha1.AnnotationBarrierRecord: string(raw)}
	}
	return p
}

// TestBarrierInWorkerState: what the controller and the agent read of a pod whose barrier is
// its worker's entrypoint, from the status and the agent's record (the record comes before
// the open, so only a container it names can have opened; a status that lags the record
// counts the recorded container as running its attempt).
func TestBarrierInWorkerState(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC))
	running := &corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
	ended := &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 143}}
	creating := &corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	rec := func(id string, restart, attempt int32) *v1alpha1.BarrierRecord {
		return &v1alpha1.BarrierRecord{ContainerID: id, Restart: restart, Attempt: attempt}
	}
	stoppedFor := func(id string, restart, attempt, n int32) *v1alpha1.BarrierRecord {
		r := rec(id, restart, attempt)
		r.StoppedFor = n
		return r
	}
	type want struct {
		waiting bool
		opened  int32 // 0: not opened since the pod last started
		before  int32 // OpenedBefore, 0: none
		stopped bool  // Stopped(2)
		openFor bool  // OpenedFor(2)
		running int32 // Running
		shown   bool  // StoppedWorker: the end shown is of a worker its agent stopped
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want want
	}{
		"no status yet":                          {inWorker(0, "", nil, nil), want{stopped: true, running: 1}},
		"waits at its barrier, no record":        {inWorker(0, "c0", running, nil), want{waiting: true, stopped: true, running: 1}},
		"opened for 1, runs":                     {inWorker(0, "c0", running, rec("c0", 0, 1)), want{opened: 1, running: 1}},
		"opened for 2, runs":                     {inWorker(0, "c0", running, rec("c0", 0, 2)), want{opened: 2, stopped: true, openFor: true, running: 2}},
		"opened for 1, ended, not restarted yet": {inWorker(0, "c0", ended, rec("c0", 0, 1)), want{opened: 1, running: 1}},
		"opened for 1, shown creating":           {inWorker(0, "c0", creating, rec("c0", 0, 1)), want{opened: 1, running: 1}},
		"restarted since: the next waits":        {inWorker(1, "c1", running, rec("c0", 0, 1)), want{waiting: true, before: 1, stopped: true, running: 1}},
		"restarted twice since the record":       {inWorker(2, "c2", running, rec("c0", 0, 1)), want{waiting: true, stopped: true, running: 1}},
		"the status lags the record (for 1)":     {inWorker(0, "c0", ended, rec("c1", 1, 1)), want{opened: 1, running: 1}},
		"the status lags the record (for 2)":     {inWorker(0, "c0", running, rec("c1", 1, 2)), want{opened: 2, stopped: true, running: 2}},
		"another container of the same restart":  {inWorker(0, "cX", running, rec("c0", 0, 1)), want{opened: 1, running: 1}},
		// Its agent stopped it for 2 and recorded so: stopped, whatever the status shows
		// yet, its barrier waiting again in the same container (TestSupervisedBarrierState);
		// the end shown is of a container the agent stopped through the runtime, its
		// barrier's socket out of reach: the stop's.
		"opened for 1, stopped for 2, shown running": {inWorker(0, "c0", running, stoppedFor("c0", 0, 1, 2)), want{waiting: true, stopped: true, running: 1}},
		"opened for 1, stopped for 2, shown ended":   {inWorker(0, "c0", ended, stoppedFor("c0", 0, 1, 2)), want{stopped: true, running: 1, shown: true}},
		"stopped for 2, restarted since":             {inWorker(1, "c1", running, stoppedFor("c0", 0, 1, 2)), want{waiting: true, before: 1, stopped: true, running: 1}},
		"stopped for 2, another container shown":     {inWorker(0, "cX", ended, stoppedFor("c0", 0, 1, 2)), want{stopped: true, running: 1}},
		"opened for 2, ended, no stop recorded":      {inWorker(0, "c0", ended, rec("c0", 0, 2)), want{opened: 2, stopped: true, running: 2}},
	} {
		t.Run(name, func(t *testing.T) {
			b := BarrierOf(tc.pod)
			_, waiting := b.Waiting()
			opened, _ := b.Opened()
			before, _ := b.OpenedBefore()
			running, _ := Running(tc.pod)
			got := want{waiting, opened, before, b.Stopped(2), b.OpenedFor(2), running, b.StoppedWorker()}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	// Stopped for 2, its barrier runs no worker until an open recorded first (a later
	// record): stopped for 3 as well, as a barrier waiting again is.
	if !BarrierOf(inWorker(0, "c0", ended, stoppedFor("c0", 0, 1, 2))).Stopped(3) {
		t.Error("stopped for 2 and ended, asked for 3: not stopped, want stopped (it runs nothing)")
	}
	if BarrierOf(inWorker(0, "c0", running, rec("c0", 0, 2))).Stopped(3) {
		t.Error("opened for 2 and running, asked for 3: stopped, want not (the stop for 3 is still to come)")
	}
	if since, ok := BarrierOf(inWorker(0, "c0", running, nil)).Waiting(); !ok || !since.Equal(started.Time) {
		t.Errorf("waiting since %v, want %v", since, started)
	}
}

// TestSupervisedBarrierState: a barrier that supervises its worker stays in the same
// container across a restart in place: its agent's record of the stop for a later attempt
// is all that says it waits again, and a record of the next open that it runs again.
func TestSupervisedBarrierState(t *testing.T) {
	supervised := inWorker
	running := &corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	record := func(attempt, stoppedFor int32) *v1alpha1.BarrierRecord {
		return &v1alpha1.BarrierRecord{ContainerID: "c0", Restart: 0, Attempt: attempt, StoppedFor: stoppedFor}
	}
	type want struct {
		waiting bool
		opened  int32
		stopped bool // Stopped(2)
		openFor bool // OpenedFor(2)
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want want
	}{
		"waits at its first open":      {supervised(0, "c0", running, nil), want{waiting: true, stopped: true}},
		"runs attempt 1":               {supervised(0, "c0", running, record(1, 0)), want{opened: 1}},
		"stopped for 2: waits again":   {supervised(0, "c0", running, record(1, 2)), want{waiting: true, stopped: true}},
		"opened for 2 in the same one": {supervised(0, "c0", running, record(2, 2)), want{opened: 2, stopped: true, openFor: true}},
		// Its worker ended on its own: the kubelet restarted the container.
		"restarted since the stop": {supervised(1, "c1", running, record(1, 2)), want{waiting: true, stopped: true}},
	} {
		t.Run(name, func(t *testing.T) {
			b := BarrierOf(tc.pod)
			_, waiting := b.Waiting()
			opened, _ := b.Opened()
			if got := (want{waiting, opened, b.Stopped(2), b.OpenedFor(2)}); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestWithRecord: a pod is read with its node agent's record from the heartbeat only where
// that record is later than the pod's own (records only move on: a later restart, a later
// attempt opened, then a stop for a later one), and the pod read is never changed.
func TestWithRecord(t *testing.T) {
	running := &corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	rec := func(restart, attempt, stoppedFor int32) *v1alpha1.BarrierRecord {
		return &v1alpha1.BarrierRecord{ContainerID: fmt.Sprintf("c%d", restart), Restart: restart, Attempt: attempt, StoppedFor: stoppedFor}
	}
	// A supervising barrier's records, then a restart's, in the order an agent writes them.
	order := []*v1alpha1.BarrierRecord{rec(0, 1, 0), rec(0, 1, 2), rec(0, 2, 2), rec(0, 2, 3), rec(0, 3, 3), rec(1, 3, 0), rec(1, 4, 0)}
	for i, a := range order {
		for j, b := range order {
			if got := LaterRecord(a, b); got != (i > j) {
				t.Errorf("LaterRecord(%+v, %+v) = %v, want %v", *a, *b, got, i > j)
			}
		}
		if !LaterRecord(a, nil) || LaterRecord(nil, a) {
			t.Errorf("%+v against none: want it later, and none never later", *a)
		}
	}
	for name, tc := range map[string]struct {
		own, node *v1alpha1.BarrierRecord
		want      *v1alpha1.BarrierRecord
	}{
		"only the node's":                {nil, rec(0, 1, 0), rec(0, 1, 0)},
		"the node's stop, later":         {rec(0, 1, 0), rec(0, 1, 2), rec(0, 1, 2)},
		"the pod's, later":               {rec(0, 2, 2), rec(0, 1, 2), rec(0, 2, 2)},
		"the node's for a later restart": {rec(0, 1, 2), rec(1, 2, 0), rec(1, 2, 0)},
		"none on the node":               {rec(0, 1, 0), nil, rec(0, 1, 0)},
		"the node's names no container":  {rec(0, 1, 0), &v1alpha1.BarrierRecord{Restart: 3, Attempt: 3}, rec(0, 1, 0)},
		"the node's names no attempt":    {nil, &v1alpha1.BarrierRecord{ContainerID: "c0"}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			pod := inWorker(0, "c0", running, tc.own)
			before := pod.DeepCopy()
			got := WithRecord(pod, tc.node)
			if !equality.Semantic.DeepEqual(pod, before) {
				t.Fatal("WithRecord changed the pod it read")
			}
			if r := BarrierRecord(got); !reflect.DeepEqual(r, tc.want) {
				t.Errorf("record read = %+v, want %+v", r, tc.want)
			}
			if (got == pod) != reflect.DeepEqual(tc.want, tc.own) {
				t.Errorf("a copy made %v, want one only for the node's record", got != pod)
			}
		})
	}
}

// TestRecordedRunning: the agent's record of an open counts a worker as running before the
// kubelet's status shows its container (the status lags the runtime's start), and never
// once the status shows it ended, a later container, or the barrier waiting again.
func TestRecordedRunning(t *testing.T) {
	running := &corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	ended := &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}
	rec := func(id string, restart, attempt, stoppedFor int32) *v1alpha1.BarrierRecord {
		return &v1alpha1.BarrierRecord{ContainerID: id, Restart: restart, Attempt: attempt, StoppedFor: stoppedFor}
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"opened for 2, shown running":            {inWorker(0, "c0", running, rec("c0", 0, 2, 0)), true},
		"opened for 2, no status yet":            {inWorker(0, "", nil, rec("c0", 0, 2, 0)), true},
		"opened for 2, an earlier one shown":     {inWorker(0, "cX", running, rec("c1", 1, 2, 0)), true},
		"opened for 2, shown ended":              {inWorker(0, "c0", ended, rec("c0", 0, 2, 0)), false},
		"opened for 2, a later one shown":        {inWorker(1, "c1", running, rec("c0", 0, 2, 0)), false},
		"opened for 1 only":                      {inWorker(0, "c0", running, rec("c0", 0, 1, 0)), false},
		"no record":                              {inWorker(0, "c0", running, nil), false},
		"supervised, opened for 2":               {inWorker(0, "c0", running, rec("c0", 0, 2, 2)), true},
		"supervised, stopped for 3: waits again": {inWorker(0, "c0", running, rec("c0", 0, 2, 3)), false},
	} {
		if got := BarrierOf(tc.pod).RecordedRunning(2); got != tc.want {
			t.Errorf("%s: RecordedRunning(2) = %v, want %v", name, got, tc.want)
		}
	}
}
