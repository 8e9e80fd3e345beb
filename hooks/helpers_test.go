package hooks_test

import (
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/internal/metrictest"
)

// metricValue returns the value of the series of name whose labels include
// want: a counter's or gauge's value, a histogram's sample count. A series
// that does not exist reads 0.
func metricValue(t testing.TB, g prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	return metrictest.Sum(t, g, name, metrictest.Pairs(want)...)
}

// labelValues returns the distinct values of label on name's series.
func labelValues(t testing.TB, g prometheus.Gatherer, name, label string) []string {
	t.Helper()
	set := map[string]bool{}
	for _, m := range metrictest.Series(t, g, name) {
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
