package framework

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-plugin"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	frameworkpb "github.com/faultline-dev/faultline/pkg/framework/proto"
)

// dispense serves impl in process over gRPC, the way nomad's plugins/base tests do, and
// returns the host-side Plugin.
func dispense(t *testing.T, impl Plugin) Plugin {
	t.Helper()
	return dispenseVersion(t, impl, APIVersion)
}

// dispenseVersion is dispense on a connection of the given API version.
func dispenseVersion(t *testing.T, impl Plugin, version int) Plugin {
	t.Helper()
	client, _ := plugin.TestPluginGRPCConn(t, false, PluginSets(impl)[version])
	t.Cleanup(func() { _ = client.Close() }) // which stops the server too
	raw, err := client.Dispense(PluginName)
	if err != nil {
		t.Fatalf("Dispense: %v", err)
	}
	p, ok := raw.(Plugin)
	if !ok {
		t.Fatalf("dispensed %T, not a Plugin", raw)
	}
	return p
}

func TestGRPCRoundTrip(t *testing.T) {
	info := Info{
		Name: "fake", Version: "v1.2.3", APIVersion: 1, DefaultRestartScope: v1alpha1.RestartScopeIndex,
		DefaultPorts: []Port{{Name: "srv", Port: 2222}, {Port: 53, Protocol: corev1.ProtocolUDP}},
	}
	answer := Rendezvous{
		Env: []EnvVar{
			{Name: "A", Value: "x-" + IndexRef},
			{Name: "EMPTY", Value: ""},
			{Name: "POD_IP", FieldPath: "status.podIP"},
		},
		Ports: []Port{{Name: "srv", Port: 2222, Protocol: corev1.ProtocolTCP}},
	}
	hints := []HintPattern{
		{Pattern: "peer died", Cause: v1alpha1.CausePeerFailure, Description: "a peer"},
		{Pattern: `ECC`, Cause: v1alpha1.CauseGPUFault},
	}
	var got RunSpec
	fake := &FakePlugin{
		InfoValue: info,
		RendezvousFunc: func(_ context.Context, run RunSpec) (Rendezvous, error) {
			got = run
			return answer, nil
		},
		HintsValue: hints,
	}
	p := dispense(t, fake)
	ctx := context.Background()

	gotInfo, err := p.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	wantInfo := info
	wantInfo.APIVersion = APIVersion // the connection's, whatever the plugin claims
	if diff := cmp.Diff(wantInfo, gotInfo); diff != "" {
		t.Errorf("Info (-want +got):\n%s", diff)
	}

	run := RunSpec{Name: "r", Namespace: "ns", Workers: 4, RestartScope: v1alpha1.RestartScopeGang, Options: map[string]string{"strategy": "x", "port": "1"},
		Worker: &Worker{Devices: map[corev1.ResourceName]int64{"nvidia.com/gpu": 8, "example.com/fpga": 1}}}
	gotAnswer, err := p.Rendezvous(ctx, run)
	if err != nil {
		t.Fatalf("Rendezvous: %v", err)
	}
	if diff := cmp.Diff(answer, gotAnswer); diff != "" {
		t.Errorf("Rendezvous answer (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(run, got); diff != "" {
		t.Errorf("RunSpec seen by the plugin (-want +got):\n%s", diff)
	}

	gotHints, err := p.FailureHints(ctx)
	if err != nil {
		t.Fatalf("FailureHints: %v", err)
	}
	if diff := cmp.Diff(hints, gotHints); diff != "" {
		t.Errorf("FailureHints (-want +got):\n%s", diff)
	}
}

// Every version the SDK speaks is served by one binary: on each connection the plugin
// reports that connection's version, which is what the host (an older one included) checks
// against the version it negotiated; a RunSpec without a worker, as a version 1 host sends
// it, reaches the plugin as a nil Worker, never as a worker that asks for nothing.
func TestGRPCVersions(t *testing.T) {
	for v := MinAPIVersion; v <= APIVersion; v++ {
		var got RunSpec
		fake := &FakePlugin{
			InfoValue: Info{APIVersion: 7}, // a stale claim, ignored
			RendezvousFunc: func(_ context.Context, run RunSpec) (Rendezvous, error) {
				got = run
				return Rendezvous{}, nil
			},
		}
		p := dispenseVersion(t, fake, v)
		info, err := p.Info(context.Background())
		if err != nil || info.APIVersion != v {
			t.Errorf("version %d connection: Info = %+v, %v; want APIVersion %d", v, info, err, v)
		}
		if _, err := p.Rendezvous(context.Background(), RunSpec{Name: "r", Workers: 1}); err != nil {
			t.Fatal(err)
		}
		if got.Worker != nil {
			t.Errorf("version %d connection: a RunSpec sent without a worker arrived with %+v", v, got.Worker)
		}
		if _, err := p.Rendezvous(context.Background(), RunSpec{Name: "r", Workers: 1, Worker: &Worker{}}); err != nil {
			t.Fatal(err)
		}
		if got.Worker == nil || len(got.Worker.Devices) != 0 {
			t.Errorf("version %d connection: a worker that asks for no devices arrived as %+v", v, got.Worker)
		}
	}
	if _, ok := VersionedPlugins[APIVersion]; !ok || len(VersionedPlugins) != APIVersion-MinAPIVersion+1 {
		t.Errorf("the host offers versions %v, want %d..%d", VersionedPlugins, MinAPIVersion, APIVersion)
	}
}

func TestGRPCErrors(t *testing.T) {
	cases := map[string]struct {
		rendezvous   func(context.Context, RunSpec) (Rendezvous, error)
		wantOptions  bool
		wantCode     codes.Code
		wantContains string
	}{
		"invalid options become an OptionsError": {
			rendezvous: func(context.Context, RunSpec) (Rendezvous, error) {
				return Rendezvous{}, InvalidOptions("ps %q is not a number", "x")
			},
			wantOptions:  true,
			wantContains: `ps "x" is not a number`,
		},
		"a plain error keeps its message": {
			rendezvous:   func(context.Context, RunSpec) (Rendezvous, error) { return Rendezvous{}, errors.New("disk on fire") },
			wantCode:     codes.Unknown,
			wantContains: "disk on fire",
		},
		"a panic is recovered into Internal": {
			rendezvous:   func(context.Context, RunSpec) (Rendezvous, error) { panic("boom") },
			wantCode:     codes.Internal,
			wantContains: "plugin panicked in Rendezvous: boom",
		},
		"a value and a field path together are refused": {
			rendezvous: func(context.Context, RunSpec) (Rendezvous, error) {
				return Rendezvous{Env: []EnvVar{{Name: "X", Value: "v", FieldPath: "status.podIP"}}}, nil
			},
			wantCode:     codes.Internal,
			wantContains: `env var "X" has both a value and a field path`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := dispense(t, &FakePlugin{RendezvousFunc: tc.rendezvous})
			_, err := p.Rendezvous(context.Background(), RunSpec{Name: "r"})
			if err == nil {
				t.Fatal("Rendezvous succeeded, want an error")
			}
			if IsInvalidOptions(err) != tc.wantOptions {
				t.Errorf("IsInvalidOptions(%v) = %v, want %v", err, !tc.wantOptions, tc.wantOptions)
			}
			if !tc.wantOptions && status.Code(err) != tc.wantCode {
				t.Errorf("code %v, want %v (%v)", status.Code(err), tc.wantCode, err)
			}
			if !strings.Contains(err.Error(), tc.wantContains) {
				t.Errorf("error %q does not contain %q", err, tc.wantContains)
			}
			// The plugin survives any of these: the next call is served.
			if _, err := p.Info(context.Background()); err != nil {
				t.Errorf("Info after the failure: %v", err)
			}
		})
	}
}

// TestGRPCTraceContext: the host's span context reaches the plugin as its remote parent.
func TestGRPCTraceContext(t *testing.T) {
	var seen trace.SpanContext
	p := dispense(t, &FakePlugin{RendezvousFunc: func(ctx context.Context, _ RunSpec) (Rendezvous, error) {
		seen = trace.SpanContextFromContext(ctx)
		return Rendezvous{}, nil
	}})
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := withRunTrace(context.Background(), traceparent)
	if _, err := p.Rendezvous(ctx, RunSpec{}); err != nil {
		t.Fatalf("Rendezvous: %v", err)
	}
	if got := seen.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace id in the plugin = %q", got)
	}
	if got := seen.SpanID().String(); got != "00f067aa0ba902b7" {
		t.Errorf("parent span id in the plugin = %q", got)
	}
	if !seen.IsRemote() || !seen.IsSampled() {
		t.Errorf("span context %+v: want remote and sampled", seen)
	}

	// Without a trace, nothing is sent and the plugin sees none.
	if _, err := p.Rendezvous(context.Background(), RunSpec{}); err != nil {
		t.Fatalf("Rendezvous: %v", err)
	}
	if seen.IsValid() {
		t.Errorf("plugin saw a span context %v without one being sent", seen)
	}
}

func TestWithRunTraceKeepsAnExistingSpan(t *testing.T) {
	own := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), own)
	got := trace.SpanContextFromContext(withRunTrace(ctx, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	if !got.Equal(own) {
		t.Errorf("withRunTrace replaced the caller's span %v with %v", own, got)
	}
	if got := trace.SpanContextFromContext(withRunTrace(context.Background(), "garbage")); got.IsValid() {
		t.Errorf("a malformed traceparent gave a span context %v", got)
	}
}

// A plugin in another language could send a field ref without a path; the client refuses it.
func TestEnvFromPBRefusesEmptyFieldRef(t *testing.T) {
	_, err := envFromPB([]*frameworkpb.EnvVar{{Name: "X", Source: &frameworkpb.EnvVar_FieldRef{FieldRef: &frameworkpb.FieldRef{}}}})
	if !errors.Is(err, ErrInvalidAnswer) {
		t.Errorf("err = %v, want ErrInvalidAnswer", err)
	}
	got, err := envFromPB([]*frameworkpb.EnvVar{{Name: "NO_SOURCE"}})
	if err != nil || len(got) != 1 || got[0] != (EnvVar{Name: "NO_SOURCE"}) {
		t.Errorf("an env var without a source = %+v, %v; want an empty value", got, err)
	}
}
