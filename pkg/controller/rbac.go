package controller

// The controller's least privilege, generated into deploy/controller/role.yaml (make generate).
// It never reads Secrets or ConfigMaps, writes of a Node only its cordon (spec.unschedulable,
// for a NodeMaintenance; deploy/admission/controller.yaml refuses any other change to a Node),
// and touches only pods it finds through its runs' label: RBAC cannot select pods by label, so deploy/admission
// (controller.yaml) confines its pod writes to the workers of runs, and to dropping the
// Job-tracking finalizer. It creates the pods of a gang's Job (attempt.Managed): no more
// power than creating a Job, which makes pods of any template too, and admission confines
// those creations to workers of runs controlled by a Job. Its leader-election Lease is a Role's
// in its own namespace: a cluster-wide grant would let it take kube-controller-manager's or
// kube-scheduler's Lease, or write node heartbeats in kube-node-lease. It reads (lists and
// watches) the node agents' heartbeats there too (package agentlease); admission keeps it from
// writing them (deploy/admission/nodeagent.yaml). It lists events only to
// say why a Job creates no pods (the Job controller's FailedCreate events).
//
// It patches a run only to write the restart scope and success policy its framework chose
// where the user left them unset (settleSpec); admission confines that patch to those two
// fields, from unset.
//
// For a framework whose workers read their Job and pods (JAX's Kubernetes detection; package
// workeraccess) it creates, per run, a ServiceAccount, a Role (list pods, get the run's Job)
// and a RoleBinding of the two. RBAC lets a creator write a Role only with rules it holds
// itself, and bind a Role only if it holds the Role's rules (or has `bind`): the controller
// holds pods list and jobs get already, so it needs neither `escalate` nor `bind`, which
// would let it grant what it does not hold. It gets create and get (to recognise its own
// after a restart), never update, patch or delete (the garbage collector deletes them with
// the run). RBAC cannot narrow a create to these objects' contents, so
// deploy/admission/controller.yaml does: the Role's rules exactly, the binding to that Role
// and that ServiceAccount only, everything owned by a TrainingRun.
//
// Where the cluster serves PodGroups (Kubernetes 1.37's gang scheduling), it creates one per
// gang run and gets it (to recognise its own); the garbage collector deletes it with the run.
//
// A run that asks for its GPUs through DRA (spec.gpus) gets a ResourceClaimTemplate, which
// the controller creates and gets as it does a PodGroup, after it gets the DeviceClass the
// run names (to say it is missing rather than leave every worker Pending).
//
// A run with warm spares (spec.spares) gets one EndpointSlice of its Service, which gives the
// indexes its spares hold their names (controller/spares.Endpoints); the controller writes it
// by server-side apply (create and patch, no read), and deploy/admission/controller.yaml
// keeps those writes to that slice: owned by a TrainingRun, of the Service named as the run,
// managed by faultline. It hands a spare its index with one patch of the spare's labels and
// annotation, which the same file and deploy/admission/identity.yaml allow on a spare only.
//
// Before an attempt of a run whose pods are laid out in roles, it reads (get only) the
// MutatingAdmissionPolicy faultline-roles and its binding, which label those pods, to say
// that they are missing rather than start pods without a role.
//
// +kubebuilder:rbac:groups=faultline.dev,resources=trainingruns,verbs=get;list;watch;delete;patch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingadmissionpolicies;mutatingadmissionpolicybindings,verbs=get
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;create
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;create
// +kubebuilder:rbac:groups=faultline.dev,resources=trainingruns/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=create;patch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;create;delete
// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=podgroups,verbs=get;create
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaimtemplates,verbs=get;create
// +kubebuilder:rbac:groups=resource.k8s.io,resources=deviceclasses,verbs=get
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=faultline.dev,resources=nodemaintenances,verbs=get;list;watch
// +kubebuilder:rbac:groups=faultline.dev,resources=nodemaintenances/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch;list
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update,namespace=faultline-system
