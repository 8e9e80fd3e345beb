package emit

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// family caches one handle per label set. Handles live as long as the vec:
// label sets are bounded (key groups are capped, every other label has a
// fixed set of values), so the cache is too.
type family[H any] struct {
	names []string // every label name
	fixed []string // curried values by position; "" where not curried
	isSet []bool   // which positions are curried
	make  func(values []string, attrs attribute.Set) *H
	seed  maphash.Seed
	mu    sync.RWMutex
	cache map[uint64]entry[H]
}

type entry[H any] struct {
	values []string
	h      *H
}

func newFamily[H any](names []string, mk func([]string, attribute.Set) *H) *family[H] {
	return &family[H]{names: names, fixed: make([]string, len(names)), isSet: make([]bool, len(names)), make: mk,
		seed: maphash.MakeSeed(), cache: map[uint64]entry[H]{}}
}

// curry returns a family of the same vec with more labels fixed: the first
// free positions to values, then the named labels of byName.
func (f *family[H]) curry(values []string, byName map[string]string) *family[H] {
	g := newFamily(f.names, f.make)
	copy(g.fixed, f.fixed)
	copy(g.isSet, f.isSet)
	next := 0
	for _, v := range values {
		for next < len(g.isSet) && g.isSet[next] {
			next++
		}
		if next == len(g.isSet) {
			panic(fmt.Sprintf("emit: %d label values curried onto %v", len(values), f.names))
		}
		g.fixed[next], g.isSet[next] = v, true
	}
	for name, v := range byName {
		i := slices.Index(f.names, name)
		if i < 0 || g.isSet[i] {
			panic(fmt.Sprintf("emit: cannot curry label %q of %v", name, f.names))
		}
		g.fixed[i], g.isSet[i] = v, true
	}
	return g
}

// with returns the handle of the label values of the free positions.
func (f *family[H]) with(values []string) *H {
	var hsh maphash.Hash
	hsh.SetSeed(f.seed)
	for _, v := range values {
		hsh.WriteString(v)
		hsh.WriteByte(0xff) // not valid UTF-8: no value contains it
	}
	sum := hsh.Sum64()
	f.mu.RLock()
	e, ok := f.cache[sum]
	f.mu.RUnlock()
	if ok && slices.Equal(e.values, values) {
		return e.h
	}
	all := slices.Clone(f.fixed)
	next := 0
	for i := range all {
		if !f.isSet[i] && next < len(values) {
			all[i] = values[next]
			next++
		}
	}
	kvs := make([]attribute.KeyValue, len(all))
	for i, v := range all {
		kvs[i] = attribute.String(f.names[i], v)
	}
	h := f.make(all, attribute.NewSet(kvs...))
	if ok {
		return h // a hash collision (odds 2^-64): correct, just not cached
	}
	f.mu.Lock()
	if e, ok := f.cache[sum]; ok && slices.Equal(e.values, values) {
		h = e.h
	} else if !ok {
		f.cache[sum] = entry[H]{values: slices.Clone(values), h: h}
	}
	f.mu.Unlock()
	return h
}

// CounterVec is a counter of the catalog on every configured pipeline.
type CounterVec struct {
	prom   *prometheus.CounterVec
	otel   metric.Float64Counter
	family *family[Counter]
}

func (v *CounterVec) child(values []string, attrs attribute.Set) *Counter {
	c := &Counter{otel: v.otel, opts: []metric.AddOption{metric.WithAttributeSet(attrs)}}
	if v.prom != nil {
		c.prom = v.prom.WithLabelValues(values...)
	}
	if c.otel != nil {
		// The Prometheus child exists from now on, at 0: so does the stream.
		c.otel.Add(context.Background(), 0, c.opts...)
	}
	return c
}

// WithLabelValues returns the handle of one label set (after the curried
// values); the first call for a label set creates it.
func (v *CounterVec) WithLabelValues(values ...string) *Counter { return v.family.with(values) }

// CurryWith returns the vec with its leading labels fixed to values.
func (v *CounterVec) CurryWith(values ...string) *CounterVec {
	return &CounterVec{prom: v.prom, otel: v.otel, family: v.family.curry(values, nil)}
}

// MustCurryWith returns the vec with the named labels fixed.
func (v *CounterVec) MustCurryWith(labels map[string]string) *CounterVec {
	return &CounterVec{prom: v.prom, otel: v.otel, family: v.family.curry(nil, labels)}
}

// Prometheus returns the vec's Prometheus collector, nil without one.
func (v *CounterVec) Prometheus() *prometheus.CounterVec { return v.prom }

// Counter is one label set of a counter.
type Counter struct {
	prom prometheus.Counter
	otel metric.Float64Counter
	opts []metric.AddOption
}

// Inc adds 1.
func (c *Counter) Inc() { c.Add(1) }

// Add adds v (v ≥ 0).
func (c *Counter) Add(v float64) {
	if c.prom != nil {
		c.prom.Add(v)
	}
	if c.otel != nil {
		c.otel.Add(context.Background(), v, c.opts...)
	}
}

// GaugeVec is a gauge of the catalog on every configured pipeline: an
// OpenTelemetry Gauge (a level set to a value) or UpDownCounter (a level
// moved by increments), as the catalog says.
type GaugeVec struct {
	prom   *prometheus.GaugeVec
	set    metric.Float64Gauge
	add    metric.Float64UpDownCounter
	family *family[Gauge]
}

func (v *GaugeVec) child(values []string, attrs attribute.Set) *Gauge {
	opt := metric.WithAttributeSet(attrs)
	g := &Gauge{set: v.set, add: v.add, addOpts: []metric.AddOption{opt}, recOpts: []metric.RecordOption{opt}}
	if v.prom != nil {
		g.prom = v.prom.WithLabelValues(values...)
	}
	switch { // the Prometheus child exists from now on, at 0: so does the stream
	case g.set != nil:
		g.set.Record(context.Background(), 0, g.recOpts...)
	case g.add != nil:
		g.add.Add(context.Background(), 0, g.addOpts...)
	}
	return g
}

// WithLabelValues returns the handle of one label set (after the curried
// values).
func (v *GaugeVec) WithLabelValues(values ...string) *Gauge { return v.family.with(values) }

// CurryWith returns the vec with its leading labels fixed to values.
func (v *GaugeVec) CurryWith(values ...string) *GaugeVec {
	return &GaugeVec{prom: v.prom, set: v.set, add: v.add, family: v.family.curry(values, nil)}
}

// Gauge is one label set of a gauge. It keeps its value, so that Set works
// on an UpDownCounter and Add on a Gauge.
type Gauge struct {
	prom    prometheus.Gauge
	set     metric.Float64Gauge
	add     metric.Float64UpDownCounter
	addOpts []metric.AddOption
	recOpts []metric.RecordOption
	bits    atomic.Uint64 // the value, as math.Float64bits
}

// Set sets the gauge to v.
func (g *Gauge) Set(v float64) {
	old := math.Float64frombits(g.bits.Swap(math.Float64bits(v)))
	if g.prom != nil {
		g.prom.Set(v)
	}
	g.record(v, v-old)
}

// Add adds d (which may be negative).
func (g *Gauge) Add(d float64) {
	for {
		old := g.bits.Load()
		v := math.Float64frombits(old) + d
		if g.bits.CompareAndSwap(old, math.Float64bits(v)) {
			if g.prom != nil {
				g.prom.Add(d)
			}
			g.record(v, d)
			return
		}
	}
}

// Inc adds 1; Dec subtracts 1.
func (g *Gauge) Inc() { g.Add(1) }

// Dec subtracts 1.
func (g *Gauge) Dec() { g.Add(-1) }

func (g *Gauge) record(v, delta float64) {
	switch {
	case g.set != nil:
		g.set.Record(context.Background(), v, g.recOpts...)
	case g.add != nil && delta != 0:
		g.add.Add(context.Background(), delta, g.addOpts...)
	}
}

// HistogramVec is a histogram of the catalog on every configured pipeline.
type HistogramVec struct {
	prom   *prometheus.HistogramVec
	otel   metric.Float64Histogram
	family *family[Histogram]
}

func (v *HistogramVec) child(values []string, attrs attribute.Set) *Histogram {
	return &Histogram{vec: v.prom, values: values, otel: v.otel, opts: []metric.RecordOption{metric.WithAttributeSet(attrs)}}
}

// WithLabelValues returns the handle of one label set (after the curried
// values).
func (v *HistogramVec) WithLabelValues(values ...string) *Histogram { return v.family.with(values) }

// CurryWith returns the vec with its leading labels fixed to values.
func (v *HistogramVec) CurryWith(values ...string) *HistogramVec {
	return &HistogramVec{prom: v.prom, otel: v.otel, family: v.family.curry(values, nil)}
}

// MustCurryWith returns the vec with the named labels fixed.
func (v *HistogramVec) MustCurryWith(labels map[string]string) *HistogramVec {
	return &HistogramVec{prom: v.prom, otel: v.otel, family: v.family.curry(nil, labels)}
}

// Histogram is one label set of a histogram. Its Prometheus child is
// created at the first observation, as an OpenTelemetry histogram stream
// starts at its first measurement: on both pipelines the series appears
// when there is something in it.
type Histogram struct {
	vec    *prometheus.HistogramVec
	values []string
	prom   atomic.Pointer[promObserver]
	otel   metric.Float64Histogram
	opts   []metric.RecordOption
}

type promObserver struct{ prometheus.Observer }

// Prometheus returns the handle's Prometheus child (creating it), nil
// without a Prometheus pipeline.
func (h *Histogram) Prometheus() prometheus.Observer {
	if o := h.observer(); o != nil {
		return o.Observer
	}
	return nil
}

func (h *Histogram) observer() *promObserver {
	if o := h.prom.Load(); o != nil || h.vec == nil {
		return o
	}
	h.prom.CompareAndSwap(nil, &promObserver{h.vec.WithLabelValues(h.values...)})
	return h.prom.Load()
}

// Observe records v with no exemplar.
func (h *Histogram) Observe(v float64) {
	if o := h.observer(); o != nil {
		o.Observe(v)
	}
	if h.otel != nil {
		h.otel.Record(context.Background(), v, h.opts...)
	}
}

// ObserveContext records v. When ctx holds a sampled span, the observation
// carries its trace as an exemplar: trace_id and span_id on the Prometheus
// path (exposed in the OpenMetrics format), the OpenTelemetry SDK's own
// exemplar on the OpenTelemetry path.
func (h *Histogram) ObserveContext(ctx context.Context, v float64) {
	if o := h.observer(); o != nil {
		observe(ctx, o.Observer, v)
	}
	if h.otel != nil {
		h.otel.Record(ctx, v, h.opts...)
	}
}

// observe records v on o, with the sampled span of ctx as an exemplar.
func observe(ctx context.Context, o prometheus.Observer, v float64) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		if eo, ok := o.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String(), "span_id": sc.SpanID().String()})
			return
		}
	}
	o.Observe(v)
}

// Describe and Collect make a handle a prometheus.Collector of its
// Prometheus child (for reading it back, as prometheus/testutil does); a
// handle without a Prometheus pipeline collects nothing.
func (c *Counter) Describe(ch chan<- *prometheus.Desc) { describe(c.prom, ch) }

// Collect implements prometheus.Collector.
func (c *Counter) Collect(ch chan<- prometheus.Metric) { collect(c.prom, ch) }

// Describe implements prometheus.Collector.
func (g *Gauge) Describe(ch chan<- *prometheus.Desc) { describe(g.prom, ch) }

// Collect implements prometheus.Collector.
func (g *Gauge) Collect(ch chan<- prometheus.Metric) { collect(g.prom, ch) }

// Describe implements prometheus.Collector.
func (h *Histogram) Describe(ch chan<- *prometheus.Desc) { describe(h.Prometheus(), ch) }

// Collect implements prometheus.Collector.
func (h *Histogram) Collect(ch chan<- prometheus.Metric) { collect(h.Prometheus(), ch) }

func describe(child any, ch chan<- *prometheus.Desc) {
	if c, ok := child.(prometheus.Collector); ok {
		c.Describe(ch)
	}
}

func collect(child any, ch chan<- prometheus.Metric) {
	if c, ok := child.(prometheus.Collector); ok {
		c.Collect(ch)
	}
}

// Describe and Collect make a vec a prometheus.Collector of its Prometheus
// collector (all its series, as a curried client_golang vec does).
func (v *CounterVec) Describe(ch chan<- *prometheus.Desc) { describe(v.prom, ch) }

// Collect implements prometheus.Collector.
func (v *CounterVec) Collect(ch chan<- prometheus.Metric) { collect(v.prom, ch) }

// Describe implements prometheus.Collector.
func (v *GaugeVec) Describe(ch chan<- *prometheus.Desc) { describe(v.prom, ch) }

// Collect implements prometheus.Collector.
func (v *GaugeVec) Collect(ch chan<- prometheus.Metric) { collect(v.prom, ch) }

// Describe implements prometheus.Collector.
func (v *HistogramVec) Describe(ch chan<- *prometheus.Desc) { describe(v.prom, ch) }

// Collect implements prometheus.Collector.
func (v *HistogramVec) Collect(ch chan<- prometheus.Metric) { collect(v.prom, ch) }
