package kueue

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and version of Kueue's API that this integration speaks: v1beta2, served by Kueue
// v0.15 and later (v0.19.2 is what the tests run).
const (
	Group   = "kueue.x-k8s.io"
	Version = "v1beta2"
)

// The kinds faultline reads or writes.
var (
	WorkloadGVK              = schema.GroupVersionKind{Group: Group, Version: Version, Kind: "Workload"}
	ResourceFlavorGVK        = schema.GroupVersionKind{Group: Group, Version: Version, Kind: "ResourceFlavor"}
	WorkloadPriorityClassGVK = schema.GroupVersionKind{Group: Group, Version: Version, Kind: "WorkloadPriorityClass"}
	ClusterQueueGVK          = schema.GroupVersionKind{Group: Group, Version: Version, Kind: "ClusterQueue"}
	LocalQueueGVK            = schema.GroupVersionKind{Group: Group, Version: Version, Kind: "LocalQueue"}
	AdmissionCheckGVK        = schema.GroupVersionKind{Group: Group, Version: Version, Kind: "AdmissionCheck"}

	WorkloadGVR = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "workloads"}
)

// Condition types of a Workload (Kueue's apis/kueue/v1beta2/workload_types.go).
const (
	ConditionQuotaReserved = "QuotaReserved"
	ConditionAdmitted      = "Admitted"
	ConditionEvicted       = "Evicted"
	ConditionPodsReady     = "PodsReady"
	ConditionFinished      = "Finished"
	ConditionRequeued      = "Requeued"
)

// Reasons of Kueue's that faultline writes or reads.
const (
	// PodsReady reasons. Kueue's WaitForPodsReady times WaitForStart (from the admission)
	// and WaitForRecovery (from the condition's transition); Started and Recovered are True.
	ReasonWaitForStart    = "WaitForStart"
	ReasonWaitForRecovery = "WaitForRecovery"
	ReasonStarted         = "Started"
	ReasonRecovered       = "Recovered"
	// Finished reasons.
	ReasonSucceeded = "Succeeded"
	ReasonFailed    = "Failed"
	// EvictedByPreemption is the Evicted reason of a preemption.
	EvictedByPreemption = "Preempted"
	// EvictedDueToNodeFailures is the Evicted reason of TAS's node replacement giving up.
	EvictedDueToNodeFailures = "NodeFailures"
	// ReasonPending is QuotaReserved=False's reason once the admission is cleared, as Kueue's
	// own job reconciler writes it after an eviction.
	ReasonPending = "Pending"
)

// LabelJobUID, on a Workload, is the UID of the job it stands for: Kueue names it in its
// preemption messages ("JobUID: ..."), so faultline puts the run's UID there.
const LabelJobUID = Group + "/job-uid"

// Priority-class references (spec.priorityClassRef).
const (
	PriorityClassGroupPod      = "scheduling.k8s.io"
	PriorityClassKindPod       = "PriorityClass"
	PriorityClassGroupWorkload = Group
	PriorityClassKindWorkload  = "WorkloadPriorityClass"
)

// Workload mirrors the fields of a kueue.x-k8s.io/v1beta2 Workload that faultline reads,
// with Kueue's JSON names: FromUnstructured fills it.
type Workload struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WorkloadSpec   `json:"spec,omitempty"`
	Status            WorkloadStatus `json:"status,omitempty"`
}

// WorkloadSpec is the part of a Workload's spec faultline reads.
type WorkloadSpec struct {
	QueueName string   `json:"queueName,omitempty"`
	PodSets   []PodSet `json:"podSets,omitempty"`
	Active    *bool    `json:"active,omitempty"`
	Priority  *int32   `json:"priority,omitempty"`
}

// PodSet is a group of identical pods of a Workload.
type PodSet struct {
	Name     string                 `json:"name"`
	Count    int32                  `json:"count"`
	Template corev1.PodTemplateSpec `json:"template"`
}

// WorkloadStatus is the part of a Workload's status faultline reads.
type WorkloadStatus struct {
	Conditions      []metav1.Condition    `json:"conditions,omitempty"`
	Admission       *Admission            `json:"admission,omitempty"`
	AdmissionChecks []AdmissionCheckState `json:"admissionChecks,omitempty"`
	RequeueState    *RequeueState         `json:"requeueState,omitempty"`
}

// Admission is the ClusterQueue's reservation of quota, with the flavors chosen per pod set.
type Admission struct {
	ClusterQueue      string             `json:"clusterQueue"`
	PodSetAssignments []PodSetAssignment `json:"podSetAssignments"`
}

// PodSetAssignment is the flavor of each resource of a pod set, and its admitted count.
type PodSetAssignment struct {
	Name    string            `json:"name"`
	Flavors map[string]string `json:"flavors,omitempty"`
	Count   *int32            `json:"count,omitempty"`
	// TopologyAssignment is set under Topology-Aware Scheduling, which faultline does not
	// support yet: Admission refuses it rather than start pods no TAS ungater would release.
	TopologyAssignment map[string]any `json:"topologyAssignment,omitempty"`
}

// AdmissionCheckState is one admission check's state, with what it asks of the pods.
type AdmissionCheckState struct {
	Name          string         `json:"name"`
	State         string         `json:"state"`
	Message       string         `json:"message,omitempty"`
	PodSetUpdates []PodSetUpdate `json:"podSetUpdates,omitempty"`
}

// PodSetUpdate is what an admission check adds to a pod set's pods.
type PodSetUpdate struct {
	Name         string              `json:"name"`
	Labels       map[string]string   `json:"labels,omitempty"`
	Annotations  map[string]string   `json:"annotations,omitempty"`
	NodeSelector map[string]string   `json:"nodeSelector,omitempty"`
	Tolerations  []corev1.Toleration `json:"tolerations,omitempty"`
}

// Admission check states (status.admissionChecks[].state).
const (
	CheckStatePending  = "Pending"
	CheckStateReady    = "Ready"
	CheckStateRetry    = "Retry"
	CheckStateRejected = "Rejected"
)

// RequeueState is Kueue's count of requeues after a PodsReady timeout.
type RequeueState struct {
	Count *int32 `json:"count,omitempty"`
}

// ResourceFlavor mirrors what faultline reads of a ResourceFlavor: what its nodes carry.
type ResourceFlavor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ResourceFlavorSpec `json:"spec,omitempty"`
}

// ResourceFlavorSpec: the labels of the flavor's nodes (a node selector for the pods) and the
// tolerations its pods get.
type ResourceFlavorSpec struct {
	NodeLabels  map[string]string   `json:"nodeLabels,omitempty"`
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}
