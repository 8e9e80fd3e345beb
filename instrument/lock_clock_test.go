package instrument_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// fakeClockClient returns a client whose every timer and ticker runs on a
// fake clock, so lease, renewal and backoff behaviour is stepped, not slept.
func fakeClockClient(t *testing.T) (*instrument.Client, *clockwork.FakeClock, *prometheus.Registry, context.Context) {
	t.Helper()
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	clk := clockwork.NewFakeClock()
	c, err := instrument.New(srv.Client(t), instrument.Options{Registerer: reg, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c, clk, reg, ctx
}

// A lease without renewal ends on the client's clock: an hour-long lease
// is lost an hour later by the injected clock, at once in real time.
func TestLockLeaseEndsOnTheInjectedClock(t *testing.T) {
	c, clk, reg, ctx := fakeClockClient(t)
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
	c, clk, reg, ctx := fakeClockClient(t)
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
		waitFor(t, "the renewal", func() bool {
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

// Backoff waits run on the injected clock: a busy lock retried with waits
// of up to an hour gives up after its retries without sleeping, and every
// wait is observed.
func TestLockBackoffOnTheInjectedClock(t *testing.T) {
	c, clk, reg, ctx := fakeClockClient(t)
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

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
	}
}
