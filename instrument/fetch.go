package instrument

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

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
// A refresh claim granted to a shared read serves one refresh or load,
// never one per caller. Each caller counts one lookup: a shared read of a
// fresh or stale value counts as hit or stale — judged again at the
// caller's own clock, so a value that went stale meanwhile counts (and
// its age is observed) as stale, and one past its hard TTL is not served:
// the caller reads again — and a caller who waited for another caller's
// load, in this process or another, counts as coalesced.
//
// load receives a context bounded by RefreshClaimTTL and detached from ctx's
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
		f, w := ca.flights.join(ctx, key)
		if w.leader {
			ca.fly(ctx, span, f, key, load)
		} else if testHookJoined != nil {
			testHookJoined(key)
		}
		if !f.wait(w) {
			return ca.gone(ctx, span, key)
		}
		if v, err, ok := ca.answer(ctx, span, key, f, w.leader); ok {
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

// fly runs flight f's lookup for the caller that started it, under its
// span. The flight serves every caller that joins it, so the leader's
// cancellation must not end it; the leader's deadline only caps the time
// given to Redis, to leave the fallback time to run. The lookup's read is
// cheaper on a context that cannot be cancelled.
func (ca *Cache[T]) fly(ctx context.Context, span trace.Span, f *flight[T], key string, load func(context.Context) (T, error)) {
	dl, _ := ctx.Deadline()
	// The flight's events go to the leader's span, even when no span was
	// started (nothing records) and ctx carries the caller's own.
	fctx := trace.ContextWithSpan(withCallerDeadline(context.WithoutCancel(ctx), dl), span)
	if !ca.bg.start(func() { ca.flyIn(fctx, f, key, load) }) {
		// Closed: no goroutine outlives Close, so the leader runs the
		// flight itself, bounded by its own context.
		ca.flyIn(trace.ContextWithSpan(ctx, span), f, key, load)
	}
}

// verdict is how one caller's lookup counts: its result and, for a stale
// value, the value's age.
type verdict struct {
	result   string
	staleAge time.Duration
}

// judge decides again, at this caller's clock, how a cached value served
// by a shared read counts: a hit that has gone stale since the read counts
// as stale, with its age now. ok is false when the value is past its hard
// TTL now: the caller must not be served it.
func (ca *Cache[T]) judge(o *outcome[T]) (v verdict, ok bool) {
	v = verdict{result: o.result, staleAge: o.staleAge}
	if o.hardUntil == 0 {
		return v, true
	}
	now := ca.c.now().UnixMilli()
	if now >= o.hardUntil {
		return v, false
	}
	if v.result == resultHit && now >= o.freshUntil {
		v.result = resultStale
	}
	if v.result == resultStale {
		v.staleAge = time.Duration(now-o.freshUntil) * time.Millisecond
	}
	return v, true
}

// answer counts one caller's lookup and returns what its landed flight f
// found (f's outcome is shared: read, never written). ok is false when the
// shared read's value is past its hard TTL by this caller's clock.
func (ca *Cache[T]) answer(ctx context.Context, span trace.Span, key string, f *flight[T], leader bool) (v T, err error, ok bool) {
	vd, ok := ca.judge(&f.o)
	if !ok {
		return v, nil, false
	}
	result := vd.result
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
		f.o.gm.staleAge.Observe(vd.staleAge.Seconds())
	}
	if f.err != nil {
		span.RecordError(f.err)
		span.SetStatus(codes.Error, "fetch failed")
		return v, f.err, true
	}
	return f.o.val, nil, true
}

// fetchSpanOpts are the Fetch span's options, built once: passed as a
// fresh variadic list they would be allocated by every caller.
var fetchSpanOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
