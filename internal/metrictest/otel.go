package metrictest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Collect reads everything rd holds now.
func Collect(t testing.TB, rd *sdkmetric.ManualReader) *metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	return &rm
}

// OTelSum is Sum for OpenTelemetry data: it adds up the data points of the
// instrument name whose attributes include every name/value pair of labels:
// sums and gauges by value, histograms by count. A missing point reads 0.
func OTelSum(t testing.TB, rm *metricdata.ResourceMetrics, name string, labels ...string) float64 {
	t.Helper()
	var sum float64
	for _, m := range instruments(rm, name) {
		switch d := m.Data.(type) {
		case metricdata.Sum[float64]:
			sum += sumPoints(d.DataPoints, labels)
		case metricdata.Sum[int64]:
			sum += sumPoints(d.DataPoints, labels)
		case metricdata.Gauge[float64]:
			sum += sumPoints(d.DataPoints, labels)
		case metricdata.Gauge[int64]:
			sum += sumPoints(d.DataPoints, labels)
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				if hasAttrs(p.Attributes, labels) {
					sum += float64(p.Count)
				}
			}
		default:
			t.Fatalf("%s: unexpected data %T", name, m.Data)
		}
	}
	return sum
}

// HistogramPoint returns the one histogram data point of name with exactly
// the attributes attrs, failing t when there is none.
func HistogramPoint(t testing.TB, rm *metricdata.ResourceMetrics, name string, attrs attribute.Set) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	for _, m := range instruments(rm, name) {
		if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
			for _, p := range h.DataPoints {
				if p.Attributes.Equals(&attrs) {
					return p
				}
			}
		}
	}
	t.Fatalf("%s: no histogram point with attributes %v", name, attrs.ToSlice())
	return metricdata.HistogramDataPoint[float64]{}
}

func instruments(rm *metricdata.ResourceMetrics, name string) []metricdata.Metrics {
	var out []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				out = append(out, m)
			}
		}
	}
	return out
}

func sumPoints[N int64 | float64](points []metricdata.DataPoint[N], labels []string) float64 {
	var sum float64
	for _, p := range points {
		if hasAttrs(p.Attributes, labels) {
			sum += float64(p.Value)
		}
	}
	return sum
}

func hasAttrs(set attribute.Set, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		v, ok := set.Value(attribute.Key(pairs[i]))
		if !ok || v.Emit() != pairs[i+1] {
			return false
		}
	}
	return true
}

// HistogramPoints returns every histogram data point of name.
func HistogramPoints(rm *metricdata.ResourceMetrics, name string) []metricdata.HistogramDataPoint[float64] {
	var out []metricdata.HistogramDataPoint[float64]
	for _, m := range instruments(rm, name) {
		if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
			out = append(out, h.DataPoints...)
		}
	}
	return out
}
