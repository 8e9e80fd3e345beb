package metrictest_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/signals"
)

func TestSum(t *testing.T) {
	reg := prometheus.NewRegistry()
	lookups := signals.CacheLookups.NewCounterVec()
	hold := signals.LockHoldDuration.NewHistogramVec()
	reg.MustRegister(lookups, hold)
	lookups.WithLabelValues("c", "a:*", "hit").Add(3)
	lookups.WithLabelValues("c", "a:*", "miss").Add(2)
	lookups.WithLabelValues("c", "b:*", "hit").Add(5)
	hold.WithLabelValues("c", "a:*", signals.EndReleased).Observe(1)
	hold.WithLabelValues("c", "a:*", signals.EndExpired).Observe(2)

	cases := []struct {
		name   string
		labels []string
		want   float64
	}{
		{signals.CacheLookups.String(), nil, 10},
		{signals.CacheLookups.String(), []string{"result", "hit"}, 8},
		{signals.CacheLookups.String(), []string{"key_group", "a:*", "result", "hit"}, 3},
		{signals.CacheLookups.String(), []string{"result", "stale"}, 0},
		{signals.CacheLookups.String(), []string{"no_such_label", "x"}, 0},
		{signals.LockHoldDuration.String(), []string{"key_group", "a:*"}, 2},
		{signals.LockHoldDuration.String(), []string{"outcome", signals.EndReleased}, 1},
		{"missing_metric", nil, 0},
	}
	for _, c := range cases {
		if got := metrictest.Sum(t, reg, c.name, c.labels...); got != c.want {
			t.Errorf("Sum(%s, %q) = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if got := metrictest.Sum(t, reg, signals.CacheLookups.String(), metrictest.Pairs(map[string]string{"key_group": "b:*"})...); got != 5 {
		t.Errorf("Sum with Pairs = %v, want 5", got)
	}
}

// errRecorder records Errorf instead of failing the test, to show that
// PromtoolCheck reports a bad page.
type errRecorder struct {
	testing.TB
	errors int
}

func (r *errRecorder) Errorf(string, ...any) { r.errors++ }

func TestPromtoolCheck(t *testing.T) {
	reg := prometheus.NewRegistry()
	lookups := signals.CacheLookups.NewCounterVec()
	reg.MustRegister(lookups)
	lookups.WithLabelValues("c", "a:*", "hit").Inc()
	metrictest.PromtoolCheck(t, metrictest.Exposition(t, reg)) // a catalog metric passes

	bad := "# HELP requests Requests.\n# TYPE requests counter\nrequests 1\n" // counter without _total
	r := &errRecorder{TB: t}
	metrictest.PromtoolCheck(r, bad)
	if r.errors != 1 {
		t.Fatalf("promtool complaints reported = %d, want 1 for a counter without _total", r.errors)
	}
}
