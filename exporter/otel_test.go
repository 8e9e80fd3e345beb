package exporter_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/signals"
)

// TestMeterProviderSeesTheSample: an exporter given a MeterProvider
// observes the same sample that a scrape reads, series for series, the
// server latency gauge histogram and the data ages included; a node where
// nothing answers too.
func TestMeterProviderSeesTheSample(t *testing.T) {
	srv := redistest.Start(t)
	seed(t, srv.Client(t))
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	e, reg := newExporter(t, exporter.Options{
		Target:        exporter.Target{Addrs: []string{srv.Addr}},
		Queues:        queues,
		Clock:         clockwork.NewFakeClockAt(time.Now()),
		MeterProvider: mp,
		Locks:         exporter.LockOptions{LongHeld: 10 * time.Second},
	})
	if snaps := e.Sample(context.Background()); !snaps[0].Up {
		t.Fatalf("sample: %+v", snaps[0])
	}
	n := metrictest.SameOnBoth(t, reg, metrictest.Collect(t, rd))
	if n < 30 {
		t.Errorf("compared %d series, want the whole seeded sample", n)
	}
	rm := metrictest.Collect(t, rd)
	expiring := signals.LocksExpiring.Metric().OTel.Name
	if got := metrictest.OTelSum(t, rm, expiring, "within", "inf"); got != float64(ttlLocks) {
		t.Errorf("%s{within=inf} = %v, want %v", expiring, got, float64(ttlLocks))
	}
	bucket := signals.ServerCommandDuration.Metric().OTel.GaugeHistogramNames().Bucket
	if got := metrictest.OTelSum(t, rm, bucket, "command", "evalsha", "le", "+Inf"); got != scriptCalls {
		t.Errorf("%s{command=evalsha,le=+Inf} = %v, want %v", bucket, got, scriptCalls)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(metrictest.Collect(t, rd).ScopeMetrics); got != 0 {
		t.Errorf("after Close the exporter still observes %d scopes", got)
	}
}
