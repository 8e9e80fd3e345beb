package hooks_test

import (
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// metricValue returns the value of the series of name whose labels include
// want: a counter's or gauge's value, a histogram's sample count. A series
// that does not exist reads 0.
func metricValue(t testing.TB, g prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	var sum float64
	for _, m := range series(t, g, name) {
		if !hasLabels(m, want) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

func series(t testing.TB, g prometheus.Gatherer, name string) []*dto.Metric {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.Metric
		}
	}
	return nil
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	got := map[string]string{}
	for _, lp := range m.Label {
		got[lp.GetName()] = lp.GetValue()
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// labelValues returns the distinct values of label on name's series.
func labelValues(t testing.TB, g prometheus.Gatherer, name, label string) []string {
	t.Helper()
	set := map[string]bool{}
	for _, m := range series(t, g, name) {
		for _, lp := range m.Label {
			if lp.GetName() == label {
				set[lp.GetValue()] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for v := range set {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// L builds a label map from "name=value" pairs.
func L(pairs ...string) map[string]string {
	m := map[string]string{}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		m[k] = v
	}
	return m
}

// expect asserts that each series reads the expected value.
func expect(t testing.TB, g prometheus.Gatherer, name string, cases map[string]float64) {
	t.Helper()
	for labels, want := range cases {
		var pairs []string
		if labels != "" {
			pairs = strings.Split(labels, ",")
		}
		if got := metricValue(t, g, name, L(pairs...)); got != want {
			t.Errorf("%s{%s} = %v, want %v", name, labels, got, want)
		}
	}
}
