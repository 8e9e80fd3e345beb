package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/internal/keygrouptest"
	"github.com/cachewatch/cachewatch/internal/lockholder"
	"github.com/cachewatch/cachewatch/internal/locktest"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/internal/syncbuf"
)

// readingClock is the real clock (timers, tickers) with its readings
// taken from now: a test steps the time decisions are made on while the
// client's timers run in real time.
type readingClock struct {
	clockwork.Clock
	now func() time.Time
}

func (c readingClock) Now() time.Time                  { return c.now() }
func (c readingClock) Since(t time.Time) time.Duration { return c.now().Sub(t) }

// lockClient returns an instrument client over rdb reporting into reg,
// reading the time from now (nil: the real clock).
func lockClient(t *testing.T, rdb redis.UniversalClient, reg prometheus.Registerer, now func() time.Time) *instrument.Client {
	t.Helper()
	var clk clockwork.Clock
	if now != nil {
		clk = readingClock{Clock: clockwork.NewRealClock(), now: now}
	}
	c, err := instrument.New(rdb, instrument.Options{Registerer: reg, Clock: clk, KeyGroups: keygrouptest.Named(t)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitDone fails the test if ctx is not done within a generous bound (a
// hang guard, not a timing assertion).
func waitDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(poll.Bound):
		t.Fatalf("%s: context still live after %v", what, poll.Bound)
	}
}

func TestLockMutualExclusionAcrossClients(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	const clients, perClient, rounds = 4, 6, 5
	counters := make([]*locktest.SetNXCounter, clients)
	var section locktest.Section
	var wg sync.WaitGroup
	for i := range clients {
		rdb := srv.Client(t)
		counters[i] = &locktest.SetNXCounter{}
		rdb.AddHook(counters[i])
		c := lockClient(t, rdb, reg, nil)
		for range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					if !holdJobLock(t, c, &section) {
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if got := section.Overlaps(); got != 0 {
		t.Fatalf("%d entries found another holder inside the critical section", got)
	}
	const locks = clients * perClient * rounds
	if got := section.Entered(); got != locks {
		t.Fatalf("critical sections entered = %d, want %d", got, locks)
	}
	checkContendedLockCounts(t, reg, counters, locks)
}

// checkContendedLockCounts checks what reg counted of locks contended
// Lock calls, each acquired, against the SET NX the counters saw sent.
func checkContendedLockCounts(t *testing.T, reg *prometheus.Registry, counters []*locktest.SetNXCounter, locks int64) {
	t.Helper()
	var sent int64
	for _, h := range counters {
		sent += h.N()
	}
	attempts := metrictest.Sum(t, reg, "cachewatch_lock_attempts_total")
	if attempts != float64(sent) {
		t.Fatalf("lock_attempts_total = %v, SET NX sent = %d", attempts, sent)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_attempts_total", "result", "acquired"); got != float64(locks) {
		t.Fatalf("acquired attempts = %v, want %d", got, locks)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_attempts_total", "attempt", "first"); got != float64(locks) {
		t.Fatalf("first attempts = %v, want one per Lock call (%d)", got, locks)
	}
	retries := metrictest.Sum(t, reg, "cachewatch_lock_attempts_total", "attempt", "retry")
	if got := metrictest.Sum(t, reg, "cachewatch_retries_total"); got != retries || retries != float64(sent-locks) {
		t.Fatalf("retries_total = %v, retry attempts = %v, want %d", got, retries, sent-locks)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_backoff_delay_seconds"); got != retries {
		t.Fatalf("backoff delays observed = %v, want %v", got, retries)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_acquire_duration_seconds", "outcome", "acquired"); got != float64(locks) {
		t.Fatalf("acquire durations observed = %v, want %d", got, locks)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_hold_duration_seconds"); got != float64(locks) {
		t.Fatalf("hold durations observed = %v, want %d", got, locks)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total"); got != 0 {
		t.Fatalf("locks lost = %v, want 0", got)
	}
	if retries == 0 {
		t.Fatal("no contention happened: the test proves nothing")
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}

// holdJobLock takes the contended job lock on c, holds section briefly and
// releases it; false when it could not lock.
func holdJobLock(t *testing.T, c *instrument.Client, section *locktest.Section) bool {
	l, err := c.Lock(context.Background(), "lock:{job:42}", instrument.LockOptions{TTL: 5 * time.Second, Backoff: patientFenced.Backoff})
	if err != nil {
		t.Error(err)
		return false
	}
	section.Hold(200 * time.Microsecond)
	if err := l.Release(context.Background()); err != nil {
		t.Error(err)
	}
	return true
}

func TestLockExpiresMidWork(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	first := lockClient(t, srv.Client(t), reg, nil)
	second := lockClient(t, srv.Client(t), reg, nil)
	ctx := context.Background()
	const key = "lock:report:7"

	a, err := first.Lock(ctx, key, instrument.LockOptions{TTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The second worker waits for the lease to run out while the first is
	// still "working" (it never releases in time).
	b, err := second.Lock(ctx, key, instrument.LockOptions{
		Backoff: instrument.Backoff{Base: 10 * time.Millisecond, Max: 40 * time.Millisecond, Retries: 100000},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, a.Context(), "first holder")
	if cause := context.Cause(a.Context()); !errors.Is(cause, instrument.ErrLockLost) {
		t.Fatalf("first holder's cause = %v, want ErrLockLost", cause)
	}
	if err := a.Release(ctx); !errors.Is(err, instrument.ErrNotOwner) {
		t.Fatalf("first release = %v, want ErrNotOwner", err)
	}
	if err := b.Context().Err(); err != nil {
		t.Fatalf("second holder's context ended: %v", err)
	}
	// The first release must not have deleted the second owner's lock.
	if got, _ := srv.Client(t).Get(ctx, key).Result(); got != b.Token() {
		t.Fatalf("lock value after the stale release = %q, want the second owner's token", got)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total"); got != 1 {
		t.Fatalf("locks_lost_total = %v, want 1", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total", "reason", "expired"); got != 1 {
		t.Fatalf("locks_lost_total{reason=expired} = %v, want 1", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_hold_duration_seconds"); got != 2 {
		t.Fatalf("hold durations observed = %v, want 2", got)
	}
}

func TestLockReleaseFindsAnotherOwner(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	reg := prometheus.NewRegistry()
	// A frozen clock: the lease never runs out by the client's reckoning, so
	// a missing token can only mean someone else took the key.
	frozen := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := lockClient(t, rdb, reg, func() time.Time { return frozen })
	ctx := context.Background()
	l, err := c.Lock(ctx, "lock:invoice:9", instrument.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, "lock:invoice:9", "intruder", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); !errors.Is(err, instrument.ErrNotOwner) {
		t.Fatalf("release = %v, want ErrNotOwner", err)
	}
	if got, _ := rdb.Get(ctx, "lock:invoice:9").Result(); got != "intruder" {
		t.Fatalf("release deleted another owner's lock (value %q)", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total", "reason", "not_owner"); got != 1 {
		t.Fatalf("locks_lost_total{reason=not_owner} = %v, want 1", got)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, instrument.ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", cause)
	}
	if err := l.Release(ctx); !errors.Is(err, instrument.ErrNotOwner) {
		t.Fatalf("second release = %v, want ErrNotOwner", err)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total"); got != 1 {
		t.Fatalf("locks_lost_total = %v after a second release, want 1", got)
	}
}

func TestLockRenewalFailsWhileRedisPaused(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redistest.NewClient(t, &redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	reg := prometheus.NewRegistry()
	c := lockClient(t, rdb, reg, nil)
	l, err := c.Lock(context.Background(), "lock:{paused}", instrument.LockOptions{TTL: 200 * time.Millisecond, Renew: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	waitDone(t, l.Context(), "holder while Redis is paused")
	// The renewal in flight fails at the lease's end too; wait for it
	// (Release would cancel it, and a cancelled renewal is no Redis error).
	poll.Until(t, "a failed renewal to be counted while Redis is paused", func() bool {
		return metrictest.Sum(t, reg, "cachewatch_lock_renewals_total", "result", "error") >= 1
	})
	srv.Resume()
	// The renewal that timed out may still land once Redis resumes, so the
	// key may be ours again: nil is as right as ErrNotOwner.
	if err := l.Release(context.Background()); err != nil && !errors.Is(err, instrument.ErrNotOwner) {
		t.Fatalf("release after the lease ran out = %v, want nil or ErrNotOwner", err)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, instrument.ErrLockLost) || !strings.Contains(cause.Error(), "renew_failed") {
		t.Fatalf("cause = %v, want ErrLockLost (renew_failed)", cause)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total", "reason", "renew_failed"); got != 1 {
		t.Fatalf("locks_lost_total{reason=renew_failed} = %v, want 1", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_renewals_total", "result", "error"); got < 1 {
		t.Fatalf("renewals{result=error} = %v, want ≥ 1", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total"); got != 1 {
		t.Fatalf("locks_lost_total = %v, want 1", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_lease_ends_total", "outcome", "lost"); got != 1 {
		t.Fatalf("lock_lease_ends_total{outcome=lost} = %v, want 1", got)
	}
}

func TestLockRedisPausedMidAcquire(t *testing.T) {
	for _, honours := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", honours), func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := redistest.NewClient(t, &redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: honours})
			reg := prometheus.NewRegistry()
			c := lockClient(t, rdb, reg, nil)
			if err := rdb.Ping(context.Background()).Err(); err != nil { // warm the pool
				t.Fatal(err)
			}
			srv.Pause()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := c.Lock(ctx, "lock:{stalled}", instrument.LockOptions{TTL: time.Minute})
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, instrument.ErrRedis) {
				t.Fatalf("Lock on a paused Redis = %v, want a deadline or ErrRedis", err)
			}
			if errors.Is(err, instrument.ErrLockBusy) {
				t.Fatalf("a paused Redis reported as busy: %v", err)
			}
			// The caller's deadline ended the attempt: it gave up; Redis
			// answered nothing, so no attempt result is counted.
			if got := metrictest.Sum(t, reg, "cachewatch_lock_attempts_total"); got != 0 {
				t.Fatalf("attempts = %v, want 0 (cut off, no result)", got)
			}
			if got := metrictest.Sum(t, reg, "cachewatch_lock_acquire_duration_seconds", "outcome", "gave_up"); got != 1 {
				t.Fatalf("acquire{outcome=gave_up} = %v, want 1", got)
			}
			srv.Resume()
			// An abandoned SET NX that lands after the caller gave up must
			// not leave an orphan lock behind for its whole TTL (a minute).
			check := redistest.NewClient(t, &redis.Options{Addr: srv.Addr})
			poll.Until(t, "the lock an abandoned acquisition may have taken to be released", func() bool {
				return check.Exists(context.Background(), "lock:{stalled}").Val() == 0
			})
		})
	}
}

func TestLockRedisKilled(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	c := lockClient(t, srv.Client(t), reg, nil)
	srv.Kill()
	_, err := c.Lock(context.Background(), "lock:{gone}", instrument.LockOptions{})
	if !errors.Is(err, instrument.ErrRedis) {
		t.Fatalf("Lock on a killed Redis = %v, want ErrRedis", err)
	}
	if errors.Is(err, instrument.ErrLockBusy) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a killed Redis reported as busy or deadline: %v", err)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_attempts_total", "result", "error", "attempt", "first"); got != 1 {
		t.Fatalf("attempts{error,first} = %v, want 1 (no retry on Redis failure)", got)
	}
}

func TestLockBusyAndDeadline(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	c := lockClient(t, srv.Client(t), reg, nil)
	ctx := context.Background()
	held, err := c.Lock(ctx, "lock:busy", instrument.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)

	_, err = c.Lock(ctx, "lock:busy", instrument.LockOptions{Backoff: instrument.Backoff{Retries: -1}})
	if !errors.Is(err, instrument.ErrLockBusy) {
		t.Fatalf("try-once on a held lock = %v, want ErrLockBusy", err)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_attempts_total", "result", "busy", "attempt", "first"); got != 1 {
		t.Fatalf("attempts{busy,first} = %v, want 1", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_acquire_duration_seconds", "outcome", "gave_up"); got != 1 {
		t.Fatalf("acquire{gave_up} = %v, want 1", got)
	}

	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = c.Lock(dctx, "lock:busy", instrument.LockOptions{Backoff: instrument.Backoff{Base: 10 * time.Millisecond, Retries: 1000}})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, instrument.ErrLockBusy) || errors.Is(err, instrument.ErrRedis) {
		t.Fatalf("Lock past its deadline = %v, want only context.DeadlineExceeded", err)
	}
}

func TestLockRejectsBadInput(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := lockClient(t, rdb, prometheus.NewRegistry(), nil)
	ctx := context.Background()
	for _, tc := range []struct {
		key  string
		opts instrument.LockOptions
	}{
		{"lock:a", instrument.LockOptions{TTL: -time.Second}},
		{"lock:a", instrument.LockOptions{TTL: 500 * time.Microsecond}},
		{"lock:a}b", instrument.LockOptions{Fencing: true}},
	} {
		if _, err := c.Lock(ctx, tc.key, tc.opts); err == nil {
			t.Fatalf("Lock(%q, %+v) succeeded, want an error", tc.key, tc.opts)
		}
	}
	if n, _ := rdb.DBSize(ctx).Result(); n != 0 {
		t.Fatalf("rejected calls wrote %d keys", n)
	}
	// The default lease is a hard TTL, never a key without expiry.
	l, err := c.Lock(ctx, "lock:default", instrument.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if ttl, _ := rdb.PTTL(ctx, "lock:default").Result(); ttl <= 0 || ttl > instrument.DefaultLockTTL {
		t.Fatalf("default lock PTTL = %v, want in (0, %v]", ttl, instrument.DefaultLockTTL)
	}
}

func TestLockFencingTokensIncrease(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := lockClient(t, rdb, prometheus.NewRegistry(), nil)
	ctx := context.Background()
	var last int64
	for i := range 20 {
		if i == 10 { // the counter expired while nobody used the lock
			if err := rdb.Del(ctx, "{lock:ledger}:fence").Err(); err != nil {
				t.Fatal(err)
			}
		}
		l, err := c.Lock(ctx, "lock:ledger", instrument.LockOptions{Fencing: true})
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("fence %d after %d: not increasing", l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The counter expires (no key leak per lock name).
	if ttl, _ := rdb.PTTL(ctx, "{lock:ledger}:fence").Result(); ttl <= 0 {
		t.Fatalf("fencing counter PTTL = %v, want a TTL", ttl)
	}
}

func TestLockClusterHashTaggedFencing(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	var fences []int64
	var inside atomic.Int64
	var wg sync.WaitGroup
	keys := []string{"lock:{order:1}", "lock:{order:2}", "lock:{order:3}", "plain-lock-name"}
	for range 3 {
		c := lockClient(t, cluster.Client(t), reg, nil)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					l, err := c.Lock(context.Background(), "lock:{order:1}", patientFenced)
					if err != nil {
						t.Error(err)
						return
					}
					if inside.Add(1) != 1 {
						t.Error("two holders of one cluster lock")
					}
					mu.Lock()
					fences = append(fences, l.Fence())
					mu.Unlock()
					inside.Add(-1)
					if err := l.Release(context.Background()); err != nil {
						t.Error(err)
					}
				}
				// Locks on other slots work from the same client.
				other, err := c.Lock(context.Background(), keys[1+g%3], patientFenced)
				if err != nil {
					t.Error(err)
					return
				}
				if err := other.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	checkFencesIncrease(t, fences, 60)
	if got := metrictest.Sum(t, reg, "cachewatch_lock_attempts_total", "result", "acquired"); got != 72 {
		t.Fatalf("acquired attempts = %v, want 72", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_attempts_total", "result", "error"); got != 0 {
		t.Fatalf("attempts with errors on the cluster = %v, want 0", got)
	}
}

// patientFenced acquires a fenced lock, retrying for as long as a test's
// contention takes.
var patientFenced = instrument.LockOptions{Fencing: true,
	Backoff: instrument.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond, Retries: 100000}}

// checkFencesIncrease checks that there were n fenced holds, each with a
// greater fence than the one before.
func checkFencesIncrease(t *testing.T, fences []int64, n int) {
	t.Helper()
	if len(fences) != n {
		t.Fatalf("%d fenced holds, want %d", len(fences), n)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fence %d after %d: holders saw tokens out of order", fences[i], fences[i-1])
		}
	}
}

func TestLockContextOutlivesAcquireDeadline(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	c := lockClient(t, srv.Client(t), reg, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	l, err := c.Lock(ctx, "lock:{ctx}", instrument.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cancel() // the acquire deadline no longer matters once the lock is held
	if err := l.Context().Err(); err != nil {
		t.Fatalf("holder's context ended with the acquire context: %v", err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l.Context().Err() == nil {
		t.Fatal("holder's context still live after Release")
	}
	if cause := context.Cause(l.Context()); errors.Is(cause, instrument.ErrLockLost) {
		t.Fatalf("a released lock reports %v", cause)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total"); got != 0 {
		t.Fatalf("locks_lost_total = %v after a clean release", got)
	}
	if err := l.Release(context.Background()); !errors.Is(err, instrument.ErrNotOwner) {
		t.Fatalf("second release = %v, want ErrNotOwner", err)
	}
}

func TestLockSpanEventsAndDebugLog(t *testing.T) {
	srv := redistest.Start(t)
	spans := tracetest.NewSpanRecorder()
	var logs syncbuf.Buffer
	c, err := instrument.New(srv.Client(t), instrument.Options{
		Registerer:     prometheus.NewRegistry(),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
		Logger:         slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.Lock(ctx, "lock:{span}", instrument.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	short, err := c.Lock(ctx, "lock:{span}", instrument.LockOptions{TTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, short.Context(), "short lease")
	// Redis's expiry trails the client's lease end by the request's travel.
	check := srv.Client(t)
	poll.Until(t, "the lock key to expire in Redis", func() bool { return check.Exists(ctx, "lock:{span}").Val() == 0 })
	if err := short.Release(ctx); !errors.Is(err, instrument.ErrNotOwner) {
		t.Fatalf("release after expiry = %v, want ErrNotOwner", err)
	}

	var events []string
	for _, s := range spans.Ended() {
		if s.Name() != "cachewatch.lock" {
			continue
		}
		for _, e := range s.Events() {
			events = append(events, e.Name)
		}
	}
	want := []string{"lease acquired", "lease released", "lease acquired", "lease lost"}
	if fmt.Sprint(events) != fmt.Sprint(want) {
		t.Fatalf("span events = %q, want %q", events, want)
	}
	out := logs.String()
	for _, s := range []string{"outcome=acquired", "outcome=released", "outcome=lost_expired", "key=lock:{span}",
		"token=" + lockholder.Parse(l.Token()).Token[:8], "key_group="} {
		if !strings.Contains(out, s) {
			t.Fatalf("debug log lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, lockholder.Parse(l.Token()).Token) || strings.Contains(out, lockholder.Parse(short.Token()).Token) {
		t.Fatalf("debug log carries a full owner token:\n%s", out)
	}
}

// With the client's clock past the lease, a missing key is an expiry, not
// another owner: the reason is decided on the injected clock, no sleeping.
func TestLockLostReasonFollowsClientClock(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	c := lockClient(t, rdb, reg, clock)
	ctx := context.Background()
	l, err := c.Lock(ctx, "lock:{clock}", instrument.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(90 * time.Second) // the work took longer than the lease
	mu.Unlock()
	rdb.Del(ctx, "lock:{clock}") // as Redis would have expired it
	if err := l.Release(ctx); !errors.Is(err, instrument.ErrNotOwner) {
		t.Fatalf("release = %v, want ErrNotOwner", err)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total", "reason", "expired"); got != 1 {
		t.Fatalf("locks_lost_total{reason=expired} = %v, want 1", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total", "reason", "not_owner"); got != 0 {
		t.Fatalf("locks_lost_total{reason=not_owner} = %v, want 0", got)
	}
	// The hold time is measured on the same clock.
	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() == "cachewatch_lock_hold_duration_seconds" {
			if sum := f.GetMetric()[0].GetHistogram().GetSampleSum(); sum != 90 {
				t.Fatalf("hold duration = %vs, want 90s by the injected clock", sum)
			}
		}
	}
}
