package exitclass

import (
	"encoding/json"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// t0 is 12:01:00 UTC; at(3.12) is 12:01:03.120.
var t0 = time.Date(2026, 3, 1, 12, 1, 0, 0, time.UTC)

func at(seconds float64) time.Time {
	return t0.Add(time.Duration(seconds * float64(time.Second)))
}

func ptrTime(t time.Time) *time.Time { return &t }

// podBuilder builds test pods: makePod("r-3").index(3).node("gpu-7").exit(143).finishedAt(t).obj().
// A fresh pod is Running with one running container "trainer".
type podBuilder struct{ p *corev1.Pod }

func makePod(name string) *podBuilder {
	return &podBuilder{p: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "trainer"}}},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{
				Name:  "trainer",
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			}},
		},
	}}
}

func (b *podBuilder) obj() *corev1.Pod { return b.p }

func (b *podBuilder) index(i int) *podBuilder {
	if b.p.Annotations == nil {
		b.p.Annotations = map[string]string{}
	}
	b.p.Annotations[batchv1.JobCompletionIndexAnnotation] = strconv.Itoa(i)
	return b
}

func (b *podBuilder) annotation(k, v string) *podBuilder {
	if b.p.Annotations == nil {
		b.p.Annotations = map[string]string{}
	}
	b.p.Annotations[k] = v
	return b
}

func (b *podBuilder) label(k, v string) *podBuilder {
	if b.p.Labels == nil {
		b.p.Labels = map[string]string{}
	}
	b.p.Labels[k] = v
	return b
}

func (b *podBuilder) node(n string) *podBuilder {
	b.p.Spec.NodeName = n
	return b
}

func (b *podBuilder) phase(p corev1.PodPhase) *podBuilder {
	b.p.Status.Phase = p
	return b
}

// terminated returns the main container's terminated state, creating it.
func (b *podBuilder) terminated() *corev1.ContainerStateTerminated {
	cs := &b.p.Status.ContainerStatuses[0]
	if cs.State.Terminated == nil {
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error"}}
	}
	return cs.State.Terminated
}

// exit terminates the main container with code and fails the pod (non-zero) or completes it.
func (b *podBuilder) exit(code int32) *podBuilder {
	t := b.terminated()
	t.ExitCode = code
	if code == 0 {
		t.Reason = "Completed"
	}
	b.p.Status.Phase = corev1.PodFailed
	if code == 0 {
		b.p.Status.Phase = corev1.PodSucceeded
	}
	return b
}

func (b *podBuilder) finishedAt(t time.Time) *podBuilder {
	b.terminated().FinishedAt = metav1.NewTime(t)
	return b
}

func (b *podBuilder) containerReason(r string) *podBuilder {
	b.terminated().Reason = r
	return b
}

func (b *podBuilder) message(m string) *podBuilder {
	b.terminated().Message = m
	return b
}

// sidecar adds a second container that terminated with code at t.
func (b *podBuilder) sidecar(name string, code int32, t time.Time) *podBuilder {
	b.p.Status.ContainerStatuses = append(b.p.Status.ContainerStatuses, corev1.ContainerStatus{
		Name: name,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: code, FinishedAt: metav1.NewTime(t),
		}},
	})
	return b
}

// initFailed adds an init container that failed with code at t.
func (b *podBuilder) initFailed(name string, code int32, t time.Time) *podBuilder {
	b.p.Status.InitContainerStatuses = append(b.p.Status.InitContainerStatuses, corev1.ContainerStatus{
		Name: name,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: code, Reason: "Error", FinishedAt: metav1.NewTime(t),
		}},
	})
	b.p.Status.Phase = corev1.PodFailed
	return b
}

// statusUnknown makes the main container lost the way the kubelet reports it: waiting, with
// ContainerStatusUnknown exit 137 as its last termination.
func (b *podBuilder) statusUnknown() *podBuilder {
	cs := &b.p.Status.ContainerStatuses[0]
	cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 137, Reason: containerReasonStatusUnknown,
		Message: "The container could not be located when the pod was terminated",
	}}
	return b
}

func (b *podBuilder) statusReason(reason, msg string) *podBuilder {
	b.p.Status.Reason, b.p.Status.Message = reason, msg
	return b
}

func (b *podBuilder) condition(t corev1.PodConditionType, status corev1.ConditionStatus, reason, msg string, when time.Time) *podBuilder {
	b.p.Status.Conditions = append(b.p.Status.Conditions, corev1.PodCondition{
		Type: t, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(when),
	})
	return b
}

// infraFault marks the pod as the node agent does: the InfrastructureFault condition and,
// beside it, the evidence that names the pod's node (set node first) and the time.
func (b *podBuilder) infraFault(cause v1alpha1.Cause, when time.Time) *podBuilder {
	return b.bareCondition(cause, when).faultEvidence(v1alpha1.FaultEvidence{
		Source: "test-agent", Node: b.p.Spec.NodeName, Cause: cause, DetectedAt: when.Format(time.RFC3339Nano),
	})
}

// bareCondition is the InfrastructureFault condition alone, without the agent's evidence.
func (b *podBuilder) bareCondition(cause v1alpha1.Cause, when time.Time) *podBuilder {
	return b.condition(v1alpha1.PodConditionInfrastructureFault, corev1.ConditionTrue, string(cause), "from the node agent", when)
}

// startedAt sets when the main container started.
func (b *podBuilder) startedAt(t time.Time) *podBuilder {
	b.terminated().StartedAt = metav1.NewTime(t)
	return b
}

func (b *podBuilder) disruption(reason string, when time.Time) *podBuilder {
	return b.condition(corev1.DisruptionTarget, corev1.ConditionTrue, reason, "", when)
}

func (b *podBuilder) faultEvidence(fe v1alpha1.FaultEvidence) *podBuilder {
	raw, err := json.Marshal(fe)
	if err != nil {
		panic(err)
	}
	return b.annotation(v1alpha1.AnnotationFaultEvidence, string(raw))
}

// gpuXID writes what the node agent writes for an XID on the pod's GPU: the evidence with the
// XID table's cause and, for an infrastructure cause, the InfrastructureFault condition.
func (b *podBuilder) gpuXID(node string, gpu int, xid uint64, when time.Time) *podBuilder {
	cause := LookupXID(xid).Cause
	if cause.Class() == v1alpha1.ClassInfrastructure {
		b.bareCondition(cause, when)
	}
	return b.faultEvidence(v1alpha1.FaultEvidence{
		Source: "nvml-event", Node: node, Cause: cause,
		DetectedAt: when.Format(time.RFC3339Nano),
		GPU:        &v1alpha1.GPUEvidence{UUID: "GPU-" + strconv.Itoa(gpu), Index: gpu, XID: xid},
	})
}

func (b *podBuilder) deleting(when time.Time) *podBuilder {
	t := metav1.NewTime(when)
	b.p.DeletionTimestamp = &t
	return b
}

func (b *podBuilder) gpus(n int64) *podBuilder {
	b.p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{
		v1alpha1.ResourceGPU: *resource.NewQuantity(n, resource.DecimalSI),
	}
	return b
}

func resourceOne() resource.Quantity { return *resource.NewQuantity(1, resource.DecimalSI) }

// worker is the usual gang member: index i on node gpu-<i>, exited code at t.
func worker(i int, code int32, t time.Time) *podBuilder {
	return makePod("r-" + strconv.Itoa(i)).index(i).node("gpu-" + strconv.Itoa(i)).exit(code).finishedAt(t)
}

func (b *podBuilder) created(t time.Time) *podBuilder {
	b.p.CreationTimestamp = metav1.NewTime(t)
	return b
}

// toleratesUnreachable gives the pod a toleration of node.kubernetes.io/unreachable for
// seconds (negative: for ever), as DefaultTolerationSeconds gives every pod 300.
func (b *podBuilder) toleratesUnreachable(seconds int64) *podBuilder {
	t := corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}
	if seconds >= 0 {
		t.TolerationSeconds = &seconds
	}
	b.p.Spec.Tolerations = append(b.p.Spec.Tolerations, t)
	return b
}
