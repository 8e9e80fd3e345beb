// Package signals is cachewatch's catalog of metrics: the one place where every
// metric's name, type, help, unit, labels and buckets are defined.
//
// Each metric has a Go identifier, an ID constant whose value is the metric's
// name (signals.LockAttempts is "cachewatch_lock_attempts_total").
// Emitters (instrument, hooks, exporter) build their collectors from an ID
// (signals.LockAttempts.NewCounterVec()); docs/metrics.md is generated from
// the definitions, and dashboards and alerts can name metrics by ID too.
// The catalog is read-only: All, Lookup and ID.Metric return copies.
// Renaming a metric here renames it everywhere, so no dashboard can keep
// querying a dead series.
package signals

import (
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

//go:generate go run ./internal/gendoc -out ../docs/metrics.md

// Kind is the Prometheus metric type of a signal.
type Kind int

// The metric types a signal can have.
const (
	Counter Kind = iota + 1
	Gauge
	Histogram
)

// String returns the Prometheus name of the type ("counter", "gauge", "histogram").
func (k Kind) String() string {
	switch k {
	case Counter:
		return "counter"
	case Gauge:
		return "gauge"
	case Histogram:
		return "histogram"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Emitter names the part of cachewatch that emits a signal.
type Emitter string

// The emitters of signals.
const (
	Instrument Emitter = "instrument"
	Hooks      Emitter = "hooks"
	Exporter   Emitter = "exporter"
	Prober     Emitter = "probe"
)

// Label is a label name together with the values it can take. Values is
// documentation and a promise of boundedness: an empty Values means the set is
// bounded by configuration (key groups, script names, nodes) rather than by code.
type Label struct {
	Name   string
	Values []string
	Doc    string
}

// Metric is the definition of one metric, as read from the catalog: a copy,
// so changing it changes nothing else. Emitters start from an ID.
type Metric struct {
	// Name is the full metric name, including the cachewatch_ prefix, the
	// unit and, for counters, the _total suffix.
	Name string
	Kind Kind
	Help string
	// Unit is the base unit ("seconds", "bytes") or "" for plain counts.
	Unit     string
	Labels   []Label
	Buckets  []float64
	Emitters []Emitter
	// OTel is the metric's OpenTelemetry instrument, for emitters given a
	// MeterProvider.
	OTel OTelInstrument
}

// ID names one metric of the catalog. Its value is the metric's name, so
// an ID can stand in PromQL text as it is; its methods build the metric's
// collectors from the one definition in the catalog.
type ID string

// String returns the metric's name.
func (id ID) String() string { return string(id) }

// Metric returns a copy of the metric's definition. It panics for an ID
// outside the catalog: that is a programming error caught by any test.
func (id ID) Metric() Metric {
	m, ok := Lookup(string(id))
	if !ok {
		panic(fmt.Sprintf("signals: %q is not in the catalog", string(id)))
	}
	return m
}

// LabelNames returns the metric's label names in order.
func (id ID) LabelNames() []string { return id.def().LabelNames() }

// Desc returns a descriptor for collectors that build const metrics (the
// exporter). constLabels may be nil.
func (id ID) Desc(constLabels prometheus.Labels) *prometheus.Desc { return id.def().Desc(constLabels) }

// NewCounterVec builds a CounterVec from the definition. It panics when the
// metric is not a counter.
func (id ID) NewCounterVec() *prometheus.CounterVec { return id.def().NewCounterVec() }

// NewGaugeVec builds a GaugeVec from the definition. It panics when the
// metric is not a gauge.
func (id ID) NewGaugeVec() *prometheus.GaugeVec { return id.def().NewGaugeVec() }

// NewHistogramVec builds a HistogramVec from the definition, with its
// buckets. It panics when the metric is not a histogram.
func (id ID) NewHistogramVec() *prometheus.HistogramVec { return id.def().NewHistogramVec() }

// def returns the catalog's own definition, for reading only.
func (id ID) def() *Metric {
	if m := catalog[id]; m != nil {
		return m
	}
	panic(fmt.Sprintf("signals: %q is not in the catalog", string(id)))
}

// catalog maps every ID to its definition.
var catalog = func() map[ID]*Metric {
	out := map[ID]*Metric{}
	for _, part := range []map[ID]*Metric{clientMetrics, hookMetrics, exporterMetrics, proberMetrics} {
		for id, m := range part {
			out[id] = m
		}
	}
	return out
}()

// ID returns the metric's ID.
func (m Metric) ID() ID { return ID(m.Name) }

// LabelNames returns the metric's label names in order.
func (m Metric) LabelNames() []string {
	names := make([]string, len(m.Labels))
	for i, l := range m.Labels {
		names[i] = l.Name
	}
	return names
}

// Desc returns a descriptor for collectors that build const metrics (the
// exporter). constLabels may be nil.
func (m Metric) Desc(constLabels prometheus.Labels) *prometheus.Desc {
	return prometheus.NewDesc(m.Name, m.Help, m.LabelNames(), constLabels)
}

// NewCounterVec builds a CounterVec from the definition. It panics when the
// metric is not a counter: that is a programming error caught by any test.
func (m Metric) NewCounterVec() *prometheus.CounterVec {
	m.mustBe(Counter)
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: m.Name, Help: m.Help}, m.LabelNames())
}

// NewGaugeVec builds a GaugeVec from the definition.
func (m Metric) NewGaugeVec() *prometheus.GaugeVec {
	m.mustBe(Gauge)
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: m.Name, Help: m.Help}, m.LabelNames())
}

// NewHistogramVec builds a HistogramVec from the definition, with its buckets.
func (m Metric) NewHistogramVec() *prometheus.HistogramVec {
	m.mustBe(Histogram)
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: m.Name, Help: m.Help, Buckets: m.Buckets}, m.LabelNames())
}

func (m Metric) mustBe(k Kind) {
	if m.Kind != k {
		panic(fmt.Sprintf("signals: %s is a %s, not a %s", m.Name, m.Kind, k))
	}
}

// clone returns a copy of m that shares no slice with it.
func (m Metric) clone() Metric {
	m.Labels = slices.Clone(m.Labels)
	for i := range m.Labels {
		m.Labels[i].Values = slices.Clone(m.Labels[i].Values)
	}
	m.Buckets = slices.Clone(m.Buckets)
	m.Emitters = slices.Clone(m.Emitters)
	return m
}

// Register registers c with reg and returns the collector to use: c itself, or
// the equal collector already registered by another emitter sharing reg (a
// hook and an instrumented client both counting cache lookups, say). A nil
// reg registers nothing and returns c.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("signals: register: %w", err)
}

// All returns a copy of the whole catalog in a stable order: client
// signals, hook signals, exporter signals.
func All() []Metric {
	out := make([]Metric, len(order))
	for i, id := range order {
		out[i] = catalog[id].clone()
	}
	return out
}

// Lookup returns a copy of the catalog entry with the given name.
func Lookup(name string) (Metric, bool) {
	m, ok := catalog[ID(name)]
	if !ok {
		return Metric{}, false
	}
	return m.clone(), true
}

// Names returns every metric name of the catalog, and for histograms the
// series names Prometheus derives from them (_bucket, _sum, _count).
func Names() map[string]Metric {
	out := make(map[string]Metric)
	for _, m := range All() {
		out[m.Name] = m
		if m.Kind == Histogram {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[m.Name+s] = m
			}
		}
	}
	return out
}

// HasEmitter reports whether s emits m.
func (m Metric) HasEmitter(s Emitter) bool {
	for _, x := range m.Emitters {
		if x == s {
			return true
		}
	}
	return false
}
