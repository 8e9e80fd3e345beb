package instrument

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/cachewatch/cachewatch/internal/redistest"
)

// A round trip that timed out while the process was off the CPU (its
// deadline noticed late) is not counted against Redis; one noticed in time
// is. The round trip is run by a ContextTimeoutEnabled client's path, on
// which the call's own goroutine notices the deadline.
func TestTimeoutNoticedLateIsNotARedisFailure(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redistest.NewClient(t, &redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	ca := newFetchCache(t, rdb, prometheus.NewRegistry(), newFetchClock(), CacheOptions{
		RedisTimeout: 500 * time.Millisecond, BreakerFailures: 2, BreakerHalfOpenAfter: time.Hour})
	d := ca.deg
	// Like a process descheduled past the deadline: the goroutine waiting
	// for the reply runs again 300ms after it (a tenth of RedisTimeout,
	// 50ms, is late).
	late := func(rctx context.Context) ([]any, error) {
		<-rctx.Done()
		time.Sleep(300 * time.Millisecond)
		return nil, rctx.Err()
	}
	onTime := func(rctx context.Context) ([]any, error) {
		<-rctx.Done()
		return nil, rctx.Err()
	}

	for i := range 3 {
		_, err := d.call(context.Background(), "test", late)
		if !errors.Is(err, errStarved) {
			t.Fatalf("round trip %d noticed 300ms late: %v, want errStarved", i, err)
		}
		if _, failing := d.failing(err); failing {
			t.Fatal("a starved round trip counts as Redis failing")
		}
	}
	if c := d.breaker.Counts(); c.TotalFailures != 0 || d.breaker.State() != gobreaker.StateClosed {
		t.Fatalf("breaker after 3 starved timeouts: %d failures, state %v; want 0, closed", c.TotalFailures, d.breaker.State())
	}

	// Noticed in time, and after the starvation sign (the round trips
	// start after it): a stalled Redis, counted.
	for i := range 2 {
		if _, err := d.call(context.Background(), "test", onTime); errors.Is(err, errStarved) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("round trip %d noticed in time: %v, want a counted timeout", i, err)
		}
	}
	if d.breaker.State() != gobreaker.StateOpen {
		t.Fatalf("breaker after 2 timeouts noticed in time: %v, want open", d.breaker.State())
	}
}

// Goroutines kept waiting to run (busy goroutines on one P) are a sign of
// starvation; a quiet process shows none, and a sign seen before a round
// trip started does not excuse its timeout.
func TestStarvationSigns(t *testing.T) {
	s := newStarvation()
	now := time.Now()
	if s.starved(now, time.Second) {
		t.Fatal("a quiet process reads as starved")
	}

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	stop := spin(3)
	var wg sync.WaitGroup
	for range 40 { // goroutines woken by timers, each waiting behind the spinners
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	stop()
	deadline := time.Now()
	if !s.starved(deadline, 50*time.Millisecond) {
		t.Fatal("goroutines waited behind 3 busy ones on one P, yet the process does not read as starved")
	}
	if s.starved(deadline.Add(time.Minute), 50*time.Millisecond) {
		t.Fatal("a sign seen before the round trip started excuses its timeout")
	}
}
