package exporter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

const benchLocks = 10_000

// benchKeys is 1,000,000 unless CACHEWATCH_BENCH_KEYS says otherwise (for
// tuning runs only; recorded figures use the full size).
var benchKeys = func() int {
	if n, err := strconv.Atoi(os.Getenv("CACHEWATCH_BENCH_KEYS")); err == nil && n > benchLocks {
		return n
	}
	return 1_000_000
}()

// BenchmarkSample covers a 1,000,000-key keyspace (10,000 of them locks)
// while another client runs GETs in a loop, and compares that client's
// latency during samples with idle windows of the same length between them.
// Run it once: go test -run x -bench BenchmarkSample -benchtime 1x ./exporter/
// (CACHEWATCH_BENCH=keys_per_second/batch,… picks the settings measured).
//
// Reported: cover_s (sampling time to cover every key), samples (samples
// needed; ×interval is the wall-clock coverage in production), heap_MB
// (exporter heap in use after the pass), GET p50/p99 idle and while sampling
// in ms, and p99_ratio (sampling ÷ idle; the target is ≤ 1.25).
func BenchmarkSample(b *testing.B) {
	srv := redistest.Start(b)
	load(b, srv.Client(b))
	for _, c := range benchConfigs() {
		b.Run(fmt.Sprintf("keys_per_second=%g/batch=%d", c.kps, c.batch), func(b *testing.B) {
			for b.Loop() {
				benchCover(b, srv.Addr, c.kps, c.batch)
			}
		})
	}
}

type benchConfig struct {
	kps   float64
	batch int
}

// benchConfigs are the sampler settings measured: CACHEWATCH_BENCH as a
// comma list of keys_per_second/batch, or unpaced defaults and the
// recommended paced setting.
func benchConfigs() []benchConfig {
	env := os.Getenv("CACHEWATCH_BENCH")
	if env == "" {
		env = "0/100,20000/20"
	}
	var out []benchConfig
	for _, f := range strings.Split(env, ",") {
		kps, batch, _ := strings.Cut(f, "/")
		k, err1 := strconv.ParseFloat(kps, 64)
		n, err2 := strconv.Atoi(batch)
		if err1 == nil && err2 == nil && n > 0 {
			out = append(out, benchConfig{k, n})
		}
	}
	return out
}

// load writes benchKeys keys with pipelined SET … PX: locks with a 1h TTL
// (outliving the run)
// and an owner token, cache entries with TTLs spread over an hour, and one
// key in ten without TTL.
func load(b *testing.B, rdb *redis.Client) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	pipe := rdb.Pipeline()
	for i := 0; i < benchKeys; i++ {
		switch {
		case i < benchLocks:
			pipe.Set(ctx, "lock:order:"+strconv.Itoa(i), "tok-"+strconv.Itoa(i), time.Hour)
		case i%10 == 0:
			pipe.Set(ctx, "session:"+strconv.Itoa(i), "v", 0)
		default:
			pipe.Set(ctx, "cache:user:"+strconv.Itoa(i), "v", time.Minute+time.Duration(rng.IntN(3600))*time.Second)
		}
		if pipe.Len() == 10000 {
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	if n := rdb.DBSize(ctx).Val(); n != int64(benchKeys) {
		b.Fatalf("loaded %d keys", n)
	}
}

func benchCover(b *testing.B, addr string, kps float64, batch int) {
	ctx := context.Background()
	other := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer other.Close()
	e, err := exporter.New(exporter.Options{Target: exporter.Target{Addrs: []string{addr}}, KeysPerSecond: kps,
		Batch: batch, ScanCount: batch})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()

	// Samples alternate with idle windows of the same length, so idle and
	// sampling latencies come from the same minutes of the same run.
	var sampling atomic.Bool
	var cover time.Duration
	samples := 0
	lat := getLoop(ctx, other, &sampling, func() {
		for {
			sampling.Store(true)
			s := e.Sample(ctx)[0]
			sampling.Store(false)
			samples++
			cover += s.Duration
			if !s.Up {
				b.Errorf("sample failed: %v", s.Err)
				return
			}
			if s.ScanCycles == 1 {
				return
			}
			time.Sleep(s.Duration)
		}
	})
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	snap := e.Snapshots()[0]
	if snap.Pass == nil || snap.Pass.Keys < uint64(benchKeys*99/100) {
		b.Fatalf("pass incomplete: %+v", snap.Pass)
	}
	idle, busy := lat[0], lat[1]
	b.ReportMetric(cover.Seconds(), "cover_s")
	b.ReportMetric(float64(samples), "samples")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap_MB")
	b.ReportMetric(pct(idle, 50), "idle_p50_ms")
	b.ReportMetric(pct(idle, 99), "idle_p99_ms")
	b.ReportMetric(pct(busy, 50), "sampling_p50_ms")
	b.ReportMetric(pct(busy, 99), "sampling_p99_ms")
	b.ReportMetric(pct(busy, 99)/pct(idle, 99), "p99_ratio")
}

// getLoop runs GETs of random keys on c while during runs, and returns
// their latencies in milliseconds, sorted, split by whether sampling was
// set when each GET started: [0] idle, [1] sampling.
func getLoop(ctx context.Context, c *redis.Client, sampling *atomic.Bool, during func()) [2][]float64 {
	stop := make(chan struct{})
	var lat [2][]float64
	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(3, 4))
		key := make([]byte, 0, 32)
		for {
			select {
			case <-stop:
				return
			default:
			}
			key = strconv.AppendInt(append(key[:0], "cache:user:"...), int64(benchLocks+rng.IntN(benchKeys-benchLocks)), 10)
			phase := 0
			if sampling.Load() {
				phase = 1
			}
			start := time.Now()
			_ = c.Get(ctx, string(key)).Err()
			lat[phase] = append(lat[phase], float64(time.Since(start))/1e6)
		}
	})
	during()
	close(stop)
	wg.Wait()
	slices.Sort(lat[0])
	slices.Sort(lat[1])
	return lat
}

func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p/100))]
}
