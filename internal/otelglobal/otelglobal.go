// Package otelglobal resolves the TracerProvider of instrument's and hooks'
// Options: nil means no spans, and OpenTelemetry's global provider starts
// no span that nothing would record.
package otelglobal

import (
	"reflect"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Gate tells whether a span started now could be recorded. It is one
// interface word, so that the callers' frames that carry it (every caller
// of a crowd) stay within their first stack.
type Gate struct {
	// unset is otel's default global provider when the caller passed the
	// global provider and no SDK was installed yet; off when no provider
	// was given (no span is ever started); nil otherwise (any other
	// provider, or the global one once an SDK is behind it, is always
	// used).
	unset trace.TracerProvider
}

// off is the Gate.unset of a caller without a provider.
var off trace.TracerProvider = noop.NewTracerProvider()

// Resolve returns the provider to start spans from and the Gate that says
// when to start them: none when explicit is nil (a noop provider), always
// for a provider of the program's own, and for otel's global provider
// (otel.GetTracerProvider()) only once an SDK is installed behind it.
func Resolve(explicit trace.TracerProvider) (trace.TracerProvider, Gate) {
	if explicit == nil {
		return off, Gate{unset: off}
	}
	if IsDefault(explicit) && IsDefault(otel.GetTracerProvider()) {
		return explicit, Gate{unset: otel.GetTracerProvider()}
	}
	return explicit, Gate{}
}

// Recording reports whether a span started now could be recorded: never
// without a provider; always, unless the provider is otel's default global
// one and no SDK has been installed since (one atomic load per call).
func (g Gate) Recording() bool {
	return g.unset == nil || g.unset != off && otel.GetTracerProvider() != g.unset
}

// IsDefault reports whether tp is otel's default global provider, the one
// that delegates to an SDK once one is installed and records nothing before.
// An unknown type is treated as a real provider: spans are started.
func IsDefault(tp trace.TracerProvider) bool {
	t := reflect.TypeOf(tp)
	return t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global"
}
