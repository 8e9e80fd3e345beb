package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/internal/keygrouptest"
	"github.com/cachewatch/cachewatch/keygroup"
)

// liveTimeout bounds the caches' Redis round trips on the live Redis: long
// enough that a loaded 2-core machine does not open their breakers.
const liveTimeout = 2 * time.Second

// Keys and queues the traffic uses; the exporter is told about the queues.
const (
	streamQueue  = "jobs:stream"
	streamGroup  = "workers"
	listQueue    = "jobs:list"
	delayedQueue = "jobs:delayed"
	// bigQueue is a stream whose first entry is larger than the exporter's
	// reply cap: reading it is left out between backoffs.
	bigQueue = "jobs:big"
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
	// mp, when set, receives every metric as well (OpenTelemetry).
	mp metric.MeterProvider
	// dead is a loopback address where nothing listens: the instrumented
	// cache behind it falls back to the source and opens its breaker.
	dead string

	app, raw, pool *redis.Client
	cw, cwDead     *instrument.Client
	// groups keeps every name of the traffic's few keys per group at once
	// (MinKeys 1), shared by every hook and client.
	groups *keygroup.Classifier

	wg     sync.WaitGroup
	cancel context.CancelFunc
}

// startTraffic starts the traffic against the Redis at addr and returns it
// with the address ("host:port") of its /metrics. It stops when the test ends.
func startTraffic(t *testing.T, addr, dead string) (*traffic, string) {
	t.Helper()
	tr := &traffic{t: t, addr: addr, dead: dead, reg: prometheus.NewRegistry()}
	tr.start(context.Background())

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("traffic: listen: %v", err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(tr.reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return tr, l.Addr().String()
}

// start builds the clients, seeds the keyspace and starts the loops under
// parent (which may carry a gate, see every).
func (tr *traffic) start(parent context.Context) {
	t := tr.t
	tr.clients()
	tr.seed()
	ctx, cancel := context.WithCancel(parent)
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
	tr.groups = keygrouptest.Named(t)
	hooked := func(name string, opts *redis.Options, scripts ...hooks.Script) *redis.Client {
		c := redis.NewClient(opts)
		t.Cleanup(func() { _ = c.Close() })
		h, err := hooks.New(hooks.Options{Registerer: tr.reg, MeterProvider: tr.mp, Name: name, Pool: c, Scripts: scripts,
			MissBurstWindow: time.Second, MissBurstThreshold: 5, KeyGroups: tr.groups})
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

	// The client's warnings (Redis timeouts on a loaded machine) would drown
	// the test's output; the metrics report them.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var err error
	if tr.cw, err = instrument.New(tr.app, instrument.Options{Registerer: tr.reg, MeterProvider: tr.mp, Name: "app", Logger: quiet,
		KeyGroups: tr.groups}); err != nil {
		t.Fatalf("instrument.New: %v", err)
	}
	// A client of a Redis that does not answer: every Fetch falls back to
	// the source behind the circuit breaker.
	deadRDB := redis.NewClient(&redis.Options{Addr: tr.dead, MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { _ = deadRDB.Close() })
	if tr.cwDead, err = instrument.New(deadRDB, instrument.Options{Registerer: tr.reg, MeterProvider: tr.mp, Name: "unreachable", Logger: quiet,
		KeyGroups: tr.groups}); err != nil {
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
	pipe.XAdd(ctx, &redis.XAddArgs{Stream: bigQueue, Values: []any{"payload", strings.Repeat("x", 100<<10)}})
	if _, err := pipe.Exec(ctx); err != nil {
		tr.t.Fatalf("seed: %v", err)
	}
}

// newCache returns a Cache of strings over c, or nil (the test failed) if
// the options are refused.
func (tr *traffic) newCache(c *instrument.Client, opts instrument.CacheOptions) *instrument.Cache[string] {
	ca, err := instrument.NewCache[string](c, opts)
	if err != nil {
		tr.t.Errorf("NewCache: %v", err)
		return nil
	}
	return ca
}

// gateKey is the context key of a traffic gate: a *sync.RWMutex that each
// step of a loop holds for reading, so that a test can stop all loops
// between steps (by taking it for writing) to read a quiescent state.
type gateKey struct{}

// every runs f every d until ctx ends, under ctx's gate if it has one.
func every(ctx context.Context, d time.Duration, f func(context.Context)) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	gate, _ := ctx.Value(gateKey{}).(*sync.RWMutex)
	for {
		if gate != nil {
			gate.RLock()
		}
		f(ctx)
		if gate != nil {
			gate.RUnlock()
		}
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
	ca := tr.newCache(tr.cw, instrument.CacheOptions{FreshTTL: 300 * time.Millisecond, HardTTL: time.Hour, Name: name, RedisTimeout: liveTimeout})
	if ca == nil {
		return
	}
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
	ca := tr.newCache(tr.cw, instrument.CacheOptions{FreshTTL: 200 * time.Millisecond, HardTTL: time.Hour,
		FailureHoldoff: 100 * time.Millisecond, Name: "prices", RedisTimeout: liveTimeout})
	if ca == nil {
		return
	}
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
	ca := tr.newCache(tr.cw, instrument.CacheOptions{FreshTTL: 50 * time.Millisecond, HardTTL: 100 * time.Millisecond,
		FailureHoldoff: -1, LocalCopies: -1, Name: "quotes", RedisTimeout: liveTimeout})
	if ca == nil {
		return
	}
	defer ca.Close()
	n := 0
	every(ctx, 400*time.Millisecond, func(ctx context.Context) {
		n++
		succeed := n%3 == 1 // read once here: a background refresh may call the loader later
		_, _ = ca.Fetch(ctx, "quote:1", func(context.Context) (string, error) {
			if succeed {
				return "q", nil
			}
			return "", errors.New("quote source down")
		})
	})
}

// missBursts: reads of keys never seen, more per second than the burst
// threshold.
func (tr *traffic) missBursts(ctx context.Context) {
	ca := tr.newCache(tr.cw, instrument.CacheOptions{FreshTTL: time.Second, HardTTL: 2 * time.Second,
		MissBurstWindow: time.Second, MissBurstThreshold: 5, Name: "search", RedisTimeout: liveTimeout})
	if ca == nil {
		return
	}
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
	ca := tr.newCache(tr.cw, instrument.CacheOptions{FreshTTL: time.Minute, Name: "drafts", RedisTimeout: liveTimeout})
	if ca == nil {
		return
	}
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
// prevented), then the same version again (a duplicate version write).
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
	ca := tr.newCache(tr.cwDead, instrument.CacheOptions{RedisTimeout: 50 * time.Millisecond,
		BreakerHalfOpenAfter: time.Second, LocalCopies: -1, Name: "unreachable"})
	if ca == nil {
		return
	}
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

// happened lists, per thing the traffic and the seeded keyspace cause, a
// query that returns series only once Prometheus has seen it happen (a
// counter above 0, a gauge at its expected value). A panel query can return
// series that are all 0; these prove the signals report what the traffic
// really did. dead is the exporter's unreachable node.
func happened(dead string) map[string]string {
	return map[string]string{
		"instrument: busy first lock attempts":     `sum(cachewatch_lock_attempts_total{key_group="lock:orders:*", attempt="first", result="busy"}) > 0`,
		"instrument: retries after backoff":        `sum(cachewatch_retries_total{key_group="lock:orders:*"}) > 0`,
		"instrument: locks lost (expired)":         `sum(cachewatch_locks_lost_total{key_group="lock:report:*"}) > 0`,
		"instrument: lease renewals":               `sum(cachewatch_lock_renewals_total{key_group="lock:batch:*", result="renewed"}) > 0`,
		"instrument: hits":                         `sum(cachewatch_cache_lookups_total{key_group="product:*", result="hit"}) > 0`,
		"instrument: stale serves":                 `sum(cachewatch_cache_lookups_total{key_group="product:*", result="stale"}) > 0`,
		"instrument: coalesced callers":            `sum(cachewatch_cache_lookups_total{key_group="product:*", result="coalesced"}) > 0`,
		"instrument: fallback loads, Redis down":   `sum(cachewatch_cache_lookups_total{key_group="profile:*", result="fallback"}) > 0`,
		"instrument: circuit breaker opened":       `max_over_time(cachewatch_circuit_breaker_state{client="unreachable"}[10m]) == 2`,
		"instrument: refresh failures":             `sum(cachewatch_loader_refresh_failures_total{key_group="price:*"}) > 0`,
		"instrument: consecutive refresh failures": `max_over_time(cachewatch_loader_consecutive_failures{key_group="price:*"}[10m]) > 1`,
		"instrument: hard-TTL refusals":            `sum(cachewatch_cache_hard_ttl_expired_total{key_group="quote:*"}) > 0`,
		"instrument: miss bursts":                  `sum(cachewatch_cache_miss_bursts_total{job="` + appJob + `", key_group="search:*"}) > 0`,
		"instrument: write skew":                   `sum(cachewatch_write_skew_total{key_group="account:*"}) > 0`,
		"instrument: duplicate version writes":     `sum(cachewatch_duplicate_version_writes_total{key_group="account:*"}) > 0`,
		"instrument: duplicate idempotency keys":   `sum(cachewatch_idempotency_checks_total{key_group="idem:*", result="duplicate"}) > 0`,
		"instrument: stale writes refused":         `sum(cachewatch_cache_stale_writes_refused_total{key_group="draft:*"}) > 0`,
		"instrument: invalidated keys":             `sum(cachewatch_cache_invalidated_keys_total{key_group="product:*"}) > 0`,
		"hook: busy lock attempts on the wire":     `sum(cachewatch_lock_attempts_total{key_group="lock:legacy:*", result="busy"}) > 0`,
		"hook: release by another owner":           `sum(cachewatch_locks_lost_total{key_group="lock:legacy:*"}) > 0`,
		"hook: GET misses":                         `sum(cachewatch_cache_lookups_total{key_group="cache:legacy:*", result="miss"}) > 0`,
		"hook: miss bursts":                        `sum(cachewatch_cache_miss_bursts_total{key_group="cache:missing:*"}) > 0`,
		"hook: named script timed":                 `sum(cachewatch_redis_script_duration_seconds_count{client="raw", script="release"}) > 0`,
		"hook: NOSCRIPT":                           `sum(cachewatch_redis_script_noscript_total{client="raw", script="release"}) > 0`,
		"hook: WRONGTYPE errors":                   `sum(cachewatch_redis_command_errors_total{client="raw", command="lpush"}) > 0`,
		"hook: pool timeouts (starvation)":         `sum(cachewatch_redis_pool_timeouts_total{client="pool"}) > 0`,
		"hook: pipelines and transactions":         `count(cachewatch_redis_pipeline_duration_seconds_count{client="raw"} > 0) == 2`,
		"exporter: the lock without TTL":           `max(cachewatch_exporter_locks_without_ttl{key_group="` + stuckLockGroup + `"}) == 1`,
		"exporter: lock figures fresh":             `max(time() - cachewatch_exporter_data_timestamp_seconds{family="locks", node!="` + dead + `"}) < 10`,
		"exporter: huge first entry left out":      `sum(cachewatch_exporter_queue_reads_skipped_total{queue="` + bigQueue + `", read="first_entry"}) > 0`,
		"exporter: memory per key group":           `max(cachewatch_exporter_keys_memory_bytes{key_group="filler:*"}) > 0`,
		"exporter: long-held locks":                `max(cachewatch_exporter_locks_long_held{key_group="lock:nightly:*"}) == 1`,
		"exporter: keys without TTL":               `max(cachewatch_exporter_keys_without_ttl{key_group="config:*"}) == 20`,
		"exporter: synchronised expiry":            `max(cachewatch_exporter_expiry_synchronisation{key_group="session:*"}) > 10`,
		"exporter: truncated samples":              `sum(cachewatch_exporter_sample_truncated_total) > 0`,
		"exporter: complete scan passes":           `sum(cachewatch_exporter_scan_cycles_total) > 0`,
		"exporter: server miss bursts":             `sum(cachewatch_exporter_server_miss_bursts_total) > 0`,
		"exporter: stream pending":                 `max(cachewatch_exporter_stream_group_pending{queue="` + streamQueue + `", group="` + streamGroup + `"}) > 0`,
		"exporter: overdue delayed jobs":           `max(cachewatch_exporter_queue_oldest_age_seconds{queue="` + delayedQueue + `"}) > 30`,
		"exporter: unreachable node down":          `max(cachewatch_exporter_up{node="` + dead + `"}) == 0`,
		"exporter: connect errors":                 `sum(cachewatch_exporter_sample_errors_total{node="` + dead + `", stage="connect"}) > 0`,
	}
}
