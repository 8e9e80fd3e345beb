package instrument

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sony/gobreaker/v2"

	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// A starved process is slow, not down. Several processes' Caches fetch 100
// keys at once while busy goroutines compete for the one P (GOMAXPROCS 1)
// and RedisTimeout is 20ms: reads wait in each Cache's queue far past
// RedisTimeout, and round trips outlast it on the wire. Every key is still
// loaded exactly once across the processes, no lookup falls back to the
// loader, and the metrics say so.
func TestStarvedProcessLoadsEachKeyOnce(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	clk := newFetchClock()
	// The breaker is kept out of the way: at a 20ms RedisTimeout on one P,
	// some timed-out round trips show no sign of the starvation (starved.go
	// reads a sample of the scheduler's waits) and count as Redis failures;
	// this test is about waiting. TestTimeoutNoticedLateIsNotARedisFailure
	// and TestStarvationSigns test the breaker's judgement.
	opts := CacheOptions{FreshTTL: time.Minute, HardTTL: time.Hour, RefreshClaimTTL: time.Minute,
		RedisTimeout: 20 * time.Millisecond, BreakerFailures: 1 << 20}

	const processes, keys, perKey = 4, 100, 2
	var caches []*Cache[string]
	for p := range processes {
		opts.Name = fmt.Sprint("starved", p)
		caches = append(caches, newFetchCache(t, srv.Client(t), reg, clk, opts))
	}
	var calls [keys]atomic.Int64
	load := func(i int) func(context.Context) (string, error) {
		return func(context.Context) (string, error) {
			calls[i].Add(1)
			time.Sleep(20 * time.Millisecond) // a slow source
			return fmt.Sprint("v", i), nil
		}
	}

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	stop := spin(4)
	errs := crowdOfKeys(caches, keys, perKey, load)
	stop()

	reportSome(t, errs, 5)
	for i := range keys {
		if n := calls[i].Load(); n != 1 {
			t.Errorf("key %d: %d loader calls, want 1 across %d processes", i, n, processes)
		}
	}
	g := caches[0].c.group("item:0")
	misses, coalesced, hits := lookups(caches[0], g, resultMiss), lookups(caches[0], g, resultCoalesced), lookups(caches[0], g, resultHit)
	if fb := lookups(caches[0], g, resultFallback); fb != 0 || misses != keys || misses+coalesced+hits != processes*keys*perKey {
		t.Errorf("lookups: fallback %v, miss %v, coalesced %v, hit %v; want 0, %d and %d in all",
			fb, misses, coalesced, hits, keys, processes*keys*perKey)
	}
	if got := loaderCalls(caches[0], g, "success"); got != keys {
		t.Errorf("loader_calls{result=success} = %v, want %d", got, keys)
	}
	if n := metrictest.Sum(t, reg, "cachewatch_cache_fallbacks_total"); n != 0 {
		t.Errorf("cachewatch_cache_fallbacks_total adds up to %v, want 0", n)
	}
	for p := range processes {
		if s := testutil.ToFloat64(caches[0].c.m.breakerState.WithLabelValues(fmt.Sprint("starved", p))); s != float64(gobreaker.StateClosed) {
			t.Errorf("process %d breaker state %v, want closed", p, s)
		}
	}
}

// reportSome reports the first n of errs, and how many more there were.
func reportSome(t *testing.T, errs []error, n int) {
	t.Helper()
	for i, err := range errs {
		if i == n {
			t.Errorf("and %d more errors", len(errs)-i)
			return
		}
		t.Error(err)
	}
}

// crowdOfKeys fetches keys item:0… item:keys-1 perKey times from every
// cache at once and returns the callers' errors (a wrong value is one).
func crowdOfKeys(caches []*Cache[string], keys, perKey int, load func(int) func(context.Context) (string, error)) []error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for p, ca := range caches {
		for i := range keys {
			for range perKey {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v, err := ca.Fetch(ctx, fmt.Sprint("item:", i), load(i))
					if err == nil && v != fmt.Sprint("v", i) {
						err = fmt.Errorf("value %q", v)
					}
					if err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("process %d, item:%d: %w", p, i, err))
						mu.Unlock()
					}
				}()
			}
		}
	}
	wg.Wait()
	return errs
}

// spin starts n goroutines that keep the CPU busy until stop is called.
func spin(n int) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := 0; !done.Load(); x++ {
				_ = x * x
			}
		}()
	}
	return func() { done.Store(true); wg.Wait() }
}
