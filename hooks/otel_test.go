package hooks_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

func meterProvider(t testing.TB) (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp, rd
}

// TestHookMeterProvider: commands, errors, scripts, locks, cache lookups,
// pipelines and the pool, seen by a hook given a Registerer and a
// MeterProvider, read back the same from both; the semantic conventions'
// db.client.operation.duration counts every operation, with the stable
// attributes, and SkipSemconvMetrics leaves it out.
func TestHookMeterProvider(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	mp, rd := meterProvider(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 2})
	defer rdb.Close()
	h, err := hooks.New(hooks.Options{Registerer: reg, MeterProvider: mp, Name: "app", Pool: rdb, ServerAddress: srv.Addr, DB: 0})
	if err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(h)
	ctx := context.Background()
	ops := 0
	do := func(err error) {
		ops++
		if err != nil && !errors.Is(err, redis.Nil) {
			var rerr redis.Error
			if !errors.As(err, &rerr) {
				t.Fatal(err)
			}
		}
	}
	do(rdb.Get(ctx, "user:1").Err())                                   // miss
	do(rdb.Set(ctx, "user:1", "v", time.Minute).Err())                 // plain
	do(rdb.Get(ctx, "user:1").Err())                                   // hit
	do(rdb.SetNX(ctx, "lock:a:1", "tok-1", time.Minute).Err())         // acquired
	do(rdb.SetNX(ctx, "lock:a:1", "tok-2", time.Minute).Err())         // busy
	do(rdb.LPush(ctx, "user:1", "x").Err())                            // WRONGTYPE
	do(redis.NewScript(`return 1`).Run(ctx, rdb, []string{"k"}).Err()) // EVALSHA (NOSCRIPT) then EVAL
	ops++                                                              // the EVAL fallback
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Get(ctx, "user:1")
		p.Get(ctx, "user:2")
		return nil
	})
	do(err)

	rm := metrictest.Collect(t, rd)
	if n := metrictest.SameOnBoth(t, reg, rm); n < 20 {
		t.Errorf("compared %d series, want more", n)
	}
	if got := metrictest.OTelSum(t, rm, "db.client.operation.duration", "db.system.name", "redis", "db.namespace", "0"); got != float64(ops) {
		t.Errorf("db.client.operation.duration counts %v operations, want %d", got, ops)
	}
	if got := metrictest.OTelSum(t, rm, "db.client.operation.duration", "db.operation.name", "LPUSH",
		"error.type", "WRONGTYPE", "db.response.status_code", "WRONGTYPE"); got != 1 {
		t.Errorf("failed LPUSH recorded %v times with its status code, want 1", got)
	}
	if got := metrictest.OTelSum(t, rm, "db.client.operation.duration", "db.operation.name", "PIPELINE"); got != 1 {
		t.Errorf("pipeline recorded %v times, want once", got)
	}
	if got := metrictest.OTelSum(t, rm, "db.client.connection.count", "db.client.connection.state", "idle"); got < 1 {
		t.Errorf("db.client.connection.count{idle} = %v, want at least 1", got)
	}

	mp2, rd2 := meterProvider(t)
	h2, err := hooks.New(hooks.Options{MeterProvider: mp2, SkipSemconvMetrics: true, Pool: rdb})
	if err != nil {
		t.Fatal(err)
	}
	rdb2 := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb2.Close()
	rdb2.AddHook(h2)
	do(rdb2.Get(ctx, "user:1").Err())
	rm2 := metrictest.Collect(t, rd2)
	if got := metrictest.OTelSum(t, rm2, "cachewatch.redis.command.duration", "command", "get"); got != 1 {
		t.Errorf("OpenTelemetry-only hook: command histogram counts %v, want 1", got)
	}
	for _, name := range []string{"db.client.operation.duration", "db.client.connection.count"} {
		if got := metrictest.OTelSum(t, rm2, name); got != 0 {
			t.Errorf("SkipSemconvMetrics: %s still emitted (%v)", name, got)
		}
	}
}
