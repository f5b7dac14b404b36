// Package otlp is an OTLP/gRPC trace receiver for tests: what a collector would get from the
// processes under test (faultline's controller and agents, the real nodes' kubelets).
package otlp

import (
	"context"
	"encoding/hex"
	"net"
	"strconv"
	"sync"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Receiver serves the OTLP trace service and keeps every span it is sent.
type Receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	// Addr is host:port, what OTEL_EXPORTER_OTLP_ENDPOINT (http://Addr) or the kubelet's
	// tracing endpoint names.
	Addr string
	srv  *grpc.Server

	mu    sync.Mutex
	spans []Span
}

// Span is a received span with the service.name of the process that sent it.
type Span struct {
	Service string
	*tracepb.Span
}

func (s Span) TraceID() string { return hex.EncodeToString(s.TraceId) }
func (s Span) ID() string      { return hex.EncodeToString(s.SpanId) }
func (s Span) Parent() string  { return hex.EncodeToString(s.ParentSpanId) }
func (s Span) Start() time.Time {
	return time.Unix(0, int64(s.StartTimeUnixNano))
}
func (s Span) End() time.Time          { return time.Unix(0, int64(s.EndTimeUnixNano)) }
func (s Span) Duration() time.Duration { return s.End().Sub(s.Start()) }

// Attr is the span attribute key as a string ("" when absent).
func (s Span) Attr(key string) string { return Attr(s.Attributes, key) }

// Attr is attribute key of kvs (a span's, a link's, a resource's) as a string ("" when
// absent).
func Attr(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.Key != key {
			continue
		}
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			return v.StringValue
		case *commonpb.AnyValue_IntValue:
			return strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			return strconv.FormatBool(v.BoolValue)
		}
	}
	return ""
}

// Start serves the OTLP trace service on addr (host:0 picks a port) until Stop.
func Start(addr string) (*Receiver, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &Receiver{Addr: ln.Addr().String(), srv: grpc.NewServer()}
	collectortrace.RegisterTraceServiceServer(r.srv, r)
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// Env is what a process of faultline's needs to send this receiver its spans at once, as
// NAME=value: OTLP/gRPC to Addr, exported every 100 ms, every span sampled that no parent
// declined.
func (r *Receiver) Env() []string {
	return []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + r.Addr,
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_BSP_SCHEDULE_DELAY=100",
		"OTEL_TRACES_SAMPLER=parentbased_always_on",
	}
}

// Stop stops serving; the spans stay readable.
func (r *Receiver) Stop() { r.srv.Stop() }

// Export keeps the request's spans.
func (r *Receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		service := Attr(rs.GetResource().GetAttributes(), "service.name")
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, Span{Service: service, Span: s})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// Spans returns what was received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// WaitFor polls the received spans until done holds of them, or ctx ends.
func (r *Receiver) WaitFor(ctx context.Context, done func([]Span) bool) ([]Span, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		spans := r.Spans()
		if done(spans) {
			return spans, nil
		}
		select {
		case <-ctx.Done():
			return spans, ctx.Err()
		case <-tick.C:
		}
	}
}
