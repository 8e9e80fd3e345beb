package hooks_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/poll"
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
	for _, msg := range mismatches(t, g, name, cases) {
		t.Error(msg)
	}
}

// mismatches lists the cases whose series do not read the expected value.
func mismatches(t testing.TB, g prometheus.Gatherer, name string, cases map[string]float64) []string {
	t.Helper()
	var out []string
	for labels, want := range cases {
		var pairs []string
		if labels != "" {
			pairs = strings.Split(labels, ",")
		}
		if got := metricValue(t, g, name, L(pairs...)); got != want {
			out = append(out, fmt.Sprintf("%s{%s} = %v, want %v", name, labels, got, want))
		}
	}
	sort.Strings(out)
	return out
}

// settled is expect for counts the hook settles later: a busy first lock
// attempt counts once it is retried, or once its retry horizon has passed
// without a retry (a try-once caller's). Each scrape settles the attempts
// whose horizon has passed, so it scrapes until the cases hold.
func settled(t testing.TB, g prometheus.Gatherer, name string, cases map[string]float64) {
	t.Helper()
	err := poll.Check(context.Background(), poll.Bound, 10*time.Millisecond, func() error {
		if msgs := mismatches(t, g, name, cases); len(msgs) > 0 {
			return errors.New(strings.Join(msgs, "; "))
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
