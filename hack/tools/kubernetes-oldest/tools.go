//go:build tools

// Package tools records the binaries this module builds, so that `go mod tidy` keeps them:
// the control plane and the kubelet of the oldest supported Kubernetes (the suite's second
// leg uses the newest kubectl, which supports one minor version of skew).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
