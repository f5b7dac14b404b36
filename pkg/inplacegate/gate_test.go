package inplacegate

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/barrier"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

var t0 = time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)

// alive is a heartbeat renewed at t0 that holds 40 s; every node of these tests but "silent"
// and "absent" has it.
func heartbeats(node string) *exitclass.Heartbeat {
	switch node {
	case "silent":
		return &exitclass.Heartbeat{RenewedAt: t0.Add(-time.Minute), Duration: 40 * time.Second}
	case "absent":
		return nil
	}
	return &exitclass.Heartbeat{RenewedAt: t0, Duration: 40 * time.Second}
}

func node(name string, declares bool, ready corev1.ConditionStatus, labels map[string]string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if declares {
		n.Status.DeclaredFeatures = []string{"SomethingElse", v1alpha1.FeatureRestartAllContainers}
	}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: v1alpha1.NodeConditionInPlaceReady, Status: ready, Message: "no CRI socket"}}
	}
	return n
}

func inPlacePod(index, attemptLabel, node string, mut ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "w-" + index,
			Labels:      map[string]string{v1alpha1.LabelAttempt: attemptLabel},
			Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: index},
		},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

// TestSupport: every schedulable node the template's nodeSelector selects must declare the
// kubelet's feature, have its agent ready, and that agent there now (its heartbeat alive);
// nodes it does not select do not count.
func TestSupport(t *testing.T) {
	gpu := map[string]string{"pool": "gpu"}
	run := &v1alpha1.TrainingRun{Spec: v1alpha1.TrainingRunSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeSelector: gpu}}}}
	cordoned := node("cordoned", false, "", gpu)
	cordoned.Spec.Unschedulable = true
	cases := map[string]struct {
		nodes []corev1.Node
		ok    bool
		names string
	}{
		"all able":                  {[]corev1.Node{node("a", true, corev1.ConditionTrue, gpu), node("cpu", false, "", nil)}, true, ""},
		"no node selected":          {[]corev1.Node{node("cpu", true, corev1.ConditionTrue, nil)}, false, ""},
		"a cordoned one aside":      {[]corev1.Node{node("a", true, corev1.ConditionTrue, gpu), cordoned}, true, ""},
		"a kubelet without it":      {[]corev1.Node{node("a", true, corev1.ConditionTrue, gpu), node("old", false, corev1.ConditionTrue, gpu)}, false, "old (its kubelet does not declare"},
		"an agent not ready":        {[]corev1.Node{node("b", true, corev1.ConditionFalse, gpu)}, false, "b (its node agent is not ready: no CRI socket)"},
		"an agent that is mute":     {[]corev1.Node{node("c", true, "", gpu)}, false, "c (its node agent does not report"},
		"an agent that went silent": {[]corev1.Node{node("silent", true, corev1.ConditionTrue, gpu)}, false, "silent (its node agent is silent: its heartbeat expired at 2026-11-27T02:59:40Z)"},
		"an agent that never beat":  {[]corev1.Node{node("absent", true, corev1.ConditionTrue, gpu)}, false, "absent (its node agent has no heartbeat"},
	}
	for name, tc := range cases {
		ok, unsupported := Support(run, tc.nodes, heartbeats, t0)
		if ok != tc.ok || !strings.HasPrefix(strings.Join(unsupported, "; "), tc.names) || (tc.names == "") != (len(unsupported) == 0) {
			t.Errorf("%s: ok %v unsupported %q; want %v and %q...", name, ok, unsupported, tc.ok, tc.names)
		}
	}
	// A role sent to other nodes (spec.roles) makes those nodes count too.
	withPS := run.DeepCopy()
	withPS.Spec.Roles = []v1alpha1.RoleTemplate{{Name: "ps", NodeSelector: map[string]string{"pool": "cpu"}}}
	nodes := []corev1.Node{node("a", true, corev1.ConditionTrue, gpu), node("cpu", false, "", map[string]string{"pool": "cpu"})}
	if ok, unsupported := Support(withPS, nodes, heartbeats, t0); ok || len(unsupported) != 1 || !strings.HasPrefix(unsupported[0], "cpu (") {
		t.Errorf("a ps role on CPU nodes that cannot: ok %v unsupported %q; want false and the cpu node", ok, unsupported)
	}
}

// TestMovedIndexes: an index moves when its pod cannot restart where it is (ended, being
// deleted, on an excluded node or one that cannot restart it in place) or has no pod.
func TestMovedIndexes(t *testing.T) {
	now := metav1.Now()
	workers := []*corev1.Pod{
		inPlacePod("0", "1", "healthy"),
		inPlacePod("1", "1", "faulty"),
		inPlacePod("2", "1", "healthy", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }),
		inPlacePod("3", "1", "healthy", func(p *corev1.Pod) { p.DeletionTimestamp = &now }),
		inPlacePod("4", "1", "no-agent"),
		inPlacePod("5", "1", ""), // not scheduled yet: it restarts nothing, and waits at its barrier
		// 6 has no pod
		inPlacePod("7", "1", "gone-node"),
	}
	nodes := map[string]exitclass.NodeFacts{"gone-node": {Gone: true}}
	got := MovedIndexes(workers, 8, []string{"faulty"}, nodes, func(n string) bool { return n == "no-agent" })
	if want := []int32{1, 2, 3, 4, 6, 7}; !cmp.Equal(got, want) {
		t.Errorf("moved %v, want %v", got, want)
	}
}

// TestStopped: a pod stopped for attempt n runs no worker of an older attempt, by what the
// kubelet reports of its barrier and workers, whatever its label says.
func TestStopped(t *testing.T) {
	barrier := func(s corev1.ContainerState) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: v1alpha1.BarrierContainer, State: s}}
		}
	}
	worker := func(s corev1.ContainerState) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", State: s}} }
	}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}
	opened := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Message: "attempt=2"}}
	opened3 := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Message: "attempt=3"}}
	cases := map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"made for the attempt, opened for it":     {inPlacePod("0", "3", "n", barrier(opened3), worker(running)), true},
		"made for the attempt, not started":       {inPlacePod("0", "3", "n", barrier(waiting)), true},
		"made for 3, opened for 2 (a stale view)": {inPlacePod("0", "3", "n", barrier(opened), worker(running)), false},
		"worker of attempt 2 runs":                {inPlacePod("0", "1", "n", barrier(opened), worker(running)), false},
		"opened for 2, worker about to start":     {inPlacePod("0", "1", "n", barrier(opened), worker(waiting)), false},
		"back at its barrier":                     {inPlacePod("0", "1", "n", barrier(running), worker(waiting)), true},
		"not started yet":                         {inPlacePod("0", "1", ""), true},
		"barrier running, a worker still listed":  {inPlacePod("0", "1", "n", barrier(running), worker(running)), false},
	}
	for name, tc := range cases {
		if got := Stopped(tc.pod, 3); got != tc.want {
			t.Errorf("%s: Stopped = %v, want %v", name, got, tc.want)
		}
	}
}

// TestWaits: before the barrier opens, the gang waits for each pod still running an older
// attempt's worker until its own grace period and StopMargin after the decision, at once for
// a pod whose node agent is silent, and for the old pods of moved indexes with no end of its
// own; after, for each waiting barrier until OpenMargin after the later of the go signal and
// the barrier's start.
func TestWaits(t *testing.T) {
	runningOld := func(p *corev1.Pod) {
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: v1alpha1.BarrierContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: "attempt=1"}}}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	}
	atBarrier := func(since time.Time) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: v1alpha1.BarrierContainer,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(since)}}}}
		}
	}
	longGrace := func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptrInt(300) }
	decided := t0.Add(-10 * time.Second)
	pods := []*corev1.Pod{
		inPlacePod("0", "1", "up", runningOld),            // default grace: 30 s + 30 s
		inPlacePod("1", "1", "up", runningOld, longGrace), // 300 s + 30 s
		inPlacePod("2", "1", "silent", runningOld),        // its agent is silent: now
		inPlacePod("3", "1", "up", atBarrier(decided)),    // stopped
		inPlacePod("4", "1", "gone", atBarrier(decided)),  // moved: its old pod must go
		inPlacePod("4", "2", "up", atBarrier(t0)),         // its new pod: nothing to stop
	}
	got := map[string]string{}
	for _, w := range BeforeOpen(pods, 2, []int32{4}, nil, decided, heartbeats, t0) {
		got[w.Pod.Name+"@"+w.Pod.Labels[v1alpha1.LabelAttempt]] = w.Describe()
	}
	want := map[string]string{
		"w-0@1": "pod w-0 on node up to stop its workers of attempt 1 (until 2026-11-27T03:00:50Z)",
		"w-1@1": "pod w-1 on node up to stop its workers of attempt 1 (until 2026-11-27T03:05:20Z)",
		"w-2@1": "pod w-2 on node silent to stop its workers of attempt 1 (its node agent is silent: moved at once)",
		"w-4@1": "pod w-4 on node gone to be gone from the API: its index moves to a new pod",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("BeforeOpen (-want +got):\n%s", diff)
	}

	opened := t0
	after := []*corev1.Pod{
		inPlacePod("0", "1", "up", atBarrier(decided)),                // waiting since before the go signal
		inPlacePod("1", "2", "up", atBarrier(t0.Add(20*time.Second))), // a new pod, started later
		inPlacePod("2", "1", "silent", atBarrier(decided)),            // nobody will open it
		inPlacePod("3", "1", "up", func(p *corev1.Pod) { // opened for 2
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: v1alpha1.BarrierContainer,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: "attempt=2"}}}}
		}),
		inPlacePod("4", "2", ""), // not scheduled: not waiting for an open
	}
	got = map[string]string{}
	for _, w := range AfterOpen(after, 2, opened, heartbeats, t0.Add(5*time.Second)) {
		got[w.Pod.Name] = w.Describe()
	}
	want = map[string]string{
		"w-0": "pod w-0 on node up to open its barrier for attempt 2 (until 2026-11-27T03:00:30Z)",
		"w-1": "pod w-1 on node up to open its barrier for attempt 2 (until 2026-11-27T03:00:50Z)",
		"w-2": "pod w-2 on node silent to open its barrier for attempt 2 (its node agent is silent: moved at once)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("AfterOpen (-want +got):\n%s", diff)
	}
}

func ptrInt(v int64) *int64 { return &v }

// TestEarliestLooksAgainWhenAHeartbeatWouldExpire: nothing wakes the controller when an
// agent dies (its heartbeat just stops being renewed): a wait whose deadline is later than
// the heartbeat's expiry is looked at again then, and runs out at once if it did expire.
func TestEarliestLooksAgainWhenAHeartbeatWouldExpire(t *testing.T) {
	old := inPlacePod("0", "1", "up", func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	})
	waits := BeforeOpen([]*corev1.Pod{old}, 2, nil, nil, t0, heartbeats, t0)
	if got, want := Earliest(waits, t0), t0.Add(40*time.Second); !got.Equal(want) {
		t.Fatalf("Earliest = %v, want the heartbeat's expiry %v (the deadline is %v)", got, want, waits[0].Until)
	}
	expired := func(string) *exitclass.Heartbeat {
		return &exitclass.Heartbeat{RenewedAt: t0, Duration: 40 * time.Second}
	}
	later := t0.Add(41 * time.Second)
	if w := BeforeOpen([]*corev1.Pod{old}, 2, nil, nil, t0, expired, later); !w[0].Silent || !w[0].Overdue(later) {
		t.Errorf("at the heartbeat's expiry: %+v, want silent and overdue", w[0])
	}
}

// TestBarrierUnpullable: a barrier waiting on an image the kubelet cannot pull is named (its
// back-off, an invalid name, a pull the pod's policy forbids); a first failed pull, which the
// kubelet retries at once, and another container's pull are not.
// inWorkerPod is a pod whose barrier is its worker's entrypoint (an image volume of
// barrier:v1), its worker waiting on an image pull that failed with msg.
func inWorkerPod(msg string) *corev1.Pod {
	p := inPlacePod("0", "1", "n")
	p.Spec.InitContainers = nil
	p.Spec.Volumes = []corev1.Volume{{Name: v1alpha1.BarrierVolume, VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "barrier:v1"}}}}
	p.Spec.Containers = []corev1.Container{{Name: "worker", Image: "trainer:v1", Command: []string{v1alpha1.BarrierBinary, barrier.CommandSupervise, "--", "train"}}}
	p.Status.InitContainerStatuses = nil
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: msg}}}}
	return p
}

func TestBarrierUnpullable(t *testing.T) {
	waiting := func(name, reason string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{Name: name,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "not found"}}})
		}
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"back-off":        {inPlacePod("0", "1", "n", waiting(v1alpha1.BarrierContainer, "ImagePullBackOff")), true},
		"invalid name":    {inPlacePod("0", "1", "n", waiting(v1alpha1.BarrierContainer, "InvalidImageName")), true},
		"never pull":      {inPlacePod("0", "1", "n", waiting(v1alpha1.BarrierContainer, "ErrImageNeverPull")), true},
		"a first failure": {inPlacePod("0", "1", "n", waiting(v1alpha1.BarrierContainer, "ErrImagePull")), false},
		"the user's init": {inPlacePod("0", "1", "n", waiting("setup", "ImagePullBackOff")), false},
		"initializing":    {inPlacePod("0", "1", "n", waiting(v1alpha1.BarrierContainer, "PodInitializing")), false},
		// A barrier in the worker container: the barrier's image volume, or the worker's
		// own image, which the kubelet's message tells apart.
		"the barrier's image volume": {inWorkerPod(`Back-off pulling image "barrier:v1": not found`), true},
		"the worker's own image":     {inWorkerPod(`Back-off pulling image "trainer:v1": not found`), false},
	} {
		if p, _ := BarrierUnpullable([]*corev1.Pod{tc.pod}); (p != nil) != tc.want {
			t.Errorf("%s: BarrierUnpullable = %v, want %v", name, p != nil, tc.want)
		}
	}
}

// TestImageVolumesCannot: a node mounts image volumes (a barrier in the worker container)
// when its kubelet reports containerd 2.1+ or CRI-O 1.31+; anything else keeps the init
// container.
func TestImageVolumesCannot(t *testing.T) {
	for rv, can := range map[string]bool{
		"containerd://2.2.9+unknown": true,
		"containerd://2.1.0":         true,
		"containerd://v2.1.4":        true,
		"containerd://2.0.5":         false,
		"containerd://1.7.27":        false,
		"cri-o://1.31.0":             true,
		"cri-o://1.30.4":             false,
		"docker://28.0.1":            false,
		"containerd://garbled":       false,
		"":                           false,
	} {
		n := &corev1.Node{Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{ContainerRuntimeVersion: rv}}}
		if why := ImageVolumesCannot(n); (why == "") != can {
			t.Errorf("%q: ImageVolumesCannot = %q, want able %v", rv, why, can)
		}
	}
	run := &v1alpha1.TrainingRun{Spec: v1alpha1.TrainingRunSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeSelector: map[string]string{"pool": "a"}}}}}
	node := func(name, pool, rv string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": pool}},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{ContainerRuntimeVersion: rv}}}
	}
	if ok, cannot := BarrierInWorker(run, []corev1.Node{node("a1", "a", "containerd://2.2.9"), node("b1", "b", "containerd://1.7.0")}); !ok || cannot != nil {
		t.Errorf("pool a on containerd 2.2: %v %v, want able (pool b is not the run's)", ok, cannot)
	}
	if ok, cannot := BarrierInWorker(run, []corev1.Node{node("a1", "a", "containerd://2.2.9"), node("a2", "a", "containerd://2.0.0")}); ok || len(cannot) != 1 {
		t.Errorf("a node of pool a on containerd 2.0: %v %v, want unable, naming it", ok, cannot)
	}
	if ok, _ := BarrierInWorker(run, nil); ok {
		t.Error("no node: able")
	}
}

// TestADeletedHeartbeatNeverCountsASupervisedWorkerStopped: a supervised worker's records
// may live only on its agent's heartbeat Lease; with the Lease deleted, a worker running
// attempt 1 reads as a barrier that never opened, which would count as stopped. It never
// does: it holds the gang's barrier, its wait ended at once (its agent is silent), and the
// gang is recreated. The same pod on a node whose heartbeat is there, waiting at its first
// open, counts as stopped.
func TestADeletedHeartbeatNeverCountsASupervisedWorkerStopped(t *testing.T) {
	supervised := func(node string) *corev1.Pod {
		p := inPlacePod("0", "1", node)
		p.Spec.Volumes = []corev1.Volume{{Name: v1alpha1.BarrierVolume, VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "barrier:v1"}}}}
		p.Spec.Containers = []corev1.Container{{Name: "worker", Command: []string{v1alpha1.BarrierBinary, "supervise", "--", "train"}}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", ContainerID: "containerd://c0",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0.Add(-time.Hour))}}}}
		return p // no record: the pod's own has none, and its node's heartbeat is gone or has none
	}
	decided := t0.Add(-10 * time.Second)
	waits := BeforeOpen([]*corev1.Pod{supervised("absent")}, 2, nil, nil, decided, heartbeats, t0)
	if len(waits) != 1 || !waits[0].Silent || !waits[0].Overdue(t0) {
		t.Fatalf("BeforeOpen on a node without a heartbeat: %+v, want the pod held, its wait over at once", waits)
	}
	if waits := BeforeOpen([]*corev1.Pod{supervised("up")}, 2, nil, nil, decided, heartbeats, t0); len(waits) != 0 {
		t.Errorf("BeforeOpen where the heartbeat is there: %+v, want a barrier waiting at its first open counted stopped", waits)
	}
}
