package signals_test

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/otlptranslator"

	"github.com/cachewatch/cachewatch/alerts"
	"github.com/cachewatch/cachewatch/signals"
)

// TestMetricsDocFresh fails when docs/metrics.md no longer matches the
// catalog and the service-level indicators generated from it.
func TestMetricsDocFresh(t *testing.T) {
	var want bytes.Buffer
	if err := signals.WriteMarkdown(&want); err != nil {
		t.Fatal(err)
	}
	want.Write(alerts.SLIMarkdown(alerts.DefaultConfig()))
	got, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatalf("read committed doc: %v", err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("docs/metrics.md is stale: run `go generate ./signals` and commit the result")
	}
}

var labelName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// TestCatalogConventions holds every definition to Prometheus's metric and
// label naming conventions, so a new metric cannot break them unnoticed.
func TestCatalogConventions(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range signals.All() {
		if seen[m.Name] {
			t.Errorf("%s defined twice", m.Name)
		}
		seen[m.Name] = true
		if !strings.HasPrefix(m.Name, "cachewatch_") {
			t.Errorf("%s: missing cachewatch_ prefix", m.Name)
		}
		if (m.Kind == signals.Counter) != strings.HasSuffix(m.Name, "_total") {
			t.Errorf("%s: counters and only counters end in _total", m.Name)
		}
		base := strings.TrimSuffix(m.Name, "_total")
		if m.Unit != "" && !strings.HasSuffix(base, "_"+m.Unit) {
			t.Errorf("%s: unit %q not in the name", m.Name, m.Unit)
		}
		if m.Help == "" || len(m.Emitters) == 0 {
			t.Errorf("%s: help and sources are required", m.Name)
		}
		if (m.Kind == signals.Histogram) != (len(m.Buckets) > 0) {
			t.Errorf("%s: histograms and only histograms have buckets", m.Name)
		}
		labels := map[string]bool{}
		for _, l := range m.Labels {
			if !labelName.MatchString(l.Name) || labels[l.Name] || l.Name == "le" || l.Name == "key" {
				t.Errorf("%s: bad or repeated label %q", m.Name, l.Name)
			}
			labels[l.Name] = true
		}
	}
	if got, ok := signals.Lookup(signals.LockAttempts.String()); !ok || got.ID() != signals.LockAttempts {
		t.Errorf("Lookup(%q) = %v, %v", signals.LockAttempts, got, ok)
	}
	if _, ok := signals.Lookup("cachewatch_no_such_metric"); ok {
		t.Error("Lookup of an unknown name succeeded")
	}
}

// The catalog is read-only to its users: what All, Lookup and ID.Metric
// return are copies, and changing them changes no emitter's metric.
func TestCatalogIsReadOnly(t *testing.T) {
	m := signals.LockAcquireDuration.Metric()
	m.Name, m.Help = "changed", "changed"
	m.Labels[1].Name = "changed"
	m.Labels[2].Values[0] = "changed"
	m.Buckets[0] = 42
	for _, a := range signals.All() {
		if a.ID() == signals.LockAcquireDuration {
			a.Labels[1].Name = "changed"
			a.Buckets[1] = 42
		}
	}
	got := signals.LockAcquireDuration.Metric()
	if got.Name != "cachewatch_lock_acquire_duration_seconds" || got.Labels[1].Name != "key_group" ||
		got.Labels[2].Values[0] != "acquired" || got.Buckets[0] == 42 || got.Buckets[1] == 42 {
		t.Fatalf("catalog changed through a copy: %+v", got)
	}
	if names := signals.LockAcquireDuration.LabelNames(); names[1] != "key_group" {
		t.Fatalf("label names = %v", names)
	}
}

// TestCatalogLint builds every metric, gives each one series, and runs the
// client_golang linter (the same checks as `promtool check metrics`).
func TestCatalogLint(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	for _, m := range signals.All() {
		values := make([]string, len(m.Labels))
		for i := range values {
			values[i] = "x"
		}
		var c prometheus.Collector
		switch m.Kind {
		case signals.Counter:
			v := m.NewCounterVec()
			v.WithLabelValues(values...).Inc()
			c = v
		case signals.Gauge:
			v := m.NewGaugeVec()
			v.WithLabelValues(values...).Set(1)
			c = v
		case signals.Histogram:
			v := m.NewHistogramVec()
			v.WithLabelValues(values...).Observe(0.01)
			c = v
		}
		if err := reg.Register(c); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	if n, _ := testutil.GatherAndCount(reg); n != len(signals.All()) {
		t.Errorf("gathered %d series, want %d", n, len(signals.All()))
	}
}

// TestRegisterShares proves two emitters on one registry share a collector
// instead of failing with a duplicate registration.
func TestRegisterShares(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := signals.Register(reg, signals.CacheLookups.NewCounterVec())
	if err != nil {
		t.Fatal(err)
	}
	b, err := signals.Register(reg, signals.CacheLookups.NewCounterVec())
	if err != nil {
		t.Fatal(err)
	}
	a.WithLabelValues("default", "g", "hit").Inc()
	b.WithLabelValues("default", "g", "hit").Inc()
	if got := testutil.ToFloat64(a.WithLabelValues("default", "g", "hit")); got != 2 {
		t.Fatalf("shared counter = %v, want 2", got)
	}
	// A collector of another type under the same name is an error, not a silent share.
	if _, err := signals.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: signals.CacheLookups.String(), Help: "x"})); err == nil {
		t.Fatal("conflicting registration accepted")
	}
}

func TestWrongKindPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NewGaugeVec on a counter did not panic")
		}
	}()
	signals.LockAttempts.NewGaugeVec()
}

// TestEveryMetricHasAnOTelInstrument fails when a metric lacks its
// OpenTelemetry instrument, or when Prometheus's OTLP translation (the
// default UnderscoreEscapingWithSuffixes strategy of Prometheus 3, through
// its own translator) would not give back the metric's Prometheus name: the
// generated dashboards and alerts would then miss OTLP-fed series.
func TestEveryMetricHasAnOTelInstrument(t *testing.T) {
	namer := otlptranslator.NewMetricNamer("", otlptranslator.UnderscoreEscapingWithSuffixes)
	seen := map[string]string{}
	for _, m := range signals.All() {
		in := m.OTel
		if in.Name == "" || in.Kind == 0 {
			t.Errorf("%s: no OpenTelemetry instrument (OTel) in the catalog", m.Name)
			continue
		}
		if !strings.HasPrefix(in.Name, "cachewatch.") || strings.Contains(in.Name, "_total") {
			t.Errorf("%s: instrument name %q must start with cachewatch. and carry no _total", m.Name, in.Name)
		}
		if prev, dup := seen[in.Name]; dup {
			t.Errorf("%s: instrument name %q already used by %s", m.Name, in.Name, prev)
		}
		seen[in.Name] = m.Name
		if want := map[string]string{"seconds": "s", "bytes": "By"}[m.Unit]; m.Unit != "" && in.Unit != want {
			t.Errorf("%s: unit %q, want UCUM %q", m.Name, in.Unit, want)
		}
		checkKind(t, m)
		for _, series := range translatedSeries(m) {
			got, err := namer.Build(series.metric)
			if err != nil || got != series.want {
				t.Errorf("%s: OTLP translation of %q (unit %q) is %q (err %v), want %q",
					m.Name, series.metric.Name, series.metric.Unit, got, err, series.want)
			}
		}
	}
}

// checkKind holds the instrument kind to the Prometheus type: counters are
// monotonic, gauges gauges or up-down counters, histograms histograms.
func checkKind(t *testing.T, m signals.Metric) {
	t.Helper()
	ok := map[signals.Kind][]signals.InstrumentKind{
		signals.Counter: {signals.OTelCounter, signals.OTelObservableCounter},
		signals.Gauge: {signals.OTelGauge, signals.OTelUpDownCounter, signals.OTelObservableGauge,
			signals.OTelObservableUpDownCounter},
		signals.Histogram: {signals.OTelHistogram, signals.OTelGaugeHistogram},
	}[m.Kind]
	for _, k := range ok {
		if m.OTel.Kind == k {
			return
		}
	}
	t.Errorf("%s: a Prometheus %s cannot be an OpenTelemetry %s", m.Name, m.Kind, m.OTel.Kind)
}

type translated struct {
	metric otlptranslator.Metric
	want   string
}

// translatedSeries is what the OTLP translation names: one metric, or the
// three gauges of a gauge histogram.
func translatedSeries(m signals.Metric) []translated {
	in := m.OTel
	typ := map[signals.InstrumentKind]otlptranslator.MetricType{
		signals.OTelCounter: otlptranslator.MetricTypeMonotonicCounter, signals.OTelObservableCounter: otlptranslator.MetricTypeMonotonicCounter,
		signals.OTelUpDownCounter: otlptranslator.MetricTypeNonMonotonicCounter, signals.OTelObservableUpDownCounter: otlptranslator.MetricTypeNonMonotonicCounter,
		signals.OTelGauge: otlptranslator.MetricTypeGauge, signals.OTelObservableGauge: otlptranslator.MetricTypeGauge,
		signals.OTelHistogram: otlptranslator.MetricTypeHistogram,
	}[in.Kind]
	if in.Kind != signals.OTelGaugeHistogram {
		return []translated{{otlptranslator.Metric{Name: in.Name, Unit: in.Unit, Type: typ}, m.Name}}
	}
	names := in.GaugeHistogramNames()
	return []translated{
		{otlptranslator.Metric{Name: names.Bucket, Unit: signals.GaugeHistogramCountUnit, Type: otlptranslator.MetricTypeGauge}, m.Name + "_bucket"},
		{otlptranslator.Metric{Name: names.Sum, Unit: in.Unit, Type: otlptranslator.MetricTypeGauge}, m.Name + "_sum"},
		{otlptranslator.Metric{Name: names.Count, Unit: signals.GaugeHistogramCountUnit, Type: otlptranslator.MetricTypeGauge}, m.Name + "_count"},
	}
}
