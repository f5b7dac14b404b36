package framework

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	frameworkpb "github.com/faultline-dev/faultline/pkg/framework/proto"
)

// GRPCPlugin carries Plugin over gRPC, in go-plugin's terms: on the plugin's side it
// registers a server for Impl, on the host's side it dispenses a client that implements
// Plugin.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is the plugin's implementation; nil on the host's side.
	Impl Plugin
	// Version is the API version this plugin set serves (PluginSets sets it); 0 means
	// APIVersion.
	Version int
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers the plugin's implementation.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return fmt.Errorf("framework plugin has no implementation to serve")
	}
	frameworkpb.RegisterFrameworkServer(s, &grpcServer{impl: p.Impl, version: p.version()})
	return nil
}

func (p *GRPCPlugin) version() int {
	if p.Version == 0 {
		return APIVersion
	}
	return p.Version
}

// GRPCClient returns the host's view of the plugin.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &grpcClient{client: frameworkpb.NewFrameworkClient(c)}, nil
}

// grpcServer runs in the plugin process. It recovers panics of the implementation, so
// that a bug on one request fails that request and not the plugin.
type grpcServer struct {
	frameworkpb.UnimplementedFrameworkServer
	impl Plugin
	// version is the API version negotiated for this connection.
	version int
}

func (s *grpcServer) Info(ctx context.Context, _ *frameworkpb.InfoRequest) (resp *frameworkpb.InfoResponse, err error) {
	defer recoverPanic("Info", &err)
	info, err := s.impl.Info(extractTrace(ctx))
	if err != nil {
		return nil, toStatus(err)
	}
	return &frameworkpb.InfoResponse{
		Name:    info.Name,
		Version: info.Version,
		// The connection's version, not the plugin's own claim: one binary serves every
		// version the SDK speaks, and an older host checks this against what it negotiated.
		ApiVersion:          int32(s.version),
		DefaultRestartScope: string(info.DefaultRestartScope),
		DefaultPorts:        portsToPB(info.DefaultPorts),
	}, nil
}

func (s *grpcServer) Rendezvous(ctx context.Context, req *frameworkpb.RendezvousRequest) (resp *frameworkpb.RendezvousResponse, err error) {
	defer recoverPanic("Rendezvous", &err)
	r, err := s.impl.Rendezvous(extractTrace(ctx), runFromPB(req.GetRun()))
	if err != nil {
		return nil, toStatus(err)
	}
	env, err := envToPB(r.Env)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "plugin bug: %v", err)
	}
	if s.version < 3 && (len(r.Roles) > 0 || r.SuccessPolicy != "" || r.ReadJobAndPods) {
		// The host would drop what it does not know and start pods that cannot work (a
		// TF_CONFIG naming a role nobody declared, a JAX detection without its access).
		return nil, status.Errorf(codes.FailedPrecondition, "the plugin's answer needs plugin API version 3 (roles, a default success policy or the workers' access to their Job), but the host speaks version %d: upgrade faultline's controller", s.version)
	}
	return &frameworkpb.RendezvousResponse{Env: env, Ports: portsToPB(r.Ports), Roles: rolesToPB(r.Roles),
		SuccessPolicy: string(r.SuccessPolicy), ReadJobAndPods: r.ReadJobAndPods}, nil
}

func rolesToPB(roles []Role) []*frameworkpb.Role {
	if len(roles) == 0 {
		return nil
	}
	out := make([]*frameworkpb.Role, len(roles))
	for i, r := range roles {
		out[i] = &frameworkpb.Role{Name: r.Name, Replicas: r.Replicas}
	}
	return out
}

func rolesFromPB(roles []*frameworkpb.Role) []Role {
	if len(roles) == 0 {
		return nil
	}
	out := make([]Role, len(roles))
	for i, r := range roles {
		out[i] = Role{Name: r.GetName(), Replicas: r.GetReplicas()}
	}
	return out
}

func (s *grpcServer) FailureHints(ctx context.Context, _ *frameworkpb.FailureHintsRequest) (resp *frameworkpb.FailureHintsResponse, err error) {
	defer recoverPanic("FailureHints", &err)
	hints, err := s.impl.FailureHints(extractTrace(ctx))
	if err != nil {
		return nil, toStatus(err)
	}
	out := make([]*frameworkpb.HintPattern, len(hints))
	for i, h := range hints {
		out[i] = &frameworkpb.HintPattern{Pattern: h.Pattern, Cause: string(h.Cause), Description: h.Description}
	}
	return &frameworkpb.FailureHintsResponse{Hints: out}, nil
}

// recoverPanic turns a panic into an Internal error; the stack goes to the plugin's log,
// which the host copies into its own.
func recoverPanic(method string, err *error) {
	if r := recover(); r != nil {
		pluginLogger().Error(fmt.Sprintf("framework plugin panicked in %s: %v", method, r), "stack", string(debug.Stack()))
		*err = status.Errorf(codes.Internal, "plugin panicked in %s: %v", method, r)
	}
}

// toStatus carries an OptionsError as InvalidArgument, the only error kind the host
// treats differently; everything else is Unknown with its message.
func toStatus(err error) error {
	if IsInvalidOptions(err) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Unknown, err.Error())
}

// grpcClient runs in the host and implements Plugin over the connection.
type grpcClient struct {
	client frameworkpb.FrameworkClient
}

var _ Plugin = (*grpcClient)(nil)

func (c *grpcClient) Info(ctx context.Context) (Info, error) {
	resp, err := c.client.Info(injectTrace(ctx), &frameworkpb.InfoRequest{})
	if err != nil {
		return Info{}, fromStatus(err)
	}
	return Info{
		Name:                resp.GetName(),
		Version:             resp.GetVersion(),
		APIVersion:          int(resp.GetApiVersion()),
		DefaultRestartScope: v1alpha1.RestartScope(resp.GetDefaultRestartScope()),
		DefaultPorts:        portsFromPB(resp.GetDefaultPorts()),
	}, nil
}

func (c *grpcClient) Rendezvous(ctx context.Context, run RunSpec) (Rendezvous, error) {
	resp, err := c.client.Rendezvous(injectTrace(ctx), &frameworkpb.RendezvousRequest{Run: runToPB(run)})
	if err != nil {
		return Rendezvous{}, fromStatus(err)
	}
	env, err := envFromPB(resp.GetEnv())
	if err != nil {
		return Rendezvous{}, err
	}
	return Rendezvous{Env: env, Ports: portsFromPB(resp.GetPorts()), Roles: rolesFromPB(resp.GetRoles()),
		SuccessPolicy: v1alpha1.SuccessPolicy(resp.GetSuccessPolicy()), ReadJobAndPods: resp.GetReadJobAndPods()}, nil
}

func (c *grpcClient) FailureHints(ctx context.Context) ([]HintPattern, error) {
	resp, err := c.client.FailureHints(injectTrace(ctx), &frameworkpb.FailureHintsRequest{})
	if err != nil {
		return nil, fromStatus(err)
	}
	out := make([]HintPattern, len(resp.GetHints()))
	for i, h := range resp.GetHints() {
		out[i] = HintPattern{Pattern: h.GetPattern(), Cause: v1alpha1.Cause(h.GetCause()), Description: h.GetDescription()}
	}
	return out, nil
}

// fromStatus turns InvalidArgument back into an OptionsError; other errors keep their
// gRPC status, which the host reads to tell a crash from a refusal.
func fromStatus(err error) error {
	if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument {
		return &OptionsError{Message: st.Message()}
	}
	return err
}

func runToPB(r RunSpec) *frameworkpb.RunSpec {
	out := &frameworkpb.RunSpec{
		Name:             r.Name,
		Namespace:        r.Namespace,
		Workers:          r.Workers,
		RestartScope:     string(r.RestartScope),
		FrameworkOptions: r.Options,
	}
	if r.Worker != nil {
		devices := make(map[string]int64, len(r.Worker.Devices))
		for name, n := range r.Worker.Devices {
			devices[string(name)] = n
		}
		out.Worker = &frameworkpb.Worker{Devices: devices}
	}
	return out
}

func runFromPB(r *frameworkpb.RunSpec) RunSpec {
	out := RunSpec{
		Name:         r.GetName(),
		Namespace:    r.GetNamespace(),
		Workers:      r.GetWorkers(),
		RestartScope: v1alpha1.RestartScope(r.GetRestartScope()),
		Options:      r.GetFrameworkOptions(),
	}
	// A version 1 host never sets worker: nil tells the plugin so, where an empty Worker
	// would claim that the template asks for no devices.
	if w := r.GetWorker(); w != nil {
		out.Worker = &Worker{Devices: make(map[corev1.ResourceName]int64, len(w.GetDevices()))}
		for name, n := range w.GetDevices() {
			out.Worker.Devices[corev1.ResourceName(name)] = n
		}
	}
	return out
}

// envToPB refuses a variable with both a value and a field path: the wire (like
// corev1.EnvVar) has room for one, and picking one would hide the plugin's bug.
func envToPB(env []EnvVar) ([]*frameworkpb.EnvVar, error) {
	out := make([]*frameworkpb.EnvVar, len(env))
	for i, e := range env {
		v := &frameworkpb.EnvVar{Name: e.Name}
		switch {
		case e.FieldPath != "" && e.Value != "":
			return nil, fmt.Errorf("env var %q has both a value and a field path", e.Name)
		case e.FieldPath != "":
			v.Source = &frameworkpb.EnvVar_FieldRef{FieldRef: &frameworkpb.FieldRef{FieldPath: e.FieldPath}}
		default:
			v.Source = &frameworkpb.EnvVar_Value{Value: e.Value}
		}
		out[i] = v
	}
	return out, nil
}

func envFromPB(env []*frameworkpb.EnvVar) ([]EnvVar, error) {
	out := make([]EnvVar, len(env))
	for i, e := range env {
		out[i] = EnvVar{Name: e.GetName()}
		switch src := e.GetSource().(type) {
		case *frameworkpb.EnvVar_FieldRef:
			if src.FieldRef.GetFieldPath() == "" {
				return nil, fmt.Errorf("%w: env var %q has a field ref without a field path", ErrInvalidAnswer, e.GetName())
			}
			out[i].FieldPath = src.FieldRef.GetFieldPath()
		case *frameworkpb.EnvVar_Value:
			out[i].Value = src.Value
		}
	}
	return out, nil
}

func portsToPB(ports []Port) []*frameworkpb.ContainerPort {
	out := make([]*frameworkpb.ContainerPort, len(ports))
	for i, p := range ports {
		out[i] = &frameworkpb.ContainerPort{Name: p.Name, Port: p.Port, Protocol: string(p.Protocol)}
	}
	return out
}

func portsFromPB(ports []*frameworkpb.ContainerPort) []Port {
	out := make([]Port, len(ports))
	for i, p := range ports {
		out[i] = Port{Name: p.GetName(), Port: p.GetPort(), Protocol: corev1.Protocol(p.GetProtocol())}
	}
	return out
}

// mdCarrier adapts gRPC metadata to OpenTelemetry's TextMapCarrier.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
