// Package emit gives cachewatch's emitters (instrument, hooks, the Redlock
// adapter) one handle per label set that records to every configured
// pipeline: a Prometheus registry, an OpenTelemetry MeterProvider, or both.
//
// Vecs are built from catalog IDs, so a metric's name, help, labels, buckets
// and OpenTelemetry instrument come from its one definition in package
// signals. A handle resolves its Prometheus child and precomputes its
// OpenTelemetry attribute set (and the option slice that carries it) once,
// so recording through it does not allocate: the hook records through
// handles on every Redis command.
package emit

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/metric"

	"github.com/cachewatch/cachewatch/signals"
)

// nativeMaxBuckets bounds a native histogram's buckets per series; past it
// client_golang widens them (halves the resolution) rather than grow.
const nativeMaxBuckets = 160

// Sinks are the pipelines of one emitter.
type Sinks struct {
	// Registerer receives Prometheus collectors; nil means none.
	Registerer prometheus.Registerer
	// Meter creates OpenTelemetry instruments; nil means none.
	Meter metric.Meter
	// NativeHistogramBucketFactor, when above 1, makes the Prometheus
	// histograms native (exponential) histograms as well, beside their
	// classic buckets (prometheus.HistogramOpts.NativeHistogramBucketFactor).
	NativeHistogramBucketFactor float64
}

// New returns the sinks of an emitter given a Registerer and a
// MeterProvider, either of which may be nil: with both nil, metrics go to
// prometheus.DefaultRegisterer (what every emitter did before it took a
// MeterProvider); with only mp, to mp alone.
func New(reg prometheus.Registerer, mp metric.MeterProvider, nativeFactor float64) Sinks {
	s := Sinks{Registerer: reg, NativeHistogramBucketFactor: nativeFactor}
	if mp != nil {
		s.Meter = Meter(mp)
	}
	if reg == nil && mp == nil {
		s.Registerer = prometheus.DefaultRegisterer
	}
	return s
}

// Meter returns cachewatch's meter of mp: one instrumentation scope for every
// emitter, so that emitters sharing a MeterProvider add to the same streams.
func Meter(mp metric.MeterProvider) metric.Meter { return mp.Meter(signals.MeterName) }

// Counter returns the counter of id on every sink, sharing a collector
// already registered on the Registerer by another emitter.
func (s Sinks) Counter(id signals.ID) (*CounterVec, error) {
	v := &CounterVec{}
	var err error
	if s.Registerer != nil {
		if v.prom, err = signals.Register(s.Registerer, id.NewCounterVec()); err != nil {
			return nil, err
		}
	}
	if s.Meter != nil {
		m := id.Metric()
		mustKind(m, signals.OTelCounter)
		v.otel, err = s.Meter.Float64Counter(m.OTel.Name, metric.WithDescription(m.Help), metric.WithUnit(m.OTel.Unit))
		if err != nil {
			return nil, fmt.Errorf("signals: %s: %w", m.OTel.Name, err)
		}
	}
	v.family = newFamily(id.LabelNames(), v.child)
	return v, nil
}

// Gauge returns the gauge of id on every sink.
func (s Sinks) Gauge(id signals.ID) (*GaugeVec, error) {
	v := &GaugeVec{}
	var err error
	if s.Registerer != nil {
		if v.prom, err = signals.Register(s.Registerer, id.NewGaugeVec()); err != nil {
			return nil, err
		}
	}
	if s.Meter != nil {
		m := id.Metric()
		opts := []metric.InstrumentOption{metric.WithDescription(m.Help), metric.WithUnit(m.OTel.Unit)}
		switch m.OTel.Kind {
		case signals.OTelGauge:
			v.set, err = s.Meter.Float64Gauge(m.OTel.Name, float64GaugeOptions(opts)...)
		case signals.OTelUpDownCounter:
			v.add, err = s.Meter.Float64UpDownCounter(m.OTel.Name, upDownOptions(opts)...)
		default:
			mustKind(m, signals.OTelGauge)
		}
		if err != nil {
			return nil, fmt.Errorf("signals: %s: %w", m.OTel.Name, err)
		}
	}
	v.family = newFamily(id.LabelNames(), v.child)
	return v, nil
}

// Histogram returns the histogram of id on every sink: on Prometheus with the
// catalog's buckets (and native buckets when asked for), on OpenTelemetry
// with the same buckets as explicit bucket advice.
func (s Sinks) Histogram(id signals.ID) (*HistogramVec, error) {
	v := &HistogramVec{}
	m := id.Metric()
	if s.Registerer != nil {
		opts := prometheus.HistogramOpts{Name: m.Name, Help: m.Help, Buckets: m.Buckets}
		if s.NativeHistogramBucketFactor > 1 {
			opts.NativeHistogramBucketFactor = s.NativeHistogramBucketFactor
			opts.NativeHistogramMaxBucketNumber = nativeMaxBuckets
			opts.NativeHistogramMinResetDuration = time.Hour
		}
		var err error
		if v.prom, err = signals.Register(s.Registerer, prometheus.NewHistogramVec(opts, m.LabelNames())); err != nil {
			return nil, err
		}
	}
	if s.Meter != nil {
		mustKind(m, signals.OTelHistogram)
		var err error
		v.otel, err = s.Meter.Float64Histogram(m.OTel.Name, metric.WithDescription(m.Help), metric.WithUnit(m.OTel.Unit),
			metric.WithExplicitBucketBoundaries(m.Buckets...))
		if err != nil {
			return nil, fmt.Errorf("signals: %s: %w", m.OTel.Name, err)
		}
	}
	v.family = newFamily(m.LabelNames(), v.child)
	return v, nil
}

func mustKind(m signals.Metric, k signals.InstrumentKind) {
	if m.OTel.Kind != k {
		panic(fmt.Sprintf("signals: %s is an OpenTelemetry %s, not a %s", m.Name, m.OTel.Kind, k))
	}
}

func float64GaugeOptions(in []metric.InstrumentOption) []metric.Float64GaugeOption {
	out := make([]metric.Float64GaugeOption, len(in))
	for i, o := range in {
		out[i] = o
	}
	return out
}

func upDownOptions(in []metric.InstrumentOption) []metric.Float64UpDownCounterOption {
	out := make([]metric.Float64UpDownCounterOption, len(in))
	for i, o := range in {
		out[i] = o
	}
	return out
}
