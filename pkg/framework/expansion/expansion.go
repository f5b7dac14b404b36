// Package expansion expands a container's env as the kubelet does (pkg/envexpand's rules),
// with its fieldRefs resolved: plugins' tests use it to see their env as a pod would.
package expansion

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/pkg/envexpand"
	"github.com/faultline-dev/faultline/pkg/rendezvous"
)

// Worker is the env of a worker container with completion index index, as the kubelet makes
// it: FAULTLINE_INDEX's downward-API field resolved, $(VAR) expanded.
func Worker(env []corev1.EnvVar, index int) (map[string]string, error) {
	return Container(env, map[string]string{rendezvous.IndexFieldPath: strconv.Itoa(index)})
}

// Container expands a container's env list as the kubelet does. A fieldRef is resolved
// from fields, keyed by field path (e.g. the completion-index annotation); any other
// valueFrom, or a field path missing from fields, is an error.
func Container(env []corev1.EnvVar, fields map[string]string) (map[string]string, error) {
	vars := make([]envexpand.Var, 0, len(env))
	for _, e := range env {
		switch {
		case e.ValueFrom == nil:
			vars = append(vars, envexpand.Var{Name: e.Name, Value: e.Value})
		case e.ValueFrom.FieldRef != nil:
			v, ok := fields[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				return nil, fmt.Errorf("env %s: no value for field %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			vars = append(vars, envexpand.Var{Name: e.Name, Value: v, Resolved: true})
		default:
			return nil, fmt.Errorf("env %s: only literal values and fieldRefs can be resolved", e.Name)
		}
	}
	return envexpand.Env(vars), nil
}

// Pod expands a container's env as the kubelet does in pod: a fieldRef is resolved from the
// pod as the downward API resolves it (metadata.name, metadata.namespace, metadata.uid,
// spec.nodeName, spec.serviceAccountName, status.podIP, status.hostIP, and one label or
// annotation by key, which is "" when the pod lacks it: kubernetes pkg/fieldpath/fieldpath.go,
// ExtractFieldPathAsString). Tests use it on the pods a real API server stored, so that what
// the admission chain did to the pod (its labels) shows in the env.
func Pod(env []corev1.EnvVar, pod *corev1.Pod) (map[string]string, error) {
	fields := map[string]string{
		"metadata.name":           pod.Name,
		"metadata.namespace":      pod.Namespace,
		"metadata.uid":            string(pod.UID),
		"spec.nodeName":           pod.Spec.NodeName,
		"spec.serviceAccountName": pod.Spec.ServiceAccountName,
		"status.podIP":            pod.Status.PodIP,
		"status.hostIP":           pod.Status.HostIP,
	}
	for _, e := range env {
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
			continue
		}
		path := e.ValueFrom.FieldRef.FieldPath
		if key, ok := subscript(path, "metadata.labels"); ok {
			fields[path] = pod.Labels[key]
		} else if key, ok := subscript(path, "metadata.annotations"); ok {
			fields[path] = pod.Annotations[key]
		}
	}
	return Container(env, fields)
}

// subscript returns key for a path of the form field['key'].
func subscript(path, field string) (string, bool) {
	rest, ok := strings.CutPrefix(path, field+"['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}
