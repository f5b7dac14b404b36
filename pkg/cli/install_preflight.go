package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/podgroup"
)

// Before `launcher install` applies anything, it checks that the cluster serves what the
// manifests and the controller need, and refuses with one message naming everything missing,
// the Kubernetes version that has it and what works around it, leaving the cluster as it was:
// an install that stops half-way (the CRD and the validating policies in, the mutating one
// refused) is worse than none. What faultline can run without (restarts in place, Kueue) is
// reported, never required.

// APINeed is what the installation needs of one kind of object it applies.
type APINeed struct {
	// Since is the first Kubernetes minor version that serves it as the manifests name it.
	Since string
	// Without says how to install without it ("" when the install cannot do without).
	Without string
}

// withoutRolesPolicy is how to install on a cluster without MutatingAdmissionPolicy v1.
var withoutRolesPolicy = "launcher install --without-roles-policy (then the pods of a run whose framework lays out roles, TensorFlow's chief/ps/worker, " +
	"under restartScope Index get no role labels and cannot join their cluster; Gang-scope runs, the default, are not affected)"

// APINeeds are the kinds the manifests apply, by group, version and kind. docs/deploy.md's
// table of supported versions lists each (TestSupportedVersionsTable).
var APINeeds = map[schema.GroupVersionKind]APINeed{
	{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}:                 {Since: "1.16"},
	{Group: "", Version: "v1", Kind: "Namespace"}:                                                    {Since: "1.0"},
	{Group: "", Version: "v1", Kind: "ServiceAccount"}:                                               {Since: "1.0"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}:                         {Since: "1.8"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"}:                  {Since: "1.8"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"}:                                {Since: "1.8"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"}:                         {Since: "1.8"},
	{Group: "apps", Version: "v1", Kind: "Deployment"}:                                               {Since: "1.9"},
	{Group: "apps", Version: "v1", Kind: "DaemonSet"}:                                                {Since: "1.9"},
	{Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Kind: "FlowSchema"}:                       {Since: "1.29"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicy"}:        {Since: "1.30"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicyBinding"}: {Since: "1.30"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingAdmissionPolicy"}:          {Since: "1.36", Without: withoutRolesPolicy},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingAdmissionPolicyBinding"}:   {Since: "1.36", Without: withoutRolesPolicy},
}

// JobManagedBySince is when Job's spec.managedBy is on by default (beta 1.32, GA 1.35): a Gang
// run's Job is faultline's to run, and a server that drops the field has the Job controller
// create a second set of pods.
const JobManagedBySince = "1.32"

// Cluster facts the preflight decides on.
type ClusterFacts struct {
	// Version is the API server's version (its gitVersion).
	Version string
	// Served are the kinds the API server serves.
	Served map[schema.GroupVersionKind]bool
	// JobManagedBy: a Job created (dry run) with spec.managedBy kept it; nil when it could not
	// be checked (no right to create Jobs).
	JobManagedBy *bool
	// Nodes are the schedulable nodes; InPlaceNodes those whose kubelet declares
	// RestartAllContainers.
	Nodes, InPlaceNodes int
	// Kueue: the cluster serves Kueue's Workloads (kueue.x-k8s.io/v1beta2).
	Kueue bool
}

// PreflightReport is the preflight's verdict: Missing (each a sentence) refuses the install;
// Notes are reported.
type PreflightReport struct {
	Missing []string
	Notes   []string
}

// Preflight decides whether the cluster can take objs. Pure.
func Preflight(objs []*unstructured.Unstructured, f ClusterFacts) PreflightReport {
	var r PreflightReport
	seen := map[schema.GroupVersionKind]bool{}
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		if seen[gvk] || f.Served[gvk] {
			continue
		}
		seen[gvk] = true
		what := gvk.Kind + " (" + gvk.GroupVersion().String() + ")"
		need, ok := APINeeds[gvk]
		if !ok {
			r.Missing = append(r.Missing, what+" is not served")
			continue
		}
		msg := fmt.Sprintf("%s is not served: Kubernetes %s and later serve it", what, need.Since)
		if olderThan(f.Version, need.Since) {
			msg += fmt.Sprintf(" (this cluster runs %s)", f.Version)
		} else {
			msg += fmt.Sprintf("; this cluster runs %s with it turned off (kube-apiserver --runtime-config)", f.Version)
		}
		if need.Without != "" {
			msg += "; or install without it: " + need.Without
		}
		r.Missing = append(r.Missing, msg)
	}
	switch {
	case f.JobManagedBy == nil:
		r.Notes = append(r.Notes, "could not check Job spec.managedBy (no right to create Jobs, dry run): a Gang run needs it (Kubernetes "+JobManagedBySince+" and later)")
	case !*f.JobManagedBy:
		r.Missing = append(r.Missing, fmt.Sprintf("Job spec.managedBy is dropped by this cluster (%s): a Gang run's Job would also get the Job controller's pods; "+
			"Kubernetes %s and later keep it (on 1.30-1.31 turn on the JobManagedBy feature gate of kube-apiserver and kube-controller-manager)", f.Version, JobManagedBySince))
	}
	switch {
	case f.Nodes == 0:
		r.Notes = append(r.Notes, "restarts in place: no schedulable node yet")
	case f.InPlaceNodes == f.Nodes:
		r.Notes = append(r.Notes, fmt.Sprintf("restarts in place: every node's kubelet (%d) declares %s", f.Nodes, v1alpha1.FeatureRestartAllContainers))
	default:
		r.Notes = append(r.Notes, fmt.Sprintf("restarts in place: %d of %d nodes' kubelets declare %s (the RestartAllContainersOnContainerExits feature); "+
			"runs on the others recreate their pods (restartMode Auto)", f.InPlaceNodes, f.Nodes, v1alpha1.FeatureRestartAllContainers))
	}
	if f.Served[podgroup.GroupVersion.WithKind(podgroup.Kind)] {
		r.Notes = append(r.Notes, fmt.Sprintf("gang scheduling: on (%s %s served): every attempt's workers of a gang run are bound all or none",
			podgroup.Kind, podgroup.GroupVersion))
	} else {
		r.Notes = append(r.Notes, fmt.Sprintf("gang scheduling: off (optional; Kubernetes 1.37 and later with %s and the GenericWorkload feature on): workers are scheduled one by one",
			podgroup.GroupVersion))
	}
	if f.Kueue {
		r.Notes = append(r.Notes, "Kueue: installed; `launcher install --components kueue` lets it read TrainingRuns (docs/deploy.md, Queueing with Kueue)")
	} else {
		r.Notes = append(r.Notes, "Kueue: not installed (optional)")
	}
	return r
}

// Err is the refusal of the report, nil when nothing is missing.
func (r PreflightReport) Err(f ClusterFacts) error {
	if len(r.Missing) == 0 {
		return nil
	}
	return fmt.Errorf("this cluster (Kubernetes %s) cannot take faultline's installation, nothing was applied: %s", f.Version, strings.Join(r.Missing, "; and "))
}

// olderThan reports whether the gitVersion v (v1.35.2) is before minor version since (1.36);
// false when either does not parse.
func olderThan(v, since string) bool {
	vmaj, vmin, ok1 := majorMinor(strings.TrimPrefix(v, "v"))
	smaj, smin, ok2 := majorMinor(since)
	if !ok1 || !ok2 {
		return false
	}
	return vmaj < smaj || vmaj == smaj && vmin < smin
}

func majorMinor(v string) (int, int, bool) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	maj, err1 := strconv.Atoi(parts[0])
	min, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return maj, min, err1 == nil && err2 == nil
}

// GatherClusterFacts asks the API server what Preflight decides on. It writes nothing (the
// Job check is a dry run).
func GatherClusterFacts(ctx context.Context, cfg *rest.Config) (ClusterFacts, error) {
	var f ClusterFacts
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return f, err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return f, fmt.Errorf("the API server's version: %w", err)
	}
	f.Version = versionString(v)
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		return f, fmt.Errorf("the API server's resources: %w", err)
	}
	f.Served = map[schema.GroupVersionKind]bool{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, res := range l.APIResources {
			if !strings.Contains(res.Name, "/") {
				f.Served[gv.WithKind(res.Kind)] = true
			}
		}
		if gv.Group == "kueue.x-k8s.io" && gv.Version == "v1beta2" {
			f.Kueue = true
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return f, err
	}
	f.JobManagedBy, err = jobKeepsManagedBy(ctx, cs)
	if err != nil {
		return f, err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsForbidden(err) {
		return f, fmt.Errorf("list nodes: %w", err)
	}
	if nodes != nil {
		for _, n := range nodes.Items {
			if n.Spec.Unschedulable {
				continue
			}
			f.Nodes++
			if slices.Contains(n.Status.DeclaredFeatures, v1alpha1.FeatureRestartAllContainers) {
				f.InPlaceNodes++
			}
		}
	}
	return f, nil
}

func versionString(v *version.Info) string {
	if v.GitVersion != "" {
		return v.GitVersion
	}
	return "v" + v.Major + "." + v.Minor
}

// jobKeepsManagedBy creates a Job with spec.managedBy in the default namespace as a dry run
// (nothing is stored) and reports whether the API server kept the field; nil when it may not.
func jobKeepsManagedBy(ctx context.Context, cs kubernetes.Interface) (*bool, error) {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "faultline-preflight-"},
		Spec: batchv1.JobSpec{
			ManagedBy: ptr.To(v1alpha1.JobManagedBy),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "c", Image: "preflight"}},
			}},
		},
	}
	got, err := cs.BatchV1().Jobs(metav1.NamespaceDefault).Create(ctx, job, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("check Job spec.managedBy (dry run): %w", err)
	}
	return ptr.To(ptr.Deref(got.Spec.ManagedBy, "") == v1alpha1.JobManagedBy), nil
}

// PrintPreflight writes the report's notes, one a line.
func PrintPreflight(w io.Writer, f ClusterFacts, r PreflightReport) {
	fmt.Fprintf(w, "preflight: Kubernetes %s\n", f.Version)
	for _, n := range r.Notes {
		fmt.Fprintln(w, "preflight: "+n)
	}
}
