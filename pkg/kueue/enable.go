package kueue

import (
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
)

// Modes of the controller's --kueue flag.
const (
	ModeAuto = "auto"
	ModeOn   = "true"
	ModeOff  = "false"
)

// Enabled decides whether the controller runs the Kueue integration: on (the cluster must
// serve Workloads, or the controller would fail to watch them), off, or auto (on exactly
// when the cluster serves Workloads at the controller's start). served asks the cluster.
func Enabled(flag, mode string, served func() (bool, error)) (bool, error) {
	switch mode {
	case ModeOff:
		return false, nil
	case ModeOn, ModeAuto:
	default:
		return false, fmt.Errorf("--%s: %q is none of %s, %s, %s", flag, mode, ModeAuto, ModeOn, ModeOff)
	}
	ok, err := served()
	if err != nil {
		return false, fmt.Errorf("--%s=%s: ask the API server for %s Workloads: %w", flag, mode, WorkloadGVK.GroupVersion(), err)
	}
	if !ok && mode == ModeOn {
		return false, fmt.Errorf("--%s=%s: the cluster serves no %s Workloads: install Kueue v0.15 or later first", flag, mode, WorkloadGVK.GroupVersion())
	}
	return ok, nil
}

// Served reports whether the cluster serves Kueue's Workloads in the version faultline
// speaks.
func Served(d discovery.DiscoveryInterface) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(WorkloadGVK.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == WorkloadGVR.Resource }), nil
}
