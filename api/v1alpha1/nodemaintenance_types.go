package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Kind and resource of NodeMaintenance, as clients and the CLI name them.
const (
	KindNodeMaintenance     = "NodeMaintenance"
	ResourceNodeMaintenance = "nodemaintenances"
)

// MaintenancePhase is where a NodeMaintenance is.
// +kubebuilder:validation:Enum=Planned;Draining;Drained;Blocked;Completed
type MaintenancePhase string

const (
	// MaintenancePlanned: a dry run's plan is written; nothing was cordoned or moved.
	MaintenancePlanned MaintenancePhase = "Planned"
	// MaintenanceDraining: the nodes are cordoned and runs are moving off them.
	MaintenanceDraining MaintenancePhase = "Draining"
	// MaintenanceDrained: no worker of a run is left on the nodes; the SRE may take them down.
	MaintenanceDrained MaintenancePhase = "Drained"
	// MaintenanceBlocked: a run hit by the drain has no feasible placement off the nodes;
	// it stays where it is until capacity frees or the node goes (status.runs says which).
	MaintenanceBlocked MaintenancePhase = "Blocked"
	// MaintenanceCompleted: every node was uncordoned again: the maintenance is over and the
	// runs may use the nodes again.
	MaintenanceCompleted MaintenancePhase = "Completed"
)

// NodeMaintenanceSpec is what an SRE asks for: move every training run off these nodes in a
// planned way, before taking them down.
type NodeMaintenanceSpec struct {
	// Nodes are the names of the Nodes to drain.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.nodes is immutable: create another NodeMaintenance for other nodes"
	Nodes []string `json:"nodes"`
	// Reason is for the runs' owners: it is written into the events on every run moved.
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.reason is immutable"
	// +optional
	Reason string `json:"reason,omitempty"`
	// DryRun only plans: the controller writes which runs and indexes the drain would hit
	// into status, and cordons and moves nothing.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.dryRun is immutable: create another NodeMaintenance to drain for real"
	// +optional
	DryRun bool `json:"dryRun,omitempty"`
}

// NodeMaintenanceStatus is what the controller did and saw.
type NodeMaintenanceStatus struct {
	// Phase summarises the maintenance.
	// +optional
	Phase MaintenancePhase `json:"phase,omitempty"`
	// Message says, for a person, what the maintenance waits on.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
	// StartTime is when the controller first acted on the maintenance.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// DrainedTime is when no worker of a run was left on the nodes.
	// +optional
	DrainedTime *metav1.Time `json:"drainedTime,omitempty"`
	// Nodes records, per node, its cordon.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=1000
	// +optional
	Nodes []MaintenanceNode `json:"nodes,omitempty"`
	// Runs are the training runs with workers on the nodes when the maintenance started, and
	// what became of each.
	// +kubebuilder:validation:MaxItems=1000
	// +optional
	Runs []MaintenanceRun `json:"runs,omitempty"`
}

// MaintenanceNode is one node of a maintenance.
type MaintenanceNode struct {
	Name string `json:"name"`
	// CordonedAt is when the controller cordoned it (or found it cordoned).
	// +optional
	CordonedAt *metav1.Time `json:"cordonedAt,omitempty"`
	// UncordonedAt is when it was seen schedulable again after the cordon: the runs' exclusion
	// of it is lifted then.
	// +optional
	UncordonedAt *metav1.Time `json:"uncordonedAt,omitempty"`
	// Missing is true when no Node of that name exists.
	// +optional
	Missing bool `json:"missing,omitempty"`
}

// MaintenanceRun is one training run hit by a maintenance.
type MaintenanceRun struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Attempt is the run's attempt that had workers on the nodes.
	Attempt int32 `json:"attempt"`
	// Indexes are that attempt's worker indexes on the nodes.
	// +kubebuilder:validation:MaxItems=10000
	// +optional
	Indexes []int32 `json:"indexes,omitempty"`
	// Nodes are the maintenance's nodes those workers were on.
	// +optional
	Nodes []string `json:"nodes,omitempty"`
	// Coordinator is true when index 0 (the framework's coordinator) is among them.
	// +optional
	Coordinator bool `json:"coordinator,omitempty"`
	// Feasible is false when the run's gang has no placement left off the nodes: it is not
	// moved (it would wait Pending), and Message says why.
	Feasible bool `json:"feasible"`
	// Message explains an infeasible placement or an outcome other than a move.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
	// MovedAt is when the run's planned restart was decided (the attempt on the nodes ended).
	// +optional
	MovedAt *metav1.Time `json:"movedAt,omitempty"`
	// ToAttempt is the attempt that runs off the nodes.
	// +optional
	ToAttempt int32 `json:"toAttempt,omitempty"`
	// RunningAt is when every worker of ToAttempt was Running: the end of the interruption.
	// +optional
	RunningAt *metav1.Time `json:"runningAt,omitempty"`
	// Gone is true when the run was deleted or finished before it was moved.
	// +optional
	Gone bool `json:"gone,omitempty"`
}

// NodeMaintenance asks faultline to move every training run off some nodes in a planned
// way: the nodes are cordoned and each run hit gets a planned restart (cause
// PlannedMaintenance) that spends no failure budget and avoids the nodes until they are
// uncordoned. It is cluster-scoped, so that an SRE needs no access to the runs' namespaces,
// and kept as the history of maintenances.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=nm,categories=faultline
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Nodes",type=string,JSONPath=`.spec.nodes`
// +kubebuilder:printcolumn:name="Dry-Run",type=boolean,JSONPath=`.spec.dryRun`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.spec.reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeMaintenance struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeMaintenanceSpec   `json:"spec"`
	Status NodeMaintenanceStatus `json:"status,omitempty"`
}

// NodeMaintenanceList is a list of NodeMaintenances.
// +kubebuilder:object:root=true
type NodeMaintenanceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeMaintenance `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, &NodeMaintenance{}, &NodeMaintenanceList{})
		return nil
	})
}
