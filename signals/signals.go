// Package signals is cachewatch's catalog of metrics: the one place where every
// metric's name, type, help, unit, labels and buckets are defined.
//
// Emitters (instrument, hooks, exporter) build their collectors from these
// definitions; dashboards, alerts and docs/metrics.md are generated from them.
// Renaming a metric here renames it everywhere, so no dashboard can keep
// querying a dead series.
package signals

import (
	"errors"
	"fmt"
	"strings"

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

// Source names the part of cachewatch that emits a signal.
type Source string

// The emitters of signals.
const (
	Instrument Source = "instrument"
	Hooks      Source = "hooks"
	Exporter   Source = "exporter"
)

// Label is a label name together with the values it can take. Values is
// documentation and a promise of boundedness: an empty Values means the set is
// bounded by configuration (key groups, script names, nodes) rather than by code.
type Label struct {
	Name   string
	Values []string
	Doc    string
}

// Metric is the single definition of one metric.
type Metric struct {
	// Name is the full metric name, including the cachewatch_ prefix, the
	// unit and, for counters, the _total suffix.
	Name string
	Kind Kind
	Help string
	// Unit is the base unit ("seconds", "bytes") or "" for plain counts.
	Unit    string
	Labels  []Label
	Buckets []float64
	Sources []Source
}

// LabelNames returns the metric's label names in order.
func (m *Metric) LabelNames() []string {
	names := make([]string, len(m.Labels))
	for i, l := range m.Labels {
		names[i] = l.Name
	}
	return names
}

// Desc returns a descriptor for collectors that build const metrics (the
// exporter). constLabels may be nil.
func (m *Metric) Desc(constLabels prometheus.Labels) *prometheus.Desc {
	return prometheus.NewDesc(m.Name, m.Help, m.LabelNames(), constLabels)
}

// NewCounterVec builds a CounterVec from the definition. It panics when the
// metric is not a counter: that is a programming error caught by any test.
func (m *Metric) NewCounterVec() *prometheus.CounterVec {
	m.mustBe(Counter)
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: m.Name, Help: m.Help}, m.LabelNames())
}

// NewGaugeVec builds a GaugeVec from the definition.
func (m *Metric) NewGaugeVec() *prometheus.GaugeVec {
	m.mustBe(Gauge)
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: m.Name, Help: m.Help}, m.LabelNames())
}

// NewHistogramVec builds a HistogramVec from the definition, with its buckets.
func (m *Metric) NewHistogramVec() *prometheus.HistogramVec {
	m.mustBe(Histogram)
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: m.Name, Help: m.Help, Buckets: m.Buckets}, m.LabelNames())
}

func (m *Metric) mustBe(k Kind) {
	if m.Kind != k {
		panic(fmt.Sprintf("signals: %s is a %s, not a %s", m.Name, m.Kind, k))
	}
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

// ByName returns the catalog entry with the given name, or nil.
func ByName(name string) *Metric {
	for _, m := range All() {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// Names returns every metric name of the catalog, and for histograms the
// series names Prometheus derives from them (_bucket, _sum, _count).
func Names() map[string]*Metric {
	out := make(map[string]*Metric)
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

// HasSource reports whether s emits m.
func (m *Metric) HasSource(s Source) bool {
	for _, x := range m.Sources {
		if x == s {
			return true
		}
	}
	return false
}

// sourceList is used by the doc generator.
func (m *Metric) sourceList() string {
	parts := make([]string, len(m.Sources))
	for i, s := range m.Sources {
		parts[i] = string(s)
	}
	return strings.Join(parts, ", ")
}
