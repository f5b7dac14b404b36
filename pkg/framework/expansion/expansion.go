// Package expansion implements Kubernetes' dependent environment variable expansion, the
// $(VAR) syntax the kubelet applies to a container's env values, command and args:
//
//   - $(NAME) is replaced by the value of NAME when NAME is defined (earlier in the env
//     list), and left as it is otherwise;
//   - $$ is an escaped $;
//   - a $ before anything else, and an unterminated $(, are kept as they are.
//
// The semantics are those of k8s.io/kubernetes/third_party/forked/golang/expansion, which
// the kubelet uses; that module is not a dependency of faultline, hence this small copy of
// the rules. Plugins' tests use it to see their env as a pod would, and the host uses
// References to check that a plugin refers only to variables that exist.
package expansion

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/pkg/rendezvous"
)

// Expand expands input. lookup returns the value of a defined variable.
func Expand(input string, lookup func(name string) (string, bool)) string {
	var b strings.Builder
	scan(input, func(literal string) { b.WriteString(literal) }, func(name string) {
		if v, ok := lookup(name); ok {
			b.WriteString(v)
			return
		}
		b.WriteString("$(" + name + ")")
	})
	return b.String()
}

// References returns the names input refers to with $(NAME), in order.
func References(input string) []string {
	var names []string
	scan(input, func(string) {}, func(name string) { names = append(names, name) })
	return names
}

// Env expands an ordered env list the way the kubelet does: each value may refer to the
// variables before it, and a later definition of a name replaces an earlier one.
func Env(env []Var) map[string]string {
	out := make(map[string]string, len(env))
	for _, e := range env {
		if e.Resolved {
			out[e.Name] = e.Value
			continue
		}
		out[e.Name] = Expand(e.Value, func(name string) (string, bool) {
			v, ok := out[name]
			return v, ok
		})
	}
	return out
}

// Var is one entry of an env list.
type Var struct {
	Name  string
	Value string
	// Resolved marks a value that is not expanded: one that came from a fieldRef (the
	// caller resolved it) rather than from a literal value.
	Resolved bool
}

// scan walks input, handing literal text to lit and each $(NAME) reference to ref.
func scan(input string, lit func(string), ref func(string)) {
	start := 0 // start of the pending literal text
	for i := 0; i < len(input); i++ {
		if input[i] != '$' || i+1 == len(input) {
			continue
		}
		lit(input[start:i])
		switch next := input[i+1]; next {
		case '$': // $$ is an escaped $
			lit("$")
			i++
		case '(':
			end := strings.IndexByte(input[i+2:], ')')
			if end < 0 { // unterminated: kept as it is
				lit("$(")
				i++
				break
			}
			ref(input[i+2 : i+2+end])
			i += 2 + end
		default: // $ before anything else is kept, with what follows
			lit(input[i : i+2])
			i++
		}
		start = i + 1
	}
	lit(input[start:])
}

// Worker is the env of a worker container with completion index index, as the kubelet makes
// it: FAULTLINE_INDEX's downward-API field resolved, $(VAR) expanded.
func Worker(env []corev1.EnvVar, index int) (map[string]string, error) {
	return Container(env, map[string]string{rendezvous.IndexFieldPath: strconv.Itoa(index)})
}

// Container expands a container's env list as the kubelet does. A fieldRef is resolved
// from fields, keyed by field path (e.g. the completion-index annotation); any other
// valueFrom, or a field path missing from fields, is an error.
func Container(env []corev1.EnvVar, fields map[string]string) (map[string]string, error) {
	vars := make([]Var, 0, len(env))
	for _, e := range env {
		switch {
		case e.ValueFrom == nil:
			vars = append(vars, Var{Name: e.Name, Value: e.Value})
		case e.ValueFrom.FieldRef != nil:
			v, ok := fields[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				return nil, fmt.Errorf("env %s: no value for field %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			vars = append(vars, Var{Name: e.Name, Value: v, Resolved: true})
		default:
			return nil, fmt.Errorf("env %s: only literal values and fieldRefs can be resolved", e.Name)
		}
	}
	return Env(vars), nil
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
