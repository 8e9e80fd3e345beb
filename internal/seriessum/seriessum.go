// Package seriessum adds up gathered Prometheus series selected by label:
// the demo's report and the tests' metrictest read metrics back alike.
package seriessum

import dto "github.com/prometheus/client_model/go"

// Sum adds up the values (see Value) of the series whose labels include
// every name/value pair in pairs ("result", "miss", ...).
func Sum(series []*dto.Metric, pairs ...string) float64 {
	var total float64
	for _, m := range series {
		if Matches(m, pairs) {
			total += Value(m)
		}
	}
	return total
}

// Value is a series' counter or gauge value, or its histogram's sample
// count.
func Value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

// Matches reports whether m's labels include every name/value pair in
// pairs.
func Matches(m *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == pairs[i] {
				found = l.GetValue() == pairs[i+1]
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
