package inplace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/barrier"
)

// inWorkerPod is a pod whose barrier is its worker container's entrypoint, as
// attempt.Job makes it with BarrierInWorker: the worker container's status shows restart
// restarts and state s (none when s is nil), and rec, when set, is the agent's record.
func inWorkerPod(restarts int32, id string, s *corev1.ContainerState, rec *v1alpha1.BarrierRecord) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "llm-0", UID: "uid-1", ResourceVersion: "7"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "worker", Command: []string{v1alpha1.BarrierBinary, barrier.CommandSupervise, "--", "/train"}}},
			Volumes:    []corev1.Volume{{Name: v1alpha1.BarrierVolume, VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "barrier"}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if s != nil {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", ContainerID: "containerd://" + id, RestartCount: restarts, State: *s}}
	}
	if rec != nil {
		raw, _ := json.Marshal(rec)
		p.Annotations = map[string]string{v1alpha1.AnnotationBarrierRecord: string(raw)}
	}
	return p
}

func record(id string, restart, attempt int32) *v1alpha1.BarrierRecord {
	return &v1alpha1.BarrierRecord{ContainerID: id, Restart: restart, Attempt: attempt}
}

// stoppedRecord is record's, with the agent's word that it stopped the container for
// attempt stoppedFor.
func stoppedRecord(id string, restart, attempt, stoppedFor int32) *v1alpha1.BarrierRecord {
	rec := record(id, restart, attempt)
	rec.StoppedFor = stoppedFor
	return rec
}

func TestDecideBarrierInWorker(t *testing.T) {
	madeFor3 := inWorkerPod(0, "c0", &running, nil)
	madeFor3.Labels = map[string]string{v1alpha1.LabelAttempt: "3"}
	for name, tc := range map[string]struct {
		pod         *corev1.Pod
		attempt     int
		barrierOpen bool
		want        Decision
	}{
		"a new pod's barrier waits, gang not released": {
			pod: inWorkerPod(0, "c0", &running, nil), attempt: 1,
			want: Decision{Action: ActionWait},
		},
		"a new pod's barrier waits, gang released": {
			pod: inWorkerPod(0, "c0", &running, nil), attempt: 1, barrierOpen: true,
			want: Decision{Action: ActionOpenBarrier},
		},
		"made for attempt 3, the run read at 2: a stale view opens nothing": {
			pod: madeFor3, attempt: 2, barrierOpen: true,
			want: Decision{Action: ActionWait},
		},
		"the recorded container runs an older attempt: stop exactly it": {
			pod: inWorkerPod(0, "c0", &running, record("c0", 0, 1)), attempt: 2, barrierOpen: true,
			want: Decision{Action: ActionStopWorkers, Containers: []string{"c0"}},
		},
		// The agent opened a container the kubelet's status does not show yet: that one is
		// what runs, whatever the status says of the one before.
		"the status lags the record: the recorded container is stopped": {
			pod: inWorkerPod(0, "c0", &exited143, record("c1", 1, 1)), attempt: 2,
			want: Decision{Action: ActionStopWorkers, Containers: []string{"c1"}},
		},
		"the recorded container runs the attempt, the gang released: made sure of once": {
			pod: inWorkerPod(1, "c1", &running, record("c1", 1, 2)), attempt: 2, barrierOpen: true,
			want: Decision{Action: ActionNone, Recorded: "c1"},
		},
		"the recorded container runs the attempt": {
			pod: inWorkerPod(1, "c1", &running, record("c1", 1, 2)), attempt: 2,
			want: Decision{Action: ActionNone},
		},
		"the recorded container runs a newer attempt than a late decision": {
			pod: inWorkerPod(1, "c1", &running, record("c1", 1, 3)), attempt: 2, barrierOpen: true,
			want: Decision{Action: ActionNone},
		},
		// The kubelet removed the recorded container and started the next: the record
		// names a container that is gone, and the new one waits at its barrier.
		"restarted since the record: the new barrier waits": {
			pod: inWorkerPod(1, "c1", &running, record("c0", 0, 1)), attempt: 2, barrierOpen: true,
			want: Decision{Action: ActionOpenBarrier},
		},
		// Its worker ended on its own in the attempt the run is still in: the barrier
		// would refuse the attempt, and a record would count it as running.
		"restarted since it ran the attempt: waits for the next": {
			pod: inWorkerPod(1, "c1", &running, record("c0", 0, 2)), attempt: 2, barrierOpen: true,
			want: Decision{Action: ActionWait},
		},
		// Its agent stopped it and said so: its barrier, which supervises the worker, waits
		// again in the same container, which the status shows running: no second stop, and
		// the open of the attempt once the gang is released.
		"stopped for the attempt and recorded so, the status lagging: no second stop": {
			pod: inWorkerPod(0, "c0", &running, stoppedRecord("c0", 0, 1, 2)), attempt: 2, barrierOpen: true,
			want: Decision{Action: ActionOpenBarrier},
		},
		"stopped for an older attempt: it waits, and runs nothing to stop": {
			pod: inWorkerPod(0, "c0", &running, stoppedRecord("c0", 0, 1, 2)), attempt: 3,
			want: Decision{Action: ActionWait},
		},
		// A container its agent stopped through the runtime (its barrier's socket out of
		// reach): the kubelet restarts the pod, and its next container waits to be opened.
		"stopped through the runtime, ended: the kubelet restarts the pod": {
			pod: inWorkerPod(0, "c0", &exited143, stoppedRecord("c0", 0, 1, 2)), attempt: 2, barrierOpen: true,
			want: Decision{Action: ActionWait, Restarting: true},
		},
		"the recorded container ended: the kubelet restarts the pod": {
			pod: inWorkerPod(0, "c0", &exited143, record("c0", 0, 1)), attempt: 2,
			want: Decision{Action: ActionWait, Restarting: true},
		},
		"ended at its barrier: the kubelet restarts the pod": {
			pod: inWorkerPod(1, "c1", &exited143, record("c0", 0, 1)), attempt: 2,
			want: Decision{Action: ActionWait, Restarting: true},
		},
		"no status yet": {
			pod: inWorkerPod(0, "", nil, nil), attempt: 1, barrierOpen: true,
			want: Decision{Action: ActionWait, Restarting: true},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := Decide(tc.pod, tc.attempt, tc.barrierOpen)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(Decision{}, "Reason")); diff != "" {
				t.Errorf("Decide (-want +got):\n%s\nreason: %s", diff, got.Reason)
			}
		})
	}
}

// records is a BarrierRecorder that keeps what it was asked to write, and how many execs
// (and stops) the runtime had seen by then.
type records struct {
	rt      *FakeRuntime
	written []v1alpha1.BarrierRecord
	execsAt []int
	err     error
	// stopped are the RecordStopped calls: "<container> for <attempt>", and the stops
	// the runtime had seen by each.
	stopped []string
	stopsAt []int
}

func (r *records) RecordStopped(ctx context.Context, _ *corev1.Pod, id string, n int, _ *v1alpha1.BarrierSave) error {
	if r.err != nil {
		return r.err
	}
	if v, ok := ctx.Value(notesKey{}).(*stepNotes); ok && v.stoppedAt.IsZero() {
		r.stopped = append(r.stopped, "recorded before the step noted its stop")
	}
	r.stopped = append(r.stopped, fmt.Sprintf("%s for %d", id, n))
	r.stopsAt = append(r.stopsAt, len(r.rt.Stops))
	return nil
}

func (r *records) RecordBarrier(_ context.Context, _ *corev1.Pod, rec v1alpha1.BarrierRecord) error {
	if r.err != nil {
		return r.err
	}
	r.written = append(r.written, rec)
	r.execsAt = append(r.execsAt, len(r.rt.Execs))
	return nil
}

func workerCtr(id string, restart uint32) *runtimeapi.Container {
	c := ctr(id, "uid-1", "worker", run)
	c.Metadata = &runtimeapi.ContainerMetadata{Name: "worker", Attempt: restart}
	return c
}

// A barrier in the worker container is opened only once the agent recorded the open, with
// the container the runtime runs and its restart number; a container recorded already is
// not recorded again, and one recorded for another attempt is not opened.
func TestOpenBarrierInWorkerRecordsFirst(t *testing.T) {
	ctx := context.Background()
	open := []string{v1alpha1.BarrierBinary, "open", "--attempt", "2"}
	for name, tc := range map[string]struct {
		pod        *corev1.Pod
		recordErr  error
		execExit   int32
		opened     bool
		wantErr    bool
		wantRecord []v1alpha1.BarrierRecord
		execs      int
	}{
		"a waiting barrier: recorded, then opened": {
			pod:        inWorkerPod(1, "c1", &running, record("c0", 0, 1)),
			opened:     true,
			wantRecord: []v1alpha1.BarrierRecord{*openedAt(record("c1", 1, 2))},
			execs:      1,
		},
		"the status lags: the runtime's container is recorded": {
			pod:        inWorkerPod(0, "c0", &exited143, record("c0", 0, 1)),
			opened:     true,
			wantRecord: []v1alpha1.BarrierRecord{*openedAt(record("c1", 1, 2))},
			execs:      1,
		},
		"recorded already, for the attempt: opened again, not recorded again": {
			pod:    inWorkerPod(1, "c1", &running, record("c1", 1, 2)),
			opened: true,
			execs:  1,
		},
		"recorded already and opened before: nothing": {
			pod:      inWorkerPod(1, "c1", &running, record("c1", 1, 2)),
			execExit: openExitOpenedBefore,
			execs:    1,
		},
		"an earlier container ran the attempt: not recorded, not opened": {
			pod: inWorkerPod(0, "c0", &exited143, record("c0", 0, 2)),
		},
		"recorded for another attempt: not opened": {
			pod: inWorkerPod(1, "c1", &running, record("c1", 1, 1)),
		},
		"the record cannot be written: not opened": {
			pod:       inWorkerPod(1, "c1", &running, record("c0", 0, 1)),
			recordErr: errors.New("conflict"),
			wantErr:   true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			rt := &FakeRuntime{Containers: []*runtimeapi.Container{workerCtr("c1", 1), ctr("other", "uid-2", "worker", run)}}
			if tc.execExit != 0 {
				rt.ExecExit = map[string]int32{"c1": tc.execExit}
			}
			recs := &records{rt: rt, err: tc.recordErr}
			r := New(rt, nil)
			r.ProcRoot = "" // by exec: the fake has no processes
			r.Records = recs
			r.Clock = clocktesting.NewFakePassiveClock(openTime)
			opened, err := r.OpenBarrier(ctx, tc.pod, 2)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %v", err, tc.wantErr)
			}
			if opened != tc.opened || len(rt.Execs) != tc.execs {
				t.Errorf("opened %v after %d execs, want %v after %d", opened, len(rt.Execs), tc.opened, tc.execs)
			}
			if diff := cmp.Diff(tc.wantRecord, recs.written); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
			for _, n := range recs.execsAt {
				if n != 0 {
					t.Errorf("recorded after %d execs: the record comes before the open", n)
				}
			}
			for _, e := range rt.Execs {
				if e.ID != "c1" || !cmp.Equal(e.Cmd, open) {
					t.Errorf("exec %q in %s, want %q in c1", e.Cmd, e.ID, open)
				}
			}
		})
	}
}

// The loop confirms the go signal before the agent records an open; the run may have moved
// on by the time the record is written, and the controller, reading the records just before
// the record, may have counted the container as waiting. The open follows a read of the run
// made after the record, and only where that read still says the gang's barrier is open for
// the attempt; a container this agent saw open is not asked about again.
func TestOpenBarrierInWorkerConfirmsAfterItsRecord(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		pod          *corev1.Pod
		seenOpen     bool
		live         int
		open         bool
		err          error
		opened       bool
		wantErr      bool
		reads, execs int
	}{
		"still open for the attempt: opened": {
			pod: inWorkerPod(1, "c1", &running, record("c0", 0, 1)), live: 2, open: true, opened: true, reads: 1, execs: 1,
		},
		"moved on to the next attempt: recorded, not opened": {
			pod: inWorkerPod(1, "c1", &running, record("c0", 0, 1)), live: 3, reads: 1,
		},
		"the read fails: not opened, retried": {
			pod: inWorkerPod(1, "c1", &running, record("c0", 0, 1)), err: errors.New("timeout"), wantErr: true, reads: 1,
		},
		"recorded before, not seen open: read again": {
			pod: inWorkerPod(1, "c1", &running, record("c1", 1, 2)), live: 3, reads: 1,
		},
		"seen open by this agent: not read again": {
			pod: inWorkerPod(1, "c1", &running, record("c1", 1, 2)), seenOpen: true, live: 3, opened: true, execs: 1,
		},
	} {
		t.Run(name, func(t *testing.T) {
			rt := &FakeRuntime{Containers: []*runtimeapi.Container{workerCtr("c1", 1)}}
			recs := &records{rt: rt}
			r := New(rt, nil)
			r.ProcRoot = ""
			r.Records = recs
			if tc.seenOpen {
				r.opened.add(openedKey("c1", 2))
			}
			reads, recordedBefore := 0, 0
			r.Confirm = func(context.Context, *corev1.Pod) (int, bool, bool, error) {
				reads++
				recordedBefore = len(recs.written)
				return tc.live, tc.live == 2, true, tc.err
			}
			opened, err := r.OpenBarrier(ctx, tc.pod, 2)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %v", err, tc.wantErr)
			}
			if opened != tc.opened || reads != tc.reads || len(rt.Execs) != tc.execs {
				t.Errorf("opened %v after %d reads and %d execs, want %v after %d and %d", opened, reads, len(rt.Execs), tc.opened, tc.reads, tc.execs)
			}
			if reads > 0 && recordedBefore != len(recs.written) {
				t.Errorf("read the run with %d records written: the read follows the record", recordedBefore)
			}
		})
	}
}

// A container recorded for the attempt is made sure of once, whether it was opened before
// (an agent that stopped between its record and its open opens it now): then never again.
func TestSyncMakesSureOfARecordedOpenOnce(t *testing.T) {
	ctx := context.Background()
	rt := &FakeRuntime{Containers: []*runtimeapi.Container{workerCtr("c1", 1)}, ExecExit: map[string]int32{"c1": openExitOpenedBefore}}
	r := New(rt, nil)
	r.ProcRoot = ""
	r.Records = &records{rt: rt}
	pod := inWorkerPod(1, "c1", &running, record("c1", 1, 2))
	for i := range 3 {
		if a, err := r.Sync(ctx, pod, 2, true); a != ActionNone || err != nil {
			t.Fatalf("sync %d: %s, %v", i, a, err)
		}
	}
	if len(rt.Execs) != 1 {
		t.Errorf("%d opens, want 1: %v", len(rt.Execs), rt.Execs)
	}
	if a, err := r.Sync(ctx, pod, 2, false); a != ActionNone || err != nil || len(rt.Execs) != 1 {
		t.Errorf("gang not released: %s, %v, %d execs", a, err, len(rt.Execs))
	}
}

// The agent records that it stopped the recorded container once the runtime has stopped it,
// or lists it running no longer: the controller may open the gang's barrier on that record.
// A stop that fails records nothing; an init container's pod has no record to write. (The
// fake runtime's containers have no processes: a supervising barrier's socket is out of
// reach, and its container is stopped through the runtime.)
func TestStopOldWorkersRecordsTheStop(t *testing.T) {
	ctx := context.Background()
	initPod := makePod().opened("attempt=1").worker("worker", "containerd://c0", running).obj()
	for name, tc := range map[string]struct {
		pod         *corev1.Pod
		containers  []*runtimeapi.Container
		stopErr     error
		wantStops   int
		wantStopped []string
		wantErr     bool
	}{
		"stopped, then recorded": {
			pod: inWorkerPod(0, "c0", &running, record("c0", 0, 1)), containers: []*runtimeapi.Container{workerCtr("c0", 0)},
			wantStops: 1, wantStopped: []string{"c0 for 2"},
		},
		"ended already (the runtime lists it running no longer): recorded": {
			pod:         inWorkerPod(0, "c0", &running, record("c0", 0, 1)),
			wantStopped: []string{"c0 for 2"},
		},
		"the stop fails: nothing recorded": {
			pod: inWorkerPod(0, "c0", &running, record("c0", 0, 1)), containers: []*runtimeapi.Container{workerCtr("c0", 0)},
			stopErr: errors.New("runtime down"), wantErr: true,
		},
		"an init container's pod: the kubelet's status tells": {
			pod: initPod, containers: []*runtimeapi.Container{ctr("c0", "uid-1", "worker", run)},
			wantStops: 1,
		},
	} {
		t.Run(name, func(t *testing.T) {
			rt := &FakeRuntime{Containers: tc.containers, StopErr: tc.stopErr}
			recs := &records{rt: rt}
			r := New(rt, nil)
			r.Records = recs
			// The step's end is the runtime's stop, not the record's write after it.
			sctx, _ := withNotes(ctx)
			_, err := r.StopOldWorkers(sctx, tc.pod, 2)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %v", err, tc.wantErr)
			}
			if len(rt.Stops) != tc.wantStops || !cmp.Equal(recs.stopped, tc.wantStopped, cmpopts.EquateEmpty()) {
				t.Errorf("%d stops, recorded %q; want %d, %q", len(rt.Stops), recs.stopped, tc.wantStops, tc.wantStopped)
			}
			for _, n := range recs.stopsAt {
				if n != tc.wantStops {
					t.Errorf("recorded after %d stops, want after %d: the stop comes first", n, tc.wantStops)
				}
			}
		})
	}
}

// A supervised worker is stopped through its barrier's socket; out of reach, through the
// runtime's stop of its container, which the kubelet then restarts: slower, and the step
// (its trace) says so, and why.
func TestStopOldWorkersSaysHowASupervisedWorkerStopped(t *testing.T) {
	pod := inWorkerPod(0, "c0", &running, record("c0", 0, 1))
	rt := &FakeRuntime{Containers: []*runtimeapi.Container{workerCtr("c0", 0)}}
	r := New(rt, nil)
	r.Records = &records{rt: rt}
	r.ProcRoot = "" // the node's processes out of sight: no socket
	sctx, notes := withNotes(context.Background())
	if _, err := r.StopOldWorkers(sctx, pod, 2); err != nil {
		t.Fatal(err)
	}
	if len(rt.Stops) != 1 || notes.via != ViaRuntime || notes.reason == "" {
		t.Errorf("%d runtime stops, noted via %q (%q); want 1, via %q and why", len(rt.Stops), notes.via, notes.reason, ViaRuntime)
	}
}

// openTime is when the tests' agent records an open.
var openTime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// openedAt is rec as the agent records an open at openTime: the worker's incarnation starts
// there (attempt.WorkerStart).
func openedAt(rec *v1alpha1.BarrierRecord) *v1alpha1.BarrierRecord {
	rec.OpenedAt = openTime.Format(time.RFC3339Nano)
	return rec
}
