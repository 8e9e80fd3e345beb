package instrument

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// localCopies keeps, per key, the last value this process read or wrote,
// with its deadlines, so that a stale value can be served without waiting
// for Redis (CacheOptions.LocalCopies). Nil when disabled; every method is
// nil-safe.
type localCopies[T any] struct {
	mu  sync.Mutex
	max int
	m   map[string]*localCopy[T]
}

type localCopy[T any] struct {
	val          T
	negative     bool
	freshUntil   int64 // unix ms
	hardUntil    int64 // unix ms
	revalidating bool  // a background read of this key is under way
}

func (l *localCopies[T]) put(key string, v T, negative bool, freshUntil, hardUntil int64) {
	if l == nil || hardUntil <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.m[key]; !ok && len(l.m) >= l.max {
		for k := range l.m { // full: make room by dropping any one copy
			delete(l.m, k)
			break
		}
	}
	l.m[key] = &localCopy[T]{val: v, negative: negative, freshUntil: freshUntil, hardUntil: hardUntil}
}

func (l *localCopies[T]) drop(key string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	delete(l.m, key)
	l.mu.Unlock()
}

// stale returns key's copy if it is stale at now (past fresh, before hard),
// and whether the caller is the one to start its revalidation.
func (l *localCopies[T]) stale(key string, now int64) (c localCopy[T], revalidate, ok bool) {
	if l == nil {
		return c, false, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.m[key]
	if p == nil || now < p.freshUntil || now >= p.hardUntil {
		return c, false, false
	}
	revalidate = !p.revalidating
	p.revalidating = true
	return *p, revalidate, true
}

// usable returns key's copy if it is within its hard TTL at now.
func (l *localCopies[T]) usable(key string, now int64) (c localCopy[T], ok bool) {
	if l == nil {
		return c, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.m[key]
	if p == nil || now >= p.hardUntil {
		return c, false
	}
	return *p, true
}

// revalidated lets the next stale hit start another revalidation (when the
// last one left the copy stale: the refresh runs elsewhere, or Redis failed).
func (l *localCopies[T]) revalidated(key string) {
	l.mu.Lock()
	if p := l.m[key]; p != nil {
		p.revalidating = false
	}
	l.mu.Unlock()
}

// keepCopy records a value read from Redis as the process's copy.
func (ca *Cache[T]) keepCopy(key string, v T, decodeErr error, s stored) {
	if decodeErr != nil && !s.negative {
		return
	}
	ca.local.put(key, v, s.negative, s.freshUntil, s.hardUntil)
}

// staleFromMemory serves key from the process's copy when that copy is
// stale but within its hard TTL, and starts one background revalidation.
func (ca *Cache[T]) staleFromMemory(ctx context.Context, span trace.Span, key string, load func(context.Context) (T, error)) (T, error, bool) {
	var zero T
	if ca.local == nil { // LocalCopies off: not even a clock read
		return zero, nil, false
	}
	now := ca.c.now().UnixMilli()
	c, revalidate, ok := ca.local.stale(key, now)
	if !ok {
		return zero, nil, false
	}
	group := ca.c.group(key)
	if revalidate {
		ca.revalidate(ctx, span, key, group, load)
	}
	span.AddEvent("cache stale (process copy)")
	gm := ca.metricsFor(group)
	ca.record(ctx, span, gm, group, key, resultStale)
	gm.staleAge.Observe((time.Duration(now-c.freshUntil) * time.Millisecond).Seconds())
	if c.negative {
		return c.val, fmt.Errorf("cachewatch: fetch %q: %w (cached)", key, ErrNotFound), true
	}
	return c.val, nil, true
}

// revalidateKey marks a background revalidation's context.
type revalidateKey struct{}

func revalidating(ctx context.Context) bool { return ctx.Value(revalidateKey{}) != nil }

// revalidate reads key from Redis in the background, as one flight shared
// with any concurrent Fetch: the read refreshes the process's copy and, when
// the value is due and the lease free, refreshes it under the lease.
func (ca *Cache[T]) revalidate(ctx context.Context, span trace.Span, key, group string, load func(context.Context) (T, error)) {
	ca.bg.Add(1)
	go func() {
		defer ca.bg.Done()
		defer ca.local.revalidated(key)
		rctx := trace.ContextWithSpan(withCallerDeadline(context.WithoutCancel(ctx), time.Time{}), span)
		rctx = context.WithValue(rctx, revalidateKey{}, true)
		rctx, cancel := context.WithTimeout(rctx, ca.o.LeaseTTL)
		defer cancel()
		f, leader, w := ca.flights.join(rctx, key)
		if leader {
			o, err := ca.lookup(rctx, key, group, load)
			o.group, o.gm = group, ca.metricsFor(group)
			ca.flights.land(key, f, o, err)
		}
		if !f.wait(w) { // another caller's flight outlived LeaseTTL
			return
		}
		if err := f.err; err != nil && !errors.Is(err, ErrNotFound) {
			ca.c.log.LogAttrs(rctx, slog.LevelDebug, "cachewatch fetch: revalidate",
				slog.String("key_group", group), slog.String("key", key), slog.Any("error", err))
		}
	}()
}
