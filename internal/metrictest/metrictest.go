// Package metrictest reads metrics back from a registry in tests, so a test
// can compare what was counted with the events it caused.
package metrictest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cachewatch/cachewatch/internal/seriessum"
)

// Sum adds up the series of metric name whose labels include every
// name/value pair given in labels ("reason", "expired", ...): counter and
// gauge values, histogram sample counts. A series that does not exist reads 0.
func Sum(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	return seriessum.Sum(Series(t, g, name, labels...))
}

// Series returns the series of metric name whose labels include every
// name/value pair in labels.
func Series(t testing.TB, g prometheus.Gatherer, name string, labels ...string) []*dto.Metric {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("metrictest: labels must be name/value pairs, got %q", labels)
	}
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("metrictest: gather: %v", err)
	}
	var out []*dto.Metric
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if seriessum.Matches(m, labels) {
				out = append(out, m)
			}
		}
	}
	return out
}

// Pairs flattens a label map into the name/value pairs Sum and Series take.
func Pairs(labels map[string]string) []string {
	out := make([]string, 0, 2*len(labels))
	for k, v := range labels {
		out = append(out, k, v)
	}
	return out
}
