package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/instrument/redlock"
	"github.com/cachewatch/cachewatch/internal/metrictest"
)

// A hook on the very clients the adapter uses times their commands but
// leaves the lock outcomes to the adapter, which counts each attempt once
// and knows a retry from a first attempt: nothing is counted twice.
func TestRedlockWithHookOnSameClientsCountsOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	rl := hookedRedlock(t, reg, "jobs")
	ctx := context.Background()

	holder := rl.NewMutex("lock:{hooked}", redsync.WithExpiry(time.Minute))
	if err := holder.Lock(ctx); err != nil { // 1 attempt: acquired, first
		t.Fatal(err)
	}
	contender := rl.NewMutex("lock:{hooked}", redsync.WithExpiry(time.Minute))
	if err := contender.Lock(ctx); !errors.Is(err, instrument.ErrLockBusy) { // 3 attempts: busy, first + 2 retries
		t.Fatalf("Lock of a held mutex = %v, want ErrLockBusy", err)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := contender.Lock(ctx); err != nil { // 1 attempt: acquired, first
		t.Fatal(err)
	}
	if err := contender.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	const attempts = "cachewatch_lock_attempts_total"
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{nil, 5},
		{[]string{"client", "jobs"}, 5}, // the adapter's Name, which the hook shares
		{[]string{"result", "acquired", "attempt", "first"}, 2},
		{[]string{"result", "busy", "attempt", "first"}, 1},
		{[]string{"result", "busy", "attempt", "retry"}, 2},
	} {
		if got := metrictest.Sum(t, reg, attempts, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", attempts, c.labels, got, c.want)
		}
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_acquire_duration_seconds"); got != 3 {
		t.Errorf("acquire_duration_count = %v, want 3 (2 acquired, 1 gave up)", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_acquire_duration_seconds", "outcome", "gave_up"); got != 1 {
		t.Errorf("acquire_duration_count{gave_up} = %v, want 1", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total"); got != 0 {
		t.Errorf("locks_lost_total = %v, want 0", got)
	}
	// The hook still timed the adapter's commands: 5 attempts' SET NX on
	// each of the 3 nodes.
	if got := metrictest.Sum(t, reg, "cachewatch_redis_command_duration_seconds", "command", "set"); got != 15 {
		t.Errorf("command_duration_count{command=set} = %v, want 15", got)
	}
}

// The backoff between attempts and the acquisition's duration follow
// Options.Clock: a retry an hour away happens when the fake clock is
// advanced, without sleeping, and the hour is what gets recorded.
func TestRedlockBackoffFollowsTheClock(t *testing.T) {
	servers := nodes(t)
	reg := prometheus.NewRegistry()
	var pools []redsyncredis.Pool
	for _, s := range servers {
		pools = append(pools, goredis.NewPool(s.Client(t)))
	}
	clock := clockwork.NewFakeClockAt(time.Now())
	rl, err := redlock.New(redsync.New(pools...), redlock.Options{Registerer: reg, Clock: clock,
		Backoff: instrument.Backoff{Base: time.Hour, Max: time.Hour, Retries: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := rl.NewMutex("lock:{clock}", redsync.WithExpiry(time.Minute)).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rl.NewMutex("lock:{clock}").Lock(ctx) }()
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := clock.BlockUntilContext(waitCtx, 1); err != nil { // the backoff timer
		t.Fatalf("no backoff timer on the clock: %v", err)
	}
	clock.Advance(time.Hour)
	if err := <-done; !errors.Is(err, instrument.ErrLockBusy) {
		t.Fatalf("Lock = %v, want ErrLockBusy after its one retry", err)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_attempts_total", "result", "busy"); got != 2 {
		t.Fatalf("busy attempts = %v, want 2", got)
	}
	var gaveUp float64
	for _, m := range metrictest.Series(t, reg, "cachewatch_lock_acquire_duration_seconds", "outcome", "gave_up") {
		gaveUp += m.GetHistogram().GetSampleSum()
	}
	if gaveUp != time.Hour.Seconds() {
		t.Fatalf("gave_up acquisition took %vs on the clock, want %v", gaveUp, time.Hour.Seconds())
	}
}

// hookedRedlock returns a Redlock adapter named name over three nodes whose
// clients carry a cachewatch hook of the same name, both on reg.
func hookedRedlock(t *testing.T, reg prometheus.Registerer, name string) *redlock.Redlock {
	t.Helper()
	h, err := hooks.New(hooks.Options{Registerer: reg, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	var pools []redsyncredis.Pool
	for _, s := range nodes(t) {
		rdb := s.Client(t)
		rdb.AddHook(h)
		pools = append(pools, goredis.NewPool(rdb))
	}
	rl, err := redlock.New(redsync.New(pools...), redlock.Options{Registerer: reg, Name: name,
		Backoff: instrument.Backoff{Base: time.Millisecond, Max: 2 * time.Millisecond, Retries: 2}})
	if err != nil {
		t.Fatal(err)
	}
	return rl
}
