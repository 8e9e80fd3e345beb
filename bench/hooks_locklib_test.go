package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/internal/keygrouptest"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// hookedClient returns a client of a fresh redis-server with a cachewatch
// hook on a new registry. Handshake extras are off so that only the lock
// libraries' traffic is counted.
func hookedClient(t *testing.T) (*redis.Client, *prometheus.Registry) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := redistest.NewClient(t, &redis.Options{Addr: srv.Addr, DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	reg := prometheus.NewRegistry()
	// The tests lock few keys per group: the groups keep every name at
	// once rather than being learnt from many keys.
	h, err := hooks.New(hooks.Options{Registerer: reg, KeyGroups: keygrouptest.Named(t)})
	if err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(h)
	return rdb, reg
}

// hookValue reads one series: a counter's value or a histogram's count;
// labels is "k=v,k=v" and must all match. Missing series read 0.
func hookValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	return metrictest.Sum(t, reg, name, metrictest.Pairs(labels)...)
}

type want struct {
	metric string
	labels map[string]string
	value  float64
}

// check scrapes reg until every want holds: the hook counts a busy first
// attempt that is never retried once its retry horizon has passed (a scrape
// settles it), so the last counts arrive late.
func check(t *testing.T, reg prometheus.Gatherer, wants []want) {
	t.Helper()
	err := poll.Check(context.Background(), poll.Bound, 10*time.Millisecond, func() error {
		var wrong []string
		for _, w := range wants {
			if got := hookValue(t, reg, w.metric, w.labels); got != w.value {
				wrong = append(wrong, fmt.Sprintf("%s%v = %v, want %v", w.metric, w.labels, got, w.value))
			}
		}
		if len(wrong) > 0 {
			return errors.New(strings.Join(wrong, "; "))
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

const (
	attemptsTotal  = "cachewatch_lock_attempts_total"
	lostTotal      = "cachewatch_locks_lost_total"
	scriptSeconds  = "cachewatch_redis_script_duration_seconds"
	noscriptTotal  = "cachewatch_redis_script_noscript_total"
	acquireSeconds = "cachewatch_lock_acquire_duration_seconds"
)

func attemptsOf(group, result, attempt string) map[string]string {
	return map[string]string{"key_group": group, "result": result, "attempt": attempt}
}

// TestHookSeesRedislock drives bsm/redislock and reads back exactly what it
// did: its obtain script is a lock attempt, its release and refresh scripts
// answer 0 for a lock someone else took over.
func TestHookSeesRedislock(t *testing.T) {
	rdb, reg := hookedClient(t)
	ctx := context.Background()
	locker := redislock.New(rdb)
	const held, contended, retrying, retries, released, lost = 200, 50, 20, 3, 100, 10

	locks := make([]*redislock.Lock, held)
	for i := range locks {
		l, err := locker.Obtain(ctx, fmt.Sprintf("lock:report:%d", i), time.Minute, nil)
		if err != nil {
			t.Fatalf("obtain %d: %v", i, err)
		}
		locks[i] = l
	}
	for i := 0; i < contended; i++ {
		if _, err := locker.Obtain(ctx, fmt.Sprintf("lock:report:%d", i), time.Minute, nil); !errors.Is(err, redislock.ErrNotObtained) {
			t.Fatalf("contended obtain %d: %v", i, err)
		}
	}
	for i := 0; i < retrying; i++ { // a retry strategy counts its retries: one each
		retry := &redislock.Options{RetryStrategy: redislock.LimitRetry(redislock.LinearBackoff(time.Millisecond), retries)}
		if _, err := locker.Obtain(ctx, fmt.Sprintf("lock:report:%d", i), time.Minute, retry); !errors.Is(err, redislock.ErrNotObtained) {
			t.Fatalf("retrying obtain %d: %v", i, err)
		}
	}
	for _, l := range locks[:released] {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The last locks "expire" and are taken by someone else before their
	// holders refresh and release them.
	for _, l := range locks[held-lost:] {
		rdb.Set(ctx, l.Key(), "someone-else", time.Minute)
		if err := l.Refresh(ctx, time.Minute, nil); !errors.Is(err, redislock.ErrNotObtained) {
			t.Fatalf("refresh of a taken-over lock: %v", err)
		}
		if err := l.Release(ctx); !errors.Is(err, redislock.ErrLockNotHeld) {
			t.Fatalf("release of a taken-over lock: %v", err)
		}
	}

	check(t, reg, []want{
		{attemptsTotal, attemptsOf("lock:report:*", "acquired", "first"), held},
		{attemptsTotal, attemptsOf("lock:report:*", "busy", "first"), contended + retrying},
		{attemptsTotal, attemptsOf("lock:report:*", "busy", "retry"), retrying * retries},
		{attemptsTotal, map[string]string{"result": "error"}, 0},
		{acquireSeconds, map[string]string{"key_group": "lock:report:*", "outcome": "acquired"}, held},
		// redislock's release answers 0 whether the lock expired or was
		// taken over: the hook cannot tell which, and says so.
		{lostTotal, map[string]string{"key_group": "lock:report:*", "reason": "expired_or_not_owner"}, lost},
		{lostTotal, map[string]string{"reason": "not_owner"}, 0},
		{lostTotal, map[string]string{"key_group": "lock:report:*", "reason": "renew_failed"}, lost},
		{lostTotal, map[string]string{"reason": "expired"}, 0},
		// Each script is run by SHA, answered NOSCRIPT once, then loaded by EVAL.
		{scriptSeconds, map[string]string{"script": "redislock_obtain", "command": "evalsha"}, held + contended + retrying*(1+retries)},
		{scriptSeconds, map[string]string{"script": "redislock_obtain", "command": "eval"}, 1},
		{scriptSeconds, map[string]string{"script": "redislock_release", "command": "evalsha"}, released + lost},
		{scriptSeconds, map[string]string{"script": "redislock_refresh", "command": "evalsha"}, lost},
		{noscriptTotal, map[string]string{"script": "redislock_obtain"}, 1},
		{noscriptTotal, map[string]string{"script": "redislock_release"}, 1},
		{scriptSeconds, map[string]string{"script": "unknown"}, 0},
	})
}

// TestHookSeesRedsync drives redsync: SET NX PX attempts, its release after
// every failed attempt (not a lost lock), and its release and extend
// scripts on locks that expired or were taken over.
func TestHookSeesRedsync(t *testing.T) {
	rdb, reg := hookedClient(t)
	ctx := context.Background()
	rs := redsync.New(goredis.NewPool(rdb))
	const held, contended, retrying, tries, released, takenOver, expired = 100, 30, 10, 4, 50, 5, 5

	mutexes := make([]*redsync.Mutex, held)
	for i := range mutexes {
		m := rs.NewMutex(fmt.Sprintf("lock:payment:%d", i), redsync.WithTries(1), redsync.WithExpiry(time.Minute))
		if err := m.LockContext(ctx); err != nil {
			t.Fatalf("lock %d: %v", i, err)
		}
		mutexes[i] = m
	}
	for i := 0; i < contended; i++ {
		m := rs.NewMutex(fmt.Sprintf("lock:payment:%d", i), redsync.WithTries(1))
		if err := m.LockContext(ctx); err == nil {
			t.Fatalf("lock %d taken twice", i)
		}
	}
	for i := 0; i < retrying; i++ {
		m := rs.NewMutex(fmt.Sprintf("lock:payment:%d", i), redsync.WithTries(tries), redsync.WithRetryDelay(time.Millisecond))
		if err := m.LockContext(ctx); err == nil {
			t.Fatalf("lock %d taken twice", i)
		}
	}
	for _, m := range mutexes[:released] {
		if ok, err := m.UnlockContext(ctx); !ok || err != nil {
			t.Fatalf("unlock: %v %v", ok, err)
		}
	}
	for _, m := range mutexes[held-takenOver:] {
		rdb.Set(ctx, m.Name(), "someone-else", time.Minute)
		if ok, _ := m.ExtendContext(ctx); ok {
			t.Fatal("extended a lock someone else holds")
		}
		if ok, _ := m.UnlockContext(ctx); ok {
			t.Fatal("released a lock someone else holds")
		}
	}
	for _, m := range mutexes[held-takenOver-expired : held-takenOver] {
		rdb.Del(ctx, m.Name())
		if _, err := m.UnlockContext(ctx); err == nil {
			t.Fatal("released an expired lock without error")
		}
	}

	failedAttempts := contended + retrying*tries
	check(t, reg, []want{
		{attemptsTotal, attemptsOf("lock:payment:*", "acquired", "first"), held},
		{attemptsTotal, attemptsOf("lock:payment:*", "busy", "first"), contended + retrying},
		{attemptsTotal, attemptsOf("lock:payment:*", "busy", "retry"), retrying * (tries - 1)},
		{acquireSeconds, map[string]string{"key_group": "lock:payment:*", "outcome": "acquired"}, held},
		{lostTotal, map[string]string{"key_group": "lock:payment:*", "reason": "not_owner"}, takenOver},
		{lostTotal, map[string]string{"key_group": "lock:payment:*", "reason": "renew_failed"}, takenOver},
		{lostTotal, map[string]string{"key_group": "lock:payment:*", "reason": "expired"}, expired},
		// One release per failed attempt, then the holders' own.
		{scriptSeconds, map[string]string{"script": "redsync_release", "command": "evalsha"},
			float64(failedAttempts + released + takenOver + expired)},
		{scriptSeconds, map[string]string{"script": "redsync_release", "command": "eval"}, 1},
		{noscriptTotal, map[string]string{"script": "redsync_release"}, 1},
		{scriptSeconds, map[string]string{"script": "redsync_extend", "command": "evalsha"}, takenOver},
		{scriptSeconds, map[string]string{"script": "unknown"}, 0},
	})
}
