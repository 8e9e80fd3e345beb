package metrictest

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/cachewatch/cachewatch/signals"
)

// SameOnBoth fails t unless every catalog series that g gathers has the same
// value in rm, the OpenTelemetry data of the same events, and rm has no
// catalog series that g lacks: counter and gauge values equal, histogram
// counts, sums and bucket counts equal. A Prometheus histogram child with no
// observation yet may be missing on OpenTelemetry, where a histogram stream
// starts at its first measurement. It returns how many series it compared.
func SameOnBoth(t testing.TB, g prometheus.Gatherer, rm *metricdata.ResourceMetrics) int {
	t.Helper()
	prom, unobserved := promValues(t, g)
	otel := otelValues(rm)
	for k, v := range prom {
		if o, ok := otel[k]; !ok && !unobserved[k] {
			t.Errorf("%s: on Prometheus (%v), not on OpenTelemetry", k, v)
		} else if o != v {
			t.Errorf("%s: Prometheus %v, OpenTelemetry %v", k, v, o)
		}
	}
	for k, v := range otel {
		if _, ok := prom[k]; !ok {
			t.Errorf("%s: on OpenTelemetry (%v), not on Prometheus", k, v)
		}
	}
	for k := range unobserved {
		if _, ok := otel[k]; !ok {
			delete(prom, k)
		}
	}
	return len(prom)
}

// promValues flattens the catalog series of g: name{labels} → value, with
// a histogram as its _count, _sum and _bucket{le} series; unobserved are
// those of histograms without an observation.
func promValues(t testing.TB, g prometheus.Gatherer) (values map[string]float64, unobserved map[string]bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out, empty := map[string]float64{}, map[string]bool{}
	for _, mf := range mfs {
		if _, ok := signals.Lookup(mf.GetName()); !ok {
			continue
		}
		for _, m := range mf.GetMetric() {
			lbls := map[string]string{}
			for _, l := range m.GetLabel() {
				lbls[l.GetName()] = l.GetValue()
			}
			keys := addProm(out, mf.GetName(), lbls, m)
			if m.Histogram != nil && m.GetHistogram().GetSampleCount() == 0 {
				for _, k := range keys {
					empty[k] = true
				}
			}
		}
	}
	return out, empty
}

// addProm adds m's series to out and returns their keys.
func addProm(out map[string]float64, name string, lbls map[string]string, m *dto.Metric) []string {
	set := map[string]float64{}
	switch {
	case m.Counter != nil:
		set[key(name, lbls)] = m.GetCounter().GetValue()
	case m.Gauge != nil:
		set[key(name, lbls)] = m.GetGauge().GetValue()
	case m.Histogram != nil:
		h := m.GetHistogram()
		set[key(name+"_count", lbls)] = float64(h.GetSampleCount())
		set[key(name+"_sum", lbls)] = h.GetSampleSum()
		for _, b := range h.GetBucket() {
			set[key(name+"_bucket", with(lbls, "le", fmt.Sprint(b.GetUpperBound())))] = float64(b.GetCumulativeCount())
		}
		set[key(name+"_bucket", with(lbls, "le", "+Inf"))] = float64(h.GetSampleCount())
	}
	keys := make([]string, 0, len(set))
	for k, v := range set {
		out[k] = v
		keys = append(keys, k)
	}
	return keys
}

// otelValues flattens rm's catalog instruments under their Prometheus names.
func otelValues(rm *metricdata.ResourceMetrics) map[string]float64 {
	byOTel := map[string]string{} // instrument name → Prometheus name
	for _, m := range signals.All() {
		byOTel[m.OTel.Name] = m.Name
		if m.OTel.Kind == signals.OTelGaugeHistogram {
			names := m.OTel.GaugeHistogramNames()
			byOTel[names.Bucket], byOTel[names.Sum], byOTel[names.Count] = m.Name+"_bucket", m.Name+"_sum", m.Name+"_count"
		}
	}
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if name, ok := byOTel[m.Name]; ok {
				addOTel(out, name, m.Data)
			}
		}
	}
	return out
}

func addOTel(out map[string]float64, name string, data metricdata.Aggregation) {
	switch d := data.(type) {
	case metricdata.Sum[float64]:
		for _, p := range d.DataPoints {
			out[key(name, attrMap(p.Attributes))] = p.Value
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			out[key(name, attrMap(p.Attributes))] = p.Value
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			lbls := attrMap(p.Attributes)
			out[key(name+"_count", lbls)] = float64(p.Count)
			out[key(name+"_sum", lbls)] = p.Sum
			var cum uint64
			for i, b := range p.Bounds {
				cum += p.BucketCounts[i]
				out[key(name+"_bucket", with(lbls, "le", fmt.Sprint(b)))] = float64(cum)
			}
			out[key(name+"_bucket", with(lbls, "le", "+Inf"))] = float64(p.Count)
		}
	}
}

// attrMap turns attributes into labels; an le attribute (of a gauge
// histogram) is written as promValues writes bucket bounds.
func attrMap(s attribute.Set) map[string]string {
	out := map[string]string{}
	for _, kv := range s.ToSlice() {
		out[string(kv.Key)] = kv.Value.Emit()
	}
	if le, ok := out["le"]; ok {
		if f, err := strconv.ParseFloat(le, 64); err == nil {
			out["le"] = fmt.Sprint(f)
		}
	}
	return out
}

func with(m map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for a, b := range m {
		out[a] = b
	}
	out[k] = v
	return out
}

func key(name string, lbls map[string]string) string {
	names := make([]string, 0, len(lbls))
	for k := range lbls {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = k + "=" + lbls[k]
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}
