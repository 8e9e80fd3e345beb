package signals

import "fmt"

// InstrumentKind is the OpenTelemetry instrument a signal is recorded with
// when an emitter has a MeterProvider.
type InstrumentKind int

// The OpenTelemetry instrument kinds of the catalog. Counts of events are
// monotonic counters (Prometheus's OTLP translation appends _total); levels
// that go up and down are gauges or up-down counters; durations are
// histograms in seconds with explicit bucket advice.
const (
	// OTelCounter is a synchronous monotonic Float64Counter.
	OTelCounter InstrumentKind = iota + 1
	// OTelUpDownCounter is a synchronous Float64UpDownCounter: a level
	// changed by increments (calls in flight).
	OTelUpDownCounter
	// OTelGauge is a synchronous Float64Gauge: a level set to a value.
	OTelGauge
	// OTelHistogram is a Float64Histogram with the metric's buckets as
	// explicit bucket advice.
	OTelHistogram
	// OTelObservableCounter is a Float64ObservableCounter read at collection
	// (pool statistics, the exporter's samples).
	OTelObservableCounter
	// OTelObservableUpDownCounter is a Float64ObservableUpDownCounter read at
	// collection.
	OTelObservableUpDownCounter
	// OTelObservableGauge is a Float64ObservableGauge read at collection.
	OTelObservableGauge
	// OTelGaugeHistogram is the distribution of a sampled state (the
	// remaining TTLs of the locks present now), which the OpenTelemetry API
	// has no instrument for: it is observed as three observable gauges,
	// Name+".bucket" (attribute le, cumulative), Name+".sum" and
	// Name+".count", which Prometheus's OTLP translation turns into the
	// classic _bucket, _sum and _count series. Its Name ends in the unit's
	// word ("seconds"), as the translation adds no unit to a name that has it.
	OTelGaugeHistogram
)

// String returns the OpenTelemetry API's name of the instrument.
func (k InstrumentKind) String() string {
	switch k {
	case OTelCounter:
		return "Counter"
	case OTelUpDownCounter:
		return "UpDownCounter"
	case OTelGauge:
		return "Gauge"
	case OTelHistogram:
		return "Histogram"
	case OTelObservableCounter:
		return "ObservableCounter"
	case OTelObservableUpDownCounter:
		return "ObservableUpDownCounter"
	case OTelObservableGauge:
		return "ObservableGauge"
	case OTelGaugeHistogram:
		return "ObservableGauge ×3 (gauge histogram)"
	}
	return fmt.Sprintf("InstrumentKind(%d)", int(k))
}

// OTelInstrument is a metric's OpenTelemetry instrument. Its description is the
// metric's Help, its attributes are the metric's labels (with the same
// bounds), and a histogram's explicit bucket advice is the metric's Buckets:
// one definition for both pipelines.
//
// Name is chosen so that Prometheus's OTLP translation (dots to underscores,
// the unit's suffix, _total for monotonic counters, _ratio for gauges of
// unit "1") gives back the metric's Prometheus name, so that the generated
// dashboards and alerts read OTLP-fed series unchanged.
type OTelInstrument struct {
	Name string
	Kind InstrumentKind
	// Unit is UCUM: "s", "By", "1", or an annotation such as "{lock}",
	// which the translation leaves out of the name.
	Unit string
}

// Observable reports whether the instrument is read by a callback at
// collection rather than recorded as events happen.
func (i OTelInstrument) Observable() bool {
	switch i.Kind {
	case OTelObservableCounter, OTelObservableUpDownCounter, OTelObservableGauge, OTelGaugeHistogram:
		return true
	}
	return false
}

// GaugeHistogramNames are the names of the three observable gauges of an
// OTelGaugeHistogram: bucket counts (attribute le), sum and count.
type GaugeHistogramNames struct {
	Bucket, Sum, Count string
}

// GaugeHistogramNames returns the names of the three observable gauges of an
// OTelGaugeHistogram.
func (i OTelInstrument) GaugeHistogramNames() GaugeHistogramNames {
	return GaugeHistogramNames{Bucket: i.Name + ".bucket", Sum: i.Name + ".sum", Count: i.Name + ".count"}
}

// MeterName is the instrumentation scope of every cachewatch instrument. All
// emitters (the instrumented client, the hook, the exporter) share it, so
// that a hook and a client on one MeterProvider add to the same streams,
// as they share collectors on one Prometheus registry.
const MeterName = "github.com/cachewatch/cachewatch"

// GaugeHistogramCountUnit is the unit of the bucket and count gauges of an
// OTelGaugeHistogram.
const GaugeHistogramCountUnit = "{observation}"
