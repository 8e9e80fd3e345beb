package bench

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Every library gets the same lease and the same full-jitter retry policy,
// so the contended case compares round trips and client overhead, not
// retry schedules.
const (
	lockBenchTTL  = 10 * time.Second
	lockBenchBase = 500 * time.Microsecond
	lockBenchMax  = 8 * time.Millisecond
)

func fullJitter(retry int) time.Duration {
	ceiling := lockBenchMax
	if d := lockBenchBase << min(retry-1, 20); d < ceiling {
		ceiling = d
	}
	return rand.N(ceiling)
}

// cachewatchLocker takes instrument's lock on key, live unless noLiveness.
func cachewatchLocker(b *testing.B, rdb *redis.Client, key string, noLiveness bool) locker {
	c, err := instrument.New(rdb, instrument.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	opts := instrument.LockOptions{TTL: lockBenchTTL, NoLiveness: noLiveness,
		Backoff: instrument.Backoff{Base: lockBenchBase, Max: lockBenchMax, Retries: 1 << 30}}
	return func(ctx context.Context) (func(context.Context) error, error) {
		l, err := c.Lock(ctx, key, opts)
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
}

// locker takes a lock and returns its release.
type locker func(ctx context.Context) (release func(context.Context) error, err error)

// lockLibraries builds one locker per library over rdb, each on its own key.
// A locker may be shared by goroutines.
var lockLibraries = []struct {
	name string
	new  func(b *testing.B, rdb *redis.Client, key string) locker
}{
	{"cachewatch", func(b *testing.B, rdb *redis.Client, key string) locker {
		return cachewatchLocker(b, rdb, key, false)
	}},
	// The lock without liveness: a plain SET NX PX, as before live locks.
	{"cachewatch-noliveness", func(b *testing.B, rdb *redis.Client, key string) locker {
		return cachewatchLocker(b, rdb, key, true)
	}},
	{"redislock", func(b *testing.B, rdb *redis.Client, key string) locker {
		c := redislock.New(rdb)
		return func(ctx context.Context) (func(context.Context) error, error) {
			l, err := c.Obtain(ctx, key, lockBenchTTL, &redislock.Options{RetryStrategy: &jitterStrategy{}})
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}
	}},
	{"redsync", func(b *testing.B, rdb *redis.Client, key string) locker {
		rs := redsync.New(goredis.NewPool(rdb))
		return func(ctx context.Context) (func(context.Context) error, error) {
			m := rs.NewMutex(key, redsync.WithExpiry(lockBenchTTL), redsync.WithTries(1<<30),
				redsync.WithRetryDelayFunc(fullJitter))
			if err := m.LockContext(ctx); err != nil {
				return nil, err
			}
			return func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }, nil
		}
	}},
}

// jitterStrategy is redislock's RetryStrategy with the shared full jitter.
type jitterStrategy struct{ retry int }

func (s *jitterStrategy) NextBackoff() time.Duration {
	s.retry++
	return fullJitter(s.retry)
}

// commandCounter counts the round trips a client makes (a pipeline is one).
type commandCounter struct{ n atomic.Int64 }

func (h *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// BenchmarkLockAcquire measures one acquire plus one release per op against
// a real redis-server, for cachewatch, bsm/redislock and redsync (single
// node). uncontended: one goroutine. contended: 8 goroutines on one key,
// each op retrying until it holds the lock. round-trips/op counts every
// command sent (retries included), from a go-redis hook.
func BenchmarkLockAcquire(b *testing.B) {
	srv := redistest.Start(b)
	for _, c := range []struct {
		name        string
		parallelism int // goroutines per GOMAXPROCS; 0 runs serially
	}{{"uncontended", 0}, {"contended", 8}} {
		for _, lib := range lockLibraries {
			b.Run(c.name+"/"+lib.name, func(b *testing.B) {
				rdb := redistest.NewClient(b, &redis.Options{Addr: srv.Addr, PoolSize: 32})
				counter := &commandCounter{}
				rdb.AddHook(counter)
				lock := lib.new(b, rdb, "bench:lock:"+c.name+":"+lib.name)
				op := func() {
					release, err := lock(context.Background())
					if err != nil {
						b.Error(err)
						return
					}
					if err := release(context.Background()); err != nil {
						b.Error(err)
					}
				}
				op() // warm the pool and load the scripts
				counter.n.Store(0)
				b.ResetTimer()
				if c.parallelism == 0 {
					for range b.N {
						op()
					}
				} else {
					b.SetParallelism(max(1, c.parallelism/runtime.GOMAXPROCS(0)))
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							op()
						}
					})
				}
				b.StopTimer()
				b.ReportMetric(float64(counter.n.Load())/float64(b.N), "round-trips/op")
			})
		}
	}
}
