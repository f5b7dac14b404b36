package controller

// The controller's least privilege, generated into deploy/controller/role.yaml (make generate).
// It never reads Secrets or ConfigMaps, never writes Nodes, and touches only pods it finds
// through its runs' label: RBAC cannot select pods by label, so deploy/admission
// (controller.yaml) confines its pod writes to the workers of runs, and to dropping the
// Job-tracking finalizer and its own scheduling gate. Its leader-election Lease is a Role's
// in its own namespace: a cluster-wide grant would let it take kube-controller-manager's or
// kube-scheduler's Lease, or write node heartbeats in kube-node-lease. It lists events only to
// say why a Job creates no pods (the Job controller's FailedCreate events).
//
// +kubebuilder:rbac:groups=faultline.dev,resources=trainingruns,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=faultline.dev,resources=trainingruns/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch;list
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update,namespace=faultline-system
