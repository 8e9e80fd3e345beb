package instrument

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Close is safe at any time: concurrent with Fetches that start flights,
// background refreshes and revalidations, and called twice. Once it has
// returned, no goroutine the Cache started is left.
func TestCacheCloseConcurrentWithFetch(t *testing.T) {
	rdb, before := connectForLeakCheck(t, redistest.Start(t))
	load := func(context.Context) (string, error) { return "v", nil }
	for round := 0; round < 20; round++ {
		clk := newFetchClock()
		ca := newFetchCache(t, rdb, prometheus.NewRegistry(), clk, CacheOptions{FreshTTL: time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		for i := 0; i < 4; i++ { // stored values, about to go stale
			if _, err := ca.Fetch(ctx, fmt.Sprintf("close:%d", i), load); err != nil {
				t.Fatal(err)
			}
		}
		var stop atomic.Bool
		var fetched atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; !stop.Load(); i++ {
					clk.add(100 * time.Millisecond) // values go stale: refreshes and revalidations start
					if _, err := ca.Fetch(ctx, fmt.Sprintf("close:%d", (g+i)%6), load); err != nil {
						t.Errorf("Fetch: %v", err)
						return
					}
					fetched.Add(1)
				}
			}(g)
		}
		// Close at various points of the work: after 0, 8, … 32 Fetches.
		poll.Until(t, "the Fetches before Close", func() bool { return fetched.Load() >= int64(round%5*8) })
		closed := make(chan error, 2)
		go func() { closed <- ca.Close() }()
		closed <- ca.Close()
		stop.Store(true)
		wg.Wait()
		for i := 0; i < 2; i++ {
			if err := <-closed; err != nil {
				t.Fatalf("Close: %v", err)
			}
		}
		// Fetch after Close still serves (and starts nothing).
		if v, err := ca.Fetch(ctx, "close:0", load); err != nil || v != "v" {
			t.Fatalf("Fetch after Close = %q, %v", v, err)
		}
		cancel()
	}
	goleak.VerifyNone(t, before)
}

// After Close a stale value is served without a background refresh, and
// the claim its read was granted is given back at once for another process
// to refresh.
func TestCacheAfterCloseNoBackgroundRefresh(t *testing.T) {
	rdb, before := connectForLeakCheck(t, redistest.Start(t))
	clk := newFetchClock()
	ca := newFetchCache(t, rdb, prometheus.NewRegistry(), clk, CacheOptions{FreshTTL: time.Minute, LocalCopies: -1})
	ctx := context.Background()
	const key = "report:1"
	if _, err := ca.Fetch(ctx, key, func(context.Context) (string, error) { return "v1", nil }); err != nil {
		t.Fatal(err)
	}
	if err := ca.Close(); err != nil {
		t.Fatal(err)
	}
	clk.add(2 * time.Minute)
	unblock := make(chan struct{})
	defer close(unblock)
	var calls atomic.Int64
	v, err := ca.Fetch(ctx, key, func(context.Context) (string, error) {
		calls.Add(1)
		<-unblock // a refresh started after Close would be left running here
		return "v2", nil
	})
	if err != nil || v != "v1" {
		t.Fatalf("stale Fetch after Close = %q, %v; want v1 served stale", v, err)
	}
	goleak.VerifyNone(t, before)
	if n := calls.Load(); n != 0 {
		t.Fatalf("loader called %d times after Close, want 0", n)
	}
	if n := rdb.Exists(ctx, keysFor(key).claim).Val(); n != 0 {
		t.Fatal("the refresh claim granted after Close was kept: no other process could refresh until RefreshClaimTTL")
	}
}

// An orphan claim (granted by a read its caller had abandoned while Redis
// stalled) is released at Close, and the goroutine releasing it ends with
// Close instead of sleeping past it.
func TestCacheCloseEndsOrphanClaimRelease(t *testing.T) {
	srv := redistest.Start(t)
	rdb, before := connectForLeakCheck(t, srv)
	clk := newFetchClock()
	ca := newFetchCache(t, rdb, prometheus.NewRegistry(), clk, CacheOptions{
		RedisTimeout: 100 * time.Millisecond, LocalCopies: -1, RefreshClaimTTL: time.Hour})
	const key = "report:2"
	srv.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := ca.Fetch(ctx, key, func(context.Context) (string, error) { return "direct", nil })
	srv.Resume()
	if err != nil || v != "direct" {
		t.Fatalf("Fetch against a stalled Redis = %q, %v; want the fallback's value", v, err)
	}
	claim := keysFor(key).claim
	if err := ca.Close(); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(ctx, claim).Val() != 0 {
		t.Fatal("orphan claim still held after Close: nobody could refresh the key for RefreshClaimTTL")
	}
	goleak.VerifyNone(t, before)
}

// mustCache is NewCache for tests: it fails the test on error and closes
// the Cache at its end.
func mustCache[T any](t testing.TB, c *Client, o CacheOptions) *Cache[T] {
	t.Helper()
	ca, err := NewCache[T](c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ca.Close() })
	return ca
}

// wait waits for the Cache's background work to end, for tests that know
// none is being started meanwhile (Close is for everything else).
func (b *background) wait() { b.wg.Wait() }

// connectForLeakCheck returns a client of srv already connected (its pool's
// goroutines running), then notes the goroutines that exist, so a
// goroutine-leak check sees only what the Cache under test starts.
func connectForLeakCheck(t *testing.T, srv *redistest.Server) (*redis.Client, goleak.Option) {
	t.Helper()
	rdb := srv.Client(t)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return rdb, goleak.IgnoreCurrent()
}
