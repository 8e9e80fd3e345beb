package instrument

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/cachewatch/cachewatch/internal/luascript"
)

// loadAndStore calls the loader while holding the claim and leaves the
// write of its result, which wakes every waiter, for the flight to run once
// it has answered its callers (writeBehind). The loader's answer is
// returned even if the write fails: the caller has it, only the others
// lose.
func (l *lookup[T]) loadAndStore(ctx context.Context, pastHard bool) (outcome[T], error) {
	ca := l.ca
	ctx, cancel := ca.claimBound(ctx)
	defer cancel()
	span := trace.SpanFromContext(ctx)
	span.AddEvent("claim acquired")
	start := ca.c.now()
	o := outcome[T]{result: resultMiss}
	var err error
	o.val, err = ca.callLoader(ctx, l.group, l.load)
	if err != nil && !ca.cacheable(err) {
		l.failed(ctx)
		if pastHard {
			err = fmt.Errorf("%w: %w", ErrHardTTLExpired, err)
		}
		return o, fmt.Errorf("cachewatch: fetch %q: load: %w", l.key, err)
	}
	l.writeBehind(ca.loadedSince(start, o.val, err))
	if err != nil {
		return o, fmt.Errorf("cachewatch: fetch %q: %w", l.key, err)
	}
	return o, nil
}

// writeBehind leaves a loaded value for write, pending (pendingWrites) from
// now until it lands.
func (l *lookup[T]) writeBehind(ld loaded[T]) {
	l.ca.c.writes.add(l.k.value)
	l.pending, l.hasPending = ld, true
}

// write stores the pending loaded value (see store). The flight runs it on
// its own goroutine, under the flight's context, once its callers are
// answered, rather than handing it to another goroutine: in a crowd that
// one would be scheduled behind the callers just woken, and the other
// processes wait for this write. It has a span of its own, a child of the
// flight's.
func (l *lookup[T]) write(ctx context.Context) {
	ca := l.ca
	defer ca.c.writes.finish(l.k.value)
	span := noSpan
	if ca.c.spans.recording() { // the options allocate, recorded or not
		ctx, span = ca.c.spans.start(ctx, "cachewatch.Write",
			trace.WithAttributes(attribute.String("cachewatch.key_group", l.group)))
	}
	defer span.End()
	l.store(ctx, l.pending)
}

// claimBound bounds a flight's load or wait by RefreshClaimTTL: the loader's
// context is documented as bounded by it, and a wait for another process's
// load need not outlast that load's claim.
func (ca *Cache[T]) claimBound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, ca.o.RefreshClaimTTL)
}

// cacheable reports whether a loader error is a cacheable "not found".
func (ca *Cache[T]) cacheable(err error) bool {
	return ca.o.NegativeTTL > 0 && errors.Is(err, ErrNotFound)
}

// refreshInBackground reloads a stale (or early-expiring) value under the
// claim the read granted (l.token). Its context outlives the caller's.
func (l *lookup[T]) refreshInBackground(ctx context.Context) {
	ca := l.ca
	link := trace.LinkFromContext(ctx)
	// The refresh has a lookup of its own, made from fields copied into
	// its goroutine: the flight's lookup lives on the flight's stack.
	key, group, k, token, load := l.key, l.group, l.k, l.token, l.load
	started := ca.bg.start(func() {
		l := lookup[T]{ca: ca, key: key, group: group, k: k, token: token, load: load}
		rctx, cancel := context.WithTimeout(withCallerDeadline(context.WithoutCancel(ctx), time.Time{}), ca.o.RefreshClaimTTL)
		defer cancel()
		rctx, span := ca.c.spans.start(rctx, "cachewatch.Refresh", trace.WithLinks(link),
			trace.WithAttributes(attribute.String("cachewatch.key_group", l.group)))
		defer span.End()
		span.AddEvent("claim acquired")
		start := ca.c.now()
		v, err := ca.callLoader(rctx, l.group, l.load)
		if err != nil && !ca.cacheable(err) {
			ca.c.m.loaderRefreshFailures.WithLabelValues(l.group).Inc()
			span.RecordError(err)
			l.failed(rctx)
			return
		}
		l.store(rctx, ca.loadedSince(start, v, err))
	})
	if !started { // closed: give the claim back for another process to refresh
		ca.giveBack(l.k, l.token)
	}
}

// callLoader calls the loader, timing and counting it.
func (ca *Cache[T]) callLoader(ctx context.Context, group string, load func(context.Context) (T, error)) (T, error) {
	start := time.Now()
	v, err := load(ctx)
	ca.countSourceCall([]string{group}, sourceResult(err), time.Since(start))
	return v, err
}

// countSourceCall counts one loader call that took took, with result, in
// each of groups: its loader duration and its loader call.
func (ca *Cache[T]) countSourceCall(groups []string, result string, took time.Duration) {
	for _, group := range groups {
		ca.c.m.recompute.WithLabelValues(group, result).Observe(took.Seconds())
		ca.c.m.loaderCalls.WithLabelValues(group, result).Inc()
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
// TTLs under the lookup's claim and wakes the waiters.
func (l *lookup[T]) store(ctx context.Context, ld loaded[T]) {
	ca, key, group, k, token := l.ca, l.key, l.group, l.k, l.token
	span := trace.SpanFromContext(ctx)
	raw, neg := []byte(nil), "0"
	fresh, hard := ca.jitter(ca.o.FreshTTL), ca.jitter(ca.o.HardTTL)
	if ld.err != nil {
		neg = "1"
		fresh = ca.jitter(ca.o.NegativeTTL)
		hard = fresh
	} else {
		var err error
		if raw, err = ca.o.Codec.Marshal(ld.v); err != nil {
			span.RecordError(err)
			ca.c.log.LogAttrs(ctx, slog.LevelWarn, "cachewatch fetch: encode value", slog.String("key_group", group), slog.String("key", key), slog.Any("error", err))
			l.failed(ctx)
			return
		}
	}
	hard = max(hard, fresh)
	now := ld.at
	// Keep the key a little past its hard TTL, so a lookup can tell "too
	// old" (counted, refused) from "never cached".
	expire := hard + max(hard/10, time.Second)
	var res any
	sentBefore, err := ca.patiently(ctx, "", func() (err error) {
		res, err = ca.run(ctx, newScriptCall("fetch write", luascript.FetchWrite, []string{k.value, k.claim, k.waiters},
			token, raw, now.Add(fresh).UnixMilli(), now.Add(hard).UnixMilli(), ld.took.Milliseconds(), neg, expire.Milliseconds()))
		return err
	})
	if err != nil {
		span.RecordError(err)
		ca.c.log.LogAttrs(ctx, slog.LevelWarn, "cachewatch fetch: write", slog.String("key_group", group), slog.String("key", key), slog.Any("error", err))
		// Nothing was stored, so give the claim back rather than make every
		// other process wait RefreshClaimTTL for a value that will not come (their
		// next poll takes the claim and loads). If the write did land late,
		// it released the claim itself and the release is a no-op.
		ca.releaseOrphan(k, token)
		return
	}
	if res != int64(1) {
		l.refused(ctx, sentBefore)
		return
	}
	span.AddEvent("written")
	ca.fails.reset(ca.c.m.loaderConsecutive, group, key)
	ca.local.put(l.noticed, key, k.value, group, ld.v, ld.err != nil, now.Add(fresh).UnixMilli(), now.Add(hard).UnixMilli())
}

// refused accounts for a write the script refused.
func (l *lookup[T]) refused(ctx context.Context, sentBefore bool) {
	span := trace.SpanFromContext(ctx)
	if sentBefore {
		// An earlier attempt timed out after it was sent: if Redis ran it,
		// the value is stored and the claim released, and this one is
		// refused for it. Not counted as a stale write: nobody can tell.
		span.AddEvent("write refused after an earlier attempt timed out")
		return
	}
	// The key was invalidated, or the claim ran out and may have passed to
	// another loader, while this load ran: what it read may be older than
	// what came after, so it is not stored (the callers of this load still
	// get it).
	l.ca.c.m.staleWritesRefused.WithLabelValues(l.group).Inc()
	span.AddEvent("stale write refused")
	l.ca.c.log.LogAttrs(ctx, slog.LevelDebug, "cachewatch fetch", slog.String("key_group", l.group),
		slog.String("key", l.key), slog.String("outcome", "stale_write_refused"))
}

// failed gives the claim a hold-off after a failed load and tracks the
// key's run of consecutive failures.
func (l *lookup[T]) failed(ctx context.Context) {
	ca, k, token := l.ca, l.k, l.token // copied: the call's closure may outlive it
	holdoff := max(ca.o.FailureHoldoff, 0)
	res, err := ca.deg.call(ctx, "fetch fail", func(rctx context.Context) ([]any, error) {
		return luascript.FetchFail.Run(ca.c.ctx(rctx), ca.c.rdb, []string{k.value, k.claim, k.waiters},
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
		ca.fails.set(ca.c.m.loaderConsecutive, l.group, l.key, n, now+max(ttl, 0))
	}
}

// jitter takes up to the Jitter fraction off d at random.
func (ca *Cache[T]) jitter(d time.Duration) time.Duration {
	if ca.o.Jitter <= 0 || d <= 0 {
		return d
	}
	return d - time.Duration(rand.Float64()*ca.o.Jitter*float64(d))
}
