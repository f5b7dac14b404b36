package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/faultline-dev/faultline/pkg/version"
)

// ShutdownTimeout bounds Shutdown when its context has no deadline: a collector that is
// gone must not hold a node agent's exit (and the node's shutdown) back.
const ShutdownTimeout = 5 * time.Second

// Options describe the process for its resource; the environment (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES) overrides them.
type Options struct {
	// ServiceName is the default service.name (ServiceController, ServiceAgent).
	ServiceName string
	// Attributes describe where the process runs: k8s.node.name for the agent,
	// k8s.namespace.name for a controller scoped to one namespace.
	Attributes []attribute.KeyValue
	// Logger receives the SDK's errors (an unreachable collector); nil keeps OTel's default.
	Logger *slog.Logger
}

// Provider is a process's tracer provider. The nil Provider, and one that Setup returns
// when no endpoint is configured, record nothing.
type Provider struct {
	tp      *sdktrace.TracerProvider
	tracer  trace.Tracer
	sampler sdktrace.Sampler
}

// Setup configures tracing from the OTEL_* environment (see the package doc), installs the
// W3C trace-context propagator and, when spans are exported, the global tracer provider.
// Without an endpoint it returns a Provider that records nothing.
func Setup(ctx context.Context, opts Options) (*Provider, error) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	if opts.Logger != nil {
		log := opts.Logger.With("component", "opentelemetry")
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing error", "error", err) }))
	}
	on, err := exportConfigured()
	if err != nil || !on {
		return &Provider{}, err
	}
	sampler, err := samplerFromEnv()
	if err != nil {
		return &Provider{}, err
	}
	res, err := newResource(ctx, opts)
	if err != nil {
		return &Provider{}, err
	}
	exp, err := newExporter(ctx)
	if err != nil {
		return &Provider{}, err
	}
	// The batcher reads OTEL_BSP_SCHEDULE_DELAY and the other OTEL_BSP_* variables.
	p := New(sampler, sdktrace.WithResource(res), sdktrace.WithBatcher(exp))
	otel.SetTracerProvider(p.tp)
	return p, nil
}

// New is a Provider over an SDK tracer provider built with opts (exporters, resource) and
// the given sampler (nil: parent-based, always on). It installs what reserved episode roots
// need (see the package doc); tests build theirs with it around an in-memory exporter.
func New(sampler sdktrace.Sampler, opts ...sdktrace.TracerProviderOption) *Provider {
	if sampler == nil {
		sampler = sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
	opts = append([]sdktrace.TracerProviderOption{
		sdktrace.WithIDGenerator(idGenerator{}),
		sdktrace.WithSampler(episodeSampler{base: sampler}),
	}, opts...)
	tp := sdktrace.NewTracerProvider(opts...)
	return &Provider{tp: tp, tracer: tp.Tracer(TracerName, trace.WithInstrumentationVersion(version.Version)), sampler: sampler}
}

// Enabled reports whether spans are recorded at all.
func (p *Provider) Enabled() bool { return p != nil && p.tp != nil }

// Tracer is faultline's tracer (a no-op one when disabled).
func (p *Provider) Tracer() trace.Tracer {
	if !p.Enabled() {
		return noop.NewTracerProvider().Tracer(TracerName)
	}
	return p.tracer
}

// TracerProvider is the underlying provider (a no-op one when disabled).
func (p *Provider) TracerProvider() trace.TracerProvider {
	if !p.Enabled() {
		return noop.NewTracerProvider()
	}
	return p.tp
}

// Shutdown exports what is buffered and stops the provider, within ctx's deadline or, if it
// has none, ShutdownTimeout.
func (p *Provider) Shutdown(ctx context.Context) error {
	if !p.Enabled() {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ShutdownTimeout)
		defer cancel()
	}
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("shut down tracing: %w", err)
	}
	return nil
}

// exportConfigured: an OTLP endpoint is set, and neither OTEL_SDK_DISABLED nor
// OTEL_TRACES_EXPORTER=none turns tracing off.
func exportConfigured() (bool, error) {
	if v, _ := strconv.ParseBool(os.Getenv("OTEL_SDK_DISABLED")); v {
		return false, nil
	}
	switch exp := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); exp {
	case "", "otlp":
	case "none":
		return false, nil
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: only otlp and none are supported", exp)
	}
	return envFirst("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT") != "", nil
}

// newExporter is the OTLP exporter of OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL; the exporters
// read the endpoint, headers, TLS, compression and timeout from the environment themselves.
func newExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	proto := envFirst("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	switch proto {
	case "grpc":
		return otlptracegrpc.New(ctx)
	case "", "http/protobuf":
		return otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("OTLP protocol %q: want grpc or http/protobuf", proto)
	}
}

// newResource: the defaults, then opts, then the environment, each overriding the one before.
func newResource(ctx context.Context, opts Options) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{semconv.ServiceVersion(version.Version)}
	if opts.ServiceName != "" {
		attrs = append(attrs, semconv.ServiceName(opts.ServiceName))
	}
	if pod := os.Getenv("POD_NAME"); pod != "" {
		attrs = append(attrs, KeyPod.String(pod))
	}
	attrs = append(attrs, opts.Attributes...)
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attrs...),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	return res, nil
}

// samplerFromEnv reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG as the SDK does; the
// Provider needs the sampler itself to decide on the episodes it reserves.
func samplerFromEnv() (sdktrace.Sampler, error) {
	name := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER")))
	arg, hasArg := os.LookupEnv("OTEL_TRACES_SAMPLER_ARG")
	ratio := func() (float64, error) {
		if !hasArg {
			return 1, nil
		}
		r, err := strconv.ParseFloat(strings.TrimSpace(arg), 64)
		if err != nil || r < 0 || r > 1 {
			return 1, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio in [0, 1]", arg)
		}
		return r, nil
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio":
		r, err := ratio()
		return sdktrace.TraceIDRatioBased(r), err
	case "parentbased_traceidratio":
		r, err := ratio()
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), err
	default:
		return nil, fmt.Errorf("OTEL_TRACES_SAMPLER=%q is not supported", name)
	}
}

func envFirst(keys ...string) string {
	for _, k := range keys {
		if v := strings.TrimSpace(os.Getenv(k)); v != "" {
			return v
		}
	}
	return ""
}
