package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/sandbox"
)

// The tests in this file start real plugin processes: the TensorFlow, JAX and PyTorch
// plugins and testdata/brokenplugin, built once per test binary (skipped with -short).

var (
	goTool    string // found before any test changes PATH
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// confinedEnv makes the test binary play the launcher's plugin-sandbox command: it confines
// itself and becomes the plugin named by its last argument.
const confinedEnv = "FAULTLINE_FRAMEWORK_TEST_CONFINE"

func TestMain(m *testing.M) {
	if os.Getenv(confinedEnv) != "" {
		plugin := os.Args[len(os.Args)-1]
		fmt.Fprintln(os.Stderr, sandbox.Exec(plugin, []string{plugin}))
		os.Exit(3)
	}
	goTool, _ = exec.LookPath("go")
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// built returns the directory with the built binaries tensorflow, jax, pytorch and
// brokenplugin.
func built(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and starts plugin processes; skipped with -short")
	}
	buildOnce.Do(func() {
		if goTool == "" {
			buildErr = errors.New("no go tool in PATH")
			return
		}
		buildDir, buildErr = os.MkdirTemp("", "faultline-plugins-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command(goTool, "build", "-o", buildDir+string(filepath.Separator),
			"github.com/faultline-dev/faultline/plugins/tensorflow",
			"github.com/faultline-dev/faultline/plugins/jax",
			"github.com/faultline-dev/faultline/plugins/pytorch",
			"github.com/faultline-dev/faultline/pkg/framework/testdata/brokenplugin")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

// install puts the built binary bin into dir as faultline-plugin-<framework>.
func install(t *testing.T, dir, bin, framework string) string {
	t.Helper()
	dst := filepath.Join(dir, BinaryPrefix+framework)
	if err := os.Symlink(filepath.Join(built(t), bin), dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

// syncBuffer collects the plugins' log.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func processHost(t *testing.T, opts HostOptions) (*Host, *syncBuffer) {
	t.Helper()
	log := &syncBuffer{}
	opts.PluginLog = log
	h := NewHost(opts)
	t.Cleanup(func() {
		h.Close()
		if t.Failed() {
			t.Logf("plugin log:\n%s", log)
		}
	})
	return h, log
}

// pidOf is the process id of the framework's running plugin, 0 if none.
func pidOf(h *Host, framework string) int {
	h.mu.Lock()
	s := h.slots[framework]
	h.mu.Unlock()
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return 0
	}
	return s.cur.conn.pid
}

// gone waits for the process to disappear (go-plugin reaps its children).
func gone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("plugin process %d is still there", pid)
}

func starts(t *testing.T, state, mode string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(state, mode+".starts"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

func envValue(t *testing.T, h *Host, run *v1alpha1.TrainingRun, name string) string {
	t.Helper()
	env, err := h.Rendezvous(context.Background(), run)
	if err != nil {
		t.Fatalf("Rendezvous(%s): %v", run.Spec.Framework, err)
	}
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	t.Fatalf("Rendezvous(%s) has no %s: %v", run.Spec.Framework, name, env)
	return ""
}

func TestProcessRealPlugins(t *testing.T) {
	dir := t.TempDir()
	install(t, dir, "tensorflow", "tensorflow")
	install(t, dir, "jax", "jax")
	install(t, dir, "pytorch", "pytorch")
	h, _ := processHost(t, HostOptions{PluginDir: dir})
	ctx := context.Background()

	tf := makeRun("tensorflow", "mnist")
	tf.Spec.Workers = 3
	want := `{"cluster":{"worker":["mnist-0.mnist.ns.svc:2222","mnist-1.mnist.ns.svc:2222","mnist-2.mnist.ns.svc:2222"]},"task":{"type":"worker","index":$(FAULTLINE_INDEX)}}`
	if got := envValue(t, h, tf, "TF_CONFIG"); got != want {
		t.Errorf("TF_CONFIG = %s, want %s", got, want)
	}
	jax := makeRun("jax", "lm")
	if got := envValue(t, h, jax, "JAX_COORDINATOR_ADDRESS"); got != "lm-0.lm.ns.svc:1234" {
		t.Errorf("JAX_COORDINATOR_ADDRESS = %q", got)
	}

	torch := makeRun("pytorch", "gpt")
	torch.Spec.Template.Spec.Containers = []corev1.Container{{Name: "trainer", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}}}
	if got := envValue(t, h, torch, "PET_NPROC_PER_NODE"); got != "8" {
		t.Errorf("PET_NPROC_PER_NODE = %q: the worker's 8 GPUs did not reach the plugin process", got)
	}

	for _, fw := range []string{"tensorflow", "jax", "pytorch"} {
		info, err := h.Info(ctx, fw)
		if err != nil || info.Name != fw || info.APIVersion != APIVersion || info.DefaultRestartScope != v1alpha1.RestartScopeGang {
			t.Errorf("Info(%s) = %+v, %v", fw, info, err)
		}
		hints, err := h.Hints(ctx, makeRun(fw, "r"))
		if err != nil || len(hints) == 0 {
			t.Errorf("Hints(%s) = %d hints, %v", fw, len(hints), err)
		}
		for _, hint := range hints {
			if hint.Source != fw {
				t.Errorf("hint %q of %s has source %q", hint.Pattern, fw, hint.Source)
			}
		}
	}

	pids := []int{pidOf(h, "tensorflow"), pidOf(h, "jax"), pidOf(h, "pytorch")}
	h.Close()
	for _, pid := range pids {
		if pid == 0 {
			t.Fatal("no plugin process recorded")
		}
		gone(t, pid)
	}
}

// TestProcessPluginsRunConfined: plugins started as the controller starts them, confined
// (sandbox.Command; here the test binary plays the launcher), make their socket in the
// directory they are given and answer as they do unconfined.
func TestProcessPluginsRunConfined(t *testing.T) {
	if _, err := sandbox.Supported(); err != nil {
		t.Skipf("plugins run unconfined here: %v", err)
	}
	dir := t.TempDir()
	install(t, dir, "jax", "jax")
	install(t, dir, "pytorch", "pytorch")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h, _ := processHost(t, HostOptions{PluginDir: dir, Command: func(path string) *exec.Cmd {
		cmd := exec.Command(exe, "--", path)
		cmd.Env = []string{confinedEnv + "=1"}
		return cmd
	}})
	if got := envValue(t, h, makeRun("jax", "lm"), "JAX_COORDINATOR_ADDRESS"); got != "lm-0.lm.ns.svc:1234" {
		t.Errorf("JAX_COORDINATOR_ADDRESS = %q", got)
	}
	if hints, err := h.Hints(context.Background(), makeRun("pytorch", "r")); err != nil || len(hints) == 0 {
		t.Errorf("Hints(pytorch) = %d hints, %v", len(hints), err)
	}
}

// A plugin binary built before API version 2 (it offers only version 1) is started, spoken
// to on version 1, and its infrastructure hint dropped; a current binary negotiates 2.
func TestProcessVersionNegotiation(t *testing.T) {
	dir := t.TempDir()
	install(t, dir, "brokenplugin", "apiv1")
	install(t, dir, "jax", "jax")
	h, log := processHost(t, HostOptions{PluginDir: dir})
	ctx := context.Background()
	for fw, want := range map[string]int{"apiv1": 1, "jax": APIVersion} {
		info, err := h.Info(ctx, fw)
		if err != nil || info.APIVersion != want {
			t.Errorf("Info(%s) = %+v, %v; want API version %d", fw, info, err, want)
		}
	}
	if got := envValue(t, h, makeRun("apiv1", "r"), "RUN"); got != "r" {
		t.Errorf("the version 1 plugin answered RUN=%q", got)
	}
	hints, err := h.Hints(ctx, makeRun("apiv1", "r"))
	if err != nil || len(hints) != 1 || hints[0].Pattern.String() != "peer went away" {
		t.Errorf("Hints(apiv1) = %v, %v; want only the PeerFailure hint", hints, err)
	}
	_ = log
}

func TestProcessDiscovery(t *testing.T) {
	t.Run("PATH when the plugin directory has none", func(t *testing.T) {
		pathDir := t.TempDir()
		bin := install(t, pathDir, "jax", "jax")
		t.Setenv("PATH", pathDir)
		h, _ := processHost(t, HostOptions{PluginDir: t.TempDir()})
		envValue(t, h, makeRun("jax", "r"), "JAX_COORDINATOR_ADDRESS")
		if got := h.slots["jax"].cur.conn.path; got != bin {
			t.Errorf("started %s, want %s", got, bin)
		}
	})
	t.Run("the plugin directory before PATH", func(t *testing.T) {
		pluginDir, pathDir := t.TempDir(), t.TempDir()
		install(t, pluginDir, "jax", "jax")
		install(t, pathDir, "brokenplugin", "jax") // a different jax plugin
		t.Setenv("PATH", pathDir)
		h, _ := processHost(t, HostOptions{PluginDir: pluginDir})
		envValue(t, h, makeRun("jax", "r"), "JAX_COORDINATOR_ADDRESS")
	})
	t.Run("not executable", func(t *testing.T) {
		dir := t.TempDir()
		p := filepath.Join(dir, BinaryPrefix+"jax")
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		h, _ := processHost(t, HostOptions{PluginDir: dir})
		_, err := h.Rendezvous(context.Background(), makeRun("jax", "r"))
		checkPluginErr(t, err, "jax", ErrNotFound, p+" is not executable (mode -rw-r--r--)")
	})
	t.Run("nowhere", func(t *testing.T) {
		dir := t.TempDir()
		install(t, dir, "tensorflow", "tensorflow")
		install(t, dir, "jax", "jax")
		t.Setenv("PATH", t.TempDir())
		h, _ := processHost(t, HostOptions{PluginDir: dir})
		_, err := h.Rendezvous(context.Background(), makeRun("pytorch", "r"))
		checkPluginErr(t, err, "pytorch", ErrNotFound,
			`framework plugin "pytorch": start: plugin not found: no executable faultline-plugin-pytorch in the plugin directory `+dir+` or in PATH`,
			`fix: install faultline-plugin-pytorch into the controller's --plugin-dir (`+dir+`) or PATH, or set spec.framework to an installed framework (none, jax, tensorflow)`)
	})
}

// TestProcessBrokenPlugins runs every broken plugin through one host, which goes on
// serving TensorFlow after each.
func TestProcessBrokenPlugins(t *testing.T) {
	state := t.TempDir()
	t.Setenv("FAULTLINE_TEST_STATE_DIR", state)
	dir := t.TempDir()
	install(t, dir, "tensorflow", "tensorflow")
	notAPlugin := filepath.Join(dir, BinaryPrefix+"notaplugin")
	if err := os.WriteFile(notAPlugin, []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h, log := processHost(t, HostOptions{PluginDir: dir, CallTimeout: time.Second})

	cases := []struct {
		mode       string
		kind       error
		want       []string
		wantStarts int  // 0: not counted (not the broken binary)
		killed     bool // the process must be gone afterwards
	}{
		{mode: "crash", kind: ErrCrashed, wantStarts: 2, killed: true,
			want: []string{"Rendezvous: plugin crashed", "and crashed again after one restart", "fix: the plugin's stderr"}},
		{mode: "hang", kind: ErrTimeout, wantStarts: 1, killed: true,
			want: []string{"Rendezvous: plugin did not answer in time: no answer within 1s, so the plugin process was killed"}},
		{mode: "freeze", kind: ErrTimeout, wantStarts: 1, killed: true,
			want: []string{"no answer within 1s, so the plugin process was killed"}},
		{mode: "panic", kind: ErrFailed, wantStarts: 1,
			want: []string{"Rendezvous: plugin returned an error", "plugin panicked in Rendezvous: brokenplugin: panicking on purpose"}},
		{mode: "garbageenv", kind: ErrInvalidAnswer, wantStarts: 1,
			want: []string{`env[0] name "NOT VALID" is not a valid variable name`, "refers to $(NOWHERE)", "env[1] FAULTLINE_INDEX is set by the controller", "fix: this is a bug in the plugin"}},
		{mode: "badregex", kind: ErrInvalidAnswer, wantStarts: 1, killed: true,
			want: []string{"FailureHints: plugin answered an invalid answer", `pattern "(unclosed": error parsing regexp`}},
		{mode: "wrongname", kind: ErrInvalidAnswer, wantStarts: 1, killed: true,
			want: []string{`Info: plugin answered an invalid answer: it calls itself "someone-else", but it was installed as the plugin of framework "wrongname"`}},
		{mode: "apiv99", kind: ErrStart, wantStarts: 1, killed: true,
			want: []string{"start: plugin did not start", "incompatible API version with plugin", "Plugin version: 99", "fix: install a faultline framework plugin built for plugin API version 1 to 3"}},
		{mode: "exitatstart", kind: ErrStart, wantStarts: 1,
			want: []string{"start: plugin did not start", "Failed to read any lines from plugin's stdout"}},
		{mode: "notaplugin", kind: ErrStart,
			want: []string{"start: plugin did not start", "Unrecognized remote plugin message: hello"}},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			if tc.mode != "notaplugin" {
				install(t, dir, "brokenplugin", tc.mode)
			}
			run := makeRun(tc.mode, "r")
			_, err := h.Rendezvous(context.Background(), run)
			checkPluginErr(t, err, tc.mode, tc.kind, tc.want...)
			if !strings.Contains(err.Error(), filepath.Join(dir, BinaryPrefix+tc.mode)) {
				t.Errorf("error %q does not name the binary", err)
			}
			if tc.wantStarts > 0 {
				pids := starts(t, state, tc.mode)
				if len(pids) != tc.wantStarts {
					t.Errorf("plugin started %d times (%v), want %d", len(pids), pids, tc.wantStarts)
				}
				if tc.killed {
					for _, p := range pids {
						var pid int
						fmt.Sscan(p, &pid)
						gone(t, pid)
					}
				}
			}
			// The remembered failure is answered at once, without a new process.
			before := len(starts(t, state, tc.mode))
			t0 := time.Now()
			if _, err2 := h.Rendezvous(context.Background(), run); tc.kind != ErrFailed && tc.kind != ErrInvalidAnswer && !errors.Is(err2, tc.kind) {
				t.Errorf("second call: %v", err2)
			}
			if tc.killed && time.Since(t0) > 500*time.Millisecond {
				t.Errorf("second call took %s", time.Since(t0))
			}
			if after := len(starts(t, state, tc.mode)); after != before {
				t.Errorf("second call started the plugin again (%d starts, then %d)", before, after)
			}
			// Other frameworks are served all along.
			if v := envValue(t, h, makeRun("tensorflow", "ok-"+tc.mode), "TF_CONFIG"); !strings.Contains(v, "ok-"+tc.mode+"-0") {
				t.Errorf("TF_CONFIG after the %s plugin failed: %s", tc.mode, v)
			}
		})
	}
	eventually(t, func() bool { return strings.Contains(log.String(), "panic: brokenplugin: crashing on purpose") }, "a crashed plugin's stderr is in the plugin log")
	eventually(t, func() bool {
		return strings.Contains(log.String(), `"@level":"error","@message":"framework plugin panicked in Rendezvous: brokenplugin: panicking on purpose"`)
	}, "a panicking plugin's stack is in the plugin log")
}

func TestProcessCrashedPluginIsRestartedOnce(t *testing.T) {
	state := t.TempDir()
	t.Setenv("FAULTLINE_TEST_STATE_DIR", state)
	dir := t.TempDir()
	install(t, dir, "brokenplugin", "crashonce")
	h, log := processHost(t, HostOptions{PluginDir: dir})
	if got := envValue(t, h, makeRun("crashonce", "r"), "BROKEN_PLUGIN_MODE"); got != "crashonce" {
		t.Errorf("BROKEN_PLUGIN_MODE = %q", got)
	}
	pids := starts(t, state, "crashonce")
	if len(pids) != 2 {
		t.Fatalf("plugin started %d times, want 2 (one restart after the crash)", len(pids))
	}
	var first int
	fmt.Sscan(pids[0], &first)
	gone(t, first)
	// The restarted plugin serves further runs.
	if got := envValue(t, h, makeRun("crashonce", "other"), "RUN"); got != "other" {
		t.Errorf("RUN = %q", got)
	}
	// The crash's panic (the runtime's, on the real stderr) and what the plugin printed
	// (streamed by go-plugin) are in the plugin log.
	for _, want := range []string{"panic: brokenplugin: crashing on purpose", `"@message":"brokenplugin: rendezvous for run other","@module":"framework-plugin.crashonce","@timestamp":`} {
		eventually(t, func() bool { return strings.Contains(log.String(), want) }, "plugin log has %q", want)
	}
}

// eventually waits up to 5 s for cond.
func eventually(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Errorf("timed out waiting until "+format, args...)
}
