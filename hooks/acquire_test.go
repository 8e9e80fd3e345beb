package hooks_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/internal/locktest"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// histogramSum is the sum of the samples of name's series with labels.
func histogramSum(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	sum := 0.0
	for _, m := range metrictest.Series(t, g, name, labels...) {
		sum += m.GetHistogram().GetSampleSum()
	}
	return sum
}

// An acquisition is timed from its first attempt's sending, so it covers
// every attempt's round trip: the first attempt here is sent to a stopped
// server and waits until the server resumes for its busy reply. Its duration can never be less
// than the two attempts' own latencies (the hook's command histogram),
// whatever the machine's load.
func TestAcquireTimedFromFirstAttemptSent(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redistest.NewClient(t, quiet(&redis.Options{Addr: srv.Addr, ReadTimeout: 10 * time.Second}))
	owner := redistest.NewClient(t, quiet(&redis.Options{Addr: srv.Addr}))
	reg := prometheus.NewRegistry()
	h, err := hooks.New(hooks.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(h)
	sent := &locktest.SetNXCounter{}
	rdb.AddHook(sent) // inside the cachewatch hook: counts the attempts as they go out
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil { // connect before the server stops
		t.Fatal(err)
	}
	owner.Set(ctx, "lock:slow:1", "owner", time.Minute)

	srv.Pause()
	busy := make(chan bool)
	go func() {
		ok, _ := rdb.SetNX(ctx, "lock:slow:1", "me", time.Minute).Result()
		busy <- !ok
	}()
	poll.Until(t, "the first attempt to be sent", func() bool { return sent.N() == 1 })
	srv.Resume()
	if !<-busy {
		t.Fatal("first attempt acquired a held lock")
	}
	owner.Del(ctx, "lock:slow:1")
	if ok, err := rdb.SetNX(ctx, "lock:slow:1", "me", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("retry: %v %v", ok, err)
	}

	if n := metricValue(t, reg, "cachewatch_lock_acquire_duration_seconds", nil); n != 1 {
		t.Fatalf("acquisitions timed = %v, want 1", n)
	}
	expect(t, reg, attempts, map[string]float64{"result=busy,attempt=first": 1, "result=acquired,attempt=retry": 1, "": 2})
	acquire := histogramSum(t, reg, "cachewatch_lock_acquire_duration_seconds", "outcome", "acquired")
	roundTrips := histogramSum(t, reg, cmdDur, "command", "set")
	const rounding = 2e-6 // the retry table keeps microseconds
	if acquire < roundTrips-rounding {
		t.Fatalf("acquisition took %.6fs, less than its two attempts' round trips (%.6fs): not timed from the first attempt sent", acquire, roundTrips)
	}
}

// An attempt cut off by its caller's own context (here a deadline that
// passes while the attempt is held in flight) is not a Redis error: the
// acquisition gave up, the attempt (no reply) is not counted, and the
// acquisition is over: the next attempt with the same token is a first.
func TestAcquireCutOffByCallerGivesUp(t *testing.T) {
	rdb, reg := hooked(t, hooks.Options{})
	hold := &locktest.HoldAttempts{Entered: make(chan struct{}, 1)}
	rdb.AddHook(hold) // inside the cachewatch hook: it sees the held attempt's end
	ctx := context.Background()
	const key = "lock:cut:1"
	if err := rdb.Set(ctx, key, "owner", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := rdb.SetNX(ctx, key, "me", time.Minute).Result(); ok || err != nil {
		t.Fatalf("first attempt on a held lock: %v, %v", ok, err)
	}
	dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := rdb.SetNX(dctx, key, "me", time.Minute).Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("retry held past its deadline: %v, want context.DeadlineExceeded", err)
	}
	if len(hold.Entered) != 1 {
		t.Fatal("the retry was not held: the test cut nothing off")
	}
	rdb.Del(ctx, key)
	if ok, err := rdb.SetNX(ctx, key, "me", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("attempt on a free lock: %v, %v", ok, err)
	}
	expect(t, reg, attempts, map[string]float64{
		"result=busy,attempt=first":     1,
		"result=acquired,attempt=first": 1,
		"result=error":                  0,
		"attempt=retry":                 0,
	})
	expect(t, reg, "cachewatch_lock_acquire_duration_seconds", map[string]float64{
		"outcome=gave_up":  1,
		"outcome=error":    0,
		"outcome=acquired": 1,
	})
}

// In the key groups that Options.TryOnce names (by name or pattern) lock
// attempts and acquisitions are mode="try_once" at once, whatever follows;
// elsewhere a busy first attempt waits for its fate: never retried, it was
// a try-once caller's too.
func TestTryOnceKeyGroups(t *testing.T) {
	rdb, reg := hooked(t, hooks.Options{TryOnce: []string{"jobs:lock:*", "cron:nightly"}, RetryHorizon: 50 * time.Millisecond})
	ctx := context.Background()
	for _, key := range []string{"jobs:lock:report", "jobs:lock:cleanup", "cron:nightly", "order:lock:42"} {
		for _, token := range []string{"a", "b"} { // acquired, then busy
			if err := rdb.SetNX(ctx, key, token, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	expect(t, reg, attempts, map[string]float64{
		"mode=try_once,result=acquired": 3,
		"mode=try_once,result=busy":     3, // the named groups', counted at once
		"mode=wait,result=acquired":     1,
		"mode=wait,result=busy":         0,
	})
	settled(t, reg, attempts, map[string]float64{
		"mode=try_once,result=busy":            4,
		"mode=try_once,key_group=order:lock:*": 1,
		"mode=wait,result=busy":                0,
	})
	expect(t, reg, "cachewatch_lock_acquire_duration_seconds", map[string]float64{
		"mode=try_once,outcome=acquired": 3,
		"mode=wait,outcome=acquired":     1,
	})
	if _, err := hooks.New(hooks.Options{Registerer: prometheus.NewRegistry(), TryOnce: []string{"jobs:[lock"}}); err == nil {
		t.Fatal("a malformed TryOnce pattern was accepted")
	}
	if _, err := hooks.New(hooks.Options{Registerer: prometheus.NewRegistry(), RetryHorizon: -time.Second}); err == nil {
		t.Fatal("a negative RetryHorizon was accepted")
	}
}

// A run-once job whose instances skip their turn when the lock is busy
// never retries: with no configuration, none of its busy attempts is
// contention (mode wait), even when an instance reuses its token on every
// run, as long as its runs are further apart than the retry horizon.
func TestRunOnceJobIsNotContention(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	const horizon = 20 * time.Millisecond
	var jobs []*redis.Client
	for _, name := range []string{"job-a", "job-b", "job-c", "job-d"} {
		rdb := redistest.NewClient(t, quiet(&redis.Options{Addr: srv.Addr}))
		h, err := hooks.New(hooks.Options{Registerer: reg, Name: name, RetryHorizon: horizon})
		if err != nil {
			t.Fatal(err)
		}
		rdb.AddHook(h)
		jobs = append(jobs, rdb)
	}
	ctx := context.Background()
	acquired := 0
	for run := 0; run < 5; run++ {
		for i, rdb := range jobs {
			token := fmt.Sprintf("instance-%d", i) // the same on every run
			ok, err := rdb.SetNX(ctx, "job-lock", token, 30*time.Second).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				acquired++
			}
		}
		time.Sleep(3 * horizon) // runs apart: never within one horizon
	}
	if acquired != 1 {
		t.Fatalf("%d runs acquired the job lock, want 1 (its TTL outlasts the test)", acquired)
	}
	settled(t, reg, attempts, map[string]float64{
		"result=busy,mode=try_once": 19,
		"result=busy,mode=wait":     0,
		"attempt=retry":             0,
		"result=acquired":           1,
	})
}
