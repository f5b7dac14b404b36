package exitclass

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// Hints that name the failed worker, as tslhints writes them.
var (
	heartbeat = HintPattern{Pattern: `Task (?:/job:(?P<role>[\w-]+)/replica:\d+/task:)?(?P<peer>\d+) heartbeat timeout`, Cause: v1alpha1.CausePeerFailure, Source: "jax"}
	alone     = HintPattern{Pattern: `The first task at the barrier: (?P<peer>\d+)\.`, Cause: v1alpha1.CausePeerFailure, Source: "jax"}
	closed    = HintPattern{Pattern: `Connection closed by peer`, Cause: v1alpha1.CausePeerFailure, Source: "gloo"}
)

const abort = "F1127 02:26:50.167436 client.h:86] Terminating process because the JAX distributed service detected fatal errors.\n" +
	"    @     0x7f4c2612d7d4  absl::lts_20260526::log_internal::LogMessage::SendToLog()"

// Who the failed workers' messages name is the root, whatever the exit codes and the order
// of exits; infrastructure evidence still comes first; names that disagree, or name a worker
// that has not failed, decide nothing and say so.
func TestClassifyNamedPeer(t *testing.T) {
	barrier := func(n string) string {
		return abort + "\nBarrier timed out.\nThe first task at the barrier: " + n + ". Some timed out task names:"
	}
	for name, tc := range map[string]struct {
		pods      []*corev1.Pod
		hints     []HintPattern
		wantIndex int
		wantCause v1alpha1.Cause
		namedBy   int
		evidence  string // a line the evidence must hold
	}{
		"every worker aborted in the same second: the one they name": {
			pods: []*corev1.Pod{
				worker(0, 134, at(50)).message(barrier("2")).obj(),
				worker(1, 134, at(50)).message(barrier("2")).obj(),
				worker(2, 134, at(50)).message("Traceback (most recent call last):\n  File \"w.py\", line 1, in <module>\nRuntimeError: worker 2 fails\n" + barrier("2")).obj(),
				worker(3, 134, at(50)).message(barrier("2")).obj(),
			},
			hints:     []HintPattern{alone},
			wantIndex: 2, wantCause: v1alpha1.CauseAppExit, namedBy: 4,
			evidence: "the output of index 0, 1, 2 and 3 names index 2 (pod r-2) as the worker that failed (jax hint)",
		},
		"the named worker exited last, an earlier one with its own exit code": {
			pods: []*corev1.Pod{
				worker(0, 1, at(1)).message("E0001 client: RPC failed").obj(),
				worker(1, 134, at(2)).message("Task 3 heartbeat timeout").obj(),
				worker(2, 134, at(2)).message("Task 3 heartbeat timeout").obj(),
				worker(3, 1, at(5)).message("segfault").obj(),
			},
			hints:     []HintPattern{heartbeat},
			wantIndex: 3, wantCause: v1alpha1.CauseAppExit, namedBy: 2,
			evidence: "the output of index 1 and 2 names index 3 (pod r-3) as the worker that failed (jax hint)",
		},
		"infrastructure evidence comes first": {
			pods: []*corev1.Pod{
				worker(1, 143, at(1)).infraFault(v1alpha1.CauseNodeShutdown, at(0.5)).obj(),
				worker(2, 1, at(2)).message("Task 3 heartbeat timeout").obj(),
				worker(3, 1, at(3)).obj(),
			},
			hints:     []HintPattern{heartbeat},
			wantIndex: 1, wantCause: v1alpha1.CauseNodeShutdown,
			evidence: "the output of index 2 names index 3 (pod r-3) as the worker that failed (jax hint)",
		},
		"names that disagree decide nothing": {
			pods: []*corev1.Pod{
				worker(0, 1, at(1)).obj(),
				worker(1, 134, at(2)).message("Task 3 heartbeat timeout").obj(),
				worker(2, 134, at(2)).message("Task 0 heartbeat timeout").obj(),
				worker(3, 1, at(5)).obj(),
			},
			hints:     []HintPattern{heartbeat},
			wantIndex: 0, wantCause: v1alpha1.CauseAppExit,
			evidence: "the failed workers' output names different workers as the one that failed (jax hints): index 0 (by index 2), index 3 (by index 1); not counted",
		},
		"a named worker that has not failed decides nothing": {
			pods: []*corev1.Pod{
				worker(2, 1, at(1)).message("Task 3 heartbeat timeout").obj(),
				makePod("r-3").index(3).node("gpu-3").obj(),
			},
			hints:     []HintPattern{heartbeat},
			wantIndex: 2, wantCause: v1alpha1.CauseUnknown,
			evidence: "the output of index 2 names index 3 as the worker that failed (jax hint), but no pod with that index has failed; not counted",
		},
		"a hint that names nobody": {
			pods: []*corev1.Pod{
				worker(0, 1, at(2)).message("Connection closed by peer [10.0.0.1]:5").obj(),
				worker(1, 1, at(1)).message("Connection closed by peer [10.0.0.2]:5").obj(),
				worker(2, 1, at(3)).obj(),
			},
			hints:     []HintPattern{closed},
			wantIndex: 2, wantCause: v1alpha1.CauseAppExit,
		},
	} {
		t.Run(name, func(t *testing.T) {
			v := Classify(Observation{Pods: tc.pods, Hints: mustHints(t, tc.hints...), Now: at(100), SettleDeadline: at(100)})
			if v.Index != tc.wantIndex || v.Cause != tc.wantCause || v.NamedBy != tc.namedBy {
				t.Errorf("root index %d %s named by %d; want index %d %s named by %d\n%s\n%s", v.Index, v.Cause, v.NamedBy,
					tc.wantIndex, tc.wantCause, tc.namedBy, v.Explain(), strings.Join(v.Evidence, "\n"))
			}
			if tc.evidence != "" && !hasLine(v.Evidence, tc.evidence) {
				t.Errorf("evidence lacks %q:\n%s", tc.evidence, strings.Join(v.Evidence, "\n"))
			}
		})
	}
}

func hasLine(lines []string, line string) bool {
	for _, l := range lines {
		if l == line {
			return true
		}
	}
	return false
}

// A message that names the very worker that prints it is its own failure, not a peer's:
// its cause is its own exit's, the evidence says why, and the explanation counts the names.
func TestClassifySelfNamed(t *testing.T) {
	msg := "Traceback (most recent call last):\n  File \"/app/w.py\", line 121, in <module>\n    raise RuntimeError(\"x\")\n" +
		"RuntimeError: devcheck: worker 2 fails on purpose\n" + abort + "\nThe first task at the barrier: 2. Some timed out task names:"
	v := Classify(Observation{
		Pods:  []*corev1.Pod{worker(2, 134, at(50)).message(msg).obj()},
		Hints: mustHints(t, alone), Now: at(49), SettleDeadline: at(51),
	})
	if v.Index != 2 || v.Cause != v1alpha1.CauseAppExit || v.Final || v.NamedBy != 1 {
		t.Fatalf("verdict %s %s final %v named by %d; want index 2 AppExit (its own exit: no hint decides), not final before the deadline, named by itself",
			v.RootPod, v.Cause, v.Final, v.NamedBy)
	}
	for _, want := range []string{
		"pod r-2: the first error in its output: RuntimeError: devcheck: worker 2 fails on purpose",
		"pod r-2: its own termination message names it as the worker that failed (jax hint): the coordination service ended it with the others; not a peer's failure",
	} {
		if !hasLine(v.Evidence, want) {
			t.Errorf("evidence lacks %q:\n%s", want, strings.Join(v.Evidence, "\n"))
		}
	}
	if want := "(1 failed worker's output names it as the one that failed)"; !strings.Contains(v.Explain(), want) {
		t.Errorf("explanation %q lacks %q", v.Explain(), want)
	}
}

// A task that TensorFlow names by its job and number is the pod with that role and role
// index in the run's layout; a job the run does not lay out numbers the completion indexes
// (MultiWorkerMirroredStrategy's worker, JAX's jax_worker); a task the layout lacks names
// nobody.
func TestNamedIndexRoles(t *testing.T) {
	h := mustHints(t, heartbeat)[0]
	layout := makePod("r-0").annotation(v1alpha1.AnnotationRoles, "chief:0-0,ps:1-2,worker:3-6").obj()
	plain := makePod("r-0").obj()
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		msg  string
		want int
	}{
		"a worker of a parameter-server run":     {layout, "Task /job:worker/replica:0/task:1 heartbeat timeout", 4},
		"its chief":                              {layout, "Task /job:chief/replica:0/task:0 heartbeat timeout", 0},
		"a worker the layout does not have":      {layout, "Task /job:worker/replica:0/task:4 heartbeat timeout", -1},
		"a job the layout does not have":         {layout, "Task /job:evaluator/replica:0/task:0 heartbeat timeout", -1},
		"MultiWorkerMirroredStrategy's worker":   {plain, "Task /job:worker/replica:0/task:3 heartbeat timeout", 3},
		"JAX 0.11's task id":                     {plain, "Task 2 heartbeat timeout", 2},
		"a name the hint matches without naming": {plain, "no task here", -1},
	} {
		t.Run(name, func(t *testing.T) {
			if got := namedIndex(&h, tc.msg, tc.pod); got != tc.want {
				t.Errorf("namedIndex = %d, want %d", got, tc.want)
			}
		})
	}
}

// The node agent's report of a worker's exit, beside the pod's status (a pod that does not
// restart in place): its time to the nanosecond orders exits in the same second, its message
// (the lines that matter above the kubelet's tail) is the one the hints read; a report of
// another container, node or second is not this exit's.
func TestClassifyAgentReport(t *testing.T) {
	report := func(b *podBuilder, id, node, finished, msg string) *podBuilder {
		b.p.Status.ContainerStatuses[0].State.Terminated.ContainerID = "containerd://" + id
		raw, err := json.Marshal(v1alpha1.WorkerExit{Attempt: 1, Container: "trainer", ContainerID: id, ExitCode: b.p.Status.ContainerStatuses[0].State.Terminated.ExitCode,
			FinishedAt: finished, Node: node, Message: msg})
		if err != nil {
			t.Fatal(err)
		}
		return b.annotation(v1alpha1.AnnotationWorkerExit, string(raw))
	}
	const kept = "Traceback (most recent call last):\nRuntimeError: the real error\n[faultline: kept]\nTask 9 heartbeat timeout"
	second := at(50).Format(time.RFC3339Nano)
	ns := func(s float64) string { return at(s).Format(time.RFC3339Nano) }
	for name, tc := range map[string]struct {
		pods      []*corev1.Pod
		wantIndex int
		wantAt    time.Time
		evidence  string
	}{
		"the runtime's nanoseconds order exits in the same second": {
			pods: []*corev1.Pod{
				report(worker(0, 1, at(50)), "c0", "gpu-0", ns(50.7), "").obj(),
				report(worker(1, 1, at(50)), "c1", "gpu-1", ns(50.2), "").obj(),
				report(worker(2, 1, at(50)), "c2", "gpu-2", ns(50.5), "").obj(),
			},
			wantIndex: 1, wantAt: at(50.2),
		},
		"a time to the second does not order against one to the nanosecond": {
			pods: []*corev1.Pod{
				worker(0, 1, at(50)).obj(),
				report(worker(1, 1, at(50)), "c1", "gpu-1", ns(50.2), "").obj(),
			},
			wantIndex: 0, wantAt: at(50),
		},
		"the report's message is the one the hints read": {
			pods: []*corev1.Pod{
				report(worker(0, 1, at(49)).message("the kubelet's tail"), "c0", "gpu-0", ns(49.1), kept).obj(),
				worker(9, 1, at(50)).obj(),
			},
			wantIndex: 9, wantAt: at(50),
			evidence: "the output of index 0 names index 9 (pod r-9) as the worker that failed (jax hint)",
		},
		"another container's report is not this exit's": {
			pods: []*corev1.Pod{
				report(worker(0, 1, at(49)), "c0", "gpu-0", ns(49.1), kept).obj(),
				worker(9, 1, at(50)).obj(),
			},
			wantIndex: 0, wantAt: at(49),
		},
		"another node's report is not this exit's": {
			pods: []*corev1.Pod{
				report(worker(0, 1, at(50)), "c0", "elsewhere", ns(50.1), "").obj(),
				report(worker(1, 1, at(50)), "c1", "gpu-1", ns(50.2), "").obj(),
			},
			wantIndex: 0, wantAt: at(50),
		},
		"a report of another second keeps the status's time": {
			pods: []*corev1.Pod{
				report(worker(0, 1, at(50)), "c0", "gpu-0", second, "").obj(),
				report(worker(1, 1, at(51)), "c1", "gpu-1", ns(49.5), "").obj(),
			},
			wantIndex: 0, wantAt: at(50),
		},
	} {
		t.Run(name, func(t *testing.T) {
			// The report's container ID must match: break it for the "another container" case.
			if strings.HasPrefix(name, "another container") {
				tc.pods[0].Status.ContainerStatuses[0].State.Terminated.ContainerID = "containerd://c0-restarted"
			}
			v := Classify(Observation{Pods: tc.pods, Hints: mustHints(t, heartbeat), Now: at(100), SettleDeadline: at(100)})
			if v.Index != tc.wantIndex || !v.FailedAt.Equal(tc.wantAt) {
				t.Errorf("root index %d failed at %s; want index %d at %s\n%s", v.Index, clock(v.FailedAt), tc.wantIndex, clock(tc.wantAt), strings.Join(v.Evidence, "\n"))
			}
			if tc.evidence != "" && !hasLine(v.Evidence, tc.evidence) {
				t.Errorf("evidence lacks %q:\n%s", tc.evidence, strings.Join(v.Evidence, "\n"))
			}
		})
	}
}

func TestFirstError(t *testing.T) {
	for msg, want := range map[string]string{
		"Traceback (most recent call last):\n  File \"a.py\", line 1\n    x()\nValueError: bad\nTraceback (most recent call last):\nKeyError: 2": "ValueError: bad",
		"[rank2]: Traceback (most recent call last):\n[rank2]:   File \"a.py\"\n[rank2]: RuntimeError: rank 2 fails\n":                           "RuntimeError: rank 2 fails",
		"...\nTraceback (most recent call last):\n  File \"a.py\", line 1":                                                                       "",
		"no traceback": "",
	} {
		if got := firstError(msg); got != want {
			t.Errorf("firstError(%q) = %q, want %q", msg, got, want)
		}
	}
}

func TestSameInstant(t *testing.T) {
	for _, tc := range []struct {
		a, b time.Time
		want bool
	}{
		{at(50), at(50), true},
		{at(50), at(50.3), true},    // to the second against to the nanosecond
		{at(50.3), at(50), true},    // either way round
		{at(50.2), at(50.3), false}, // both to the nanosecond
		{at(50), at(51), false},
		{at(50.9), at(51.1), false},
		{time.Time{}, at(50), false},
	} {
		if got := sameInstant(tc.a, tc.b); got != tc.want {
			t.Errorf("sameInstant(%s, %s) = %v, want %v", clock(tc.a), clock(tc.b), got, tc.want)
		}
	}
	if diff := cmp.Diff(true, sameInstant(time.Time{}, time.Time{})); diff != "" {
		t.Error(diff)
	}
}
