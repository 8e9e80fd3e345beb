package instrument

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/signals"
)

// TestMeterProviderSeesWhatPrometheusSees drives contended locks, cache
// hits, misses, stale serves, failed refreshes, versioned writes and
// idempotency checks through a client given both a Registerer and a
// MeterProvider, then reads every catalog series back from both: the same
// values, series for series.
func TestMeterProviderSeesWhatPrometheusSees(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	mp, rd := meterProvider(t)
	clk := newFetchClock()
	c, err := New(srv.Client(t), Options{Registerer: reg, MeterProvider: mp, Name: "both", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	contendLocks(t, c, reg)
	ca := mustCache[string](t, c, CacheOptions{FreshTTL: 20 * time.Millisecond, HardTTL: time.Minute, FailureHoldoff: -1})
	defer ca.Close()
	fail := false
	load := func(context.Context) (string, error) {
		if fail {
			return "", errors.New("source down")
		}
		return "v", nil
	}
	for i := range 5 {
		_, _ = ca.Fetch(ctx, "user:"+strconv.Itoa(i%2), load)
	}
	clk.add(time.Second) // past FreshTTL
	fail = true
	_, _ = ca.Fetch(ctx, "user:0", load) // stale, its refresh fails
	_, _ = c.SetVersioned(ctx, "acct:1", []byte("v"), 2, time.Minute)
	_, _ = c.SetVersioned(ctx, "acct:1", []byte("v"), 1, time.Minute)
	_, _ = c.FirstSeen(ctx, "idem:1", time.Minute)
	_, _ = c.FirstSeen(ctx, "idem:1", time.Minute)
	ca.bg.wait() // the failed refresh has been counted

	n := metrictest.SameOnBoth(t, reg, metrictest.Collect(t, rd))
	if n < 20 {
		t.Errorf("compared %d series; the traffic should make more", n)
	}
	if got := metrictest.Sum(t, reg, signals.LockAttempts.String(), "result", "busy"); got == 0 {
		t.Error("no busy lock attempt: the locks did not contend")
	}
}

// contendLocks has four callers take one lock at once, each holding it
// until another has found it busy.
func contendLocks(t *testing.T, c *Client, reg prometheus.Gatherer) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lock(ctx, "lock:job:1", LockOptions{TTL: time.Second, Backoff: Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond, Retries: 50}})
			if err != nil {
				t.Errorf("lock %d: %v", i, err)
				return
			}
			// Hold the lock until another caller has found it busy.
			if err := poll.Check(ctx, poll.Bound, time.Millisecond, func() error {
				if metrictest.Sum(t, reg, signals.LockAttempts.String(), "result", "busy") == 0 {
					return errors.New("no busy attempt yet")
				}
				return nil
			}); err != nil {
				t.Errorf("lock %d: %v", i, err)
			}
			_ = l.Release(ctx)
		}()
	}
	wg.Wait()
}

// meterProvider returns a MeterProvider read by a ManualReader.
func meterProvider(t *testing.T) (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp, rd
}

// A lock taken inside a sampled span puts the span's trace on the acquire
// histogram, as an exemplar on both pipelines.
func TestLockExemplars(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	mp, rd := meterProvider(t)
	tp := sdktrace.NewTracerProvider()
	c, err := New(srv.Client(t), Options{Registerer: reg, MeterProvider: mp, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	l, err := c.Lock(ctx, "lock:ex:1", LockOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	span.End()
	want := span.SpanContext().TraceID().String()

	var found string
	for _, m := range metrictest.Series(t, reg, signals.LockAcquireDuration.String()) {
		for _, b := range m.GetHistogram().GetBucket() {
			for _, lp := range b.GetExemplar().GetLabel() {
				if lp.GetName() == "trace_id" {
					found = lp.GetValue()
				}
			}
		}
	}
	if found != want {
		t.Errorf("Prometheus exemplar trace_id = %q, want %q", found, want)
	}
	rm := metrictest.Collect(t, rd)
	var otelTrace string
	for _, p := range metrictest.HistogramPoints(rm, signals.LockAcquireDuration.Metric().OTel.Name) {
		for _, e := range p.Exemplars {
			otelTrace = traceHex(e.TraceID)
		}
	}
	if otelTrace != want {
		t.Errorf("OpenTelemetry exemplar trace = %q, want %q", otelTrace, want)
	}
}

func traceHex(id []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(id))
	for _, b := range id {
		out = append(out, digits[b>>4], digits[b&15])
	}
	return string(out)
}
