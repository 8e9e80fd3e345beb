package instrument

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cachewatch/cachewatch/internal/burst"
)

// ErrNotFound is what a loader returns (wrapped or not) when the source has
// no value for the key. With CacheOptions.NegativeTTL set, that answer is
// cached too, and Fetch returns an error wrapping ErrNotFound until it
// expires, without calling the loader. Client.GetVersioned returns an error
// wrapping it for a key that does not exist.
var ErrNotFound = errors.New("cachewatch: not found")

// ErrHardTTLExpired is wrapped in the error Fetch returns when the only
// stored value is past its hard TTL and the loader failed: Fetch never
// serves data older than the hard TTL.
var ErrHardTTLExpired = errors.New("cachewatch: cached value past its hard TTL")

// ErrLoadFailed is wrapped in the error Fetch returns when it has nothing
// to serve and the load it would wait for failed: another caller's load of
// the key, in this process or another, or one that failed within the last
// FailureHoldoff. The caller whose own loader failed gets the loader's
// error instead.
var ErrLoadFailed = errors.New("cachewatch: another caller's load failed")

// CacheOptions configures a Cache. The zero value is usable.
type CacheOptions struct {
	// FreshTTL is how long a value is served as a hit (default 1m).
	FreshTTL time.Duration
	// HardTTL is how long a value may be served at all: between FreshTTL
	// and HardTTL it is served stale while one caller refreshes it
	// (default 10×FreshTTL; raised to FreshTTL if smaller).
	HardTTL time.Duration
	// Jitter is the largest fraction taken at random off every TTL written
	// (fresh, hard, negative), so keys written together do not expire
	// together (default 0.1; negative means none).
	Jitter float64
	// Beta enables probabilistic early refresh (XFetch, Vattani et al.,
	// VLDB 2015): a fresh value is refreshed before FreshTTL with a
	// probability that rises as expiry nears, scaled by the last load
	// time. 1 is the paper's choice; 0 (the default) disables it.
	Beta float64
	// RefreshClaimTTL bounds one load: the refresh claim expires after it, and
	// callers waiting on another process's load try to take over after it
	// (default 10s). A load is stored only while its claim holds: one that
	// outlives RefreshClaimTTL, or that an Invalidate overtook, is returned to its
	// callers but not stored (cachewatch_cache_stale_writes_refused_total).
	//
	// On a single Redis server (not a Cluster) a claim also names its
	// holder's wake channel: once that channel has no subscriber — the
	// holder's process died and Redis closed its connections — the next
	// read takes the claim over (a waiter's, within PollInterval) instead
	// of waiting for RefreshClaimTTL. A holder whose pub/sub connection is being
	// re-established meanwhile loses its claim the same way: its load is
	// then returned to its callers but not stored.
	RefreshClaimTTL time.Duration
	// FailureHoldoff is how long a failed load keeps the claim, so a failing
	// source is retried once per hold-off instead of by every caller
	// (default 1s; negative releases the claim at once). The callers with
	// nothing to serve (no value, or one past HardTTL) share the failure,
	// as the callers of one load in a process do: those waiting for the
	// load, in any process, are woken with it, and those arriving during
	// the hold-off get it at once; both get an error wrapping
	// ErrLoadFailed. Callers of a stale value keep being served it.
	FailureHoldoff time.Duration
	// NegativeTTL, when positive, caches ErrNotFound answers that long.
	NegativeTTL time.Duration
	// PollInterval is how often a waiter re-reads the value in case the
	// wake-up notification was lost or the load's holder died (default
	// 250ms).
	PollInterval time.Duration
	// Codec encodes values (default JSONCodec).
	Codec Codec

	// RedisTimeout bounds every Redis round trip (default 1s: on a busy
	// host a round trip can wait hundreds of milliseconds for the CPU, and
	// BreakerFailures timeouts in a row open the breaker). The
	// script calls of a Cache's concurrent lookups share round trips: those
	// asked for while one is in flight go together as one pipeline, bounded
	// by one RedisTimeout, when it returns or after 200µs, whichever comes
	// first (at most 4 round trips in flight).
	//
	// Slow is not down: a round trip that timed out, or a call still
	// waiting in that queue (a starved process), is sent again for as long
	// as the caller waits (its context, at most RefreshClaimTTL); its lookup is
	// never sent to the loader for it. When the caller has a deadline, a
	// round trip gets at most half of what is left of it, so that the
	// process's copy of the value (LocalCopies) can still answer in time.
	RedisTimeout time.Duration
	// BreakerFailures is the number of consecutive Redis failures (failed
	// round trips: refused or broken connections, error replies, timeouts;
	// a failed pipeline counts once; a call that waited in the queue, whose
	// caller left, or that timed out while the process was starved of CPU
	// does not count) that open the circuit breaker
	// (default 5). Only Redis failing sends a lookup to the loader
	// directly: while the breaker is open, and when a round trip fails with
	// a broken connection or an error reply. Each such fallback counts in
	// cachewatch_cache_fallbacks_total by cause (redis_down, redis_error,
	// timeout: the failure that opened the breaker).
	BreakerFailures uint32
	// BreakerHalfOpenAfter is how long the breaker stays open before it lets one
	// trial call through (default 5s).
	BreakerHalfOpenAfter time.Duration
	// FallbackConcurrency caps the loader calls in flight while Redis is
	// unavailable (default 16). Callers beyond it wait, bounded by their
	// context.
	FallbackConcurrency int
	// Name is the client label of the Cache's breaker and fallback series
	// (circuit_breaker_state, loader_in_flight); default the Client's
	// Name. Two open Caches on one registry cannot share a name: NewCache
	// returns ErrNameTaken, so give the second Cache its own.
	Name string

	// LocalCopies is how many keys' last values each process keeps in
	// memory (default 1024; negative disables), only to serve them once
	// they are stale: past FreshTTL (and before HardTTL) a caller gets the
	// process's copy at once, without waiting for Redis — even while Redis
	// is unreachable — and one background read per process revalidates it
	// (refreshing it under the claim as usual: still one refresh across all
	// processes). Fresh values are always read from Redis.
	//
	// So a stale copy is served for as long as one read of Redis takes,
	// even if another process has just refreshed the key: the
	// stale-while-revalidate contract, at process level. Invalidate (of
	// the Client or a Cache) and the Client's InvalidateMatch notify every
	// process's Caches over pub/sub (the Client's one connection, on its
	// Namespace's channels), which drop their copies of the keys removed,
	// and keep no copy from a lookup that such a notice may have overtaken
	// (one that began before it arrived); a key deleted behind cachewatch's back is served from a stale copy
	// until the revalidating read finds it gone.
	LocalCopies int

	// MissBurstWindow and MissBurstThreshold configure the miss-burst detector:
	// a key group with MissBurstThreshold misses within MissBurstWindow counts one
	// burst (defaults 1s and 50).
	MissBurstWindow    time.Duration
	MissBurstThreshold int64
}

func (o CacheOptions) withDefaults(clientName string) CacheOptions {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.FreshTTL, time.Minute)
	def(&o.HardTTL, 10*o.FreshTTL)
	o.HardTTL = max(o.HardTTL, o.FreshTTL)
	if o.Jitter == 0 {
		o.Jitter = 0.1
	}
	o.Jitter = min(max(o.Jitter, 0), 0.9)
	def(&o.RefreshClaimTTL, 10*time.Second)
	if o.FailureHoldoff == 0 {
		o.FailureHoldoff = time.Second
	}
	def(&o.PollInterval, 250*time.Millisecond)
	if o.Codec == nil {
		o.Codec = JSONCodec{}
	}
	def(&o.RedisTimeout, time.Second)
	if o.BreakerFailures == 0 {
		o.BreakerFailures = 5
	}
	def(&o.BreakerHalfOpenAfter, 5*time.Second)
	if o.FallbackConcurrency <= 0 {
		o.FallbackConcurrency = 16
	}
	if o.Name == "" {
		o.Name = clientName
	}
	if o.LocalCopies == 0 {
		o.LocalCopies = 1024
	}
	return o
}

// Cache is a stale-while-revalidate cache of values of type T in Redis,
// safe for concurrent use. Create one per kind of value and keep it for
// the life of the process: it holds the in-process coalescing and the
// circuit breaker.
//
// Each key is stored as a hash with its fresh and hard deadlines, next to a
// refresh claim in the same Redis Cluster hash slot: a key with a hash tag
// ("user:{42}") is used as is; in any other key what follows the first
// colon becomes the tag ("user:42" is stored as "user:{42}", its claim as
// "user:{42}:claim"; a key without a colon is wrapped whole). While a load
// is in flight, the processes waiting for it are queued, in the order they
// arrived, in a sorted set beside them ("user:{42}:waitq"), which expires
// with the claim; the write that ends the load wakes them in that order.
type Cache[T any] struct {
	c       *Client
	o       CacheOptions
	flights flights[T]
	batch   batcher // gathers concurrent flights' script calls into pipelines
	deg     *degraded
	bursts  *burst.Detector
	fails   failureRuns
	local   *localCopies[T] // nil unless LocalCopies > 0
	// unlisten ends the copies' invalidation notices (nil without copies).
	unlisten func()
	closeHub sync.Once
	// releaseName frees the Cache's name on its registry (Close).
	releaseName func()
	// groupM caches per-group metric handles (group → *groupMetrics),
	// bounded like the groups. Every caller reads it, so reads take no
	// lock (an RWMutex's reader count is one cache line written by every
	// core); groupsMu serialises adding to it.
	groupsMu sync.Mutex
	groupM   sync.Map
	bg       *background // every goroutine the Cache starts, ended by Close
}

// NewCache returns a Cache over c's Redis client. It returns an error
// wrapping ErrNameTaken when another open Cache on c's registry has the
// same name (CacheOptions.Name, default the Client's Name).
func NewCache[T any](c *Client, opts CacheOptions) (*Cache[T], error) {
	o := opts.withDefaults(c.name)
	releaseName, err := claimCacheName(c.reg, o.Name)
	if err != nil {
		return nil, fmt.Errorf("cachewatch: NewCache: %w", err)
	}
	ca := &Cache[T]{c: c, o: o, deg: newDegraded(c.rdb, o.Name, o, c.m), bg: newBackground(), releaseName: releaseName}
	c.hub.open()
	ca.bursts = burst.New(burst.Options{Window: o.MissBurstWindow, Threshold: o.MissBurstThreshold, Now: c.clock.Now,
		OnBurst: func(group string) { c.m.missBursts.WithLabelValues(group).Inc() }})
	ca.fails.runs = map[string]map[string]failureRun{}
	if o.LocalCopies > 0 {
		ca.local = &localCopies[T]{max: o.LocalCopies}
		ca.unlisten = c.hub.listen(ca.dropNoticed)
	}
	return ca, nil
}

// Close stops the Cache's background work and returns once every
// goroutine it started has ended: it waits for the lookups and refreshes
// in flight (each bounded by RefreshClaimTTL, as long as the loader honours its
// context: one that ignores it delays Close until it returns) and the
// writes of loaded values, ends the waits of orphan-claim
// releases after one last attempt, and closes the wake-up subscription and
// the Cache's share of the Client's invalidation subscription. It is safe
// at any time, concurrently with Fetch, and more than once.
//
// Fetch still works after Close, without background work: each lookup
// runs on its caller's goroutine, bounded by its context, a stale value is
// served without a refresh (the claim is given back at once for another process to take),
// waiters poll, and the process's copies no longer hear of other
// processes' invalidations.
//
// Close on a nil *Cache (what NewCache returns with an error) does nothing
// and returns nil.
func (ca *Cache[T]) Close() error {
	if ca == nil {
		return nil
	}
	ca.bg.close()
	var err error
	ca.closeHub.Do(func() {
		if ca.unlisten != nil {
			ca.unlisten()
		}
		err = ca.c.hub.close()
		ca.releaseName()
	})
	return err
}

// Invalidate removes keys (named as passed to Fetch) from the cache —
// their stored values and refresh claims, by UNLINK — and drops this
// process's copies of them (LocalCopies) at once and the other processes'
// when the pub/sub notice reaches them, so that the next Fetch of each
// loads it again. Removing the claim also voids every load of those keys
// in flight, in any process: such a load may have read the source before
// the change that prompted the invalidation, so its result is returned to
// its callers but not stored (cachewatch_cache_stale_writes_refused_total).
// It returns how many keys were stored. Client.Invalidate with the same
// names does the same, except that this process's copies are dropped only
// when the notice comes back.
func (ca *Cache[T]) Invalidate(ctx context.Context, keys ...string) (int64, error) {
	n, err := ca.c.Invalidate(ctx, keys...)
	for _, k := range keys {
		ca.local.drop(k)
	}
	return n, err
}
