package hinttest

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/framework/hinttest/realoutput"
)

// untimed stands for the exit time of a fixture whose output carries no timestamps.
var untimed = realoutput.RecordedOn.Add(12 * time.Hour)

// Gang is the recording's workers as the failed pods of attempt 1 of run f.Name, for
// exitclass.Classify: pod <name>-<index> on node n<index>, its worker container terminated
// with the recorded exit code when the output ended, as the API server shows it (to the
// second), with what the kubelet keeps of its log as its message (KubeletCut). With agent,
// each pod also carries the node agent's report of the same exit
// (v1alpha1.AnnotationWorkerExit): the runtime's time, to the nanosecond as far as the
// output tells, and what the agent keeps of the log (AgentKept).
func Gang(f realoutput.Recording, agent bool) []*corev1.Pod {
	pods := make([]*corev1.Pod, 0, len(f.Workers))
	for _, w := range f.Workers {
		exited := w.ExitedAt
		if exited.IsZero() {
			exited = untimed
		}
		started := f.Start()
		if started.IsZero() {
			started = exited.Add(-time.Minute)
		}
		name, node, id := f.Name+"-"+strconv.Itoa(w.Index), "n"+strconv.Itoa(w.Index), "w"+strconv.Itoa(w.Index)+"-"+f.Name
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: "ml",
				Labels:      map[string]string{v1alpha1.LabelRun: f.Name, v1alpha1.LabelAttempt: "1"},
				Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: strconv.Itoa(w.Index)},
			},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "worker"}}},
			Status: corev1.PodStatus{
				Phase: corev1.PodFailed,
				ContainerStatuses: []corev1.ContainerStatus{{
					Name: "worker", ContainerID: "containerd://" + id,
					State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
						ExitCode: w.ExitCode, Reason: "Error", Message: KubeletCut(w.Log), ContainerID: "containerd://" + id,
						StartedAt:  metav1.NewTime(started.Truncate(time.Second)),
						FinishedAt: metav1.NewTime(exited.Truncate(time.Second)),
					}},
				}},
			},
		}
		if agent {
			raw, err := json.Marshal(v1alpha1.WorkerExit{
				Attempt: 1, Container: "worker", ContainerID: id, ExitCode: w.ExitCode, Reason: "Error",
				Message: AgentKept(w.Log), StartedAt: started.Format(time.RFC3339Nano), FinishedAt: exited.Format(time.RFC3339Nano), Node: node,
			})
			if err != nil {
				panic(err)
			}
			p.Annotations[v1alpha1.AnnotationWorkerExit] = string(raw)
		}
		pods = append(pods, p)
	}
	return pods
}

// GangCase is the verdict a recorded gang must get.
type GangCase struct {
	// Root is the completion index of the worker that failed first; Cause its own cause.
	Root  int
	Cause v1alpha1.Cause
	// NamedBy is how many failed workers' output names the root as the one that failed.
	NamedBy int
}

// RunGangs classifies every case's recording (realoutput, by name) with hints, fed as the kubelet cuts
// each worker's log and as the node agent keeps it, once the settle window is over: the
// root's index and cause must be the case's, and every other worker a peer whose own
// output says a peer failed (OwnCause PeerFailure).
func RunGangs(t *testing.T, hints []exitclass.Hint, cases map[string]GangCase) {
	t.Helper()
	for name, tc := range cases {
		f, err := realoutput.Load(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, agent := range []bool{false, true} {
			fed := "as the kubelet cuts it"
			if agent {
				fed = "as the agent keeps it"
			}
			t.Run(name+"/"+fed, func(t *testing.T) {
				pods := Gang(f, agent)
				now := untimed.Add(24 * time.Hour)
				v := exitclass.Classify(exitclass.Observation{Pods: pods, Hints: hints, Now: now, SettleDeadline: now})
				report := v.Explain() + "\n" + strings.Join(v.Evidence, "\n")
				t.Log(report)
				if v.Index != tc.Root || v.Cause != tc.Cause || v.Class != tc.Cause.Class() || !v.Final {
					t.Errorf("root index %d %s/%s (final %v); want index %d %s\n%s", v.Index, v.Class, v.Cause, v.Final, tc.Root, tc.Cause, report)
				}
				if v.NamedBy != tc.NamedBy {
					t.Errorf("%d failed workers name the root; want %d\n%s", v.NamedBy, tc.NamedBy, report)
				}
				if len(v.Peers) != len(pods)-1 {
					t.Errorf("%d peers, want %d", len(v.Peers), len(pods)-1)
				}
				for _, p := range v.Peers {
					if p.OwnCause != v1alpha1.CausePeerFailure {
						t.Errorf("survivor index %d: own cause %q (%s); want PeerFailure, its output blaming a peer\n%s", p.Index, p.OwnCause, p.Reason, report)
					}
				}
				if t.Failed() {
					for _, p := range pods {
						t.Logf("%s's message:\n%s", p.Name, p.Status.ContainerStatuses[0].State.Terminated.Message)
					}
				}
			})
		}
	}
}
