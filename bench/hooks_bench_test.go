package bench

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// noopHook wraps every call in a function that only calls next: one more
// layer in go-redis's hook chain and nothing else.
type noopHook struct{}

func (noopHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (noopHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return next(ctx, cmd) }
}

func (noopHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { return next(ctx, cmds) }
}

// BenchmarkHookLoopback runs the same commands against a real redis-server
// over loopback with bare go-redis, with cachewatch's hook (metrics, and
// metrics + spans), and with go-redis's own redisotel (metrics, and metrics
// + traces), and with a hook that does nothing (the floor). Throughput ratios are bare ns/op divided by each variant's.
// Spans and metrics are recorded in memory and never exported.
//
//	cd bench && go test -run '^$' -bench HookLoopback -benchmem -count 5
func BenchmarkHookLoopback(b *testing.B) {
	addr := redistest.Start(b).Addr
	seed := redistest.NewClient(b, &redis.Options{Addr: addr})
	must(b, seed.Set(context.Background(), "user:1234", "a cached value", 0).Err()) // GET is a hit
	variants := []struct {
		name  string
		setup func(b *testing.B, rdb *redis.Client)
	}{
		{"bare", func(*testing.B, *redis.Client) {}},
		// A hook that only calls next: the cost of go-redis's hook chain
		// itself, the floor under every instrumented variant.
		{"noop_hook", func(_ *testing.B, rdb *redis.Client) { rdb.AddHook(noopHook{}) }},
		{"cachewatch", func(b *testing.B, rdb *redis.Client) {
			h, err := hooks.New(hooks.Options{Registerer: prometheus.NewRegistry()})
			must(b, err)
			rdb.AddHook(h)
		}},
		{"cachewatch_traces", func(b *testing.B, rdb *redis.Client) {
			h, err := hooks.New(hooks.Options{Registerer: prometheus.NewRegistry(), TracerProvider: sdktrace.NewTracerProvider()})
			must(b, err)
			rdb.AddHook(h)
		}},
		{"redisotel_metrics", func(b *testing.B, rdb *redis.Client) {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			must(b, redisotel.InstrumentMetrics(rdb, redisotel.WithMeterProvider(mp)))
		}},
		{"redisotel_metrics_traces", func(b *testing.B, rdb *redis.Client) {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			must(b, redisotel.InstrumentMetrics(rdb, redisotel.WithMeterProvider(mp)))
			must(b, redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(sdktrace.NewTracerProvider())))
		}},
	}
	cases := []struct {
		name string
		run  func(ctx context.Context, rdb *redis.Client, i int) error
	}{
		{"GET", func(ctx context.Context, rdb *redis.Client, i int) error {
			return rdb.Get(ctx, "user:1234").Err()
		}},
		{"SET_NX", func(ctx context.Context, rdb *redis.Client, i int) error {
			return rdb.SetNX(ctx, "lock:order:1234", "tok-8f3a9c0e", 10*time.Second).Err()
		}},
	}
	ctx := context.Background()
	client := func(b *testing.B, setup func(*testing.B, *redis.Client), run func(context.Context, *redis.Client, int) error) *redis.Client {
		rdb := redistest.NewClient(b, &redis.Options{Addr: addr, DisableIdentity: true, PoolSize: 1,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
		setup(b, rdb)
		for i := 0; i < 100; i++ { // connect, create the metric children
			must(b, run(ctx, rdb, i))
		}
		return rdb
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			// Background load on a shared machine moves separate runs by more
			// than the instrumentation costs; taking one op of each variant in
			// turn and comparing median op times cancels most of it. Reports
			// each variant's throughput over bare's (median bare op time over
			// median variant op time).
			b.Run("interleaved", func(b *testing.B) {
				clients := make([]*redis.Client, len(variants))
				took := make([][]time.Duration, len(variants))
				for i, v := range variants {
					clients[i] = client(b, v.setup, c.run)
					took[i] = make([]time.Duration, b.N)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for k := range clients { // rotate the order: no variant always goes first
						j := (i + k) % len(clients)
						start := time.Now()
						err := c.run(ctx, clients[j], i)
						took[j][i] = time.Since(start)
						if err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StopTimer()
				bare := median(took[0])
				for j, v := range variants[1:] {
					b.ReportMetric(float64(bare)/float64(median(took[j+1])), v.name+"/bare")
				}
			})
			for _, v := range variants {
				b.Run(v.name, func(b *testing.B) {
					rdb := client(b, v.setup, c.run)
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						if err := c.run(ctx, rdb, i); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

// median sorts d and returns its middle value.
func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}
