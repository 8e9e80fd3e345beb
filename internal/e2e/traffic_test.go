package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/instrument"
)

// Keys and queues the traffic uses; the exporter is told about the queues.
const (
	streamQueue  = "jobs:stream"
	streamGroup  = "workers"
	listQueue    = "jobs:list"
	delayedQueue = "jobs:delayed"
	// stuckLock is the lock key written without a TTL on purpose, to fire
	// the locks-without-TTL alert; its key group is stuckLockGroup.
	stuckLock      = "lock:stuck:1"
	stuckLockGroup = "lock:stuck:*"
)

// releaseScript is the service's own owner-checked release, registered with
// the hook under a name so that its latency and lost locks are reported.
const releaseSrc = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

var releaseScript = redis.NewScript(releaseSrc)

// traffic is a set of goroutines that make a real Redis contend, miss, serve
// stale, fail refreshes and starve a pool, through the instrumented client
// and hooked go-redis clients, all reporting to one registry served over
// HTTP on a loopback port.
type traffic struct {
	t    testing.TB
	addr string // the live Redis
	reg  *prometheus.Registry
	// dead is a loopback address where nothing listens: the instrumented
	// cache behind it falls back to the source and opens its breaker.
	dead string

	app, raw, pool *redis.Client
	cw, cwDead     *instrument.Client

	wg     sync.WaitGroup
	cancel context.CancelFunc
}

// startTraffic starts the traffic against the Redis at addr and returns it
// with the address ("host:port") of its /metrics. It stops when the test ends.
func startTraffic(t *testing.T, addr, dead string) (*traffic, string) {
	t.Helper()
	tr := &traffic{t: t, addr: addr, dead: dead, reg: prometheus.NewRegistry()}
	tr.clients()
	tr.seed()
	ctx, cancel := context.WithCancel(context.Background())
	tr.cancel = cancel
	for _, loop := range []func(context.Context){
		tr.contendedLocks, tr.contendedLocks, tr.contendedLocks,
		tr.lostLocks, tr.renewedLocks,
		tr.cacheReads("products-a"), tr.cacheReads("products-b"), tr.failingRefreshes, tr.hardTTL, tr.missBursts,
		tr.staleWrites, tr.versionedWrites, tr.deadRedis,
		tr.rawLocks, tr.rawLocks, tr.rawCache, tr.rawScripts, tr.rawErrors,
		tr.poolPressure, tr.poolPressure, tr.poolPressure, tr.queueWork,
	} {
		tr.wg.Add(1)
		go func() { defer tr.wg.Done(); loop(ctx) }()
	}
	t.Cleanup(tr.stop)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("traffic: listen: %v", err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(tr.reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return tr, l.Addr().String()
}

func (tr *traffic) stop() {
	tr.cancel()
	tr.wg.Wait()
}

// clients builds the hooked go-redis clients and the instrumented clients.
// Each hooked client has its own client label; the app client is the one the
// instrumented client uses, so its commands and scripts are timed too.
func (tr *traffic) clients() {
	t := tr.t
	hooked := func(name string, opts *redis.Options, scripts ...hooks.Script) *redis.Client {
		c := redis.NewClient(opts)
		t.Cleanup(func() { _ = c.Close() })
		h, err := hooks.New(hooks.Options{Registerer: tr.reg, Name: name, Pool: c, Scripts: scripts,
			MissBurstWindow: time.Second, MissBurstThreshold: 5})
		if err != nil {
			t.Fatalf("hooks.New(%s): %v", name, err)
		}
		c.AddHook(h)
		return c
	}
	tr.app = hooked("app", &redis.Options{Addr: tr.addr, PoolSize: 32})
	tr.raw = hooked("raw", &redis.Options{Addr: tr.addr},
		hooks.Script{Name: "release", Src: releaseSrc, Role: hooks.RoleRelease})
	// Two connections and a 20ms wait for one: three goroutines holding
	// connections in BLPOP starve the third (pool timeouts).
	tr.pool = hooked("pool", &redis.Options{Addr: tr.addr, PoolSize: 2, PoolTimeout: 20 * time.Millisecond,
		ReadTimeout: 2 * time.Second})

	var err error
	if tr.cw, err = instrument.New(tr.app, instrument.Options{Registerer: tr.reg, Name: "app"}); err != nil {
		t.Fatalf("instrument.New: %v", err)
	}
	// A client of a Redis that does not answer: every Fetch falls back to
	// the source behind the circuit breaker.
	deadRDB := redis.NewClient(&redis.Options{Addr: tr.dead, MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { _ = deadRDB.Close() })
	if tr.cwDead, err = instrument.New(deadRDB, instrument.Options{Registerer: tr.reg, Name: "unreachable"}); err != nil {
		t.Fatalf("instrument.New (unreachable): %v", err)
	}
}

// seed writes the keyspace the exporter samples: keys without TTL, keys
// whose TTLs expire in the same second (no jitter), enough filler keys that
// one sample cannot cover the keyspace, queues with a consumer group, and a
// lock held for an hour (long-held).
func (tr *traffic) seed() {
	ctx := context.Background()
	pipe := tr.raw.Pipeline()
	for i := range 20 {
		pipe.Set(ctx, "config:"+strconv.Itoa(i), "v", 0)
	}
	for i := range 60 {
		pipe.Set(ctx, "session:"+strconv.Itoa(i), "v", 10*time.Minute) // one second for all: synchronised expiry
	}
	for i := range 400 {
		pipe.Set(ctx, "filler:"+strconv.Itoa(i), "v", time.Hour+time.Duration(i)*time.Second)
	}
	pipe.Set(ctx, "lock:nightly:1", "owner-nightly", time.Hour)
	past := float64(time.Now().Add(-time.Minute).Unix())
	pipe.ZAdd(ctx, delayedQueue, redis.Z{Score: past, Member: "job-1"}, redis.Z{Score: past + 1, Member: "job-2"})
	pipe.RPush(ctx, listQueue, "a", "b", "c")
	pipe.XGroupCreateMkStream(ctx, streamQueue, streamGroup, "0")
	if _, err := pipe.Exec(ctx); err != nil {
		tr.t.Fatalf("seed: %v", err)
	}
}

// every runs f every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func(context.Context)) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		f(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// contendedLocks: several goroutines take the same two locks for short work,
// so first attempts find them busy, retry after backoff and sometimes give up.
func (tr *traffic) contendedLocks(ctx context.Context) {
	every(ctx, 10*time.Millisecond, func(ctx context.Context) {
		key := "lock:orders:" + strconv.Itoa(rand.IntN(2))
		l, err := tr.cw.Lock(ctx, key, instrument.LockOptions{TTL: 2 * time.Second,
			Backoff: instrument.Backoff{Base: 2 * time.Millisecond, Max: 20 * time.Millisecond, Retries: 4}})
		if err != nil {
			return // busy after the retries: counted as gave_up
		}
		sleep(ctx, time.Duration(5+rand.IntN(15))*time.Millisecond)
		_ = l.Release(ctx)
	})
}

// lostLocks: work longer than the lock's TTL, so the release finds it gone.
func (tr *traffic) lostLocks(ctx context.Context) {
	every(ctx, 700*time.Millisecond, func(ctx context.Context) {
		l, err := tr.cw.Lock(ctx, "lock:report:1", instrument.LockOptions{TTL: 30 * time.Millisecond, Backoff: instrument.Backoff{Retries: -1}})
		if err != nil {
			return
		}
		sleep(ctx, 80*time.Millisecond)
		_ = l.Release(ctx) // ErrNotOwner: counted as lost
	})
}

// renewedLocks: work that outlasts the TTL under a renewing lease.
func (tr *traffic) renewedLocks(ctx context.Context) {
	every(ctx, 500*time.Millisecond, func(ctx context.Context) {
		l, err := tr.cw.Lock(ctx, "lock:batch:1", instrument.LockOptions{TTL: 150 * time.Millisecond, Renew: true, Backoff: instrument.Backoff{Retries: -1}})
		if err != nil {
			return
		}
		sleep(ctx, 300*time.Millisecond)
		_ = l.Release(ctx)
	})
}

// cacheReads: reads of 20 product keys with a short fresh TTL: hits, stale
// serves with background refreshes, misses, and callers coalescing on one
// load; now and then a key is invalidated, or a pattern.
func (tr *traffic) cacheReads(name string) func(context.Context) {
	return func(ctx context.Context) { tr.readProducts(ctx, name) }
}

func (tr *traffic) readProducts(ctx context.Context, name string) {
	ca := instrument.NewCache[string](tr.cw, instrument.CacheOptions{FreshTTL: 300 * time.Millisecond, HardTTL: time.Hour, Name: name})
	defer ca.Close()
	n := 0
	every(ctx, 15*time.Millisecond, func(ctx context.Context) {
		n++
		key := "product:" + strconv.Itoa(rand.IntN(20))
		_, _ = ca.Fetch(ctx, key, func(context.Context) (string, error) {
			time.Sleep(20 * time.Millisecond) // a slow source: concurrent callers coalesce
			return "p", nil
		})
		switch {
		case n%100 == 0:
			_, _ = ca.Invalidate(ctx, key)
		case n%250 == 0:
			_, _ = tr.cw.InvalidateMatch(ctx, "product:1*")
		}
	})
}

// failingRefreshes: values whose source fails after the first load, so they
// are served stale while every refresh fails (stale-forever).
func (tr *traffic) failingRefreshes(ctx context.Context) {
	ca := instrument.NewCache[string](tr.cw, instrument.CacheOptions{FreshTTL: 200 * time.Millisecond, HardTTL: time.Hour,
		FailureHoldoff: 100 * time.Millisecond, Name: "prices"})
	defer ca.Close()
	loaded := map[string]bool{}
	every(ctx, 50*time.Millisecond, func(ctx context.Context) {
		key := "price:" + strconv.Itoa(rand.IntN(3))
		first := !loaded[key]
		_, err := ca.Fetch(ctx, key, func(context.Context) (string, error) {
			if first {
				return "42", nil
			}
			return "", errors.New("price source down")
		})
		if err == nil {
			loaded[key] = true
		}
	})
}

// hardTTL: a value read past its hard TTL (Redis keeps the key a little
// longer) while the source fails, which cachewatch refuses to serve.
func (tr *traffic) hardTTL(ctx context.Context) {
	ca := instrument.NewCache[string](tr.cw, instrument.CacheOptions{FreshTTL: 50 * time.Millisecond, HardTTL: 100 * time.Millisecond,
		FailureHoldoff: -1, LocalCopies: -1, Name: "quotes"})
	defer ca.Close()
	n := 0
	every(ctx, 400*time.Millisecond, func(ctx context.Context) {
		n++
		_, _ = ca.Fetch(ctx, "quote:1", func(context.Context) (string, error) {
			if n%3 == 1 {
				return "q", nil
			}
			return "", errors.New("quote source down")
		})
	})
}

// missBursts: reads of keys never seen, more per second than the burst
// threshold.
func (tr *traffic) missBursts(ctx context.Context) {
	ca := instrument.NewCache[string](tr.cw, instrument.CacheOptions{FreshTTL: time.Second, HardTTL: 2 * time.Second,
		BurstWindow: time.Second, BurstThreshold: 5, Name: "search"})
	defer ca.Close()
	n := 0
	every(ctx, 40*time.Millisecond, func(ctx context.Context) {
		n++
		_, _ = ca.Fetch(ctx, "search:"+strconv.Itoa(n), func(context.Context) (string, error) { return "r", nil })
	})
}

// staleWrites: a key invalidated while its load runs; the loaded value must
// not be stored. Also idempotency checks, first and duplicate.
func (tr *traffic) staleWrites(ctx context.Context) {
	ca := instrument.NewCache[string](tr.cw, instrument.CacheOptions{FreshTTL: time.Minute, Name: "drafts"})
	defer ca.Close()
	n := 0
	every(ctx, 300*time.Millisecond, func(ctx context.Context) {
		n++
		key := "draft:" + strconv.Itoa(n)
		_, _ = ca.Fetch(ctx, key, func(lctx context.Context) (string, error) {
			_, _ = ca.Invalidate(lctx, key)
			return "d", nil
		})
		idem := "idem:" + strconv.Itoa(n)
		_, _ = tr.cw.FirstSeen(ctx, idem, time.Minute)
		_, _ = tr.cw.FirstSeen(ctx, idem, time.Minute) // the retry: duplicate
	})
}

// versionedWrites: a newer version, then a late older one (write skew
// prevented), then the same version again (duplicate recompute).
func (tr *traffic) versionedWrites(ctx context.Context) {
	n := int64(0)
	every(ctx, 300*time.Millisecond, func(ctx context.Context) {
		n++
		key := "account:" + strconv.FormatInt(n%10, 10)
		_, _ = tr.cw.SetVersioned(ctx, key, []byte("v"), 10*n+2, time.Minute)
		_, _ = tr.cw.SetVersioned(ctx, key, []byte("v"), 10*n+1, time.Minute)
		_, _ = tr.cw.SetVersioned(ctx, key, []byte("v"), 10*n+2, time.Minute)
	})
}

// deadRedis: reads through a client whose Redis does not answer: fallback
// loads, breaker open.
func (tr *traffic) deadRedis(ctx context.Context) {
	ca := instrument.NewCache[string](tr.cwDead, instrument.CacheOptions{RedisTimeout: 50 * time.Millisecond,
		BreakerOpenFor: time.Second, LocalCopies: -1, Name: "unreachable"})
	defer ca.Close()
	every(ctx, 100*time.Millisecond, func(ctx context.Context) {
		_, _ = ca.Fetch(ctx, "profile:"+strconv.Itoa(rand.IntN(5)), func(context.Context) (string, error) {
			time.Sleep(5 * time.Millisecond)
			return "p", nil
		})
	})
}

// rawLocks: a service with hand-written SET NX PX locks and an owner-checked
// release script, seen only by the hook; now and then it releases with a
// token that is not its own (another owner: a lost lock).
func (tr *traffic) rawLocks(ctx context.Context) {
	n := 0
	every(ctx, 15*time.Millisecond, func(ctx context.Context) {
		n++
		key := "lock:legacy:" + strconv.Itoa(rand.IntN(2))
		token := fmt.Sprintf("tok-%d-%d", rand.Int64(), n)
		for try := 0; try < 3; try++ {
			ok, err := tr.raw.SetNX(ctx, key, token, time.Second).Result()
			if err != nil {
				return
			}
			if ok {
				sleep(ctx, 10*time.Millisecond)
				release := token
				if n%20 == 0 {
					release = "not-mine"
				}
				_ = releaseScript.Run(ctx, tr.raw, []string{key}, release).Err()
				return
			}
			sleep(ctx, 5*time.Millisecond)
		}
	})
}

// rawCache: cache-aside reads with GET and MGET, hits and misses, with miss
// bursts on a group of keys that are never there; pipelines and a
// transaction.
func (tr *traffic) rawCache(ctx context.Context) {
	n := 0
	every(ctx, 20*time.Millisecond, func(ctx context.Context) {
		n++
		key := "cache:legacy:" + strconv.Itoa(rand.IntN(10))
		if err := tr.raw.Get(ctx, key).Err(); errors.Is(err, redis.Nil) {
			_ = tr.raw.Set(ctx, key, "v", 500*time.Millisecond).Err()
		}
		_ = tr.raw.MGet(ctx, "cache:missing:"+strconv.Itoa(n), "cache:legacy:1").Err()
		pipe := tr.raw.Pipeline()
		pipe.Incr(ctx, "counter:hits")
		pipe.Get(ctx, "config:1")
		_, _ = pipe.Exec(ctx)
		_, _ = tr.raw.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, "counter:tx")
			p.Expire(ctx, "counter:tx", time.Hour)
			return nil
		})
	})
}

// rawScripts: the release script's cache flushed now and then, so EVALSHA
// answers NOSCRIPT before go-redis falls back to EVAL.
func (tr *traffic) rawScripts(ctx context.Context) {
	every(ctx, 2*time.Second, func(ctx context.Context) {
		_ = tr.raw.ScriptFlush(ctx).Err()
		_ = releaseScript.Run(ctx, tr.raw, []string{"lock:legacy:none"}, "x").Err()
	})
}

// rawErrors: a command against the wrong type (WRONGTYPE: class other).
func (tr *traffic) rawErrors(ctx context.Context) {
	every(ctx, 500*time.Millisecond, func(ctx context.Context) {
		_ = tr.raw.LPush(ctx, "config:2", "x").Err()
	})
}

// poolPressure: three goroutines block on BLPOP (1s, its shortest timeout)
// through a two-connection pool with a short pool timeout: waits and
// timeouts (starvation).
func (tr *traffic) poolPressure(ctx context.Context) {
	every(ctx, 10*time.Millisecond, func(ctx context.Context) {
		_ = tr.pool.BLPop(ctx, time.Second, "pool:never").Err()
	})
}

// queueWork: producers add to the stream, a consumer reads without always
// acknowledging (pending, oldest pending age), and the list and delayed queue
// get entries.
func (tr *traffic) queueWork(ctx context.Context) {
	n := 0
	every(ctx, 200*time.Millisecond, func(ctx context.Context) {
		n++
		_ = tr.raw.XAdd(ctx, &redis.XAddArgs{Stream: streamQueue, Values: []string{"job", strconv.Itoa(n)}}).Err()
		_ = tr.raw.XAdd(ctx, &redis.XAddArgs{Stream: streamQueue, Values: []string{"job", strconv.Itoa(n) + "b"}}).Err()
		msgs, err := tr.raw.XReadGroup(ctx, &redis.XReadGroupArgs{Group: streamGroup, Consumer: "w1", Streams: []string{streamQueue, ">"}, Count: 1, Block: -1}).Result()
		if err == nil && n%3 != 0 {
			for _, s := range msgs {
				for _, m := range s.Messages {
					_ = tr.raw.XAck(ctx, streamQueue, streamGroup, m.ID).Err()
				}
			}
		}
		_ = tr.raw.RPush(ctx, listQueue, n).Err()
	})
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
