package controller

import (
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/controller/episode"
	"github.com/faultline-dev/faultline/pkg/policy"
	"github.com/faultline-dev/faultline/pkg/tracing"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func mt(ms int) *metav1.MicroTime {
	m := metav1.NewMicroTime(at(ms))
	return &m
}

func newTracedReconciler() (*Reconciler, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	clock := clocktesting.NewFakeClock(at(0))
	return &Reconciler{Episodes: episode.New(tracing.New(nil, sdktrace.WithSyncer(exp)), clock), Recorder: events.NewFakeRecorder(100), Clock: clock}, exp
}

// runBuilder builds test runs: makeRun("llm", 4).attempt(2).obj().
type runBuilder struct{ r *v1alpha1.TrainingRun }

func makeRun(name string, workers int32) *runBuilder {
	return &runBuilder{r: &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: "uid-" + "run"},
		Spec:       v1alpha1.TrainingRunSpec{Workers: workers},
		Status:     v1alpha1.TrainingRunStatus{Attempt: 1, Attempts: []v1alpha1.AttemptRecord{{Attempt: 1, StartTime: ptr.To(metav1.NewTime(at(-60000)))}}},
	}}
}

func (b *runBuilder) obj() *v1alpha1.TrainingRun { return b.r }

// failed records a decided failure of the current attempt as restart() or fail() do.
func (b *runBuilder) failed(v *v1alpha1.FailureVerdict, tr *v1alpha1.TraceStatus) *runBuilder {
	st := &b.r.Status
	outcome := policy.OutcomeRestarted
	if v.Action == v1alpha1.ActionFailRun {
		outcome = policy.OutcomeFailed
	}
	endAttempt(b.r, metav1.NewTime(v.DecidedAt.Time), v, outcome)
	st.LastFailure = v
	if v.Action != v1alpha1.ActionFailRun {
		st.Attempt++
		appendRecord(b.r, v1alpha1.AttemptRecord{Attempt: st.Attempt})
	}
	st.Trace = tr
	return b
}

func shutdownVerdict(decided time.Time) *v1alpha1.FailureVerdict {
	return &v1alpha1.FailureVerdict{
		Class: v1alpha1.ClassInfrastructure, Cause: v1alpha1.CauseNodeShutdown, Rule: "default-infrastructure",
		Action: v1alpha1.ActionRestartRun, Pod: "llm-1", Index: ptr.To[int32](1), Node: "gpu-node-4",
		Container: "worker", ExitCode: ptr.To[int32](143), Signal: 15, PeerFailures: 3,
		FailedAt: ptr.To(metav1.NewTime(at(150))), DecidedAt: ptr.To(metav1.NewTime(decided)),
	}
}
