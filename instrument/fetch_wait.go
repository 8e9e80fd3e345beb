package instrument

import (
	"context"
	"errors"
	"fmt"

	"github.com/cachewatch/cachewatch/internal/luascript"
)

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
