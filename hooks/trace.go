package hooks

import (
	"context"
	"net"
	"strconv"
	"strings"

	"github.com/cachewatch/cachewatch/internal/otelglobal"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys of the OpenTelemetry database semantic conventions (v1.33+).
// Only bounded facts become attributes: never keys, values or arguments.
const (
	attrDBSystem        = attribute.Key("db.system.name")
	attrDBOperation     = attribute.Key("db.operation.name")
	attrStoredProcedure = attribute.Key("db.stored_procedure.name")
	attrBatchSize       = attribute.Key("db.operation.batch.size")
	attrServerAddress   = attribute.Key("server.address")
	attrServerPort      = attribute.Key("server.port")
	attrErrorType       = attribute.Key("error.type")
)

const tracerName = "github.com/cachewatch/cachewatch/hooks"

// spanInfo is the span name and start options of one command, built at New.
type spanInfo struct {
	name  string
	start []trace.SpanStartOption
}

// tracing holds what the hook needs for spans.
//
// With no TracerProvider in Options the hook starts no span. Given otel's
// global provider (otel.GetTracerProvider()) it follows it, and until a
// program installs an SDK (otel.SetTracerProvider) that provider's spans
// record nothing yet cost allocations on every command. So while the global
// provider is still otel's default, no span is started; once an SDK is
// installed, spans start (checked per command: one atomic load). This is
// what instrument does too.
type tracing struct {
	tracer trace.Tracer
	gate   otelglobal.Gate
	server []attribute.KeyValue
	batch  spanInfo
}

func newTracing(tp trace.TracerProvider, serverAddr string) *tracing {
	tp, gate := otelglobal.Resolve(tp)
	t := &tracing{gate: gate}
	t.tracer = tp.Tracer(tracerName)
	t.server = append(t.server, attrDBSystem.String("redis"))
	if serverAddr != "" {
		host, port, err := net.SplitHostPort(serverAddr)
		if err != nil {
			host = serverAddr
		}
		t.server = append(t.server, attrServerAddress.String(host))
		if p, err := strconv.Atoi(port); err == nil {
			t.server = append(t.server, attrServerPort.Int(p))
		}
	}
	t.batch = t.span("BATCH")
	return t
}

// recording reports whether a span started now could be recorded.
func (t *tracing) recording() bool {
	return t.gate.Recording()
}

// span returns the span name and start options for an operation name.
func (t *tracing) span(op string) spanInfo {
	attrs := append(append([]attribute.KeyValue(nil), t.server...), attrDBOperation.String(op))
	return spanInfo{name: op, start: []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...),
	}}
}

func (t *tracing) commandSpan(name string) spanInfo {
	if name == otherCommand {
		return t.span("redis") // the real name could be anything
	}
	return t.span(strings.ToUpper(name))
}

func (t *tracing) start(ctx context.Context, s *spanInfo) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, s.name, s.start...)
}

// endSpan records the error class (never the message, which may quote
// arguments) and ends the span.
func endSpan(span trace.Span, class errClass, failed bool) {
	if failed {
		span.SetAttributes(attrErrorType.String(class.String()))
		span.SetStatus(codes.Error, class.String())
	}
	span.End()
}
