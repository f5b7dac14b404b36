package cli

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/policy"
)

// t0 is when the fixed runs of the golden tests were created; now is when they are printed.
var (
	t0  = time.Date(2026, 3, 14, 9, 26, 0, 0, time.UTC)
	now = t0.Add(95 * time.Second)
)

func at(s float64) *metav1.Time {
	t := metav1.NewTime(t0.Add(time.Duration(s * float64(time.Second))))
	return &t
}

// runBuilder builds TrainingRuns for the golden tests (JobSet's wrappers style).
type runBuilder struct{ run *v1alpha1.TrainingRun }

func makeRun(name string, workers int32) *runBuilder {
	return &runBuilder{run: &v1alpha1.TrainingRun{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.KindTrainingRun},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "research", UID: "5f0c1c1e-0000-4000-8000-000000000001",
			CreationTimestamp: *at(0), Labels: map[string]string{"team": "llm"},
		},
		Spec: v1alpha1.TrainingRunSpec{
			Framework: "jax", Workers: workers,
			RestartScope: v1alpha1.RestartScopeGang, SuccessPolicy: v1alpha1.SuccessPolicyAllWorkers,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name: "worker", Image: "ghcr.io/example/jax-train:1.0",
					Command: []string{"python", "train.py", "--model", "llm-7b"},
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
						corev1.ResourceName(v1alpha1.ResourceGPU): resource.MustParse("2"),
						corev1.ResourceMemory:                     resource.MustParse("64Gi"),
					}},
				}},
			}},
			FailurePolicy: v1alpha1.FailurePolicy{
				MaxRestarts:   v1alpha1.RestartBudgets{Infrastructure: ptr.To[int32](10), Application: ptr.To[int32](0), Unknown: ptr.To[int32](1)},
				Backoff:       v1alpha1.Backoff{InitialSeconds: 5, MaxSeconds: 300, ResetAfterSeconds: 600},
				SettleSeconds: ptr.To[int32](1),
				Rules: []v1alpha1.FailurePolicyRule{{
					Name: "exclude-faulty-nodes", OnClasses: []v1alpha1.Class{v1alpha1.ClassInfrastructure},
					Action: v1alpha1.ActionRestartRun, ExcludeNode: true,
				}},
			},
		},
		Status: v1alpha1.TrainingRunStatus{StartTime: at(0)},
	}}
}

func (b *runBuilder) obj() *v1alpha1.TrainingRun { return b.run }

func (b *runBuilder) phase(p v1alpha1.Phase, attempt, ready int32) *runBuilder {
	b.run.Status.Phase, b.run.Status.Attempt, b.run.Status.ReadyWorkers = p, attempt, ready
	return b
}

func (b *runBuilder) attempt(rec v1alpha1.AttemptRecord) *runBuilder {
	b.run.Status.Attempts = append(b.run.Status.Attempts, rec)
	if rec.Verdict != nil {
		b.run.Status.LastFailure = rec.Verdict
	}
	return b
}

func (b *runBuilder) restarts(infra, app, unknown int32) *runBuilder {
	b.run.Status.Restarts = v1alpha1.RestartCounts{Infrastructure: infra, Application: app, Unknown: unknown}
	return b
}

// spares gives the run n warm spares (spec.spares).
func (b *runBuilder) spares(n int32) *runBuilder {
	b.run.Spec.Spares = n
	return b
}

func (b *runBuilder) excluded(nodes ...string) *runBuilder {
	b.run.Status.ExcludedNodes = nodes
	return b
}

// goodput sets the run's ledger through s, each part in seconds: training, scheduling,
// detection, teardown.
func (b *runBuilder) goodput(through, training, scheduling, detection, teardown float64) *runBuilder {
	d := func(s float64) metav1.Duration {
		return metav1.Duration{Duration: time.Duration(s * float64(time.Second))}
	}
	b.run.Status.Goodput = &v1alpha1.GoodputLedger{Through: metav1.NewMicroTime(at(through).Time), Training: d(training),
		Scheduling: d(scheduling), Detection: d(detection), Teardown: d(teardown)}
	return b
}

func (b *runBuilder) completed(s float64) *runBuilder {
	b.run.Status.CompletionTime = at(s)
	return b
}

func (b *runBuilder) condition(typ string, status metav1.ConditionStatus, reason, msg string, s float64) *runBuilder {
	b.run.Status.Conditions = append(b.run.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: *at(s),
	})
	return b
}

// shutdownVerdict is the verdict on a node shutdown under index 0, as the controller stores it.
func shutdownVerdict() *v1alpha1.FailureVerdict {
	return &v1alpha1.FailureVerdict{
		Class: v1alpha1.ClassInfrastructure, Cause: v1alpha1.CauseNodeShutdown,
		Rule: "exclude-faulty-nodes", Action: v1alpha1.ActionRestartRun,
		Pod: "llm-0-x7k2p", Index: ptr.To[int32](0), Node: "gpu-node-3", Container: "worker",
		ExitCode: ptr.To[int32](143), Signal: 15, PeerFailures: 1,
		FailedAt: at(31), DecidedAt: at(31),
		Evidence: []string{
			"pod llm-0-x7k2p: container worker exited 143 (SIGTERM) at 09:26:31.204",
			"pod llm-0-x7k2p: condition faultline.dev/InfrastructureFault=True, reason NodeShutdown: node gpu-node-3 is shutting down (logind PrepareForShutdown)",
			"pod llm-0-x7k2p: fault evidence from logind on node gpu-node-3 at 09:26:31.012: NodeShutdown",
			"node gpu-node-3: logind PrepareForShutdown at 09:26:31.011",
		},
		Explanation: "index 0 (pod llm-0-x7k2p) on node gpu-node-3 exited 143 (SIGTERM) with the node agent's InfrastructureFault condition (NodeShutdown: node gpu-node-3 is shutting down (logind PrepareForShutdown)); 1 peer failed after it → infrastructure: NodeShutdown",
	}
}

// appExitVerdict is the verdict on index 5 exiting 1.
func appExitVerdict() *v1alpha1.FailureVerdict {
	return &v1alpha1.FailureVerdict{
		Class: v1alpha1.ClassApplication, Cause: v1alpha1.CauseAppExit,
		Rule: policy.RuleDefaultApplication, Action: v1alpha1.ActionFailRun,
		Pod: "llm-5-q9w4z", Index: ptr.To[int32](5), Node: "gpu-node-6", Container: "worker",
		ExitCode: ptr.To[int32](1), FailedAt: at(64), DecidedAt: at(65),
		Evidence: []string{
			"pod llm-5-q9w4z: container worker exited 1 at 09:27:04.310",
			"node gpu-node-6: no facts observed",
		},
		Explanation: "index 5 (pod llm-5-q9w4z) on node gpu-node-6 exited 1 with no infrastructure evidence; no other worker failed → application: AppExit",
	}
}

// failedRun: attempt 1 restarted on a node shutdown, attempt 2 failed on an exit 1.
func failedRun() *v1alpha1.TrainingRun {
	return makeRun("llm", 16).phase(v1alpha1.PhaseFailed, 2, 0).restarts(1, 0, 0).excluded("gpu-node-3").completed(65).
		goodput(65, 28+30, 2+2, 1+1, 1).
		attempt(v1alpha1.AttemptRecord{Attempt: 1, StartTime: at(0), RunningTime: at(2), EndTime: at(31),
			Outcome: policy.OutcomeRestarted, Verdict: shutdownVerdict()}).
		attempt(v1alpha1.AttemptRecord{Attempt: 2, StartTime: at(32), RunningTime: at(34), EndTime: at(65),
			Outcome: policy.OutcomeFailed, Verdict: appExitVerdict(), ExcludedNodes: []string{"gpu-node-3"}}).
		condition(v1alpha1.ConditionFailed, metav1.ConditionTrue, "AppExit", appExitVerdict().Explanation, 65).
		condition(v1alpha1.ConditionReady, metav1.ConditionFalse, "AppExit", "the run failed", 65).
		condition(v1alpha1.ConditionRestarting, metav1.ConditionFalse, v1alpha1.ReasonAttemptCreated, "attempt 2 created", 32).
		obj()
}

// runningRun: attempt 2 running after a shutdown restart.
func runningRun() *v1alpha1.TrainingRun {
	return makeRun("llm", 16).phase(v1alpha1.PhaseRunning, 2, 16).restarts(1, 0, 0).excluded("gpu-node-3").
		goodput(34, 28, 2+2, 1, 1).
		attempt(v1alpha1.AttemptRecord{Attempt: 1, StartTime: at(0), RunningTime: at(2), EndTime: at(31),
			Outcome: policy.OutcomeRestarted, Verdict: shutdownVerdict()}).
		attempt(v1alpha1.AttemptRecord{Attempt: 2, StartTime: at(32), RunningTime: at(34), ExcludedNodes: []string{"gpu-node-3"}}).
		condition(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAllWorkersRunning, "16/16 workers Running", 34).
		obj()
}

// inPlaceRun: attempt 2 restarted in place after a node shutdown, two indexes moved.
func inPlaceRun() *v1alpha1.TrainingRun {
	return makeRun("llm", 16).phase(v1alpha1.PhaseRunning, 2, 16).restarts(1, 0, 0).excluded("gpu-node-3").
		attempt(v1alpha1.AttemptRecord{Attempt: 1, StartTime: at(0), RunningTime: at(2), EndTime: at(31),
			Outcome: policy.OutcomeRestarted, Verdict: shutdownVerdict(),
			Saved:  &v1alpha1.SavedStatus{Step: ptr.To[int64](1200), At: metav1.NewMicroTime(at(20).Time), Workers: 14},
			Redone: &metav1.Duration{Duration: 10 * time.Second}}).
		attempt(v1alpha1.AttemptRecord{Attempt: 2, StartTime: at(32), RunningTime: at(33), ExcludedNodes: []string{"gpu-node-3"},
			RestartMode: v1alpha1.RestartModeInPlace, JobAttempt: 1, MovedIndexes: []int32{6, 7}, BarrierOpenedAt: at(32)}).
		condition(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAllWorkersRunning, "16/16 workers Running", 33).
		spares(2).obj()
}

// succeededRun: one attempt, all workers completed.
func succeededRun() *v1alpha1.TrainingRun {
	b := makeRun("resnet", 4).phase(v1alpha1.PhaseSucceeded, 1, 0).completed(-600).
		attempt(v1alpha1.AttemptRecord{Attempt: 1, StartTime: at(-3599), RunningTime: at(-3597), EndTime: at(-600), Outcome: policy.OutcomeSucceeded})
	b.run.Spec.Framework = "tensorflow"
	b.run.Spec.FailurePolicy.Rules = nil
	b.run.CreationTimestamp = *at(-3600)
	b.run.Status.StartTime = at(-3600)
	return b.obj()
}

// pendingRun: just created, nothing yet.
func pendingRun() *v1alpha1.TrainingRun {
	b := makeRun("bert", 8).phase(v1alpha1.PhasePending, 1, 3).attempt(v1alpha1.AttemptRecord{Attempt: 1, StartTime: at(90)})
	b.run.CreationTimestamp = *at(89)
	b.run.Spec.Framework = "none"
	return b.obj()
}

// runEvents are the events of failedRun, as the core/v1 API shows events.k8s.io events.
func runEvents() []corev1.Event {
	ev := func(s float64, typ, reason, action, note string) corev1.Event {
		return corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: "llm." + reason, Namespace: "research"},
			EventTime:  metav1.NewMicroTime(t0.Add(time.Duration(s * float64(time.Second)))),
			Type:       typ, Reason: reason, Action: action, Message: note,
			ReportingController: "faultline-controller",
		}
	}
	return []corev1.Event{
		ev(0.21, corev1.EventTypeNormal, v1alpha1.ReasonAttemptCreated, "CreateAttempt", "attempt 1: created Job llm with 16 workers"),
		ev(31.25, corev1.EventTypeWarning, "NodeShutdown", "Restart", "attempt 1 failed, starting attempt 2: rule exclude-faulty-nodes restarts the run on NodeShutdown: Infrastructure restart 1 of 10. "+shutdownVerdict().Explanation),
		ev(32.02, corev1.EventTypeNormal, v1alpha1.ReasonAttemptCreated, "CreateAttempt", "attempt 2: created Job llm with 16 workers"),
		ev(65.33, corev1.EventTypeWarning, "AppExit", "Fail", "run failed (rule default-application fails the run on AppExit (Application)): "+appExitVerdict().Explanation),
	}
}

// attemptPods are the pods of an attempt of 4 workers in which index 2 exited 1 and index
// 3 then failed with a coordination error, on nodes without evidence.
func attemptPods() []*corev1.Pod {
	pod := func(i int, phase corev1.PodPhase, exit int32, finished float64, msg string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: "small-" + string(rune('0'+i)) + "-abcde", Namespace: "research",
				Labels:      map[string]string{v1alpha1.LabelRun: "small", v1alpha1.LabelAttempt: "1"},
				Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: string(rune('0' + i))},
			},
			Spec:   corev1.PodSpec{NodeName: "gpu-node-" + string(rune('0'+i)), Containers: []corev1.Container{{Name: "worker"}}},
			Status: corev1.PodStatus{Phase: phase},
		}
		if phase == corev1.PodFailed {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: exit, Reason: "Error", Message: msg, FinishedAt: *at(finished),
			}}}}
		}
		return p
	}
	return []*corev1.Pod{
		pod(0, corev1.PodRunning, 0, 0, ""),
		pod(1, corev1.PodRunning, 0, 0, ""),
		pod(2, corev1.PodFailed, 1, 40, "ValueError: loss is NaN"),
		pod(3, corev1.PodFailed, 1, 40.5, "coordination service: task 2 heartbeat timeout"),
	}
}
