package framework

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// Defaults of HostOptions.
const (
	DefaultCallTimeout  = 5 * time.Second
	DefaultStartTimeout = 10 * time.Second
	DefaultRetryAfter   = 30 * time.Second
	DefaultCacheSize    = 1024
)

// HostOptions configure a Host.
type HostOptions struct {
	// PluginDir is searched first for faultline-plugin-<framework>, then PATH.
	PluginDir string
	// CallTimeout bounds every call to a plugin; a plugin that misses it is killed.
	CallTimeout time.Duration
	// StartTimeout bounds starting a plugin process up to the end of the handshake.
	StartTimeout time.Duration
	// RetryAfter is how long a plugin that failed (did not start, crashed again after its
	// restart, hung) is left alone: calls in the meantime fail at once with its error.
	RetryAfter time.Duration
	// CacheSize bounds the number of cached Rendezvous answers (one per run spec).
	CacheSize int
	// Logger receives the host's own events (starts, crashes, restarts, kills).
	Logger *slog.Logger
	// PluginLog receives go-plugin's log, the plugins' stderr included, as JSON lines
	// (default os.Stderr).
	PluginLog io.Writer
	// Clock times RetryAfter.
	Clock clock.PassiveClock
	// Command is how a plugin process is started: exec.Command(path) when nil. The
	// controller starts each confined (sandbox.Command).
	Command func(path string) *exec.Cmd
}

// Host runs framework plugins for the controller: it implements the controller's
// Frameworks interface. The zero value is not usable; call NewHost. Close it at shutdown.
type Host struct {
	opts   HostOptions
	log    *slog.Logger
	launch launchFunc
	// locate finds a framework's plugin binary (find; swapped for in-process plugins).
	locate func(framework string) (string, error)
	// lookPath finds a binary in PATH (exec.LookPath).
	lookPath func(string) (string, error)
	cache    *lru.Cache
	closed   atomic.Bool

	mu    sync.Mutex
	slots map[string]*slot
}

// NewHost returns a host that starts plugins lazily, on the first call for their framework.
func NewHost(opts HostOptions) *Host {
	h := newHost(opts)
	h.launch = h.launchProcess
	h.locate = h.find
	return h
}

func newHost(opts HostOptions) *Host {
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = DefaultRetryAfter
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = DefaultCacheSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.PluginLog == nil {
		opts.PluginLog = os.Stderr
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Host{
		opts:     opts,
		log:      opts.Logger.With("component", "framework-plugins"),
		lookPath: execLookPath,
		cache:    lru.New(opts.CacheSize),
		slots:    map[string]*slot{},
	}
}

// Resolved is what a framework adds to a run's pods.
type Resolved struct {
	// Env is appended after the common FAULTLINE_* variables, in order.
	Env []corev1.EnvVar
	// Ports are the container ports the framework listens on: the plugin's answer, or its
	// Info.DefaultPorts when the answer names none.
	Ports []corev1.ContainerPort
	// RestartScope is the run's effective restart scope: spec.restartScope when set, else
	// the plugin's Info.DefaultRestartScope (Gang for framework none). The plugin's answer
	// was computed for this scope.
	RestartScope v1alpha1.RestartScope
	// SuccessPolicy is the run's effective success policy: spec.successPolicy when set,
	// else the plugin's Rendezvous.SuccessPolicy, else AllWorkers.
	SuccessPolicy v1alpha1.SuccessPolicy
	// Roles lay the run's indexes out in contiguous ranges (Rendezvous.Roles); empty: none.
	Roles []Role
	// ReadJobAndPods: the workers need a service account that may list the pods of the
	// namespace and get the run's Job (Rendezvous.ReadJobAndPods).
	ReadJobAndPods bool
}

// DeepCopy returns a copy that shares nothing with r.
func (r Resolved) DeepCopy() Resolved {
	out := Resolved{}
	if r.Env != nil {
		out.Env = make([]corev1.EnvVar, len(r.Env))
		for i := range r.Env {
			r.Env[i].DeepCopyInto(&out.Env[i])
		}
	}
	out.Ports = slices.Clone(r.Ports)
	out.RestartScope = r.RestartScope
	out.SuccessPolicy = r.SuccessPolicy
	out.Roles = slices.Clone(r.Roles)
	out.ReadJobAndPods = r.ReadJobAndPods
	return out
}

// withRunsChoices is a cached answer for run: the run's own success policy, when it states
// one, wins over the plugin's default (the cache key leaves it out: the plugin never sees it).
func withRunsChoices(res Resolved, run *v1alpha1.TrainingRun) Resolved {
	if run.Spec.SuccessPolicy != "" {
		res.SuccessPolicy = run.Spec.SuccessPolicy
	}
	if res.SuccessPolicy == "" {
		res.SuccessPolicy = v1alpha1.SuccessPolicyAllWorkers
	}
	return res
}

// Rendezvous returns the framework's environment for the run's containers; framework
// "none" (or unset) needs no plugin and adds nothing.
func (h *Host) Rendezvous(ctx context.Context, run *v1alpha1.TrainingRun) ([]corev1.EnvVar, error) {
	r, err := h.Resolve(ctx, run)
	return r.Env, err
}

// Resolve returns everything the run's framework adds to its pods. Answers are cached per
// run spec (framework, name, namespace, workers, restart scope as the run states it,
// frameworkOptions, the worker's devices), so a run's later attempts get the same
// environment even while its plugin is down.
func (h *Host) Resolve(ctx context.Context, run *v1alpha1.TrainingRun) (res Resolved, err error) {
	fw := run.Spec.Framework
	if fw == "" || fw == v1alpha1.FrameworkNone {
		scope := run.Spec.RestartScope
		if scope == "" {
			scope = v1alpha1.RestartScopeGang
		}
		return withRunsChoices(Resolved{RestartScope: scope}, run), nil
	}
	defer h.recoverPanic(fw, "Rendezvous", &err)
	spec := specOf(run)
	// Keyed on the scope as the run states it: the plugin's default fills an unset one
	// below, and is the same for every call to one plugin binary.
	key := cacheKey(fw, spec)
	if v, ok := h.cache.Get(key); ok {
		return withRunsChoices(v.(Resolved).DeepCopy(), run), nil
	}
	s, err := h.slot(fw)
	if err != nil {
		return Resolved{}, err
	}
	ctx = withRunTrace(ctx, run.Annotations[v1alpha1.AnnotationTraceparent])
	var answer Rendezvous
	var info Info
	err = h.call(ctx, s, "Rendezvous", func(ctx context.Context, inst *instance) error {
		spec := spec
		if spec.RestartScope == "" {
			spec.RestartScope = inst.info.DefaultRestartScope
		}
		r, err := inst.conn.plugin.Rendezvous(ctx, spec)
		if err != nil {
			return err
		}
		if err := validateRendezvous(r, spec.Workers); err != nil {
			return err
		}
		answer, info = r, inst.info
		return nil
	})
	if err != nil {
		return Resolved{}, err
	}
	if len(answer.Ports) == 0 {
		answer.Ports = info.DefaultPorts
	}
	res = toCore(answer)
	res.RestartScope = run.Spec.RestartScope
	if res.RestartScope == "" {
		res.RestartScope = info.DefaultRestartScope
	}
	h.cache.Add(key, res.DeepCopy())
	return withRunsChoices(res, run), nil
}

// Hints returns the compiled failure hints of the run's framework. A plugin that cannot
// serve now costs nothing when it served once: its last good hints are returned.
func (h *Host) Hints(ctx context.Context, run *v1alpha1.TrainingRun) (hints []exitclass.Hint, err error) {
	fw := run.Spec.Framework
	if fw == "" || fw == v1alpha1.FrameworkNone {
		return nil, nil
	}
	defer h.recoverPanic(fw, "FailureHints", &err)
	s, err := h.slot(fw)
	if err != nil {
		return nil, err
	}
	inst, err := s.get(withRunTrace(ctx, run.Annotations[v1alpha1.AnnotationTraceparent]))
	if err != nil {
		if last := s.lastHints(); last != nil {
			return last, nil
		}
		return nil, err
	}
	return slices.Clone(inst.hints), nil
}

// Info returns the Info of a framework's plugin, starting it if needed.
func (h *Host) Info(ctx context.Context, framework string) (info Info, err error) {
	defer h.recoverPanic(framework, "Info", &err)
	s, err := h.slot(framework)
	if err != nil {
		return Info{}, err
	}
	inst, err := s.get(ctx)
	if err != nil {
		return Info{}, err
	}
	return inst.info, nil
}

// Close kills every plugin process; later calls fail with ErrClosed.
func (h *Host) Close() {
	h.closed.Store(true)
	h.mu.Lock()
	slots := make([]*slot, 0, len(h.slots))
	for _, s := range h.slots {
		slots = append(slots, s)
	}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range slots {
		wg.Go(s.stop)
	}
	wg.Wait()
	h.cache.Clear()
}

// slot returns the framework's slot, creating it on first use.
func (h *Host) slot(framework string) (*slot, error) {
	if msgs := validation.IsDNS1123Label(framework); len(msgs) > 0 {
		return nil, &PluginError{Framework: framework, Op: "start", Err: fmt.Errorf("%w: %q is not a valid framework name: %s", ErrNotFound, framework, msgs[0]),
			Fix: "set spec.framework to a plugin's name (a DNS label) or to none"}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.slots[framework]
	if !ok {
		s = &slot{host: h, framework: framework}
		h.slots[framework] = s
	}
	return s, nil
}

// recoverPanic keeps a bug in the host's handling of a plugin from taking the controller
// down: the panic becomes the call's error.
func (h *Host) recoverPanic(framework, op string, err *error) {
	if r := recover(); r != nil {
		h.log.Error("panic while calling a framework plugin", "framework", framework, "op", op, "panic", r)
		*err = &PluginError{Framework: framework, Op: op, Err: fmt.Errorf("%w: panic in the plugin host: %v", ErrFailed, r),
			Fix: "this is a bug in faultline's plugin host; please report it with the controller log"}
	}
}

// outcome is how a call ended, as far as the host's reaction goes.
type outcome int

const (
	callOK outcome = iota
	callCrashed
	callTimedOut
	callCanceled
	callRefused // the run's options are invalid
	callGarbage // the answer is invalid
	callFailed  // the plugin answered with an error
)

func (h *Host) classify(ctx context.Context, inst *instance, err error) outcome {
	switch {
	case err == nil:
		return callOK
	case ctx.Err() != nil:
		return callCanceled
	case errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded:
		return callTimedOut
	case inst.conn.exited() || status.Code(err) == codes.Unavailable:
		return callCrashed
	case IsInvalidOptions(err):
		return callRefused
	case errors.Is(err, ErrInvalidAnswer):
		return callGarbage
	default:
		return callFailed
	}
}

// call runs fn against the framework's plugin, under the call timeout. A plugin found
// dead is restarted once and fn tried again; every other failure is reported as it is.
func (h *Host) call(ctx context.Context, s *slot, op string, fn func(context.Context, *instance) error) error {
	inst, err := s.get(ctx)
	if err != nil {
		return err
	}
	err = h.invoke(ctx, inst, func(ctx context.Context, _ Plugin) error { return fn(ctx, inst) })
	out := h.classify(ctx, inst, err)
	if out == callCrashed {
		h.log.Warn("framework plugin crashed; restarting it once", "framework", s.framework, "path", inst.conn.path, "op", op, "error", err)
		first := err
		inst, err = s.restart(ctx, inst)
		if err != nil {
			var pe *PluginError
			if errors.As(err, &pe) {
				return &PluginError{Framework: s.framework, Path: pe.Path, Op: op,
					Err: fmt.Errorf("%w (%v), and restarting it failed: %w", ErrCrashed, first, pe.Err), Fix: pe.Fix}
			}
			return err
		}
		err = h.invoke(ctx, inst, func(ctx context.Context, _ Plugin) error { return fn(ctx, inst) })
		out = h.classify(ctx, inst, err)
		if out == callCrashed {
			pe := &PluginError{Framework: s.framework, Path: inst.conn.path, Op: op,
				Err: fmt.Errorf("%w, and crashed again after one restart: %v", ErrCrashed, err),
				Fix: fmt.Sprintf("the plugin's stderr (a panic or fatal error, usually) is in the controller log; fix or replace the binary; faultline tries it again in %s", h.opts.RetryAfter)}
			s.fail(inst, pe)
			return pe
		}
	}
	switch out {
	case callOK:
		return nil
	case callCanceled:
		return fmt.Errorf("%s with framework plugin %q: %w", op, s.framework, context.Cause(ctx))
	case callTimedOut:
		pe := &PluginError{Framework: s.framework, Path: inst.conn.path, Op: op,
			Err: fmt.Errorf("%w: no answer within %s, so the plugin process was killed", ErrTimeout, h.opts.CallTimeout),
			Fix: fmt.Sprintf("the plugin hangs (its log is in the controller log); fix or replace the binary, or raise the controller's --plugin-call-timeout; faultline tries it again in %s", h.opts.RetryAfter)}
		s.fail(inst, pe)
		return pe
	case callRefused:
		return &PluginError{Framework: s.framework, Path: inst.conn.path, Op: op, Err: err,
			Fix: fmt.Sprintf("change the run's spec (spec.frameworkOptions, spec.workers) to what the %s plugin accepts", s.framework)}
	case callGarbage:
		return &PluginError{Framework: s.framework, Path: inst.conn.path, Op: op, Err: err,
			Fix: "this is a bug in the plugin: report it to its author or install a fixed binary"}
	default:
		return &PluginError{Framework: s.framework, Path: inst.conn.path, Op: op, Err: fmt.Errorf("%w: %w", ErrFailed, err),
			Fix: "read the plugin's message (and its stderr in the controller log); fix the plugin or its setup"}
	}
}

// invoke runs fn under the call timeout; a panic on the host's side of the call is an error.
func (h *Host) invoke(ctx context.Context, inst *instance, fn func(context.Context, Plugin) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic in the host while talking to the plugin: %v", r)
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, h.opts.CallTimeout)
	defer cancel()
	return fn(cctx, inst.conn.plugin)
}

// cacheKey identifies a run spec: the framework and a hash of everything a plugin may
// depend on.
func cacheKey(framework string, spec RunSpec) string {
	b, _ := json.Marshal(spec) // maps marshal with sorted keys
	sum := sha256.Sum256(b)
	return framework + "/" + hex.EncodeToString(sum[:])
}

func toCore(r Rendezvous) Resolved {
	var out Resolved
	for _, e := range r.Env {
		v := corev1.EnvVar{Name: e.Name, Value: e.Value}
		if e.FieldPath != "" {
			v = corev1.EnvVar{Name: e.Name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: e.FieldPath}}}
		}
		out.Env = append(out.Env, v)
	}
	for _, p := range r.Ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		out.Ports = append(out.Ports, corev1.ContainerPort{Name: p.Name, ContainerPort: p.Port, Protocol: proto})
	}
	out.Roles = slices.Clone(r.Roles)
	out.SuccessPolicy = r.SuccessPolicy
	out.ReadJobAndPods = r.ReadJobAndPods
	return out
}
