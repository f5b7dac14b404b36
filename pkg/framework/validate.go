package framework

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/envexpand"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// Limits on what a plugin may answer. They are far above what a framework needs and low
// enough that a runaway plugin cannot bloat every pod of a run.
const (
	maxEnvVars = 64
	// maxEnvEntryBytes is Linux's MAX_ARG_STRLEN (32 pages): exec fails with E2BIG on an
	// environment string "NAME=value" longer than that, so such a pod could never start.
	maxEnvEntryBytes = 32 * 4096
	maxEnvBytes      = 2 * maxEnvEntryBytes
	maxPorts         = 16
	maxHints         = 128
	maxPatternLen    = 4096
	maxInfoString    = 256
)

// commonEnv are the variables the controller sets before a plugin's: a plugin may refer to
// them and must not redefine them.
var commonEnv = sets.New(v1alpha1.EnvIndex, v1alpha1.EnvRun, v1alpha1.EnvAttempt, v1alpha1.EnvWorldSize, v1alpha1.EnvService)

// downwardAPIEnvFields are the pod fields the Downward API can put into an env var
// (besides labels and annotations, below).
var downwardAPIEnvFields = sets.New(
	"metadata.name", "metadata.namespace", "metadata.uid",
	"spec.nodeName", "spec.serviceAccountName",
	"status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs",
)

var subscriptedField = regexp.MustCompile(`^metadata\.(labels|annotations)\['([^']+)'\]$`)

// validateInfo checks a plugin's Info against what the host expects of it.
func validateInfo(framework string, negotiated int, info Info) error {
	var errs []error
	if info.Name != framework {
		errs = append(errs, fmt.Errorf("it calls itself %q, but it was installed as the plugin of framework %q", info.Name, framework))
	}
	if info.APIVersion != negotiated {
		errs = append(errs, fmt.Errorf("it reports API version %d, but version %d was negotiated", info.APIVersion, negotiated))
	}
	if len(info.Version) > maxInfoString {
		errs = append(errs, fmt.Errorf("its version string is %d bytes long (at most %d)", len(info.Version), maxInfoString))
	}
	switch info.DefaultRestartScope {
	case v1alpha1.RestartScopeGang, v1alpha1.RestartScopeIndex:
	default:
		errs = append(errs, fmt.Errorf("default restart scope %q is neither %s nor %s", info.DefaultRestartScope, v1alpha1.RestartScopeGang, v1alpha1.RestartScopeIndex))
	}
	if err := validatePorts(info.DefaultPorts); err != nil {
		errs = append(errs, fmt.Errorf("default ports: %w", err))
	}
	return invalid(errs)
}

// validateRendezvous checks what a plugin answered for a run of workers workers: env names
// and sources, references, sizes, ports, roles and the success policy.
func validateRendezvous(r Rendezvous, workers int32) error {
	var errs []error
	if len(r.Env) > maxEnvVars {
		errs = append(errs, fmt.Errorf("%d env vars (at most %d)", len(r.Env), maxEnvVars))
	}
	errs = append(errs, validateRoles(r.Roles, workers)...)
	switch r.SuccessPolicy {
	case "", v1alpha1.SuccessPolicyAllWorkers, v1alpha1.SuccessPolicyLeader:
	default:
		errs = append(errs, fmt.Errorf("success policy %q is neither %s nor %s", r.SuccessPolicy, v1alpha1.SuccessPolicyAllWorkers, v1alpha1.SuccessPolicyLeader))
	}
	defined := commonEnv.Clone()
	reserved := commonEnv.Clone().Insert(roleEnv...)
	if len(r.Roles) > 0 {
		defined.Insert(roleEnv...)
	}
	seen := sets.New[string]()
	total := 0
	for i, e := range r.Env {
		if msgs := validation.IsCIdentifier(e.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("env[%d] name %q is not a valid variable name: %s", i, e.Name, msgs[0]))
		}
		if reserved.Has(e.Name) {
			errs = append(errs, fmt.Errorf("env[%d] %s is set by the controller; a plugin may refer to it but not set it", i, e.Name))
		}
		if seen.Has(e.Name) {
			errs = append(errs, fmt.Errorf("env[%d] %s is set twice", i, e.Name))
		}
		seen.Insert(e.Name)
		switch {
		case e.FieldPath != "" && e.Value != "":
			errs = append(errs, fmt.Errorf("env[%d] %s has both a value and a field path", i, e.Name))
		case e.FieldPath != "":
			if err := validateFieldPath(e.FieldPath); err != nil {
				errs = append(errs, fmt.Errorf("env[%d] %s: %w", i, e.Name, err))
			}
		default:
			for _, ref := range envexpand.References(e.Value) {
				if !defined.Has(ref) {
					errs = append(errs, fmt.Errorf("env[%d] %s refers to $(%s), which is not defined before it (the kubelet would leave it unexpanded)", i, e.Name, ref))
				}
			}
		}
		defined.Insert(e.Name)
		entry := len(e.Name) + 1 + len(e.Value) + 1
		if entry > maxEnvEntryBytes {
			errs = append(errs, fmt.Errorf("env[%d] %s is %d bytes long, over the %d bytes Linux allows for one environment string", i, e.Name, entry, maxEnvEntryBytes))
		}
		total += entry
	}
	if total > maxEnvBytes {
		errs = append(errs, fmt.Errorf("the env vars take %d bytes (at most %d)", total, maxEnvBytes))
	}
	if err := validatePorts(r.Ports); err != nil {
		errs = append(errs, fmt.Errorf("ports: %w", err))
	}
	return invalid(errs)
}

// roleEnv are the variables the controller sets before a plugin's in a run with roles.
var roleEnv = []string{v1alpha1.EnvRole, v1alpha1.EnvRoleIndex}

// maxRoles bounds a layout: the annotation that carries it is on every pod.
const maxRoles = 16

// validateRoles checks a layout: DNS-label names, each once, at least one replica each,
// adding up to the run's workers.
func validateRoles(roles []Role, workers int32) []error {
	if len(roles) == 0 {
		return nil
	}
	var errs []error
	if len(roles) > maxRoles {
		errs = append(errs, fmt.Errorf("%d roles (at most %d)", len(roles), maxRoles))
	}
	seen := sets.New[string]()
	total := int64(0)
	for i, r := range roles {
		if msgs := validation.IsDNS1123Label(r.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("role[%d] name %q is not a DNS label: %s", i, r.Name, msgs[0]))
		}
		if seen.Has(r.Name) {
			errs = append(errs, fmt.Errorf("role[%d] %s is listed twice", i, r.Name))
		}
		seen.Insert(r.Name)
		if r.Replicas < 1 {
			errs = append(errs, fmt.Errorf("role[%d] %s has %d replicas (at least 1)", i, r.Name, r.Replicas))
		}
		total += int64(r.Replicas)
	}
	if total != int64(workers) {
		errs = append(errs, fmt.Errorf("the roles' replicas add up to %d, but the run has %d workers", total, workers))
	}
	return errs
}

func validateFieldPath(path string) error {
	if downwardAPIEnvFields.Has(path) {
		return nil
	}
	if m := subscriptedField.FindStringSubmatch(path); m != nil {
		if msgs := validation.IsQualifiedName(m[2]); len(msgs) > 0 {
			return fmt.Errorf("field path %q: %q is not a valid %s key: %s", path, m[2], m[1], msgs[0])
		}
		return nil
	}
	return fmt.Errorf("field path %q is not one the Downward API offers to env vars", path)
}

func validatePorts(ports []Port) error {
	var errs []error
	if len(ports) > maxPorts {
		errs = append(errs, fmt.Errorf("%d ports (at most %d)", len(ports), maxPorts))
	}
	names := sets.New[string]()
	type key struct {
		port  int32
		proto corev1.Protocol
	}
	seen := sets.New[key]()
	for i, p := range ports {
		if msgs := validation.IsValidPortNum(int(p.Port)); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("port[%d] %d: %s", i, p.Port, msgs[0]))
		}
		if p.Name != "" {
			if msgs := validation.IsValidPortName(p.Name); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("port[%d] name %q: %s", i, p.Name, msgs[0]))
			}
			if names.Has(p.Name) {
				errs = append(errs, fmt.Errorf("port[%d] name %q is used twice", i, p.Name))
			}
			names.Insert(p.Name)
		}
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		if !slices.Contains([]corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}, proto) {
			errs = append(errs, fmt.Errorf("port[%d] protocol %q is not TCP, UDP or SCTP", i, p.Protocol))
		}
		if seen.Has(key{p.Port, proto}) {
			errs = append(errs, fmt.Errorf("port[%d] %d/%s is listed twice", i, p.Port, proto))
		}
		seen.Insert(key{p.Port, proto})
	}
	return joinErrors(errs)
}

// compileHints checks and compiles a plugin's hints; Source is always the framework, so a
// plugin cannot speak for another. version is the connection's API version: a hint with an
// infrastructure cause is refused from a version 2 plugin (a bug its author must fix) and
// dropped, returned in dropped for the host to warn about, from a version 1 plugin, whose
// contract allowed it: the classifier would ignore it anyway, and refusing it would take an
// installed plugin's framework down for a claim that counts for nothing.
func compileHints(framework string, version int, hints []HintPattern) (compiled []exitclass.Hint, dropped []HintPattern, err error) {
	if len(hints) > maxHints {
		return nil, nil, invalid([]error{fmt.Errorf("%d failure hints (at most %d)", len(hints), maxHints)})
	}
	patterns := make([]exitclass.HintPattern, len(hints))
	for i, h := range hints {
		if len(h.Pattern) > maxPatternLen {
			return nil, nil, invalid([]error{fmt.Errorf("hint %d: pattern is %d bytes long (at most %d)", i, len(h.Pattern), maxPatternLen)})
		}
		if h.Cause.Class() == v1alpha1.ClassInfrastructure && version >= 2 {
			return nil, nil, invalid([]error{fmt.Errorf("hint %d, pattern %q: cause %s is an infrastructure cause, which program output cannot prove (only the node agent's evidence can); give the hint cause %s if the message means another worker failed, an application cause if it means the program's own fault, or drop it",
				i, h.Pattern, h.Cause, v1alpha1.CausePeerFailure)})
		}
		patterns[i] = exitclass.HintPattern{Pattern: h.Pattern, Cause: h.Cause, Source: framework}
	}
	all, err := exitclass.CompileHints(patterns)
	if err != nil {
		return nil, nil, invalid([]error{err})
	}
	for i, h := range all {
		// A pattern that matches an empty message matches every message: it would decide
		// every failure of the framework and hide the hints after it.
		if h.Pattern.MatchString("") {
			return nil, nil, invalid([]error{fmt.Errorf("hint %d from %q, pattern %q: matches the empty message, so it would match every message", i, framework, h.Pattern)})
		}
		if h.Cause.Class() == v1alpha1.ClassInfrastructure {
			dropped = append(dropped, hints[i])
			continue
		}
		compiled = append(compiled, h)
	}
	return compiled, dropped, nil
}

// invalid joins validation errors under ErrInvalidAnswer, or returns nil.
func invalid(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidAnswer, joinErrors(errs))
}

// joinedErrors is errors.Join on one line: its message ends up in a condition message.
type joinedErrors []error

func (e joinedErrors) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e joinedErrors) Unwrap() []error { return e }

func joinErrors(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return joinedErrors(errs)
}
