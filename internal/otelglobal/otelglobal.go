// Package otelglobal lets instrument and hooks follow OpenTelemetry's global
// tracer provider without starting spans that nothing would record.
package otelglobal

import (
	"reflect"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// Gate tells whether a span started now could be recorded.
type Gate struct {
	// unset is otel's default global provider when the caller follows the
	// global provider and none was installed yet; nil otherwise (an explicit
	// provider, or one installed before, is always used).
	unset trace.TracerProvider
}

// Resolve returns explicit, or otel's global provider when explicit is nil,
// with the Gate that watches for an SDK to be installed later.
func Resolve(explicit trace.TracerProvider) (trace.TracerProvider, Gate) {
	if explicit != nil {
		return explicit, Gate{}
	}
	tp := otel.GetTracerProvider()
	if IsDefault(tp) {
		return tp, Gate{unset: tp}
	}
	return tp, Gate{}
}

// Recording reports whether a span started now could be recorded: always,
// unless the provider is otel's default global one and no SDK has been
// installed since (one atomic load per call).
func (g Gate) Recording() bool {
	return g.unset == nil || otel.GetTracerProvider() != g.unset
}

// IsDefault reports whether tp is otel's default global provider, the one
// that delegates to an SDK once one is installed and records nothing before.
// An unknown type is treated as a real provider: spans are started.
func IsDefault(tp trace.TracerProvider) bool {
	t := reflect.TypeOf(tp)
	return t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global"
}
