package instrument

import (
	"context"
	"reflect"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// tracing starts the client's spans. With no TracerProvider in Options the
// client follows otel's global provider, and until a program installs an
// SDK (otel.SetTracerProvider) that provider's spans record nothing — yet
// each costs allocations, and in a stampede every one of hundreds of
// callers per process starts one, on the path whose latency Fetch promises
// (measured: most of a joining caller's CPU). So while the global provider
// is still otel's default, no span is started; the moment an SDK is
// installed, spans start (checked per call: one atomic load).
type tracing struct {
	tracer trace.Tracer
	// unset is otel's default global provider when the client follows the
	// global provider and none was installed at New; nil otherwise (an
	// explicit provider, or one installed before New, is always used).
	unset trace.TracerProvider
}

// noSpan is the span of a call that nothing would record.
var noSpan trace.Span = noop.Span{}

func newTracing(explicit trace.TracerProvider) tracing {
	tp := explicit
	t := tracing{}
	if tp == nil {
		tp = otel.GetTracerProvider()
		if isOtelDefault(tp) {
			t.unset = tp
		}
	}
	t.tracer = tp.Tracer("github.com/cachewatch/cachewatch/instrument")
	return t
}

// isOtelDefault reports whether tp is otel's default global provider, the
// one that delegates to an SDK once one is installed and records nothing
// before. An unknown type is treated as a real provider: spans are started.
func isOtelDefault(tp trace.TracerProvider) bool {
	t := reflect.TypeOf(tp)
	return t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global"
}

// recording reports whether a span started now could be recorded.
func (t tracing) recording() bool {
	return t.unset == nil || otel.GetTracerProvider() != t.unset
}

// start starts a span, or returns ctx unchanged and noSpan when nothing
// would record it.
func (t tracing) start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !t.recording() {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, name, opts...)
}
