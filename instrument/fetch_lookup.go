package instrument

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// lookup is one flight's lookup of a key, from the read that decides what
// to do to the write that ends a load. It carries what every stage needs:
// the key, its group and Redis names, the loader, the token of the refresh
// claim the latest read offered, and the deadline of the caller who started
// it. It lives on its flight's goroutine (no allocation of its own), and
// its stages are its methods, a file each:
//
//   - fetch_flight.go: the callers of a key in this process share one lookup;
//   - fetch_read.go: read the value, its state and, when due, the refresh
//     claim in one round trip; a fresh or stale value is served (serve);
//   - fetch_load.go: holding the claim, load and write the value back;
//   - fetch_wait.go: while another process loads, wait for its write;
//   - degraded.go: while Redis fails, load from the source directly.
type lookup[T any] struct {
	ca    *Cache[T]
	key   string
	group string // classified once per lookup, not per caller
	k     keys
	load  func(context.Context) (T, error)
	// token is the refresh claim's owner token offered by the latest read:
	// the claim's, when that read was granted it.
	token string
	// deadline is the deadline of the caller who started the lookup, when
	// the lookup runs detached from that caller's context (zero for none):
	// its Redis calls share out what is left of it (degraded.timeoutFor),
	// and a fallback waits for a source slot no longer than it.
	deadline time.Time
	// sub is the lookup's interest in the stored key's wake-ups, and woken
	// the next wake-up, taken before each read, so that a write landing
	// between a read and the wait that follows is not missed.
	sub   subscription
	woken *wakeup
	// pending is a load's result, written once the flight has landed
	// (write) when hasPending.
	pending    loaded[T]
	hasPending bool
	// pastHard: the latest read found only a value past its hard TTL.
	pastHard bool
	// noticed is the invalidation notices seen before the first read: a
	// copy is kept only if none that could cover it arrived since.
	noticed noticeMark
}

// flyIn runs flight f's lookup of key under fctx, which carries the
// deadline of the caller who started it (none when it runs on that
// caller's own context), and lands it.
func (ca *Cache[T]) flyIn(fctx context.Context, f *flight[T], key string, load func(context.Context) (T, error)) {
	// The key group is classified here, once per flight, not per caller:
	// in a stampede most callers only join a flight.
	k := keysFor(key)
	l := lookup[T]{ca: ca, key: key, group: ca.c.group(key), k: k, load: load, deadline: callerDeadline(fctx), noticed: ca.local.mark(k.value)}
	l.fly(fctx, f)
}

// fly runs the lookup as flight f's under fctx and lands it, then writes a
// loaded value: its callers have it, now it is stored and the other
// processes are woken.
func (l *lookup[T]) fly(fctx context.Context, f *flight[T]) {
	o, err := l.run(fctx)
	o.group, o.gm = l.group, l.ca.metricsFor(l.group)
	l.ca.flights.land(l.key, f, o, err)
	if l.hasPending {
		l.write(fctx)
	}
}

// run is the lookup: read, then serve, load or wait. Its waits and loads
// are bounded by RefreshClaimTTL (claimBound), its Redis calls by RedisTimeout; a
// lookup that finds the value does neither.
func (l *lookup[T]) run(ctx context.Context) (outcome[T], error) {
	ca := l.ca
	ca.fails.expire(ca.c.m.loaderConsecutive, ca.c.now().UnixMilli())
	if ca.deg.open() {
		return l.unavailable(ctx, errBreakerOpen)
	}
	ca.c.writes.wait(ctx, l.k.value) // this process's own write of key comes first
	l.watch()
	defer l.sub.close()
	s, err := l.read(ctx)
	if err != nil {
		return l.unavailable(ctx, err)
	}
	span := trace.SpanFromContext(ctx)
	switch s.state {
	case stateFresh, stateStale:
		return l.serve(ctx, s)
	case stateExpired:
		span.AddEvent("cache expired past hard TTL")
	default:
		span.AddEvent("cache miss")
	}
	ca.local.drop(l.key)
	var o outcome[T]
	switch {
	case s.granted:
		o, err = l.loadAndStore(ctx, s.state == stateExpired)
	case s.failing:
		o, err = outcome[T]{result: resultError}, l.loadFailed()
	default:
		o, err = l.waitForValue(ctx)
	}
	o.pastHard = s.state == stateExpired
	return o, err
}

// serve answers the flight with the value its read found fresh or stale.
// A claim granted to the read is the flight's, so one refresh serves all of
// its callers (a stale value, or XFetch's early refresh of a fresh one).
func (l *lookup[T]) serve(ctx context.Context, s stored) (outcome[T], error) {
	span := trace.SpanFromContext(ctx)
	result := resultHit
	if s.state == stateStale {
		result = resultStale
		span.AddEvent("cache stale")
	} else {
		span.AddEvent("cache hit")
	}
	if s.granted {
		l.refreshInBackground(ctx)
	}
	o := outcome[T]{freshUntil: s.freshUntil, hardUntil: s.hardUntil}
	var err error
	o.val, o.result, err = l.ca.decode(l.key, s, result)
	if o.result == resultStale {
		o.staleAge = time.Duration(l.ca.c.now().UnixMilli()-s.freshUntil) * time.Millisecond
	}
	l.keepCopy(o.val, err, s)
	return o, err
}

// unavailable answers a flight whose read failed: from the process's copy
// if there is one within its hard TTL (LocalCopies), else from the source
// if Redis is failing; a read that only waited too long ends in an error.
func (l *lookup[T]) unavailable(ctx context.Context, err error) (outcome[T], error) {
	now := l.ca.c.now().UnixMilli()
	if c, ok := l.ca.local.usable(l.key, now); ok {
		trace.SpanFromContext(ctx).AddEvent("cache copy served, Redis unavailable")
		o := outcome[T]{val: c.val, result: resultHit, freshUntil: c.freshUntil, hardUntil: c.hardUntil}
		if now >= c.freshUntil {
			o.result, o.staleAge = resultStale, time.Duration(now-c.freshUntil)*time.Millisecond
		}
		if c.negative {
			return o, fmt.Errorf("cachewatch: fetch %q: %w (cached)", l.key, ErrNotFound)
		}
		return o, nil
	}
	cause, failing := l.ca.deg.failing(err)
	if !failing {
		return outcome[T]{result: resultError}, fmt.Errorf("cachewatch: fetch %q: waiting for Redis: %w", l.key, err)
	}
	return l.fallback(ctx, err, cause)
}
