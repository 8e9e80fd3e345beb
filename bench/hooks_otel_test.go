package bench

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	redisotelnative "github.com/redis/go-redis/extra/redisotel-native/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// BenchmarkHookLoopbackOTel compares, against a real redis-server over
// loopback, bare go-redis with cachewatch's hook emitting through an
// OpenTelemetry SDK MeterProvider (its catalog instruments and the semantic
// conventions' db.client.operation.duration; alone, and beside a Prometheus
// registry) and with go-redis's redisotel-native (its command metrics, on
// the same kind of MeterProvider). Nothing is exported: each MeterProvider
// has a reader that is never collected.
//
// redisotel-native instruments every client of the process once initialised,
// so the variants run one after another rather than interleaved: compare
// medians of several -count runs.
//
//	cd bench && go test -run '^$' -bench HookLoopbackOTel -benchmem -count 5
func BenchmarkHookLoopbackOTel(b *testing.B) {
	addr := redistest.Start(b).Addr
	seed := redistest.NewClient(b, &redis.Options{Addr: addr})
	must(b, seed.Set(context.Background(), "user:1234", "a cached value", 0).Err())
	meter := func() *sdkmetric.MeterProvider {
		return sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	}
	hook := func(opts func() hooks.Options) func(*testing.B, *redis.Client) {
		return func(b *testing.B, rdb *redis.Client) {
			h, err := hooks.New(opts())
			must(b, err)
			rdb.AddHook(h)
		}
	}
	variants := []struct {
		name    string
		process func(b *testing.B)                    // process-wide instrumentation, before the client
		client  func(b *testing.B, rdb *redis.Client) // the client's own
	}{
		{name: "bare"},
		{name: "cachewatch_meter", client: hook(func() hooks.Options { return hooks.Options{MeterProvider: meter()} })},
		{name: "cachewatch_meter_and_registry", client: hook(func() hooks.Options {
			return hooks.Options{Registerer: prometheus.NewRegistry(), MeterProvider: meter()}
		})},
		{name: "redisotel_native", process: func(b *testing.B) {
			otel := redisotelnative.GetObservabilityInstance()
			must(b, otel.Init(redisotelnative.NewConfig().WithEnabled(true).WithMeterProvider(meter()).
				WithMetricGroups(redisotelnative.MetricGroupFlagCommand)))
			b.Cleanup(func() { _ = otel.Shutdown() })
		}},
	}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		run  func(ctx context.Context, rdb *redis.Client) error
	}{
		{"GET", func(ctx context.Context, rdb *redis.Client) error { return rdb.Get(ctx, "user:1234").Err() }},
		{"SET_NX", func(ctx context.Context, rdb *redis.Client) error {
			return rdb.SetNX(ctx, "lock:order:1234", "tok-8f3a9c0e", 10*time.Second).Err()
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for _, v := range variants {
				b.Run(v.name, func(b *testing.B) {
					if v.process != nil {
						v.process(b)
					}
					rdb := redistest.NewClient(b, &redis.Options{Addr: addr, DisableIdentity: true, PoolSize: 1,
						MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
					if v.client != nil {
						v.client(b, rdb)
					}
					for range 100 {
						must(b, c.run(ctx, rdb))
					}
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						if err := c.run(ctx, rdb); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}
