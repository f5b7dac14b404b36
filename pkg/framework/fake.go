package framework

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-plugin"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// FakePlugin is a Plugin for tests, with error injection. Its zero value answers like a
// well-behaved plugin of framework "fake" with no environment and no hints.
type FakePlugin struct {
	// InfoValue is Info's answer; its Name defaults to "fake" and its APIVersion to
	// APIVersion, its restart scope to Gang.
	InfoValue Info
	InfoErr   error
	// RendezvousFunc answers Rendezvous (default: an empty Rendezvous).
	RendezvousFunc func(ctx context.Context, run RunSpec) (Rendezvous, error)
	HintsValue     []HintPattern
	HintsErr       error

	mu    sync.Mutex
	calls map[string]int
}

var _ Plugin = (*FakePlugin)(nil)

func (f *FakePlugin) count(method string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[method]++
}

// Calls returns how often method ("Info", "Rendezvous", "FailureHints") was called.
func (f *FakePlugin) Calls(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

func (f *FakePlugin) Info(context.Context) (Info, error) {
	f.count("Info")
	info := f.InfoValue
	if info.Name == "" {
		info.Name = "fake"
	}
	if info.APIVersion == 0 {
		info.APIVersion = APIVersion
	}
	if info.DefaultRestartScope == "" {
		info.DefaultRestartScope = v1alpha1.RestartScopeGang
	}
	return info, f.InfoErr
}

func (f *FakePlugin) Rendezvous(ctx context.Context, run RunSpec) (Rendezvous, error) {
	f.count("Rendezvous")
	if f.RendezvousFunc != nil {
		return f.RendezvousFunc(ctx, run)
	}
	return Rendezvous{}, nil
}

func (f *FakePlugin) FailureHints(context.Context) ([]HintPattern, error) {
	f.count("FailureHints")
	return f.HintsValue, f.HintsErr
}

// NewTestHost returns a Host whose plugins are served in process, over a real gRPC
// connection (go-plugin's TestPluginGRPCConn), keyed by framework name: everything but the
// process and the handshake is the production path. The host is closed at the end of the
// test.
func NewTestHost(t testing.TB, opts HostOptions, plugins map[string]Plugin) *Host {
	h := newHost(opts)
	h.locate = func(framework string) (string, error) {
		if _, ok := plugins[framework]; !ok {
			return "", fmt.Errorf("%w: no in-process plugin for framework %q", ErrNotFound, framework)
		}
		return "in-process:" + framework, nil
	}
	h.launch = func(framework, path string) (*conn, error) {
		return testConn(t, path, plugins[framework]), nil
	}
	t.Cleanup(h.Close)
	return h
}

// testConn serves impl in process and returns the host's connection to it.
func testConn(t testing.TB, path string, impl Plugin) *conn {
	return testConnVersion(t, path, impl, APIVersion)
}

// testConnVersion is testConn as if go-plugin had negotiated version: the plugin side
// serves that version's plugin set, and the host knows the connection by it.
func testConnVersion(t testing.TB, path string, impl Plugin, version int) *conn {
	client, _ := plugin.TestPluginGRPCConn(t, false, PluginSets(impl)[version])
	raw, err := client.Dispense(PluginName)
	if err != nil {
		t.Fatalf("dispense in-process plugin: %v", err)
	}
	var stopped atomic.Bool
	return &conn{
		path:    path,
		plugin:  raw.(Plugin),
		version: version,
		kill: func() {
			// Closing the client asks the server to stop (go-plugin's controller Shutdown);
			// stopping it here as well would race with that.
			if stopped.CompareAndSwap(false, true) {
				_ = client.Close()
			}
		},
		exited: stopped.Load,
	}
}
