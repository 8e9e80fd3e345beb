package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// fakeClock is a client whose every timer and ticker runs on a fake clock,
// so lease, renewal and backoff behaviour is stepped, not slept; with its
// registry, a plain client of its Redis, and a context bounding the test.
type fakeClock struct {
	c   *instrument.Client
	clk *clockwork.FakeClock
	reg *prometheus.Registry
	rdb *redis.Client
	ctx context.Context
}

func fakeClockClient(t *testing.T) fakeClock {
	t.Helper()
	srv := redistest.Start(t)
	f := fakeClock{reg: prometheus.NewRegistry(), clk: clockwork.NewFakeClock(), rdb: srv.Client(t)}
	var err error
	if f.c, err = instrument.New(srv.Client(t), instrument.Options{Registerer: f.reg, Clock: f.clk}); err != nil {
		t.Fatal(err)
	}
	var cancel context.CancelFunc
	f.ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return f
}

// A lease without renewal ends on the client's clock: an hour-long lease
// is lost an hour later by the injected clock, at once in real time.
func TestLockLeaseEndsOnTheInjectedClock(t *testing.T) {
	f := fakeClockClient(t)
	c, clk, reg, ctx := f.c, f.clk, f.reg, f.ctx
	l, err := c.Lock(ctx, "lock:{fake}:lease", instrument.LockOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := clk.BlockUntilContext(ctx, 1); err != nil { // the expiry timer
		t.Fatal(err)
	}
	if got := l.TTL(); got != time.Hour {
		t.Fatalf("TTL() = %v right after Lock on a stopped clock, want 1h", got)
	}
	clk.Advance(20 * time.Minute)
	if got := l.TTL(); got != 40*time.Minute {
		t.Fatalf("TTL() = %v after 20m, want 40m", got)
	}
	clk.Advance(40 * time.Minute)
	waitDone(t, l.Context(), "lock context after its lease ran out")
	if got := l.TTL(); got != 0 {
		t.Fatalf("TTL() = %v after the lease ran out, want 0", got)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, instrument.ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", cause)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total", "reason", "expired"); got != 1 {
		t.Fatalf("locks_lost_total{expired} = %v, want 1", got)
	}
}

// The heartbeat beats every TTL/3 of the injected clock: each step renews
// the lease in Redis and is counted; the lock outlives many TTLs.
func TestLockRenewalOnTheInjectedClock(t *testing.T) {
	f := fakeClockClient(t)
	c, clk, reg, ctx := f.c, f.clk, f.reg, f.ctx
	const ttl = 30 * time.Second
	l, err := c.Lock(ctx, "lock:{fake}:renew", instrument.LockOptions{TTL: ttl, Renew: true})
	if err != nil {
		t.Fatal(err)
	}
	for beat := 1; beat <= 5; beat++ {
		if err := clk.BlockUntilContext(ctx, 2); err != nil { // expiry timer and heartbeat ticker
			t.Fatal(err)
		}
		clk.Advance(ttl / 3)
		poll.Until(t, "the renewal", func() bool {
			return metrictest.Sum(t, reg, "cachewatch_lock_renewals_total", "result", "renewed") == float64(beat)
		})
	}
	if err := l.Context().Err(); err != nil {
		t.Fatalf("lock context ended after renewals covering %v of a %v lease: %v", 5*ttl/3, ttl, context.Cause(l.Context()))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The heartbeat keeps the lease for as long as the work runs: over three
// TTLs of the injected clock, each beat resets the key's expiry in Redis
// and is counted, a rival is refused throughout and the holder's context
// lives. A key deleted behind the holder's back is found gone at the next
// beat: the lock is lost, counted once as not_owner.
func TestLockRenewalKeepsLeaseAndReportsLoss(t *testing.T) {
	f := fakeClockClient(t)
	c, clk, reg, ctx := f.c, f.clk, f.reg, f.ctx
	const key, ttl = "lock:{long-job}", 30 * time.Second
	l, err := c.Lock(ctx, key, instrument.LockOptions{TTL: ttl, Renew: true})
	if err != nil {
		t.Fatal(err)
	}
	beat := func(n int, result string) {
		t.Helper()
		if err := clk.BlockUntilContext(ctx, 2); err != nil { // expiry timer and heartbeat ticker
			t.Fatal(err)
		}
		clk.Advance(ttl / 3)
		poll.Until(t, fmt.Sprintf("renewal %d (%s) to be counted", n, result), func() bool {
			return metrictest.Sum(t, reg, "cachewatch_lock_renewals_total", "result", result) == float64(n)
		})
	}
	for n := 1; n <= 9; n++ {
		// Shorten the key's expiry: only the renewal can bring it back.
		if err := f.rdb.PExpire(ctx, key, ttl/10).Err(); err != nil {
			t.Fatal(err)
		}
		beat(n, "renewed")
		if left := f.rdb.PTTL(ctx, key).Val(); left <= ttl/2 {
			t.Fatalf("key expires in %v after renewal %d, want about the %v TTL", left, n, ttl)
		}
		if _, err := c.Lock(ctx, key, instrument.LockOptions{Backoff: instrument.Backoff{Retries: -1}}); !errors.Is(err, instrument.ErrLockBusy) {
			t.Fatalf("rival Lock during renewed work = %v, want ErrLockBusy", err)
		}
		if err := l.Context().Err(); err != nil {
			t.Fatalf("holder's context ended during renewed work: %v", context.Cause(l.Context()))
		}
	}
	// Someone deletes the key behind the holder's back.
	if err := f.rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	beat(1, "lost")
	waitDone(t, l.Context(), "holder after the key was deleted")
	if cause := context.Cause(l.Context()); !errors.Is(cause, instrument.ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", cause)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total", "reason", "not_owner"); got != 1 {
		t.Fatalf("locks_lost_total{reason=not_owner} = %v, want 1", got)
	}
	if err := l.Release(ctx); !errors.Is(err, instrument.ErrNotOwner) {
		t.Fatalf("release = %v, want ErrNotOwner", err)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total"); got != 1 {
		t.Fatalf("locks_lost_total = %v, want 1 (counted once)", got)
	}
}

// Backoff waits run on the injected clock: a busy lock retried with waits
// of up to an hour gives up after its retries without sleeping, and every
// wait is observed.
func TestLockBackoffOnTheInjectedClock(t *testing.T) {
	f := fakeClockClient(t)
	c, clk, reg, ctx := f.c, f.clk, f.reg, f.ctx
	holder, err := c.Lock(ctx, "lock:{fake}:busy", instrument.LockOptions{TTL: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)
	done := make(chan error, 1)
	// No deadline: a backoff that would pass one is refused at once.
	noDeadline, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, err := c.Lock(noDeadline, "lock:{fake}:busy", instrument.LockOptions{
			Backoff: instrument.Backoff{Base: time.Hour, Max: time.Hour, Retries: 3}})
		done <- err
	}()
	for retry := 1; retry <= 3; retry++ {
		// The holder's expiry timer plus the contender's backoff timer.
		if err := clk.BlockUntilContext(ctx, 2); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Hour)
	}
	select {
	case err := <-done:
		if !errors.Is(err, instrument.ErrLockBusy) {
			t.Fatalf("Lock = %v, want ErrLockBusy after 3 retries", err)
		}
	case <-ctx.Done():
		t.Fatal("contender still waiting after its retries")
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_attempts_total", "attempt", "retry"); got != 3 {
		t.Fatalf("retry attempts = %v, want 3", got)
	}
}
