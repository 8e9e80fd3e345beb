package instrument

import (
	"context"

	"github.com/cachewatch/cachewatch/internal/otelglobal"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// tracing starts the client's spans. With no TracerProvider in Options the
// client starts none. Given otel's global provider (otel.GetTracerProvider())
// it follows it, and until a program installs an SDK (otel.SetTracerProvider)
// that provider's spans record nothing — yet each costs allocations, and in
// a stampede every one of hundreds of callers per process starts one, on the
// path whose latency Fetch promises (measured: most of a joining caller's
// CPU). So while the global provider is still otel's default, no span is
// started; the moment an SDK is installed, spans start (checked per call:
// one atomic load).
type tracing struct {
	tracer trace.Tracer
	gate   otelglobal.Gate
}

// noSpan is the span of a call that nothing would record.
var noSpan trace.Span = noop.Span{}

func newTracing(explicit trace.TracerProvider) tracing {
	tp, gate := otelglobal.Resolve(explicit)
	t := tracing{gate: gate}
	t.tracer = tp.Tracer("github.com/cachewatch/cachewatch/instrument")
	return t
}

// recording reports whether a span started now could be recorded.
func (t tracing) recording() bool {
	return t.gate.Recording()
}

// start starts a span, or returns ctx unchanged and noSpan when nothing
// would record it.
func (t tracing) start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !t.recording() {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, name, opts...)
}
