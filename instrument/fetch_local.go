package instrument

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// localCopies keeps, per key, the last value this process read or wrote,
// with its deadlines, so that a stale value can be served without waiting
// for Redis (CacheOptions.LocalCopies). Nil when disabled; every method is
// nil-safe.
//
// Serving a copy takes no lock (sync.Map's reads do not), nor does
// replacing one: in a crowd, a caller that finds a lock taken parks behind
// every other runnable goroutine, and the background read that refreshes a
// copy lands in the middle of the crowd it serves.
type localCopies[T any] struct {
	max  int
	m    sync.Map // key → *localCopy[T]; a copy is never changed, only replaced
	size atomic.Int64
	// Invalidation notices seen, counted so that a copy read or written by
	// a lookup is not kept when a notice that may cover it arrived while
	// the lookup ran: a write that lands before another process's
	// InvalidateMatch scans is unlinked there, and its notice can pass
	// before the writer keeps its copy. Key notices count per bucket of
	// the stored name, so unrelated keys' notices rarely void a copy.
	patternNotices atomic.Uint64
	keyNotices     [noticeBuckets]atomic.Uint64
}

const noticeBuckets = 256

// noticeMark is the count of notices that could cover one stored name,
// taken before a lookup reads Redis.
type noticeMark struct{ pattern, key uint64 }

func noticeBucket(stored string) int {
	h := uint32(2166136261) // FNV-1a: no allocation, the same bucket in every process
	for i := 0; i < len(stored); i++ {
		h = (h ^ uint32(stored[i])) * 16777619
	}
	return int(h % noticeBuckets)
}

// mark returns the notices seen so far that could cover stored.
func (l *localCopies[T]) mark(stored string) noticeMark {
	if l == nil {
		return noticeMark{}
	}
	return noticeMark{l.patternNotices.Load(), l.keyNotices[noticeBucket(stored)].Load()}
}

// noticedSince reports whether a notice that could cover stored arrived
// after m was taken.
func (l *localCopies[T]) noticedSince(m noticeMark, stored string) bool {
	return l.mark(stored) != m
}

type localCopy[T any] struct {
	stored       string // the value's key in Redis, as invalidation notices name it
	group        string // the key's group, kept so the callers served are not classified each
	val          T
	negative     bool
	freshUntil   int64       // unix ms
	hardUntil    int64       // unix ms
	revalidating atomic.Bool // a background read of this key is under way
}

// put keeps a copy of key unless a notice that could cover it arrived
// since m was taken. A notice counts before it drops copies, and put checks
// after it stores, so a notice either voids the copy here or drops it.
func (l *localCopies[T]) put(m noticeMark, key, stored, group string, v T, negative bool, freshUntil, hardUntil int64) {
	if l == nil || hardUntil <= 0 {
		return
	}
	c := &localCopy[T]{stored: stored, group: group, val: v, negative: negative, freshUntil: freshUntil, hardUntil: hardUntil}
	if _, replaced := l.m.Swap(key, c); !replaced {
		l.size.Add(1)
	}
	if l.noticedSince(m, stored) {
		if l.m.CompareAndDelete(key, c) {
			l.size.Add(-1)
		}
		return
	}
	l.makeRoom(key)
}

// makeRoom drops a copy other than key's while there are more than max.
func (l *localCopies[T]) makeRoom(key string) {
	if l.size.Load() <= int64(l.max) {
		return
	}
	l.m.Range(func(k, _ any) bool { // full: make room by dropping any other copy
		if k == key {
			return true
		}
		if _, ok := l.m.LoadAndDelete(k); ok {
			l.size.Add(-1)
			return false
		}
		return true
	})
}

// dropIf drops the copies for which gone reports true.
func (l *localCopies[T]) dropIf(gone func(*localCopy[T]) bool) {
	if l == nil {
		return
	}
	l.m.Range(func(k, v any) bool {
		if gone(v.(*localCopy[T])) && l.m.CompareAndDelete(k, v) {
			l.size.Add(-1)
		}
		return true
	})
}

// dropStored drops the copies whose value is stored under one of names.
func (l *localCopies[T]) dropStored(names []string) {
	if l == nil {
		return
	}
	gone := make(map[string]bool, len(names))
	for _, n := range names {
		gone[n] = true
		l.keyNotices[noticeBucket(n)].Add(1)
	}
	l.dropIf(func(c *localCopy[T]) bool { return gone[c.stored] })
}

// dropAll drops every copy.
func (l *localCopies[T]) dropAll() {
	if l == nil {
		return
	}
	l.patternNotices.Add(1)
	l.dropIf(func(*localCopy[T]) bool { return true })
}

func (l *localCopies[T]) drop(key string) {
	if l == nil {
		return
	}
	if _, ok := l.m.LoadAndDelete(key); ok {
		l.size.Add(-1)
	}
}

// get returns key's copy, or nil.
func (l *localCopies[T]) get(key string) *localCopy[T] {
	if v, ok := l.m.Load(key); ok {
		return v.(*localCopy[T])
	}
	return nil
}

// stale returns key's copy if it is stale at now (past fresh, before
// hard), else nil, and whether the caller is the one to start its
// revalidation.
func (l *localCopies[T]) stale(key string, now int64) (c *localCopy[T], revalidate bool) {
	if l == nil {
		return nil, false
	}
	p := l.get(key)
	if p == nil || now < p.freshUntil || now >= p.hardUntil {
		return nil, false
	}
	// Load first: in a crowd every caller asks, one of them starts the
	// revalidation, and a compare-and-swap writes the line every core reads.
	return p, !p.revalidating.Load() && p.revalidating.CompareAndSwap(false, true)
}

// usable returns key's copy if it is within its hard TTL at now.
func (l *localCopies[T]) usable(key string, now int64) (c *localCopy[T], ok bool) {
	if l == nil {
		return nil, false
	}
	p := l.get(key)
	if p == nil || now >= p.hardUntil {
		return nil, false
	}
	return p, true
}

// revalidated lets the next stale hit start another revalidation (when the
// last one left the copy stale: the refresh runs elsewhere, or Redis failed).
func (l *localCopies[T]) revalidated(key string) {
	if p := l.get(key); p != nil {
		p.revalidating.Store(false)
	}
}

// keepCopy records a value read from Redis as the process's copy.
func (l *lookup[T]) keepCopy(v T, decodeErr error, s stored) {
	if decodeErr != nil && !s.negative {
		return
	}
	l.ca.local.put(l.noticed, l.key, l.k.value, l.group, v, s.negative, s.freshUntil, s.hardUntil)
}

// staleFromMemory serves key from the process's copy when that copy is
// stale but within its hard TTL, and starts one background revalidation.
func (ca *Cache[T]) staleFromMemory(ctx context.Context, span trace.Span, key string, load func(context.Context) (T, error)) (T, error, bool) {
	var zero T
	if ca.local == nil { // LocalCopies off: not even a clock read
		return zero, nil, false
	}
	now := ca.c.now().UnixMilli()
	c, revalidate := ca.local.stale(key, now)
	if c == nil {
		return zero, nil, false
	}
	v, err := ca.serveStale(ctx, span, key, load, c, revalidate, now)
	return v, err, true
}

// serveStale serves a stale copy c (its own function: every caller of a
// cold crowd passes through staleFromMemory, at the bottom of a fresh
// goroutine's stack, and this part's frame made each one grow its stack
// there: TestCrowdCallersKeepTheirFirstStack).
func (ca *Cache[T]) serveStale(ctx context.Context, span trace.Span, key string, load func(context.Context) (T, error), c *localCopy[T], revalidate bool, now int64) (T, error) {
	group := c.group
	if revalidate {
		ca.revalidate(ctx, span, key, group, load)
	}
	span.AddEvent("cache stale (process copy)")
	gm := ca.metricsFor(group)
	ca.record(ctx, span, gm, group, key, resultStale)
	gm.staleAge.Observe((time.Duration(now-c.freshUntil) * time.Millisecond).Seconds())
	if c.negative {
		return c.val, fmt.Errorf("cachewatch: fetch %q: %w (cached)", key, ErrNotFound)
	}
	return c.val, nil
}

// revalidateKey marks a background revalidation's context.
type revalidateKey struct{}

func revalidating(ctx context.Context) bool { return ctx.Value(revalidateKey{}) != nil }

// revalidate reads key from Redis in the background, as one flight shared
// with any concurrent Fetch: the read refreshes the process's copy and, when
// the value is due and the claim free, refreshes it under the claim.
func (ca *Cache[T]) revalidate(ctx context.Context, span trace.Span, key, group string, load func(context.Context) (T, error)) {
	started := ca.bg.start(func() {
		defer ca.local.revalidated(key)
		rctx := trace.ContextWithSpan(withCallerDeadline(context.WithoutCancel(ctx), time.Time{}), span)
		rctx = context.WithValue(rctx, revalidateKey{}, true)
		rctx, cancel := context.WithTimeout(rctx, ca.o.RefreshClaimTTL)
		defer cancel()
		f, w := ca.flights.join(rctx, key)
		if w.leader {
			ca.flyIn(rctx, f, key, load)
		}
		if !f.wait(w) { // another caller's flight outlived RefreshClaimTTL
			return
		}
		if err := f.err; err != nil && !errors.Is(err, ErrNotFound) {
			ca.c.log.LogAttrs(rctx, slog.LevelDebug, "cachewatch fetch: revalidate",
				slog.String("key_group", group), slog.String("key", key), slog.Any("error", err))
		}
	})
	if !started { // closed: the copy is served until its hard TTL, unrevalidated
		ca.local.revalidated(key)
	}
}
