package framework

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/gpuclaim"
	"github.com/faultline-dev/faultline/pkg/rendezvous"
)

// Plugin is what a framework plugin implements (API versions 1 and 2: one Go interface,
// the version says what the host sends and accepts; see package doc). Every method may be
// called concurrently, and must return promptly: the host kills a plugin that does not
// answer within its call timeout (5 s by default).
type Plugin interface {
	// Info describes the plugin.
	Info(ctx context.Context) (Info, error)
	// Rendezvous returns the environment and ports the run's workers need to find each
	// other. It must depend only on run, which is what the host caches on. A problem with
	// the user's frameworkOptions is reported with InvalidOptions.
	Rendezvous(ctx context.Context, run RunSpec) (Rendezvous, error)
	// FailureHints returns the framework's failure patterns, first match wins.
	FailureHints(ctx context.Context) ([]HintPattern, error)
}

// Info describes a plugin.
type Info struct {
	// Name is the framework, the <name> in faultline-plugin-<name>.
	Name string
	// Version is the plugin's own release, for humans.
	Version string
	// APIVersion is the protocol version of the connection. A Go plugin need not set it:
	// Serve reports the version go-plugin negotiated with the host, whatever the plugin's
	// own value, because one binary serves every version the SDK speaks. The host checks it
	// against the negotiated version (it matters to plugins written without this SDK).
	APIVersion int
	// DefaultRestartScope is the restart scope the framework needs unless the run says
	// otherwise: the host gives it to runs that leave spec.restartScope unset (in RunSpec,
	// and in Resolved.RestartScope for the controller).
	DefaultRestartScope v1alpha1.RestartScope
	// DefaultPorts are the ports a worker listens on unless the run's options change them:
	// the host declares them on the worker container when a Rendezvous answer names no
	// ports, so a plugin whose ports never change may state them only here.
	DefaultPorts []Port
}

// RunSpec is the part of a TrainingRun a plugin may depend on.
type RunSpec struct {
	Name      string
	Namespace string
	Workers   int32
	// RestartScope is the run's spec.restartScope, or the plugin's DefaultRestartScope when
	// the run leaves it unset.
	RestartScope v1alpha1.RestartScope
	// Options is spec.frameworkOptions.
	Options map[string]string
	// Worker is what the run's pod template asks for. A host of API version 2 always sets
	// it; nil means the host speaks only version 1 and did not say, and a plugin that needs
	// it should ask for a frameworkOption instead (see the pytorch plugin's nprocPerNode).
	Worker *Worker
}

// Worker is the part of a run's pod template a plugin may depend on.
type Worker struct {
	// Devices are the extended resources (domain-prefixed names such as "nvidia.com/gpu")
	// that the worker container asks for, in whole units: its limits, or its requests for a
	// resource it sets no limit on. The worker container is the template's first, the one
	// the controller declares the framework's ports on. The GPUs a run asks for through DRA
	// (spec.gpus) are counted under the name Kubernetes gives a DeviceClass's devices as a
	// resource, deviceclass.resource.kubernetes.io/<class>; claims the template itself names
	// are not (nothing in the pod says what devices they hold).
	Devices map[corev1.ResourceName]int64
}

// SpecOf is the RunSpec the host sends for a run. An unset restart scope is Gang here; the
// host gives such a run its plugin's DefaultRestartScope instead.
func SpecOf(run *v1alpha1.TrainingRun) RunSpec {
	spec := specOf(run)
	if spec.RestartScope == "" {
		spec.RestartScope = v1alpha1.RestartScopeGang
	}
	return spec
}

// specOf is SpecOf with an unset restart scope left unset, for the host to fill in from the
// plugin's Info.
func specOf(run *v1alpha1.TrainingRun) RunSpec {
	return RunSpec{
		Name:         run.Name,
		Namespace:    run.Namespace,
		Workers:      run.Spec.Workers,
		RestartScope: run.Spec.RestartScope,
		Options:      maps.Clone(run.Spec.FrameworkOptions),
		Worker:       workerOf(run),
	}
}

// workerOf is what run's worker container asks for, its GPUs through DRA included.
func workerOf(run *v1alpha1.TrainingRun) *Worker {
	w := WorkerOf(&run.Spec.Template.Spec)
	if n := gpuclaim.Count(run); n > 0 {
		w.Devices[corev1.ResourceName(v1alpha1.DeviceClassResourcePrefix+run.Spec.GPUs.DeviceClassName)] = n
	}
	return w
}

// WorkerOf is what a pod spec's worker container (its first) asks for.
func WorkerOf(spec *corev1.PodSpec) *Worker {
	w := &Worker{Devices: map[corev1.ResourceName]int64{}}
	if len(spec.Containers) == 0 {
		return w
	}
	res := spec.Containers[0].Resources
	for name, q := range res.Requests {
		if isDevice(name) {
			w.Devices[name] = q.Value()
		}
	}
	// Kubernetes requires extended resources' requests to equal their limits when both are
	// set, and defaults requests to limits; limits win where a spec got that wrong.
	for name, q := range res.Limits {
		if isDevice(name) {
			w.Devices[name] = q.Value()
		}
	}
	return w
}

// isDevice reports whether name is an extended resource: domain-prefixed, outside the
// kubernetes.io domain (cpu, memory, hugepages-* and ephemeral-storage are not).
func isDevice(name corev1.ResourceName) bool {
	domain, _, ok := strings.Cut(string(name), "/")
	return ok && domain != "kubernetes.io" && !strings.HasSuffix(domain, ".kubernetes.io")
}

// Address is the stable DNS name of the worker with this index,
// <run>-<index>.<run>.<namespace>.svc (see package rendezvous).
func (r RunSpec) Address(index int) string {
	return rendezvous.Address(&v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: r.Namespace}}, index)
}

// IndexRef expands, in an env value, to the pod's completion index: the controller
// declares FAULTLINE_INDEX before any plugin variable.
const IndexRef = "$(" + v1alpha1.EnvIndex + ")"

// Rendezvous is a plugin's answer for one run.
type Rendezvous struct {
	// Env is appended, in order, after the common FAULTLINE_* variables.
	Env []EnvVar
	// Ports are the container ports the framework listens on.
	Ports []Port

	// The fields below are API version 3's: Serve refuses to send an answer that uses them
	// to an older host, which would drop them and start pods that cannot work.

	// Roles lay the run's indexes out in contiguous ranges, in order: the first role's
	// Replicas indexes from 0, the next role's after them, and so on; their replicas add
	// up to the run's workers. Every pod of the run is then told its role and its index
	// within the role (EnvRole, EnvRoleIndex; refer to them with RoleRef and RoleIndexRef),
	// which the completion index alone cannot give: Kubernetes env expansion only
	// substitutes, it cannot subtract a role's first index. Empty: no roles.
	Roles []Role
	// SuccessPolicy is the success policy of a run that leaves spec.successPolicy unset;
	// empty means AllWorkers. A layout whose processes never exit (parameter servers)
	// names Leader, with its leader at index 0.
	SuccessPolicy v1alpha1.SuccessPolicy
	// ReadJobAndPods says that the framework's processes find their gang through the
	// Kubernetes API from inside the pod, as JAX's Kubernetes cluster detection does: the
	// controller then gives the run's pods a service account of their own that may list
	// the pods of the run's namespace and get the run's Job, and nothing else.
	ReadJobAndPods bool
}

// Role is a range of a run's indexes that play one part (TensorFlow's chief, ps, worker,
// evaluator).
type Role struct {
	// Name is the role's name, a DNS label (it is a label value on the pods).
	Name string
	// Replicas is the number of indexes in the role, at least 1.
	Replicas int32
}

// RoleRef and RoleIndexRef expand, in an env value of an answer with Roles, to the pod's
// role and its index within the role (a number from 0): the controller declares EnvRole
// and EnvRoleIndex before any plugin variable.
const (
	RoleRef      = "$(" + v1alpha1.EnvRole + ")"
	RoleIndexRef = "$(" + v1alpha1.EnvRoleIndex + ")"
)

// RoleRanges renders roles as the controller writes them for the pods
// (v1alpha1.AnnotationRoles): "name:first-last" per role, in index order, comma-separated,
// e.g. "chief:0-0,ps:1-2,worker:3-6".
func RoleRanges(roles []Role) string {
	parts := make([]string, 0, len(roles))
	first := int32(0)
	for _, r := range roles {
		parts = append(parts, fmt.Sprintf("%s:%d-%d", r.Name, first, first+r.Replicas-1))
		first += r.Replicas
	}
	return strings.Join(parts, ",")
}

// RoleOf is the role of the pod with completion index index, and its index within the
// role; ok is false for an index outside every role.
func RoleOf(roles []Role, index int) (role string, roleIndex int, ok bool) {
	first := 0
	for _, r := range roles {
		if index >= first && index < first+int(r.Replicas) {
			return r.Name, index - first, true
		}
		first += int(r.Replicas)
	}
	return "", 0, false
}

// EnvVar is an environment variable: a literal Value, in which $(NAME) refers to an
// earlier variable, or, when FieldPath is set, a Downward API field of the pod.
type EnvVar struct {
	Name      string
	Value     string
	FieldPath string
}

// Port is a container port.
type Port struct {
	// Name is an IANA service name (at most 15 characters), optional.
	Name string
	Port int32
	// Protocol is TCP (the default when empty), UDP or SCTP.
	Protocol corev1.Protocol
}

// HintPattern is a failure hint as a plugin states it.
type HintPattern struct {
	// Pattern is an RE2 regular expression (Go regexp syntax).
	Pattern string
	// Cause is PeerFailure ("a peer died, not me") or an application cause ("my program's
	// own fault": AppExit, OOMKilled, AppGPUError). Never Unknown, and never an
	// infrastructure cause: a program's output cannot prove the node failed (anyone can
	// print "uncorrectable ECC error"); only the node agent's attested evidence can. The host
	// refuses a plugin that names one (it drops them, with a warning, from a plugin of API
	// version 1, which allowed them).
	Cause v1alpha1.Cause
	// Description says, for humans, what the pattern recognises.
	Description string
}

// OptionsError is a plugin's refusal of a run's frameworkOptions: the user must change the
// spec, and restarting the plugin would not help.
type OptionsError struct {
	Message string
}

func (e *OptionsError) Error() string { return e.Message }

// InvalidOptions is how a plugin refuses a run's frameworkOptions; the host reports it as
// a problem with the run, not with the plugin.
func InvalidOptions(format string, args ...any) error {
	return &OptionsError{Message: fmt.Sprintf(format, args...)}
}

// IsInvalidOptions reports whether err is (or wraps) an OptionsError.
func IsInvalidOptions(err error) bool {
	var oe *OptionsError
	return errors.As(err, &oe)
}

// Shipped are the frameworks faultline ships a plugin for (plugins/<name>), in order; the
// launcher offers them with "none". Other plugins work the same once installed.
var Shipped = []string{"jax", "pytorch", "tensorflow"}
