package instrument

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cachewatch/cachewatch/internal/emit"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cachewatch/cachewatch/internal/burst"
	"github.com/cachewatch/cachewatch/internal/luascript"
)

// ErrNotFound is what a loader returns (wrapped or not) when the source has
// no value for the key. With CacheOptions.NegativeTTL set, that answer is
// cached too, and Fetch returns an error wrapping ErrNotFound until it
// expires, without calling the loader.
var ErrNotFound = errors.New("cachewatch: not found")

// ErrHardTTLExpired is wrapped in the error Fetch returns when the only
// stored value is past its hard TTL and the loader failed: Fetch never
// serves data older than the hard TTL.
var ErrHardTTLExpired = errors.New("cachewatch: cached value past its hard TTL")

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
	// LeaseTTL bounds one load: the refresh lease expires after it, and
	// callers waiting on another process's load try to take over after it
	// (default 10s). A load is stored only while its lease holds: one that
	// outlives LeaseTTL, or that an Invalidate overtook, is returned to its
	// callers but not stored (cachewatch_cache_stale_writes_refused_total).
	LeaseTTL time.Duration
	// FailureHoldoff is how long a failed load keeps the lease, so a failing
	// source is retried once per hold-off instead of by every caller
	// (default 1s; negative releases the lease at once).
	FailureHoldoff time.Duration
	// NegativeTTL, when positive, caches ErrNotFound answers that long.
	NegativeTTL time.Duration
	// PollInterval is how often a waiter re-reads the value in case the
	// wake-up notification was lost (default 250ms).
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
	// as the caller waits (its context, at most LeaseTTL); its lookup is
	// never sent to the loader for it. When the caller has a deadline, a
	// round trip gets at most half of what is left of it, so that the
	// process's copy of the value (LocalCopies) can still answer in time.
	RedisTimeout time.Duration
	// BreakerFailures is the number of consecutive Redis failures (failed
	// round trips: refused or broken connections, error replies, timeouts;
	// a failed pipeline counts once; a call that waited in the queue or
	// whose caller left does not count) that open the circuit breaker
	// (default 5). Only Redis failing sends a lookup to the loader
	// directly: while the breaker is open, and when a round trip fails with
	// a broken connection or an error reply. Each such fallback counts in
	// cachewatch_cache_fallbacks_total by cause (redis_down, redis_error,
	// timeout: the failure that opened the breaker).
	BreakerFailures uint32
	// BreakerOpenFor is how long the breaker stays open before it lets one
	// trial call through (default 5s).
	BreakerOpenFor time.Duration
	// FallbackConcurrency caps the loader calls in flight while Redis is
	// unavailable (default 16). Callers beyond it wait, bounded by their
	// context.
	FallbackConcurrency int
	// Name is the client label of the Cache's breaker and fallback series
	// (circuit_breaker_state, source_in_flight); default the Client's
	// Name. Two open Caches on one registry cannot share a name: NewCache
	// returns ErrNameInUse, so give the second Cache its own.
	Name string

	// LocalCopies is how many keys' last values each process keeps in
	// memory (default 1024; negative disables), only to serve them once
	// they are stale: past FreshTTL (and before HardTTL) a caller gets the
	// process's copy at once, without waiting for Redis — even while Redis
	// is unreachable — and one background read per process revalidates it
	// (refreshing it under the lease as usual: still one refresh across all
	// processes). Fresh values are always read from Redis.
	//
	// So a stale copy is served for as long as one read of Redis takes,
	// even if another process has just refreshed the key: the
	// stale-while-revalidate contract, at process level. Invalidate (of
	// the Client or a Cache) and the Client's InvalidateMatch notify every
	// process's Caches over pub/sub (the Client's one connection, on its
	// Namespace's channels), which drop their copies of the keys removed;
	// a key deleted behind cachewatch's back is served from a stale copy
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
	def(&o.LeaseTTL, 10*time.Second)
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
	def(&o.BreakerOpenFor, 5*time.Second)
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
// refresh lease in the same Redis Cluster hash slot: a key with a hash tag
// ("user:{42}") is used as is; in any other key what follows the first
// colon becomes the tag ("user:42" is stored as "user:{42}", its lease as
// "user:{42}:lease"; a key without a colon is wrapped whole). While a load
// is in flight, the processes waiting for it are queued, in the order they
// arrived, in a sorted set beside them ("user:{42}:waitq"), which expires
// with the lease; the write that ends the load wakes them in that order.
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
// wrapping ErrNameInUse when another open Cache on c's registry has the
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
// in flight (each bounded by LeaseTTL, as long as the loader honours its
// context: one that ignores it delays Close until it returns) and the
// writes of loaded values, ends the waits of orphan-lease
// releases after one last attempt, and closes the wake-up subscription and
// the Cache's share of the Client's invalidation subscription. It is safe
// at any time, concurrently with Fetch, and more than once.
//
// Fetch still works after Close, without background work: each lookup
// runs on its caller's goroutine, bounded by its context, a stale value is
// served without a refresh (the lease is given back at once for another process to take),
// waiters poll, and the process's copies no longer hear of other
// processes' invalidations.
func (ca *Cache[T]) Close() error {
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
// their stored values and refresh leases, by UNLINK — and drops this
// process's copies of them (LocalCopies) at once and the other processes'
// when the pub/sub notice reaches them, so that the next Fetch of each
// loads it again. Removing the lease also voids every load of those keys
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

// Lookup results, as in the cachewatch_cache_lookups_total result label.
const (
	resultHit       = "hit"
	resultStale     = "stale"
	resultMiss      = "miss"
	resultCoalesced = "coalesced"
	resultFallback  = "fallback"
	resultError     = "error"
)

// results are the values of the lookups' result label, in lookupCounters'
// order.
var results = [...]string{resultHit, resultStale, resultMiss, resultCoalesced, resultFallback, resultError}

// lookupCounters are one key group's lookup counters, by result. An array
// searched, not a map: record runs at the bottom of every caller's stack,
// and a map lookup there made each fresh caller of a stampede grow its
// stack (docs/benchmarks.md, "Callers keep their first stack").
type lookupCounters [len(results)]*emit.Counter

// of returns result's counter; result must be one of results.
func (l *lookupCounters) of(result string) *emit.Counter {
	for i := range results { // by index: a range over the array's values would copy it into the frame
		if results[i] == result {
			return l[i]
		}
	}
	panic("instrument: unknown lookup result")
}

// outcome is what one flight (one lookup shared by concurrent callers in
// this process) found.
type outcome[T any] struct {
	val      T
	result   string
	staleAge time.Duration // how far past its fresh TTL a stale value was
	group    string        // the key's group, classified once per flight
	gm       *groupMetrics // and its metrics, resolved once per flight
	// freshUntil and hardUntil (unix ms) are the served value's deadlines,
	// when it was cached (0 for a loaded or fallback value): each caller
	// judges them again at its own clock.
	freshUntil, hardUntil int64
	// pastHard: the read found only a value past its hard TTL, refused to
	// serve it; each caller answered counts it, as each counts a lookup.
	pastHard bool
}

// Fetch returns the value of key: from Redis when fresh; stale (while one
// caller in all processes refreshes it in the background) when past its
// fresh TTL but within its hard TTL; otherwise from load, called once
// across all processes while the other callers wait to be woken by the
// write. The callers of a load are answered when it returns; its write
// lands in the background (before Close returns), and whatever this
// process next asks of the key through the same Client (a Fetch, Get, Set
// or invalidation) waits for it. When Redis is unavailable, load is called
// directly, with bounded concurrency behind a circuit breaker. Fetch never
// blocks past ctx.
//
// Concurrent Fetches of one key in a process share one lookup: the callers
// that arrive while a read of the key is in flight wait for its answer
// instead of making their own round trip (each still bounded by its own
// ctx), and anyone arriving after it lands reads again, so no caller is
// served an answer older than a read that was in flight when it arrived.
// A refresh lease granted to a shared read serves one refresh or load,
// never one per caller. Each caller counts one lookup: a shared read of a
// fresh or stale value counts as hit or stale — judged again at the
// caller's own clock, so a value that went stale meanwhile counts (and
// its age is observed) as stale, and one past its hard TTL is not served:
// the caller reads again — and a caller who waited for another caller's
// load, in this process or another, counts as coalesced.
//
// load receives a context bounded by LeaseTTL and detached from ctx's
// cancellation (its result serves every waiting caller). Its error is
// returned wrapped; an error wrapping ErrNotFound is cached when
// NegativeTTL is set.
func (ca *Cache[T]) Fetch(ctx context.Context, key string, load func(context.Context) (T, error)) (T, error) {
	// Keep this frame and the waiters' path small: in a stampede, hundreds
	// of fresh goroutines per process wait here, and stack growth or copies
	// of the outcome per caller are what they would wait for.
	ctx, span := ca.c.spans.start(ctx, "cachewatch.Fetch", fetchSpanOpts...)
	defer span.End()
	if ca.local != nil {
		if v, err, ok := ca.staleFromMemory(ctx, span, key, load); ok {
			return v, err
		}
	}
	for {
		f, leader, w := ca.flights.join(ctx, key)
		if leader {
			ca.fly(ctx, span, f, key, load)
		} else if testHookJoined != nil {
			testHookJoined(key)
		}
		if !f.wait(w) {
			return ca.gone(ctx, span, key)
		}
		if v, err, ok := ca.answer(ctx, span, key, f, leader); ok {
			return v, err
		}
		span.AddEvent("shared read is past the hard TTL now, reading again")
	}
}

// gone counts and reports a caller whose context ended while it waited.
func (ca *Cache[T]) gone(ctx context.Context, span trace.Span, key string) (T, error) {
	var zero T
	group := ca.c.group(key)
	ca.record(ctx, span, ca.metricsFor(group), group, key, resultError)
	return zero, fmt.Errorf("cachewatch: fetch %q: %w", key, ctx.Err())
}

// fly runs a flight for the caller that started it, under its span. The
// flight serves every caller that joins it, so the leader's cancellation
// must not end it; the leader's deadline only caps the time given to
// Redis, to leave the fallback time to run.
func (ca *Cache[T]) fly(ctx context.Context, span trace.Span, f *flight[T], key string, load func(context.Context) (T, error)) {
	dl, _ := ctx.Deadline()
	// The flight's events go to the leader's span, even when no span was
	// started (nothing records) and ctx carries the caller's own.
	fctx := trace.ContextWithSpan(withCallerDeadline(context.WithoutCancel(ctx), dl), span)
	if !ca.bg.start(func() { ca.flyIn(fctx, f, key, load) }) {
		// Closed: no goroutine outlives Close, so the leader runs the
		// flight itself, bounded by its own context as well.
		ca.flyIn(trace.ContextWithSpan(ctx, span), f, key, load)
	}
}

// flyIn runs flight f under fctx and lands it. The flight's waits and
// loads are bounded by LeaseTTL (leaseBound), its Redis calls by
// RedisTimeout; a flight that finds the value does neither, and its read's
// bound is cheaper on a context that cannot be cancelled.
func (ca *Cache[T]) flyIn(fctx context.Context, f *flight[T], key string, load func(context.Context) (T, error)) {
	// The key group is classified once per flight, not per caller: in a
	// stampede most callers only join a flight.
	group := ca.c.group(key)
	var write func(context.Context)
	o, err := ca.lookup(fctx, key, group, load, &write)
	o.group, o.gm = group, ca.metricsFor(group)
	ca.flights.land(key, f, o, err)
	if write != nil {
		write(fctx) // its callers have the value: now store it and wake the other processes
	}
}

// judge decides again, at this caller's clock, how a cached value served
// by a shared read counts: a hit that has gone stale since the read counts
// as stale, with its age now. ok is false when the value is past its hard
// TTL now: the caller must not be served it.
func (ca *Cache[T]) judge(o *outcome[T]) (result string, staleAge time.Duration, ok bool) {
	result, staleAge = o.result, o.staleAge
	if o.hardUntil == 0 {
		return result, staleAge, true
	}
	now := ca.c.now().UnixMilli()
	if now >= o.hardUntil {
		return result, staleAge, false
	}
	if result == resultHit && now >= o.freshUntil {
		result = resultStale
	}
	if result == resultStale {
		staleAge = time.Duration(now-o.freshUntil) * time.Millisecond
	}
	return result, staleAge, true
}

// answer counts one caller's lookup and returns what its landed flight f
// found (f's outcome is shared: read, never written). ok is false when the
// shared read's value is past its hard TTL by this caller's clock.
func (ca *Cache[T]) answer(ctx context.Context, span trace.Span, key string, f *flight[T], leader bool) (v T, err error, ok bool) {
	result, age, ok := ca.judge(&f.o)
	if !ok {
		return v, nil, false
	}
	if !leader {
		span.AddEvent("coalesced")
		if result == resultMiss {
			result = resultCoalesced
		}
	}
	if f.err != nil && !errors.Is(f.err, ErrNotFound) {
		result = resultError
	}
	ca.record(ctx, span, f.o.gm, f.o.group, key, result)
	if f.o.pastHard {
		f.o.gm.hardTTLExpired.Inc()
	}
	if result == resultStale {
		f.o.gm.staleAge.Observe(age.Seconds())
	}
	if f.err != nil {
		span.RecordError(f.err)
		span.SetStatus(codes.Error, "fetch failed")
		return v, f.err, true
	}
	return f.o.val, nil, true
}

// record counts one caller's lookup in its group's metrics gm and logs
// the decision.
func (ca *Cache[T]) record(ctx context.Context, span trace.Span, gm *groupMetrics, group, key, result string) {
	gm.lookups.of(result).Inc()
	if span.IsRecording() {
		tagSpan(span, group, result)
	}
	if result == resultMiss || result == resultCoalesced {
		gm.misses.Miss()
	}
	if ca.c.log.Enabled(ctx, slog.LevelDebug) {
		ca.logDecision(ctx, group, key, result)
	}
}

// tagSpan sets a Fetch span's key group and result.
func tagSpan(span trace.Span, group, result string) {
	span.SetAttributes(attribute.String("cachewatch.key_group", group), attribute.String("cachewatch.result", result))
}

// logDecision writes the debug line of one caller's lookup (its own
// function, so that callers who do not log keep a small stack frame).
func (ca *Cache[T]) logDecision(ctx context.Context, group, key, result string) {
	outcome := result
	if result == resultMiss {
		outcome = "recompute"
	}
	ca.c.log.LogAttrs(ctx, slog.LevelDebug, "cachewatch fetch",
		slog.String("key_group", group), slog.String("key", key), slog.String("outcome", outcome))
}

// fetchSpanOpts are the Fetch span's options, built once: passed as a
// fresh variadic list they would be allocated by every caller.
var fetchSpanOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// groupMetrics are the per-caller metrics of one key group, resolved once:
// every caller of a stampede records one lookup, so the label lookup is
// kept off that path.
type groupMetrics struct {
	lookups        lookupCounters
	staleAge       *emit.Histogram
	hardTTLExpired *emit.Counter
	misses         *burst.Group // its misses, counted for the burst detector
}

func (ca *Cache[T]) metricsFor(group string) *groupMetrics {
	if gm, ok := ca.groupM.Load(group); ok {
		return gm.(*groupMetrics)
	}
	return ca.newGroupMetrics(group)
}

// newGroupMetrics resolves and keeps group's metric handles.
func (ca *Cache[T]) newGroupMetrics(group string) *groupMetrics {
	ca.groupsMu.Lock()
	defer ca.groupsMu.Unlock()
	if gm, ok := ca.groupM.Load(group); ok {
		return gm.(*groupMetrics)
	}
	gm := &groupMetrics{staleAge: ca.c.m.staleAge.WithLabelValues(group), misses: ca.bursts.Group(group),
		hardTTLExpired: ca.c.m.hardTTLExpired.WithLabelValues(group)}
	for i, r := range results {
		gm.lookups[i] = ca.c.m.lookups.WithLabelValues(group, r)
	}
	ca.groupM.Store(group, gm)
	return gm
}

// keys are the Redis names of one cached key, and the wake channel its
// reads register when this process waits for another's load ("" for none).
type keys struct {
	value, lease, waiters string
	wake                  string
}

// keysFor names key's value, lease and queue of waiters in Redis, in one
// allocation (a flight names its keys once, and in a stampede every process
// starts its flights at once): the value's name is the start of the
// lease's.
func keysFor(key string) keys {
	prefix, open, id, end := hashTag(key)
	n := len(prefix) + len(open) + len(id) + len(end)
	all := prefix + open + id + end + leaseSuffix + prefix + open + id + end + waitersSuffix
	lease := all[:n+len(leaseSuffix)]
	return keys{value: lease[:n], lease: lease, waiters: all[len(lease):]}
}

// hashTag splits key around the hash tag its Redis names carry: a key
// with a tag of its own keeps it (prefix is the whole key); otherwise the
// tag holds what follows the first colon (the whole key if there is none),
// so value and lease share a slot, keys spread over slots by their IDs,
// and the prefix stays visible to key-group classification in hooks and
// the exporter ("product:{42}" is "product:*", where "{product:42}" would
// be "*").
func hashTag(key string) (prefix, open, id, end string) {
	if hashTagged(key) {
		return key, "", "", ""
	}
	if i := strings.IndexByte(key, ':'); i >= 0 && i < len(key)-1 {
		return key[:i+1], "{", key[i+1:], "}"
	}
	return "", "{", key, "}"
}

// leaseSuffix follows a cached value's name in its refresh lease's name,
// waitersSuffix in the name of the queue of processes waiting for the lease
// holder's value (a sorted set that lives no longer than a lease). Earlier
// releases kept an unordered set under ":waiters": a new name, so that old
// and new processes of a fleet being upgraded never meet a key of the other
// type (a WRONGTYPE error); they poll for each other's loads meanwhile.
const (
	leaseSuffix   = ":lease"
	waitersSuffix = ":waitq"
)

// hashTagged reports whether Redis Cluster would hash only part of key.
func hashTagged(key string) bool {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return false
	}
	end := strings.IndexByte(key[open+1:], '}')
	return end > 0
}

// stored is a decoded reply of the read script.
type stored struct {
	state      int64 // 0 missing, 1 fresh, 2 stale, 3 past hard TTL
	granted    bool  // the caller holds the refresh lease
	raw        string
	freshUntil int64 // unix ms
	hardUntil  int64 // unix ms
	negative   bool
}

const (
	stateMissing = 0
	stateFresh   = 1
	stateStale   = 2
	stateExpired = 3
)

// lookup is one flight: read, then serve, refresh, load or wait. A load's
// write is left in *after, for the flight to run once it has landed.
func (ca *Cache[T]) lookup(ctx context.Context, key, group string, load func(context.Context) (T, error), after *func(context.Context)) (outcome[T], error) {
	k := keysFor(key)
	span := trace.SpanFromContext(ctx)
	ca.fails.expire(ca.c.m.refreshConsecutive, ca.c.now().UnixMilli())
	if ca.deg.open() {
		return ca.unavailable(ctx, key, group, load, errBreakerOpen)
	}
	ca.c.writes.wait(ctx, k.value) // this process's own write of key comes first
	sub, woken, wake := ca.watch(k.value)
	defer sub.close()
	k.wake = wake
	s, token, err := ca.read(ctx, key, k)
	if err != nil {
		return ca.unavailable(ctx, key, group, load, err)
	}
	switch s.state {
	case stateFresh, stateStale:
		result := resultHit
		if s.state == stateStale {
			result = resultStale
			span.AddEvent("cache stale")
		} else {
			span.AddEvent("cache hit")
		}
		// The lease is granted to the flight, so one refresh serves all of
		// its callers (stale, or XFetch's early refresh of a fresh value).
		if s.granted {
			ca.refreshInBackground(ctx, key, group, k, token, load)
		}
		o := outcome[T]{freshUntil: s.freshUntil, hardUntil: s.hardUntil}
		var err error
		o.val, o.result, err = ca.decode(key, s, result)
		if o.result == resultStale {
			o.staleAge = time.Duration(ca.c.now().UnixMilli()-s.freshUntil) * time.Millisecond
		}
		ca.keepCopy(key, k.value, group, o.val, err, s)
		return o, err
	case stateExpired:
		span.AddEvent("cache expired past hard TTL")
	default:
		span.AddEvent("cache miss")
	}
	ca.local.drop(key)
	o := outcome[T]{pastHard: s.state == stateExpired}
	if s.granted {
		o.val, o.result, err = ca.loadAndStore(ctx, key, group, k, token, load, s.state == stateExpired, after)
		return o, err
	}
	o.val, o.result, err = ca.waitForValue(ctx, key, group, k, load, sub, woken, after)
	return o, err
}

// unavailable answers a flight whose read failed: from the process's copy
// if there is one within its hard TTL (LocalCopies), else from the source
// if Redis is failing; a read that only waited too long ends in an error.
func (ca *Cache[T]) unavailable(ctx context.Context, key, group string, load func(context.Context) (T, error), err error) (outcome[T], error) {
	now := ca.c.now().UnixMilli()
	if c, ok := ca.local.usable(key, now); ok {
		trace.SpanFromContext(ctx).AddEvent("cache copy served, Redis unavailable")
		o := outcome[T]{val: c.val, result: resultHit, freshUntil: c.freshUntil, hardUntil: c.hardUntil}
		if now >= c.freshUntil {
			o.result, o.staleAge = resultStale, time.Duration(now-c.freshUntil)*time.Millisecond
		}
		if c.negative {
			return o, fmt.Errorf("cachewatch: fetch %q: %w (cached)", key, ErrNotFound)
		}
		return o, nil
	}
	var o outcome[T]
	cause, failing := ca.deg.failing(err)
	if !failing {
		o.result = resultError
		return o, fmt.Errorf("cachewatch: fetch %q: waiting for Redis: %w", key, err)
	}
	o.val, o.result, err = ca.fallback(ctx, key, group, load, err, cause)
	return o, err
}

// read runs the read script: one round trip for the value, its state and,
// when due, the refresh lease, offered under the returned token.
//
// Slow is not down: a read that Redis did not answer within RedisTimeout,
// or that waited in this Cache's queue, is sent again (under a new token:
// the first may yet grant its own lease, released as an orphan) for as
// long as the breaker lets it, the caller waits and LeaseTTL allows. On a
// starved process or a slow Redis, a flight sent to the source instead
// would load once per process, not once for the fleet — with batched reads,
// every flight of the batch would. Only Redis failing ends the wait early
// (the breaker opens after BreakerFailures timed-out round trips in a row).
func (ca *Cache[T]) read(ctx context.Context, key string, k keys) (stored, string, error) {
	var until time.Time
	for {
		token := leaseToken()
		s, err := ca.readOnce(ctx, k, token)
		if err == nil || !ca.waitOn(ctx, key, err, &until) {
			return s, token, err
		}
		trace.SpanFromContext(ctx).AddEvent("read not answered in time, reading again")
	}
}

// waitOn reports whether a failed read of key is sent again: Redis is
// slow, not failing (degraded.failing), the caller is there, and LeaseTTL
// has not passed since the first read failed (*until, set then, on the real
// clock like every bound of a Redis call). When the caller's share of its
// deadline ran out (degraded.timeoutFor) and the process has a copy of the
// value, the copy answers it instead. A background revalidation does not
// wait: its process serves the copy meanwhile, and the next stale hit
// revalidates again.
func (ca *Cache[T]) waitOn(ctx context.Context, key string, err error, until *time.Time) bool {
	if _, failing := ca.deg.failing(err); failing || ctx.Err() != nil || revalidating(ctx) {
		return false
	}
	if errors.Is(err, errCallerGone) {
		if _, there := callerLeft(ctx); !there {
			return false
		}
		if _, ok := ca.local.usable(key, ca.c.now().UnixMilli()); ok {
			return false
		}
	}
	if until.IsZero() {
		*until = time.Now().Add(ca.o.LeaseTTL)
	}
	return time.Now().Before(*until)
}

// runPatiently runs the script call newCall makes, again (a new call)
// while Redis is slow rather than failing, as read does. sentBefore
// reports that an earlier attempt timed out after it was sent: Redis may
// have run it.
func (ca *Cache[T]) runPatiently(ctx context.Context, newCall func() *scriptCall) (res any, sentBefore bool, err error) {
	var until time.Time
	for {
		res, err = ca.run(ctx, newCall())
		if err == nil || !ca.waitOn(ctx, "", err, &until) {
			return res, sentBefore, err
		}
		sentBefore = sentBefore || !errors.Is(err, errNotSent)
	}
}

// readOnce runs the read script once, under token.
func (ca *Cache[T]) readOnce(ctx context.Context, k keys, token string) (stored, error) {
	xf := 0.0
	if ca.o.Beta > 0 {
		xf = ca.o.Beta * -math.Log(1-rand.Float64()) // 1-U is in (0, 1]
	}
	v, err := ca.run(ctx, newScriptCall("fetch read", luascript.FetchRead, []string{k.value, k.lease, k.waiters},
		ca.c.now().UnixMilli(), xf, ca.o.LeaseTTL.Milliseconds(), token, k.wake))
	if err != nil {
		if !errors.Is(err, gobreaker.ErrOpenState) && !errors.Is(err, gobreaker.ErrTooManyRequests) && !errors.Is(err, errNotSent) {
			ca.releaseOrphan(k, token)
		}
		return stored{}, err
	}
	res, _ := v.([]any)
	return parseStored(res)
}

// releaseOrphan releases the lease that an abandoned read (Redis stalled or
// the call timed out) may yet grant when Redis runs it: otherwise nobody
// could refresh the key until LeaseTTL passed. Redis may run the read only
// once it recovers, so the release is sent, off every caller's path, after
// RedisTimeout, 1s and 4s — three answered attempts, stopping at the one
// that releases the lease. An attempt Redis did not answer (each is given
// at least a second) does not count: a slow Redis or a starved process is
// given time, as a lookup's reads are, until LeaseTTL has passed (the lease
// has then run out anyway).
//
// Close cuts the waits short: one last attempt, bounded by RedisTimeout,
// then the goroutine ends (a lease it could not release expires after
// LeaseTTL).
func (ca *Cache[T]) releaseOrphan(k keys, token string) {
	ca.bg.start(func() {
		until := time.Now().Add(ca.o.LeaseTTL)
		waits := []time.Duration{ca.o.RedisTimeout, time.Second, 4 * time.Second}
		for len(waits) > 0 && time.Now().Before(until) {
			timer := ca.c.clock.NewTimer(waits[0])
			select {
			case <-timer.Chan():
			case <-ca.bg.stop:
				timer.Stop()
				ca.giveBack(k, token)
				return
			}
			ctx, cancel := ca.bg.bound(max(ca.o.RedisTimeout, time.Second))
			released, err := ca.release(ctx, k, token)
			cancel()
			if released {
				return
			}
			if err == nil {
				waits = waits[1:]
			}
		}
	})
}

func parseStored(res []any) (stored, error) {
	var s stored
	if len(res) < 2 {
		return s, fmt.Errorf("cachewatch: fetch read: malformed reply %v", res)
	}
	s.state, _ = res[0].(int64)
	granted, _ := res[1].(int64)
	s.granted = granted == 1
	if s.state != stateFresh && s.state != stateStale {
		return s, nil
	}
	if len(res) < 5 {
		return s, fmt.Errorf("cachewatch: fetch read: malformed reply %v", res)
	}
	s.raw, _ = res[2].(string)
	f, _ := res[3].(string)
	s.freshUntil, _ = strconv.ParseInt(f, 10, 64)
	n, _ := res[4].(string)
	s.negative = n == "1"
	if len(res) > 6 {
		h, _ := res[6].(string)
		s.hardUntil, _ = strconv.ParseInt(h, 10, 64)
	}
	return s, nil
}

// decode turns a stored value into the caller's answer.
func (ca *Cache[T]) decode(key string, s stored, result string) (T, string, error) {
	var v T
	if s.negative {
		return v, result, fmt.Errorf("cachewatch: fetch %q: %w (cached)", key, ErrNotFound)
	}
	if err := ca.o.Codec.Unmarshal([]byte(s.raw), &v); err != nil {
		return v, resultError, fmt.Errorf("cachewatch: fetch %q: decode cached value: %w", key, err)
	}
	return v, result, nil
}

// loadAndStore calls the loader while holding the lease and leaves in
// *after the write of its result, which wakes every waiter: the flight
// answers its callers first (pendingWrites). The loader's answer is
// returned even if the write fails: the caller has it, only the others
// lose.
func (ca *Cache[T]) loadAndStore(ctx context.Context, key, group string, k keys, token string,
	load func(context.Context) (T, error), pastHard bool, after *func(context.Context)) (T, string, error) {
	ctx, cancel := ca.leaseBound(ctx)
	defer cancel()
	span := trace.SpanFromContext(ctx)
	span.AddEvent("lease acquired")
	start := ca.c.now()
	v, err := ca.callSource(ctx, group, load)
	if err != nil && !ca.cacheable(err) {
		ca.failed(ctx, key, group, k, token)
		if pastHard {
			err = fmt.Errorf("%w: %w", ErrHardTTLExpired, err)
		}
		return v, resultMiss, fmt.Errorf("cachewatch: fetch %q: load: %w", key, err)
	}
	*after = ca.writeBehind(key, group, k, token, ca.loadedSince(start, v, err))
	if err != nil {
		return v, resultMiss, fmt.Errorf("cachewatch: fetch %q: %w", key, err)
	}
	return v, resultMiss, nil
}

// writeBehind returns the write of a loaded value (see store), pending
// (pendingWrites) from now until it lands. The flight runs it on its own
// goroutine, under the flight's context, once its callers are answered,
// rather than handing it to another goroutine: in a crowd that one would be
// scheduled behind the callers just woken, and the other processes wait
// for this write. It has a span of its own, a child of the flight's.
func (ca *Cache[T]) writeBehind(key, group string, k keys, token string, l loaded[T]) func(context.Context) {
	ca.c.writes.add(k.value)
	return func(ctx context.Context) {
		defer ca.c.writes.finish(k.value)
		span := noSpan
		if ca.c.spans.recording() { // the options allocate, recorded or not
			ctx, span = ca.c.spans.start(ctx, "cachewatch.Write",
				trace.WithAttributes(attribute.String("cachewatch.key_group", group)))
		}
		defer span.End()
		ca.store(ctx, key, group, k, token, l)
	}
}

// leaseBound bounds a flight's load or wait by LeaseTTL: the loader's
// context is documented as bounded by it, and a wait for another process's
// load need not outlast that load's lease.
func (ca *Cache[T]) leaseBound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, ca.o.LeaseTTL)
}

// cacheable reports whether a loader error is a cacheable "not found".
func (ca *Cache[T]) cacheable(err error) bool {
	return ca.o.NegativeTTL > 0 && errors.Is(err, ErrNotFound)
}

// refreshInBackground reloads a stale (or early-expiring) value under the
// lease the read granted. Its context outlives the caller's.
func (ca *Cache[T]) refreshInBackground(ctx context.Context, key, group string, k keys, token string, load func(context.Context) (T, error)) {
	link := trace.LinkFromContext(ctx)
	started := ca.bg.start(func() {
		rctx, cancel := context.WithTimeout(withCallerDeadline(context.WithoutCancel(ctx), time.Time{}), ca.o.LeaseTTL)
		defer cancel()
		rctx, span := ca.c.spans.start(rctx, "cachewatch.Refresh", trace.WithLinks(link),
			trace.WithAttributes(attribute.String("cachewatch.key_group", group)))
		defer span.End()
		span.AddEvent("lease acquired")
		start := ca.c.now()
		v, err := ca.callSource(rctx, group, load)
		if err != nil && !ca.cacheable(err) {
			ca.c.m.refreshFailures.WithLabelValues(group).Inc()
			span.RecordError(err)
			ca.failed(rctx, key, group, k, token)
			return
		}
		ca.store(rctx, key, group, k, token, ca.loadedSince(start, v, err))
	})
	if !started { // closed: give the lease back for another process to refresh
		ca.giveBack(k, token)
	}
}

// giveBack releases a refresh lease this Cache will not use, bounded by the
// Redis timeout (if that fails, the lease expires after LeaseTTL).
func (ca *Cache[T]) giveBack(k keys, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), ca.o.RedisTimeout)
	defer cancel()
	_, _ = ca.release(ctx, k, token)
}

// release releases the lease token holds, if it still does, bounded by
// ctx, and reports whether it did.
func (ca *Cache[T]) release(ctx context.Context, k keys, token string) (bool, error) {
	n, err := luascript.FetchRelease.Run(ca.c.ctx(ctx), ca.c.rdb, []string{k.lease}, token).Int64()
	return n == 1, err
}

// callSource calls the loader, timing and counting it.
func (ca *Cache[T]) callSource(ctx context.Context, group string, load func(context.Context) (T, error)) (T, error) {
	start := time.Now()
	v, err := load(ctx)
	ca.countSourceCall([]string{group}, sourceResult(err), time.Since(start))
	return v, err
}

// countSourceCall counts one loader call that took took, with result, in
// each of groups: its recompute duration and its source call.
func (ca *Cache[T]) countSourceCall(groups []string, result string, took time.Duration) {
	for _, group := range groups {
		ca.c.m.recompute.WithLabelValues(group, result).Observe(took.Seconds())
		ca.c.m.sourceCalls.WithLabelValues(group, result).Inc()
	}
}

// sourceResult is a loader call's result label: a "not found" answer is a
// success (the source answered).
func sourceResult(err error) string {
	if err != nil && !errors.Is(err, ErrNotFound) {
		return "error"
	}
	return "success"
}

// loaded is a loader's result on its way to Redis.
type loaded[T any] struct {
	v    T
	err  error         // nil, or a "not found" to cache (NegativeTTL)
	took time.Duration // the loader's time, kept for XFetch
	at   time.Time     // when the loader returned: the TTLs count from then
}

// loadedSince returns the result of a loader call that started at start.
func (ca *Cache[T]) loadedSince(start time.Time, v T, err error) loaded[T] {
	end := ca.c.now()
	return loaded[T]{v: v, err: err, took: end.Sub(start), at: end}
}

// store writes a loaded value (or a cacheable not-found) with jittered
// TTLs and wakes the waiters.
func (ca *Cache[T]) store(ctx context.Context, key, group string, k keys, token string, l loaded[T]) {
	span := trace.SpanFromContext(ctx)
	raw, neg := []byte(nil), "0"
	fresh, hard := ca.jitter(ca.o.FreshTTL), ca.jitter(ca.o.HardTTL)
	if l.err != nil {
		neg = "1"
		fresh = ca.jitter(ca.o.NegativeTTL)
		hard = fresh
	} else {
		var err error
		if raw, err = ca.o.Codec.Marshal(l.v); err != nil {
			span.RecordError(err)
			ca.c.log.LogAttrs(ctx, slog.LevelWarn, "cachewatch fetch: encode value", slog.String("key_group", group), slog.String("key", key), slog.Any("error", err))
			ca.failed(ctx, key, group, k, token)
			return
		}
	}
	hard = max(hard, fresh)
	now := l.at
	// Keep the key a little past its hard TTL, so a lookup can tell "too
	// old" (counted, refused) from "never cached".
	expire := hard + max(hard/10, time.Second)
	res, sentBefore, err := ca.runPatiently(ctx, func() *scriptCall {
		return newScriptCall("fetch write", luascript.FetchWrite, []string{k.value, k.lease, k.waiters},
			token, raw, now.Add(fresh).UnixMilli(), now.Add(hard).UnixMilli(), l.took.Milliseconds(), neg, expire.Milliseconds())
	})
	if err != nil {
		span.RecordError(err)
		ca.c.log.LogAttrs(ctx, slog.LevelWarn, "cachewatch fetch: write", slog.String("key_group", group), slog.String("key", key), slog.Any("error", err))
		// Nothing was stored, so give the lease back rather than make every
		// other process wait LeaseTTL for a value that will not come (their
		// next poll takes the lease and loads). If the write did land late,
		// it released the lease itself and the release is a no-op.
		ca.releaseOrphan(k, token)
		return
	}
	if res != int64(1) && sentBefore {
		// An earlier attempt timed out after it was sent: if Redis ran it,
		// the value is stored and the lease released, and this one is
		// refused for it. Not counted as a stale write: nobody can tell.
		span.AddEvent("write refused after an earlier attempt timed out")
		return
	}
	if res != int64(1) {
		// The key was invalidated, or the lease ran out and may have passed
		// to another loader, while this load ran: what it read may be older
		// than what came after, so it is not stored (the callers of this
		// load still get it).
		ca.c.m.staleWritesRefused.WithLabelValues(group).Inc()
		span.AddEvent("stale write refused")
		ca.c.log.LogAttrs(ctx, slog.LevelDebug, "cachewatch fetch", slog.String("key_group", group),
			slog.String("key", key), slog.String("outcome", "stale_write_refused"))
		return
	}
	span.AddEvent("written")
	ca.fails.reset(ca.c.m.refreshConsecutive, group, key)
	ca.local.put(key, k.value, group, l.v, l.err != nil, now.Add(fresh).UnixMilli(), now.Add(hard).UnixMilli())
}

// failed gives the lease a hold-off after a failed load and tracks the
// key's run of consecutive failures.
func (ca *Cache[T]) failed(ctx context.Context, key, group string, k keys, token string) {
	holdoff := max(ca.o.FailureHoldoff, 0)
	res, err := ca.deg.call(ctx, "fetch fail", func(rctx context.Context) ([]any, error) {
		return luascript.FetchFail.Run(ca.c.ctx(rctx), ca.c.rdb, []string{k.value, k.lease},
			token, holdoff.Milliseconds()).Slice()
	})
	if err != nil || len(res) < 2 {
		return
	}
	n, _ := res[0].(int64)
	ttl, _ := res[1].(int64)
	if n > 0 {
		// The run ends when the stored value does: the key is then never
		// served again, so a key nobody fetches any more leaves the gauge.
		now := ca.c.now().UnixMilli()
		ca.fails.set(ca.c.m.refreshConsecutive, group, key, n, now+max(ttl, 0))
	}
}

// waitForValue waits for another process's load to land, woken by its
// write (the read that found the load registered this process's wake
// channel, k.wake) or, if that is lost, by polling, bounded by ctx. sub
// and woken were taken before that read. If the loader's lease lapses
// without a value, the next read grants the lease here and this caller
// loads.
func (ca *Cache[T]) waitForValue(ctx context.Context, key, group string, k keys, load func(context.Context) (T, error),
	sub subscription, woken *wakeup, after *func(context.Context)) (T, string, error) {
	var zero T
	ctx, cancel := ca.leaseBound(ctx)
	defer cancel()
	ticker := ca.c.clock.NewTicker(ca.o.PollInterval)
	defer ticker.Stop()
	if k.wake == "" && ca.wakeChannelReady(ctx) {
		// The read could not register (the wake channel's subscription
		// was not confirmed yet): read again, registered.
		k.wake = ca.c.hub.wake
		if v, result, err, done := ca.readAgain(ctx, key, group, k, load, sub, &woken, after); done {
			return v, result, err
		}
	} else if testHookWaiting != nil {
		testHookWaiting(key)
	}
	for {
		select {
		case <-woken.done:
			if s, ok := ca.carried(woken.payload); ok {
				return ca.served(ctx, key, group, k, "", load, s)
			}
		case <-ticker.Chan():
		case <-ctx.Done():
			return zero, resultError, fmt.Errorf("cachewatch: fetch %q: waiting for another caller's load: %w", key, ctx.Err())
		}
		if v, result, err, done := ca.readAgain(ctx, key, group, k, load, sub, &woken, after); done {
			return v, result, err
		}
	}
}

// readAgain reads for a waiter (taking the next wake-up first, so that a
// write landing between the read and the wait is not missed) and answers
// it if the value is there or the lease is now its own; done is false
// when it must wait on.
func (ca *Cache[T]) readAgain(ctx context.Context, key, group string, k keys, load func(context.Context) (T, error),
	sub subscription, woken **wakeup, after *func(context.Context)) (v T, result string, err error, done bool) {
	*woken = sub.wait()
	s, token, err := ca.read(ctx, key, k)
	switch {
	case err != nil:
		if cause, failing := ca.deg.failing(err); failing {
			v, result, err = ca.fallback(ctx, key, group, load, err, cause)
			return v, result, err, true
		}
		if ctx.Err() != nil || errors.Is(err, errCallerGone) {
			return v, resultError, fmt.Errorf("cachewatch: fetch %q: waiting for another caller's load: %w", key, err), true
		}
		return v, "", nil, false // slow, not down: wait on
	case s.state == stateFresh || s.state == stateStale:
		v, result, err = ca.served(ctx, key, group, k, token, load, s)
		return v, result, err, true
	case s.granted:
		v, result, err = ca.loadAndStore(ctx, key, group, k, token, load, s.state == stateExpired, after)
		return v, result, err, true
	}
	if testHookWaiting != nil {
		testHookWaiting(key)
	}
	return v, "", nil, false
}

// served answers a waiter with the value another process stored, read
// (refreshing it when the read granted the lease) or carried by the
// wake-up.
func (ca *Cache[T]) served(ctx context.Context, key, group string, k keys, token string, load func(context.Context) (T, error), s stored) (T, string, error) {
	if s.granted {
		ca.refreshInBackground(ctx, key, group, k, token, load)
	}
	v, _, err := ca.decode(key, s, resultCoalesced)
	ca.keepCopy(key, k.value, group, v, err, s)
	return v, resultCoalesced, err
}

// carried decodes a value carried by a wake-up ("=f:h:n:v", published by
// the write script), judged at this process's clock; ok is false for a
// bare wake-up ("1": refused or too large a value), a malformed one, or a
// value already past its hard TTL here — the waiter then reads again.
func (ca *Cache[T]) carried(payload string) (s stored, ok bool) {
	c, ok := luascript.ParseCarried(payload)
	if !ok {
		return s, false
	}
	s.freshUntil, s.hardUntil, s.negative, s.raw = c.FreshUntil, c.HardUntil, c.Negative, c.Value
	switch now := ca.c.now().UnixMilli(); {
	case now < s.freshUntil:
		s.state = stateFresh
	case now < s.hardUntil:
		s.state = stateStale
	default:
		return s, false
	}
	return s, true
}

// watch registers a flight's interest in the wake-ups of the stored key
// (see hub.watch); after Close the Cache no longer uses the Client's
// connection, and its waiters poll.
func (ca *Cache[T]) watch(stored string) (subscription, *wakeup, string) {
	if ca.bg.isClosed() {
		t := newTopic()
		return subscription{h: ca.c.hub, stored: stored, t: t}, t.wake, ""
	}
	return ca.c.hub.watch(stored)
}

// wakeChannelReady waits, bounded by RedisTimeout, for the wake channel's
// subscription to be confirmed (a Cache just created); false after Close or
// if it is not: the waiter polls.
func (ca *Cache[T]) wakeChannelReady(ctx context.Context) bool {
	return !ca.bg.isClosed() && ca.c.hub.ready(ctx, ca.o.RedisTimeout)
}

// testHookWaiting, when set by a test, is called each time a waiter blocks.
var testHookWaiting func(key string)

// testHookJoined, when set by a test, is called each time a Fetch joins a
// flight already in progress instead of starting one.
var testHookJoined func(key string)

// fallback serves a lookup from the source directly because Redis failed
// (err, counted under cause: see degraded.failing): bounded concurrency,
// bounded by ctx, nothing written.
func (ca *Cache[T]) fallback(ctx context.Context, key, group string, load func(context.Context) (T, error), err error, cause string) (T, string, error) {
	var zero T
	if revalidating(ctx) { // a background revalidation does not load past a failed Redis
		return zero, resultError, err
	}
	ca.deg.fallbacks.WithLabelValues(cause).Inc()
	ctx, cancelLoad := ca.leaseBound(ctx)
	defer cancelLoad()
	span := trace.SpanFromContext(ctx)
	span.AddEvent("fallback", trace.WithAttributes(attribute.String("cause", cause), attribute.String("error", err.Error())))
	actx, cancel := callerBound(ctx)
	defer cancel()
	if aerr := ca.deg.acquire(actx); aerr != nil {
		ca.c.m.sourceCalls.WithLabelValues(group, "rejected").Inc()
		return zero, resultError, fmt.Errorf("cachewatch: fetch %q: Redis unavailable (%w) and no source slot free: %w", key, err, aerr)
	}
	defer ca.deg.release()
	v, lerr := ca.callSource(ctx, group, load)
	if lerr != nil {
		return zero, resultError, fmt.Errorf("cachewatch: fetch %q: Redis unavailable (%w), load: %w", key, err, lerr)
	}
	return v, resultFallback, nil
}

// jitter takes up to the Jitter fraction off d at random.
func (ca *Cache[T]) jitter(d time.Duration) time.Duration {
	if ca.o.Jitter <= 0 || d <= 0 {
		return d
	}
	return d - time.Duration(rand.Float64()*ca.o.Jitter*float64(d))
}

// leaseToken returns a random owner token for a refresh lease.
func leaseToken() string {
	var buf [26]byte // two uint64s in base 36: at most 13 digits each
	b := strconv.AppendUint(buf[:0], rand.Uint64(), 36)
	return string(strconv.AppendUint(b, rand.Uint64(), 36))
}

// failureRuns tracks the keys whose refreshes are failing, per group, to
// report the longest current run. Only failing keys are kept, at most
// maxFailingKeys of them, each until its stored value expires in Redis.
type failureRuns struct {
	mu      sync.Mutex
	runs    map[string]map[string]failureRun // group → key → run
	size    atomic.Int64
	soonest atomic.Int64 // unix ms: the earliest until among the runs
}

// failureRun is one key's run of failed refreshes.
type failureRun struct {
	n     int64
	until int64 // unix ms: when the stored value expires
}

const maxFailingKeys = 10000

func (f *failureRuns) set(g *emit.GaugeVec, group, key string, n, until int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := f.runs[group]
	if keys == nil {
		keys = map[string]failureRun{}
		f.runs[group] = keys
	}
	if _, ok := keys[key]; !ok {
		if f.size.Load() >= maxFailingKeys {
			return
		}
		f.size.Add(1)
	}
	keys[key] = failureRun{n: n, until: until}
	if s := f.soonest.Load(); f.size.Load() == 1 || until < s {
		f.soonest.Store(until)
	}
	g.WithLabelValues(group).Set(float64(longest(keys)))
}

func (f *failureRuns) reset(g *emit.GaugeVec, group, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := f.runs[group]
	if _, ok := keys[key]; !ok {
		return
	}
	delete(keys, key)
	f.size.Add(-1)
	g.WithLabelValues(group).Set(float64(longest(keys)))
}

// expire ends the runs of keys whose stored value has expired by now (unix
// ms). Called once per read, it costs two atomic loads until a run is due.
func (f *failureRuns) expire(g *emit.GaugeVec, now int64) {
	if f.size.Load() == 0 || now < f.soonest.Load() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	soonest := int64(math.MaxInt64)
	for group, keys := range f.runs {
		before := len(keys)
		for key, r := range keys {
			if now >= r.until {
				delete(keys, key)
				f.size.Add(-1)
			} else {
				soonest = min(soonest, r.until)
			}
		}
		if len(keys) != before {
			g.WithLabelValues(group).Set(float64(longest(keys)))
		}
	}
	f.soonest.Store(soonest)
}

func longest(keys map[string]failureRun) int64 {
	var n int64
	for _, r := range keys {
		n = max(n, r.n)
	}
	return n
}
