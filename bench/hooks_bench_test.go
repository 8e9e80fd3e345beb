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
	for _, c := range loopbackCases {
		b.Run(c.name, func(b *testing.B) {
			// Background load on a shared machine moves separate runs by more
			// than the instrumentation costs; taking one op of each variant in
			// turn and comparing median op times cancels most of it.
			b.Run("interleaved", func(b *testing.B) { c.interleaved(b, addr) })
			for _, v := range loopbackVariants {
				b.Run(v.name, func(b *testing.B) { c.measure(b, c.client(b, addr, v.setup)) })
			}
		})
	}
}

// loopbackVariants are the ways BenchmarkHookLoopback instruments a client;
// the first, bare, is the baseline.
var loopbackVariants = []struct {
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

// loopbackCase is one operation of BenchmarkHookLoopback.
type loopbackCase struct {
	name string
	run  func(ctx context.Context, rdb *redis.Client, i int) error
}

var loopbackCases = []loopbackCase{
	{"GET", func(ctx context.Context, rdb *redis.Client, i int) error {
		return rdb.Get(ctx, "user:1234").Err()
	}},
	{"SET_NX", func(ctx context.Context, rdb *redis.Client, i int) error {
		return rdb.SetNX(ctx, "lock:order:1234", "tok-8f3a9c0e", 10*time.Second).Err()
	}},
}

// client returns a one-connection client of addr instrumented by setup,
// connected and with its metric children created.
func (c loopbackCase) client(b *testing.B, addr string, setup func(*testing.B, *redis.Client)) *redis.Client {
	rdb := redistest.NewClient(b, &redis.Options{Addr: addr, DisableIdentity: true, PoolSize: 1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	setup(b, rdb)
	for i := 0; i < 100; i++ {
		must(b, c.run(context.Background(), rdb, i))
	}
	return rdb
}

// measure times the operation on rdb alone.
func (c loopbackCase) measure(b *testing.B, rdb *redis.Client) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.run(ctx, rdb, i); err != nil {
			b.Fatal(err)
		}
	}
}

// interleaved takes one op of each variant in turn and reports each
// variant's throughput over bare's (median bare op time over median variant
// op time).
func (c loopbackCase) interleaved(b *testing.B, addr string) {
	ctx := context.Background()
	clients := make([]*redis.Client, len(loopbackVariants))
	took := make([][]time.Duration, len(loopbackVariants))
	for i, v := range loopbackVariants {
		clients[i] = c.client(b, addr, v.setup)
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
	for j, v := range loopbackVariants[1:] {
		b.ReportMetric(float64(bare)/float64(median(took[j+1])), v.name+"/bare")
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
