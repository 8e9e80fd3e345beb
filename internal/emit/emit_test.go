package emit_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/cachewatch/cachewatch/internal/emit"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/signals"
)

// sinks returns Sinks on reg and on a MeterProvider read by the
// ManualReader it returns.
func sinks(t testing.TB, reg prometheus.Registerer) (emit.Sinks, *sdkmetric.ManualReader) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return emit.New(reg, mp, 0), rd
}

// Both pipelines see the same counts, gauges and histograms, under the
// catalog's instrument names with the labels as attributes.
func TestBothPipelinesAgree(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, rd := sinks(t, reg)
	c, err := s.Counter(signals.CacheLookups)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Gauge(signals.LoaderInFlight)
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Histogram(signals.CommandDuration)
	if err != nil {
		t.Fatal(err)
	}
	hits := c.CurryWith("app").WithLabelValues("user:*", "hit")
	for range 3 {
		hits.Inc()
	}
	c.WithLabelValues("app", "user:*", "miss").Add(2)
	in := g.WithLabelValues("cache")
	in.Inc()
	in.Inc()
	in.Dec()
	in.Set(5)
	get := h.WithLabelValues("app", "get")
	for _, v := range []float64{0.00001, 0.0003, 2} {
		get.Observe(v)
	}

	if got := testutil.ToFloat64(c.Prometheus().WithLabelValues("app", "user:*", "hit")); got != 3 {
		t.Errorf("Prometheus hits = %v, want 3", got)
	}
	rm := metrictest.Collect(t, rd)
	if got := metrictest.OTelSum(t, rm, "cachewatch.cache.lookups", "client", "app", "key_group", "user:*", "result", "hit"); got != 3 {
		t.Errorf("OpenTelemetry hits = %v, want 3", got)
	}
	if got := metrictest.OTelSum(t, rm, "cachewatch.loader.in_flight", "client", "cache"); got != 5 {
		t.Errorf("OpenTelemetry in flight = %v, want 5 (Set on an UpDownCounter)", got)
	}
	dp := metrictest.HistogramPoint(t, rm, "cachewatch.redis.command.duration",
		attribute.NewSet(attribute.String("client", "app"), attribute.String("command", "get")))
	var pm dto.Metric
	if err := get.Prometheus().(prometheus.Metric).Write(&pm); err != nil {
		t.Fatal(err)
	}
	ph := pm.GetHistogram()
	if dp.Count != ph.GetSampleCount() || dp.Sum != ph.GetSampleSum() {
		t.Errorf("OpenTelemetry count/sum %d/%v, Prometheus %d/%v", dp.Count, dp.Sum, ph.GetSampleCount(), ph.GetSampleSum())
	}
	wantBounds := signals.CommandDuration.Metric().Buckets
	if len(dp.Bounds) != len(wantBounds) {
		t.Fatalf("bucket advice %v, want the catalog's %v", dp.Bounds, wantBounds)
	}
	var cum uint64
	for i, b := range ph.GetBucket() {
		cum += dp.BucketCounts[i]
		if dp.Bounds[i] != b.GetUpperBound() || cum != b.GetCumulativeCount() {
			t.Errorf("bucket %d: OpenTelemetry ≤%v %d, Prometheus ≤%v %d", i, dp.Bounds[i], cum, b.GetUpperBound(), b.GetCumulativeCount())
		}
	}
	_ = reg
}

// A latency observed inside a sampled span carries the span's trace as an
// exemplar on both pipelines.
func TestExemplars(t *testing.T) {
	s, rd := sinks(t, prometheus.NewRegistry())
	h, err := s.Histogram(signals.LockAcquireDuration)
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	o := h.WithLabelValues("app", "lock:*", "acquired", "wait")
	o.ObserveContext(ctx, 0.02)
	o.ObserveContext(context.Background(), 0.03) // no span: no exemplar

	var pm dto.Metric
	if err := o.Prometheus().(prometheus.Metric).Write(&pm); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, b := range pm.GetHistogram().GetBucket() {
		if ex := b.GetExemplar(); ex != nil {
			found = true
			for _, l := range ex.GetLabel() {
				if l.GetName() == "trace_id" && l.GetValue() != sc.TraceID().String() {
					t.Errorf("Prometheus exemplar trace_id = %s, want %s", l.GetValue(), sc.TraceID())
				}
			}
			if ex.GetValue() != 0.02 {
				t.Errorf("Prometheus exemplar value %v, want 0.02", ex.GetValue())
			}
		}
	}
	if !found {
		t.Error("no Prometheus exemplar")
	}
	dp := metrictest.HistogramPoint(t, metrictest.Collect(t, rd), "cachewatch.lock.acquire.duration",
		attribute.NewSet(attribute.String("client", "app"), attribute.String("key_group", "lock:*"), attribute.String("outcome", "acquired"), attribute.String("mode", "wait")))
	if len(dp.Exemplars) != 1 || trace.TraceID(dp.Exemplars[0].TraceID) != sc.TraceID() || dp.Exemplars[0].Value != 0.02 {
		t.Errorf("OpenTelemetry exemplars = %+v, want one of value 0.02 with trace %s", dp.Exemplars, sc.TraceID())
	}
}

// Recording through a handle allocates nothing on either pipeline.
func TestHandlesDoNotAllocate(t *testing.T) {
	s, _ := sinks(t, prometheus.NewRegistry())
	c, _ := s.Counter(signals.CommandErrors)
	h, _ := s.Histogram(signals.CommandDuration)
	cc := c.WithLabelValues("app", "get", "timeout")
	hh := h.WithLabelValues("app", "get")
	ctx := context.Background()
	cc.Inc()
	hh.ObserveContext(ctx, 0.001)
	if n := testing.AllocsPerRun(1000, func() {
		cc.Inc()
		hh.ObserveContext(ctx, 0.001)
	}); n != 0 {
		t.Errorf("%v allocations per recording, want 0", n)
	}
}

// Without a Registerer and a MeterProvider the default registerer is used;
// with only a MeterProvider nothing reaches Prometheus.
func TestNewDefaults(t *testing.T) {
	if s := emit.New(nil, nil, 0); s.Registerer != prometheus.DefaultRegisterer || s.Meter != nil {
		t.Errorf("New(nil, nil) = %+v", s)
	}
	mp := sdkmetric.NewMeterProvider()
	if s := emit.New(nil, mp, 0); s.Registerer != nil || s.Meter == nil {
		t.Errorf("New(nil, mp) = %+v", s)
	}
}

// NativeHistogramBucketFactor adds native buckets to the Prometheus
// histograms and keeps the classic ones the dashboards read.
func TestNativeHistograms(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := emit.New(reg, nil, 1.1)
	h, err := s.Histogram(signals.CommandDuration)
	if err != nil {
		t.Fatal(err)
	}
	o := h.WithLabelValues("app", "get")
	o.Observe(0.0003)
	o.Observe(0.002)
	var pm dto.Metric
	if err := o.Prometheus().(prometheus.Metric).Write(&pm); err != nil {
		t.Fatal(err)
	}
	ph := pm.GetHistogram()
	if ph.Schema == nil || len(ph.GetPositiveSpan()) == 0 {
		t.Errorf("no native buckets: schema %v, spans %v", ph.Schema, ph.GetPositiveSpan())
	}
	if got, want := len(ph.GetBucket()), len(signals.CommandDuration.Metric().Buckets); got != want {
		t.Errorf("%d classic buckets, want the catalog's %d", got, want)
	}
	plain, _ := emit.New(prometheus.NewRegistry(), nil, 0).Histogram(signals.CommandDuration)
	var pp dto.Metric
	po := plain.WithLabelValues("app", "get")
	po.Observe(0.001)
	if err := po.Prometheus().(prometheus.Metric).Write(&pp); err != nil {
		t.Fatal(err)
	}
	if pp.GetHistogram().Schema != nil {
		t.Error("native buckets without NativeHistogramBucketFactor")
	}
}
