package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// fleet serves plugins in process for a Host and counts their starts and kills. make
// builds the plugin for the n-th start (from 1) of a framework; die makes that "process"
// exit, as a crash would.
type fleet struct {
	t    *testing.T
	make func(framework string, n int, die func()) Plugin

	mu     sync.Mutex
	starts map[string]int
	kills  map[string]int
}

func newFleet(t *testing.T, make func(framework string, n int, die func()) Plugin) *fleet {
	return &fleet{t: t, make: make, starts: map[string]int{}, kills: map[string]int{}}
}

func (f *fleet) host(opts HostOptions) *Host {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	h := newHost(opts)
	h.locate = func(fw string) (string, error) {
		if strings.HasPrefix(fw, "missing") {
			return "", fmt.Errorf("%w: not in this fleet", ErrNotFound)
		}
		return "/plugins/" + BinaryPrefix + fw, nil
	}
	h.launch = func(fw, path string) (*conn, error) {
		f.mu.Lock()
		f.starts[fw]++
		n := f.starts[fw]
		f.mu.Unlock()
		var dead atomic.Bool
		c := testConn(f.t, path, f.make(fw, n, func() { dead.Store(true) }))
		kill, exited := c.kill, c.exited
		c.kill = func() {
			f.mu.Lock()
			f.kills[fw]++
			f.mu.Unlock()
			kill()
		}
		c.exited = func() bool { return dead.Load() || exited() }
		return c, nil
	}
	f.t.Cleanup(h.Close)
	return h
}

func (f *fleet) count(fw string) (starts, kills int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.starts[fw], f.kills[fw]
}

// named is a FakePlugin of the given framework.
func named(fw string) *FakePlugin {
	return &FakePlugin{InfoValue: Info{Name: fw}}
}

func makeRun(fw, name string) *v1alpha1.TrainingRun {
	return &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec:       v1alpha1.TrainingRunSpec{Framework: fw, Workers: 2, RestartScope: v1alpha1.RestartScopeGang},
	}
}

var unavailable = status.Error(codes.Unavailable, "error reading from server: EOF")

func TestHostFrameworkNone(t *testing.T) {
	f := newFleet(t, func(fw string, _ int, _ func()) Plugin { return named(fw) })
	h := f.host(HostOptions{})
	for _, fw := range []string{"", v1alpha1.FrameworkNone} {
		env, err := h.Rendezvous(context.Background(), makeRun(fw, "r"))
		if err != nil || env != nil {
			t.Errorf("Rendezvous(framework %q) = %v, %v; want nothing", fw, env, err)
		}
		hints, err := h.Hints(context.Background(), makeRun(fw, "r"))
		if err != nil || hints != nil {
			t.Errorf("Hints(framework %q) = %v, %v; want nothing", fw, hints, err)
		}
	}
	if len(f.starts) != 0 {
		t.Errorf("framework none started plugins: %v", f.starts)
	}
}

func TestHostResolveConvertsAndValidates(t *testing.T) {
	fake := named("fw")
	fake.RendezvousFunc = func(_ context.Context, run RunSpec) (Rendezvous, error) {
		return Rendezvous{
			Env:   []EnvVar{{Name: "ADDR", Value: run.Address(0) + ":1"}, {Name: "ID", Value: IndexRef}, {Name: "IP", FieldPath: "status.podIP"}},
			Ports: []Port{{Name: "p", Port: 1}},
		}, nil
	}
	fake.HintsValue = []HintPattern{{Pattern: "peer gone", Cause: v1alpha1.CausePeerFailure}}
	h := newFleet(t, func(string, int, func()) Plugin { return fake }).host(HostOptions{})

	got, err := h.Resolve(context.Background(), makeRun("fw", "r"))
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	want := Resolved{
		Env: []corev1.EnvVar{
			{Name: "ADDR", Value: "r-0.r.ns.svc:1"},
			{Name: "ID", Value: "$(FAULTLINE_INDEX)"},
			{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		},
		Ports:         []corev1.ContainerPort{{Name: "p", ContainerPort: 1, Protocol: corev1.ProtocolTCP}},
		RestartScope:  v1alpha1.RestartScopeGang,
		SuccessPolicy: v1alpha1.SuccessPolicyAllWorkers,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Resolve (-want +got):\n%s", diff)
	}
	hints, err := h.Hints(context.Background(), makeRun("fw", "r"))
	if err != nil || len(hints) != 1 || hints[0].Source != "fw" || !hints[0].Pattern.MatchString("the peer gone away") {
		t.Errorf("Hints = %+v, %v", hints, err)
	}
	if n := fake.Calls("Info") + fake.Calls("FailureHints"); n != 2 {
		t.Errorf("Info and FailureHints called %d times in all, want once each per process", n)
	}
}

func TestHostCachesPerRunSpec(t *testing.T) {
	fake := named("fw")
	h := newFleet(t, func(string, int, func()) Plugin { return fake }).host(HostOptions{})
	base := makeRun("fw", "r")
	base.Spec.FrameworkOptions = map[string]string{"a": "1", "b": "2"}
	base.Spec.Template.Spec.Containers = []corev1.Container{{Name: "trainer", Image: "v1"}}
	cases := []struct {
		name      string
		mutate    func(*v1alpha1.TrainingRun)
		wantCalls int // cumulative
	}{
		{"first call", func(*v1alpha1.TrainingRun) {}, 1},
		{"same spec", func(*v1alpha1.TrainingRun) {}, 1},
		{"same options, rebuilt map", func(r *v1alpha1.TrainingRun) { r.Spec.FrameworkOptions = map[string]string{"b": "2", "a": "1"} }, 1},
		{"annotation and status do not matter", func(r *v1alpha1.TrainingRun) {
			r.Annotations = map[string]string{"x": "y"}
			r.Status.Attempt = 7
		}, 1},
		{"a template change the plugin cannot see", func(r *v1alpha1.TrainingRun) { r.Spec.Template.Spec.Containers[0].Image = "v2" }, 1},
		// The plugin's default, which fills an unset scope, is not known before the plugin
		// is asked: an unset scope is a spec of its own.
		{"unset restart scope", func(r *v1alpha1.TrainingRun) { r.Spec.RestartScope = "" }, 2},
		{"options", func(r *v1alpha1.TrainingRun) { r.Spec.FrameworkOptions = map[string]string{"a": "1"} }, 3},
		{"workers", func(r *v1alpha1.TrainingRun) { r.Spec.Workers = 3 }, 4},
		{"restart scope", func(r *v1alpha1.TrainingRun) { r.Spec.RestartScope = v1alpha1.RestartScopeIndex }, 5},
		{"name", func(r *v1alpha1.TrainingRun) { r.Name = "other" }, 6},
		{"namespace", func(r *v1alpha1.TrainingRun) { r.Namespace = "other" }, 7},
		{"GPUs per worker", func(r *v1alpha1.TrainingRun) {
			r.Spec.Template.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}
		}, 8},
		{"back to the first", func(*v1alpha1.TrainingRun) {}, 8},
	}
	for _, tc := range cases {
		run := base.DeepCopy()
		tc.mutate(run)
		if _, err := h.Rendezvous(context.Background(), run); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := fake.Calls("Rendezvous"); got != tc.wantCalls {
			t.Errorf("%s: %d Rendezvous calls so far, want %d", tc.name, got, tc.wantCalls)
		}
	}
}

// A plugin's Info defaults take effect: an unset restart scope becomes the plugin's default
// (what the plugin is asked for and what the controller is told), and a Rendezvous answer
// without ports gets the plugin's default ports.
func TestHostAppliesThePluginsDefaults(t *testing.T) {
	gpus := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8"), corev1.ResourceCPU: resource.MustParse("16")}
	cases := map[string]struct {
		scope     v1alpha1.RestartScope
		answer    []Port
		wantScope v1alpha1.RestartScope
		wantPorts []corev1.ContainerPort
	}{
		"unset scope, no ports in the answer": {
			wantScope: v1alpha1.RestartScopeIndex,
			wantPorts: []corev1.ContainerPort{{Name: "coord", ContainerPort: 1234, Protocol: corev1.ProtocolTCP}},
		},
		"the run's scope wins": {
			scope:     v1alpha1.RestartScopeGang,
			wantScope: v1alpha1.RestartScopeGang,
			wantPorts: []corev1.ContainerPort{{Name: "coord", ContainerPort: 1234, Protocol: corev1.ProtocolTCP}},
		},
		"the answer's ports win": {
			answer:    []Port{{Name: "other", Port: 4321}},
			wantScope: v1alpha1.RestartScopeIndex,
			wantPorts: []corev1.ContainerPort{{Name: "other", ContainerPort: 4321, Protocol: corev1.ProtocolTCP}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var seen RunSpec
			fake := &FakePlugin{
				InfoValue: Info{Name: "fw", DefaultRestartScope: v1alpha1.RestartScopeIndex, DefaultPorts: []Port{{Name: "coord", Port: 1234}}},
				RendezvousFunc: func(_ context.Context, run RunSpec) (Rendezvous, error) {
					seen = run
					return Rendezvous{Ports: tc.answer}, nil
				},
			}
			h := newFleet(t, func(string, int, func()) Plugin { return fake }).host(HostOptions{})
			run := makeRun("fw", "r")
			run.Spec.RestartScope = tc.scope
			run.Spec.Template.Spec.Containers = []corev1.Container{{Name: "trainer", Resources: corev1.ResourceRequirements{Limits: gpus, Requests: gpus}}}
			for range 2 { // the second answer is the cache's, and must say the same
				got, err := h.Resolve(context.Background(), run)
				if err != nil {
					t.Fatal(err)
				}
				if got.RestartScope != tc.wantScope {
					t.Errorf("Resolved.RestartScope = %q, want %q", got.RestartScope, tc.wantScope)
				}
				if diff := cmp.Diff(tc.wantPorts, got.Ports); diff != "" {
					t.Errorf("Resolved.Ports (-want +got):\n%s", diff)
				}
			}
			want := RunSpec{Name: "r", Namespace: "ns", Workers: 2, RestartScope: tc.wantScope,
				Worker: &Worker{Devices: map[corev1.ResourceName]int64{"nvidia.com/gpu": 8}}}
			if diff := cmp.Diff(want, seen, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("RunSpec seen by the plugin (-want +got):\n%s", diff)
			}
		})
	}
	none, err := newFleet(t, nil).host(HostOptions{}).Resolve(context.Background(), makeRun(v1alpha1.FrameworkNone, "r"))
	if err != nil || none.RestartScope != v1alpha1.RestartScopeGang {
		t.Errorf("framework none: Resolve = %+v, %v; want restart scope Gang, the API's default", none, err)
	}
}

// A plugin built before API version 2 keeps working: the host negotiates version 1 with it
// and drops, with a warning, the hints whose cause is an infrastructure cause (which
// version 1 allowed and the classifier ignores).
func TestHostVersion1Plugin(t *testing.T) {
	fake := named("old")
	fake.HintsValue = []HintPattern{
		{Pattern: "uncorrectable ECC error", Cause: v1alpha1.CauseGPUFault},
		{Pattern: "peer went away", Cause: v1alpha1.CausePeerFailure},
	}
	var logged syncBuffer
	h := newHost(HostOptions{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	h.locate = func(fw string) (string, error) { return "/x/" + fw, nil }
	h.launch = func(fw, path string) (*conn, error) { return testConnVersion(t, path, fake, 1), nil }
	t.Cleanup(h.Close)
	info, err := h.Info(context.Background(), "old")
	if err != nil || info.APIVersion != 1 {
		t.Fatalf("Info = %+v, %v; want the plugin loaded on API version 1", info, err)
	}
	hints, err := h.Hints(context.Background(), makeRun("old", "r"))
	if err != nil || len(hints) != 1 || hints[0].Cause != v1alpha1.CausePeerFailure {
		t.Errorf("Hints = %+v, %v; want only the PeerFailure hint", hints, err)
	}
	if !strings.Contains(logged.String(), "hint dropped") || !strings.Contains(logged.String(), "uncorrectable ECC error") {
		t.Errorf("no warning names the dropped hint; log:\n%s", logged.String())
	}
}

// API version 3: the roles, the default success policy and the workers' access reach the
// controller in Resolved; a run's own success policy wins over the plugin's default, also
// from the cache (the plugin never sees it); an older host is never sent them.
func TestHostVersion3Answer(t *testing.T) {
	answer := Rendezvous{
		Roles:          []Role{{Name: "chief", Replicas: 1}, {Name: "worker", Replicas: 1}},
		SuccessPolicy:  v1alpha1.SuccessPolicyLeader,
		ReadJobAndPods: true,
		Env:            []EnvVar{{Name: "TASK", Value: RoleRef + "/" + RoleIndexRef}},
	}
	fake := named("roles")
	fake.RendezvousFunc = func(context.Context, RunSpec) (Rendezvous, error) { return answer, nil }
	h := newFleet(t, func(string, int, func()) Plugin { return fake }).host(HostOptions{})
	got, err := h.Resolve(context.Background(), makeRun("roles", "r"))
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	want := Resolved{Env: []corev1.EnvVar{{Name: "TASK", Value: "$(FAULTLINE_ROLE)/$(FAULTLINE_ROLE_INDEX)"}}, RestartScope: v1alpha1.RestartScopeGang,
		SuccessPolicy: v1alpha1.SuccessPolicyLeader, Roles: answer.Roles, ReadJobAndPods: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Resolve (-want +got):\n%s", diff)
	}
	own := makeRun("roles", "r")
	own.Spec.SuccessPolicy = v1alpha1.SuccessPolicyAllWorkers
	if got, err := h.Resolve(context.Background(), own); err != nil || got.SuccessPolicy != v1alpha1.SuccessPolicyAllWorkers || fake.Calls("Rendezvous") != 1 {
		t.Errorf("a run that states AllWorkers: Resolve = %v, %v after %d calls; want AllWorkers from the cached answer", got.SuccessPolicy, err, fake.Calls("Rendezvous"))
	}

	old := newHost(HostOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	old.locate = func(fw string) (string, error) { return "/x/" + fw, nil }
	old.launch = func(fw, path string) (*conn, error) { return testConnVersion(t, path, fake, 2), nil }
	t.Cleanup(old.Close)
	_, err = old.Resolve(context.Background(), makeRun("roles", "r"))
	if err == nil || !strings.Contains(err.Error(), "needs plugin API version 3") {
		t.Errorf("a version 2 connection: Resolve err = %v; want the plugin's refusal to send version 3 fields", err)
	}
}

// A plugin that misstates its API version (one written without this SDK) is refused.
func TestHostRefusesAMisstatedAPIVersion(t *testing.T) {
	h := newHost(HostOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	h.locate = func(fw string) (string, error) { return "/x/" + fw, nil }
	h.launch = func(fw, path string) (*conn, error) {
		c := testConnVersion(t, path, named(fw), 1) // answers Info with API version 1
		c.version = 2                               // on a connection negotiated as 2
		return c, nil
	}
	t.Cleanup(h.Close)
	_, err := h.Rendezvous(context.Background(), makeRun("fw", "r"))
	checkPluginErr(t, err, "fw", ErrInvalidAnswer, "it reports API version 1, but version 2 was negotiated")
}

func TestHostResultIsACopy(t *testing.T) {
	fake := named("fw")
	fake.RendezvousFunc = func(context.Context, RunSpec) (Rendezvous, error) {
		return Rendezvous{Env: []EnvVar{{Name: "IP", FieldPath: "status.podIP"}}}, nil
	}
	h := newFleet(t, func(string, int, func()) Plugin { return fake }).host(HostOptions{})
	for range 2 {
		env, err := h.Rendezvous(context.Background(), makeRun("fw", "r"))
		if err != nil {
			t.Fatal(err)
		}
		if env[0].ValueFrom.FieldRef.FieldPath != "status.podIP" {
			t.Fatalf("cached answer was changed by a caller: %+v", env[0])
		}
		env[0].ValueFrom.FieldRef.FieldPath = "scribbled"
	}
}

func TestHostInvalidOptions(t *testing.T) {
	fake := named("fw")
	fake.RendezvousFunc = func(context.Context, RunSpec) (Rendezvous, error) {
		return Rendezvous{}, InvalidOptions("frameworkOptions.ps %q is not a number", "x")
	}
	f := newFleet(t, func(string, int, func()) Plugin { return fake })
	h := f.host(HostOptions{})
	_, err := h.Rendezvous(context.Background(), makeRun("fw", "r"))
	if !IsInvalidOptions(err) {
		t.Fatalf("err = %v, want an OptionsError", err)
	}
	want := `framework plugin "fw" (/plugins/faultline-plugin-fw): Rendezvous: frameworkOptions.ps "x" is not a number; fix: change the run's spec`
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("err = %q, want it to start with %q", err, want)
	}
	if starts, kills := f.count("fw"); starts != 1 || kills != 0 {
		t.Errorf("a refusal restarted or killed the plugin: %d starts, %d kills", starts, kills)
	}
}

// Every way a plugin can fail to load, and that the host goes on serving other frameworks.
func TestHostLoadFailures(t *testing.T) {
	cases := map[string]struct {
		plugin func(fw string) Plugin
		want   []string
		kind   error
	}{
		"bad regex hint": {
			plugin: func(fw string) Plugin {
				p := named(fw)
				p.HintsValue = []HintPattern{{Pattern: "(unclosed", Cause: v1alpha1.CausePeerFailure}}
				return p
			},
			want: []string{"FailureHints: plugin answered an invalid answer", `pattern "(unclosed"`, "fix: this is a bug in the plugin"},
			kind: ErrInvalidAnswer,
		},
		"hints error": {
			plugin: func(fw string) Plugin { p := named(fw); p.HintsErr = errors.New("no hints today"); return p },
			want:   []string{"FailureHints: plugin returned an error", "no hints today"},
			kind:   ErrFailed,
		},
		"info error": {
			plugin: func(fw string) Plugin { p := named(fw); p.InfoErr = errors.New("who am I"); return p },
			want:   []string{"Info: plugin returned an error", "who am I"},
			kind:   ErrFailed,
		},
		"wrong name": {
			plugin: func(string) Plugin { return named("someone-else") },
			want:   []string{`it calls itself "someone-else"`, "fix: install the plugin of framework"},
			kind:   ErrInvalidAnswer,
		},
		"infrastructure hint": {
			plugin: func(fw string) Plugin {
				p := named(fw)
				p.HintsValue = []HintPattern{{Pattern: "uncorrectable ECC error", Cause: v1alpha1.CauseGPUFault}}
				return p
			},
			want: []string{"FailureHints: plugin answered an invalid answer", "cause GPUFault is an infrastructure cause", "fix: this is a bug in the plugin"},
			kind: ErrInvalidAnswer,
		},
		"info panics": {
			plugin: func(fw string) Plugin {
				return &panicky{Plugin: named(fw), method: "Info"}
			},
			want: []string{"Info: plugin returned an error", "plugin panicked in Info"},
			kind: ErrFailed,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFleet(t, func(fw string, _ int, _ func()) Plugin {
				if fw == "broken" {
					return tc.plugin(fw)
				}
				return named(fw)
			})
			h := f.host(HostOptions{})
			_, err := h.Rendezvous(context.Background(), makeRun("broken", "r"))
			checkPluginErr(t, err, "broken", tc.kind, tc.want...)
			if _, err := h.Hints(context.Background(), makeRun("broken", "r")); !errors.Is(err, tc.kind) {
				t.Errorf("Hints of a plugin that never loaded: %v, want %v", err, tc.kind)
			}
			if starts, kills := f.count("broken"); starts != 1 || kills != 1 {
				t.Errorf("broken plugin: %d starts, %d kills; want 1 start (then it is left alone), killed", starts, kills)
			}
			if _, err := h.Rendezvous(context.Background(), makeRun("good", "r")); err != nil {
				t.Errorf("the host stopped serving another framework: %v", err)
			}
		})
	}
}

func TestHostNotFound(t *testing.T) {
	h := newFleet(t, nil).host(HostOptions{})
	_, err := h.Rendezvous(context.Background(), makeRun("missing-fw", "r"))
	checkPluginErr(t, err, "missing-fw", ErrNotFound, `framework plugin "missing-fw": start: plugin not found`, "fix: install faultline-plugin-missing-fw into PATH")

	_, err = h.Rendezvous(context.Background(), makeRun("../etc", "r"))
	checkPluginErr(t, err, "../etc", ErrNotFound, `"../etc" is not a valid framework name`)
}

func TestHostGarbageAnswer(t *testing.T) {
	f := newFleet(t, func(fw string, _ int, _ func()) Plugin {
		p := named(fw)
		if fw == "garbage" {
			p.RendezvousFunc = func(context.Context, RunSpec) (Rendezvous, error) {
				return Rendezvous{Env: []EnvVar{{Name: "BAD NAME", Value: "$(UNDEFINED)"}}}, nil
			}
		}
		return p
	})
	h := f.host(HostOptions{})
	for range 2 {
		_, err := h.Rendezvous(context.Background(), makeRun("garbage", "r"))
		checkPluginErr(t, err, "garbage", ErrInvalidAnswer, `env[0] name "BAD NAME"`, "refers to $(UNDEFINED)", "fix: this is a bug in the plugin")
	}
	if starts, kills := f.count("garbage"); starts != 1 || kills != 0 {
		t.Errorf("garbage answers: %d starts, %d kills; want the plugin kept (an answer for one run may be wrong, not the plugin)", starts, kills)
	}
	if _, err := h.Rendezvous(context.Background(), makeRun("good", "r")); err != nil {
		t.Errorf("another framework: %v", err)
	}
}

func TestHostRestartsACrashedPluginOnce(t *testing.T) {
	f := newFleet(t, func(fw string, n int, die func()) Plugin {
		p := named(fw)
		p.RendezvousFunc = func(context.Context, RunSpec) (Rendezvous, error) {
			if n == 1 { // the first process crashes, its replacement serves
				die()
				return Rendezvous{}, unavailable
			}
			return Rendezvous{Env: []EnvVar{{Name: "OK", Value: "1"}}}, nil
		}
		return p
	})
	h := f.host(HostOptions{})
	env, err := h.Rendezvous(context.Background(), makeRun("fw", "r"))
	if err != nil {
		t.Fatalf("Rendezvous after one crash: %v", err)
	}
	if len(env) != 1 || env[0].Name != "OK" {
		t.Errorf("env = %v", env)
	}
	if starts, kills := f.count("fw"); starts != 2 || kills != 1 {
		t.Errorf("%d starts, %d kills; want the crashed process reaped and one restart", starts, kills)
	}
}

func TestHostCrashingPluginIsReportedAndLeftAlone(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Now())
	f := newFleet(t, func(fw string, _ int, die func()) Plugin {
		p := named(fw)
		p.RendezvousFunc = func(context.Context, RunSpec) (Rendezvous, error) {
			die()
			return Rendezvous{}, unavailable
		}
		return p
	})
	h := f.host(HostOptions{Clock: clock, RetryAfter: time.Minute})
	_, err := h.Rendezvous(context.Background(), makeRun("fw", "r"))
	checkPluginErr(t, err, "fw", ErrCrashed, "Rendezvous: plugin crashed, and crashed again after one restart", "fix: the plugin's stderr", "tries it again in 1m0s")
	if starts, _ := f.count("fw"); starts != 2 {
		t.Fatalf("%d starts, want 2 (one restart)", starts)
	}

	// Within RetryAfter the host answers at once, without starting it again.
	_, err2 := h.Rendezvous(context.Background(), makeRun("fw", "other"))
	if err2 == nil || err2.Error() != err.Error() {
		t.Errorf("second call: %v, want the remembered %v", err2, err)
	}
	if starts, _ := f.count("fw"); starts != 2 {
		t.Errorf("%d starts within RetryAfter, want still 2", starts)
	}

	// After it, the plugin gets another chance (a start and a restart).
	clock.SetTime(clock.Now().Add(time.Minute))
	if _, err := h.Rendezvous(context.Background(), makeRun("fw", "r")); !errors.Is(err, ErrCrashed) {
		t.Errorf("after RetryAfter: %v", err)
	}
	if starts, _ := f.count("fw"); starts != 4 {
		t.Errorf("%d starts after RetryAfter, want 4", starts)
	}
}

func TestHostCrashedPluginThatCannotRestart(t *testing.T) {
	f := newFleet(t, func(fw string, n int, die func()) Plugin {
		p := named(fw)
		p.RendezvousFunc = func(context.Context, RunSpec) (Rendezvous, error) {
			die()
			return Rendezvous{}, unavailable
		}
		if n > 1 {
			p.HintsValue = []HintPattern{{Pattern: "(", Cause: v1alpha1.CausePeerFailure}}
		}
		return p
	})
	h := f.host(HostOptions{})
	_, err := h.Rendezvous(context.Background(), makeRun("fw", "r"))
	checkPluginErr(t, err, "fw", ErrCrashed, "Rendezvous: plugin crashed (rpc error: code = Unavailable", "and restarting it failed: plugin answered an invalid answer", "fix: this is a bug in the plugin")
	if !errors.Is(err, ErrInvalidAnswer) {
		t.Errorf("err %v does not wrap the restart's failure", err)
	}
}

func TestHostPluginThatExitedWhileIdleIsStartedAgain(t *testing.T) {
	var dies []func()
	f := newFleet(t, func(fw string, _ int, die func()) Plugin {
		dies = append(dies, die)
		return named(fw)
	})
	h := f.host(HostOptions{})
	if _, err := h.Rendezvous(context.Background(), makeRun("fw", "a")); err != nil {
		t.Fatal(err)
	}
	dies[0]() // e.g. OOM-killed between two runs
	if _, err := h.Rendezvous(context.Background(), makeRun("fw", "b")); err != nil {
		t.Fatalf("Rendezvous after the plugin exited: %v", err)
	}
	if starts, kills := f.count("fw"); starts != 2 || kills != 1 {
		t.Errorf("%d starts, %d kills; want 2, 1", starts, kills)
	}
}

func TestHostKillsAHungPlugin(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	clock := clocktesting.NewFakePassiveClock(time.Now())
	f := newFleet(t, func(fw string, _ int, _ func()) Plugin {
		p := named(fw)
		p.RendezvousFunc = func(context.Context, RunSpec) (Rendezvous, error) {
			<-release // ignores its context, like a plugin stuck in a syscall
			return Rendezvous{}, nil
		}
		return p
	})
	h := f.host(HostOptions{CallTimeout: 100 * time.Millisecond, Clock: clock})
	start := time.Now()
	_, err := h.Rendezvous(context.Background(), makeRun("fw", "r"))
	checkPluginErr(t, err, "fw", ErrTimeout, "Rendezvous: plugin did not answer in time: no answer within 100ms, so the plugin process was killed", "--plugin-call-timeout")
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the call took %s", took)
	}
	if starts, kills := f.count("fw"); starts != 1 || kills != 1 {
		t.Errorf("%d starts, %d kills; want the hung plugin killed", starts, kills)
	}
	// Left alone for RetryAfter: the next call does not wait for another timeout.
	start = time.Now()
	if _, err := h.Rendezvous(context.Background(), makeRun("fw", "r")); !errors.Is(err, ErrTimeout) {
		t.Errorf("second call: %v", err)
	}
	if took := time.Since(start); took > 50*time.Millisecond {
		t.Errorf("second call took %s; want the remembered failure at once", took)
	}
}

func TestHostHintsSurviveAPluginOutage(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Now())
	var dies []func()
	f := newFleet(t, func(fw string, n int, die func()) Plugin {
		dies = append(dies, die)
		p := named(fw)
		p.HintsValue = []HintPattern{{Pattern: "peer", Cause: v1alpha1.CausePeerFailure}}
		if n > 1 {
			p.InfoErr = errors.New("broken by an upgrade")
		}
		return p
	})
	h := f.host(HostOptions{Clock: clock})
	if _, err := h.Hints(context.Background(), makeRun("fw", "r")); err != nil {
		t.Fatal(err)
	}
	dies[0]()
	hints, err := h.Hints(context.Background(), makeRun("fw", "r"))
	if err != nil || len(hints) != 1 {
		t.Errorf("Hints while the plugin cannot start = %v, %v; want the last good hints", hints, err)
	}
	if _, err := h.Rendezvous(context.Background(), makeRun("fw", "r")); !errors.Is(err, ErrFailed) {
		t.Errorf("Rendezvous while the plugin cannot start: %v", err)
	}
}

func TestHostClose(t *testing.T) {
	f := newFleet(t, func(fw string, _ int, _ func()) Plugin { return named(fw) })
	h := f.host(HostOptions{})
	for _, fw := range []string{"a", "b"} {
		if _, err := h.Rendezvous(context.Background(), makeRun(fw, "r")); err != nil {
			t.Fatal(err)
		}
	}
	h.Close()
	for _, fw := range []string{"a", "b"} {
		if _, kills := f.count(fw); kills != 1 {
			t.Errorf("plugin %s killed %d times by Close, want 1", fw, kills)
		}
	}
	if _, err := h.Rendezvous(context.Background(), makeRun("a", "r")); !errors.Is(err, ErrClosed) {
		t.Errorf("Rendezvous after Close: %v", err)
	}
	if _, err := h.Hints(context.Background(), makeRun("c", "r")); !errors.Is(err, ErrClosed) {
		t.Errorf("Hints of a new framework after Close: %v", err)
	}
	if starts, _ := f.count("c"); starts != 0 {
		t.Errorf("a plugin was started after Close")
	}
}

func TestHostCanceledCallIsNotHeldAgainstThePlugin(t *testing.T) {
	fake := named("fw")
	h := newFleet(t, func(string, int, func()) Plugin { return fake }).host(HostOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.Rendezvous(ctx, makeRun("fw", "r")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Rendezvous with a canceled context: %v", err)
	}
	if _, err := h.Rendezvous(context.Background(), makeRun("fw", "r")); err != nil {
		t.Errorf("the next call failed: %v", err)
	}
}

func TestHostPassesTheRunsTraceparent(t *testing.T) {
	var seen trace.SpanContext
	fake := named("fw")
	fake.RendezvousFunc = func(ctx context.Context, _ RunSpec) (Rendezvous, error) {
		seen = trace.SpanContextFromContext(ctx)
		return Rendezvous{}, nil
	}
	h := newFleet(t, func(string, int, func()) Plugin { return fake }).host(HostOptions{})
	run := makeRun("fw", "r")
	run.Annotations = map[string]string{v1alpha1.AnnotationTraceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	if _, err := h.Rendezvous(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	if got := seen.TraceID().String(); got != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("plugin saw trace %q", got)
	}
}

// A panic on the host's side of a call (here: an in-process Plugin that panics) is an
// error, not a crashed controller.
func TestHostRecoversPanics(t *testing.T) {
	h := newHost(HostOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	h.locate = func(fw string) (string, error) { return "/x/" + fw, nil }
	h.launch = func(fw, path string) (*conn, error) {
		return &conn{path: path, plugin: &panicky{Plugin: named(fw), method: "Rendezvous"}, version: APIVersion, kill: func() {}, exited: func() bool { return false }}, nil
	}
	_, err := h.Rendezvous(context.Background(), makeRun("fw", "r"))
	checkPluginErr(t, err, "fw", ErrFailed, "panic in the host while talking to the plugin: Rendezvous exploded")
}

func TestHostConcurrentCalls(t *testing.T) {
	f := newFleet(t, func(fw string, _ int, _ func()) Plugin {
		p := named(fw)
		p.RendezvousFunc = func(_ context.Context, run RunSpec) (Rendezvous, error) {
			return Rendezvous{Env: []EnvVar{{Name: "RUN", Value: run.Name}}}, nil
		}
		return p
	})
	h := f.host(HostOptions{})
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			fw := []string{"a", "b"}[i%2]
			run := makeRun(fw, fmt.Sprintf("r%d", i%5))
			env, err := h.Rendezvous(context.Background(), run)
			if err != nil || len(env) != 1 || env[0].Value != run.Name {
				t.Errorf("Rendezvous(%s/%s) = %v, %v", fw, run.Name, env, err)
			}
			if _, err := h.Hints(context.Background(), run); err != nil {
				t.Errorf("Hints: %v", err)
			}
		})
	}
	wg.Wait()
	for _, fw := range []string{"a", "b"} {
		if starts, _ := f.count(fw); starts != 1 {
			t.Errorf("plugin %s started %d times by concurrent first calls, want 1", fw, starts)
		}
	}
}

// panicky panics in one method.
type panicky struct {
	Plugin
	method string
}

func (p *panicky) Info(ctx context.Context) (Info, error) {
	if p.method == "Info" {
		panic("Info exploded")
	}
	return p.Plugin.Info(ctx)
}

func (p *panicky) Rendezvous(ctx context.Context, run RunSpec) (Rendezvous, error) {
	if p.method == "Rendezvous" {
		panic("Rendezvous exploded")
	}
	return p.Plugin.Rendezvous(ctx, run)
}

// checkPluginErr checks that err is a PluginError about framework, of kind, whose message
// contains each of want.
func checkPluginErr(t *testing.T, err error, framework string, kind error, want ...string) {
	t.Helper()
	var pe *PluginError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v (%T), want a *PluginError", err, err)
	}
	if pe.Framework != framework {
		t.Errorf("PluginError.Framework = %q, want %q", pe.Framework, framework)
	}
	if !errors.Is(err, kind) {
		t.Errorf("err %q is not %v", err, kind)
	}
	if pe.Fix == "" {
		t.Errorf("err %q says nothing about a fix", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("err %q does not contain %q", err, w)
		}
	}
}

// TestPluginSeesDRAGPUs (issue 58): the GPUs a run asks for through DRA (spec.gpus) are
// devices of the worker a plugin is told of, under the name Kubernetes gives a DeviceClass's
// devices as a resource: PyTorch's plugin starts a process per GPU whichever way they come.
func TestPluginSeesDRAGPUs(t *testing.T) {
	run := makeRun("fw", "r")
	run.Spec.Template.Spec.Containers = []corev1.Container{{Name: "trainer"}}
	run.Spec.GPUs = &v1alpha1.GPUClaim{DeviceClassName: "gpu.nvidia.com", Count: 4}
	got := SpecOf(run).Worker
	want := &Worker{Devices: map[corev1.ResourceName]int64{"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 4}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Worker of a run with spec.gpus (-want +got):\n%s", diff)
	}
}
