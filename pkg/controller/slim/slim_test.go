package slim

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/inplacegate"
)

// The cached pod keeps everything exitclass and the teardown read (labels, annotations,
// finalizers, node, GPU requests, the toleration of an unreachable node, status) and loses
// the rest: the environment, the
// affinity, volumes, images, addresses and managed fields.
func TestSlimPodKeepsWhatTheControllerReads(t *testing.T) {
	gpu := corev1.ResourceList{v1alpha1.ResourceGPU: resource.MustParse("1")}
	// DefaultTolerationSeconds' own: how long the pod's workers outlive their node's silence.
	unreachable := corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}
	full := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "llm-1-0-abc", Namespace: "ml", UID: "u",
			Labels:        map[string]string{v1alpha1.LabelRun: "llm"},
			Annotations:   map[string]string{v1alpha1.AnnotationFaultEvidence: `{"cause":"GPUXid"}`},
			Finalizers:    []string{"batch.kubernetes.io/job-tracking"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}},
		},
		Spec: corev1.PodSpec{
			NodeName:       "gpu-node-3",
			InitContainers: []corev1.Container{{Name: "init", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}},
			Containers: []corev1.Container{{
				Name: "worker", Image: "trainer", Command: []string{"python", "train.py"},
				Env: []corev1.EnvVar{{Name: "TF_CONFIG", Value: `{"cluster":{"worker":["llm-1-0.llm:2222"]}}`}},
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{v1alpha1.ResourceGPU: gpu[v1alpha1.ResourceGPU], corev1.ResourceMemory: resource.MustParse("64Gi")},
					Requests: corev1.ResourceList{v1alpha1.ResourceGPU: gpu[v1alpha1.ResourceGPU], corev1.ResourceCPU: resource.MustParse("8")},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "token", MountPath: "/var/run/secrets"}},
			}},
			Hostname: "llm-0", Subdomain: "llm",
			Volumes: []corev1.Volume{{Name: "token"}},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"gpu-node-1"}}}}},
			}}},
			Tolerations:                   []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}, unreachable},
			TerminationGracePeriodSeconds: ptr.To[int64](300),
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodFailed,
			Reason:     "Evicted",
			Message:    "the node was low on memory",
			StartTime:  ptr.To(metav1.NewTime(time.Unix(0, 0))),
			Conditions: []corev1.PodCondition{{Type: v1alpha1.PodConditionInfrastructureFault, Status: corev1.ConditionTrue, Reason: "GPUXid"}},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "worker", Image: "trainer", ImageID: "sha256:1", ContainerID: "containerd://1", RestartCount: 1, Started: ptr.To(false),
				State: corev1.ContainerState{
					Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, FinishedAt: metav1.NewTime(time.Unix(1, 0)), Message: "Traceback"},
				},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}},
			}},
			PodIP:    "10.0.0.9",
			PodIPs:   []corev1.PodIP{{IP: "10.0.0.9"}},
			QOSClass: corev1.PodQOSBestEffort,
		},
	}
	obj, err := Pod(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	slim := obj.(*corev1.Pod)

	want := full.DeepCopy()
	want.ManagedFields = nil
	want.Spec = corev1.PodSpec{
		NodeName:                      "gpu-node-3",
		InitContainers:                []corev1.Container{{Name: "init"}},
		Containers:                    []corev1.Container{{Name: "worker", Resources: corev1.ResourceRequirements{Limits: gpu, Requests: gpu}}},
		Tolerations:                   []corev1.Toleration{unreachable},
		TerminationGracePeriodSeconds: ptr.To[int64](300),
	}
	want.Status.PodIPs, want.Status.QOSClass = nil, ""
	cs := &want.Status.ContainerStatuses[0]
	cs.Image, cs.ImageID, cs.ContainerID = "", "", ""
	if !equality.Semantic.DeepEqual(slim, want) {
		t.Fatalf("slim pod:\n%+v\nwant:\n%+v", slim, want)
	}
}

// The cached Node gives the same facts as the full one.
func TestSlimNodeKeepsItsFacts(t *testing.T) {
	full := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:          "gpu-node-3",
			Annotations:   map[string]string{v1alpha1.AnnotationShutdownDetectedAt: "2026-11-22T21:00:00.123456Z"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kwok"}},
		},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{
			{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: ptr.To(metav1.NewTime(time.Date(2026, 11, 22, 20, 59, 0, 0, time.UTC)))},
			{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute},
		}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionFalse},
				{Type: v1alpha1.NodeConditionGPUHealthy, Status: corev1.ConditionFalse, Reason: "XID79", LastTransitionTime: metav1.NewTime(time.Date(2026, 11, 22, 20, 0, 0, 0, time.UTC))},
				{Type: "GpuMemWatch", Status: corev1.ConditionTrue, Reason: "GpuMemWatchIsNotHealthy", LastTransitionTime: metav1.NewTime(time.Date(2026, 11, 22, 20, 0, 0, 0, time.UTC))},
			},
			Images:    []corev1.ContainerImage{{Names: []string{"trainer"}, SizeBytes: 1 << 30}},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.3"}},
			Capacity:  corev1.ResourceList{v1alpha1.ResourceGPU: resource.MustParse("8")},
			NodeInfo:  corev1.NodeSystemInfo{ContainerRuntimeVersion: "containerd://2.2.9", KernelVersion: "6.1.0"},
		},
	}
	obj, err := Node(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	slim := obj.(*corev1.Node)
	rules := exitclass.DefaultNodeConditionRules
	if got, want := exitclass.FactsOfNode(slim, rules), exitclass.FactsOfNode(full, rules); !reflect.DeepEqual(got, want) {
		t.Fatalf("facts of the slim node %+v, of the full one %+v", got, want)
	}
	if f := exitclass.FactsOfNode(full, rules); f.ShutdownDetectedAt == nil || !f.NotReady || !f.Unschedulable || f.GPUUnhealthyReason == "" ||
		f.GPUUnhealthySince == nil || !f.Unreachable || f.UnreachableSince == nil || !f.OutOfService || len(f.Conditions) != 1 {
		t.Fatalf("the test node should have every fact, or the comparison above proves little: %+v", f)
	}
	if why := inplacegate.ImageVolumesCannot(slim); why != "" {
		t.Errorf("the slim node of a containerd 2.2 node: %s", why)
	}
	if slim.ManagedFields != nil || slim.Status.Images != nil || slim.Status.Capacity != nil || slim.Status.NodeInfo.KernelVersion != "" {
		t.Errorf("slim node kept what nobody reads: %+v", slim)
	}
}
