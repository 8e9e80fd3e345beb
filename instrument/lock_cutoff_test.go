package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/internal/locktest"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// A caller whose own deadline or cancellation ends during an acquire
// attempt gave up, as when it ends during the backoff: the acquisition
// counts as gave_up, the attempt (whose result Redis never gave) is not
// counted, and nothing is a Redis error — whether go-redis bounds its I/O
// by the context or the client does, and for plain and fencing locks.
func TestLockCallerContextEndingDuringAttemptGivesUp(t *testing.T) {
	for _, honours := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", honours), func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := redistest.NewClient(t, &redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: honours})
			hold := &locktest.HoldAttempts{Entered: make(chan struct{}, 1)}
			rdb.AddHook(hold)
			reg := prometheus.NewRegistry()
			c := lockClient(t, rdb, reg, nil)
			endings := map[string]func() (context.Context, error){
				"deadline": func() (context.Context, error) {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
					t.Cleanup(cancel)
					return ctx, context.DeadlineExceeded
				},
				"cancel": func() (context.Context, error) {
					ctx, cancel := context.WithCancel(context.Background())
					go func() { <-hold.Entered; hold.Entered <- struct{}{}; cancel() }()
					return ctx, context.Canceled
				},
			}
			n := 0
			for name, ending := range endings {
				for _, fencing := range []bool{false, true} {
					n++
					ctx, want := ending()
					_, err := c.Lock(ctx, fmt.Sprintf("lock:{cut}:%d", n), instrument.LockOptions{Fencing: fencing})
					<-hold.Entered
					if !errors.Is(err, want) || errors.Is(err, instrument.ErrRedis) || errors.Is(err, instrument.ErrLockBusy) {
						t.Fatalf("%s during the attempt (fencing %v): Lock = %v, want only %v", name, fencing, err, want)
					}
				}
			}
			locktest.CheckCutOff(t, reg, n)
		})
	}
}

// A try-once acquisition (Backoff{Retries: -1}: the caller skips the work
// when the lock is busy) is labelled mode="try_once", attempts and
// acquisition alike; an acquisition that retries is mode="wait". The
// contention alerts count only the latter.
func TestLockModeTellsTryOnceFromWaiting(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	c := lockClient(t, srv.Client(t), reg, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "lock:{job}:report"
	tryOnce := instrument.LockOptions{Backoff: instrument.Backoff{Retries: -1}}
	waiting := instrument.LockOptions{Backoff: instrument.Backoff{Base: time.Millisecond, Retries: 2}}
	held, err := c.Lock(ctx, key, tryOnce) // free: acquired on its one try
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.Lock(ctx, key, tryOnce); !errors.Is(err, instrument.ErrLockBusy) {
			t.Fatalf("try-once on a held lock = %v, want ErrLockBusy", err)
		}
	}
	if _, err := c.Lock(ctx, key, waiting); !errors.Is(err, instrument.ErrLockBusy) {
		t.Fatalf("waiting on a held lock = %v, want ErrLockBusy after its retries", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.Lock(ctx, key, waiting)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)

	attempts := func(mode string, pairs ...string) float64 {
		return metrictest.Sum(t, reg, "cachewatch_lock_attempts_total", append(pairs, "mode", mode)...)
	}
	acquisitions := func(mode, outcome string) float64 {
		return metrictest.Sum(t, reg, "cachewatch_lock_acquire_duration_seconds", "mode", mode, "outcome", outcome)
	}
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"attempts{try_once, first, acquired}", attempts("try_once", "attempt", "first", "result", "acquired"), 1},
		{"attempts{try_once, first, busy}", attempts("try_once", "attempt", "first", "result", "busy"), 3},
		{"attempts{try_once, retry}", attempts("try_once", "attempt", "retry"), 0},
		{"acquisitions{try_once, acquired}", acquisitions("try_once", "acquired"), 1},
		{"acquisitions{try_once, gave_up}", acquisitions("try_once", "gave_up"), 3},
		{"attempts{wait, first, busy}", attempts("wait", "attempt", "first", "result", "busy"), 1},
		{"attempts{wait, retry, busy}", attempts("wait", "attempt", "retry", "result", "busy"), 2},
		{"attempts{wait, first, acquired}", attempts("wait", "attempt", "first", "result", "acquired"), 1},
		{"acquisitions{wait, gave_up}", acquisitions("wait", "gave_up"), 1},
		{"acquisitions{wait, acquired}", acquisitions("wait", "acquired"), 1},
		{"attempts, all", metrictest.Sum(t, reg, "cachewatch_lock_attempts_total"), 8},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}
