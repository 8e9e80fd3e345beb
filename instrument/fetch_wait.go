package instrument

import (
	"context"
	"errors"
	"fmt"

	"github.com/cachewatch/cachewatch/internal/luascript"
)

// waitForValue waits for another process's load to land, woken by its
// write (the read that found the load registered this process's wake
// channel, l.k.wake) or, if that is lost, by polling, bounded by ctx. The
// wake-up waited for was taken before that read. If the loader's claim
// lapses without a value, the next read grants the claim here and this
// lookup loads.
func (l *lookup[T]) waitForValue(ctx context.Context) (outcome[T], error) {
	ca := l.ca
	ctx, cancel := ca.claimBound(ctx)
	defer cancel()
	ticker := ca.c.clock.NewTicker(ca.o.PollInterval)
	defer ticker.Stop()
	if l.k.wake == "" && ca.wakeChannelReady(ctx) {
		// The read could not register (the wake channel's subscription
		// was not confirmed yet): read again, registered.
		l.k.wake = ca.c.hub.wake
		if o, done, err := l.readAgain(ctx); done {
			return o, err
		}
	} else if testHookWaiting != nil {
		testHookWaiting(l.key)
	}
	for {
		select {
		case <-l.woken.done:
			if l.woken.payload == luascript.WakeFailed {
				return outcome[T]{result: resultError}, l.loadFailed()
			}
			if s, ok := ca.carried(l.woken.payload); ok {
				return l.served(ctx, s)
			}
		case <-ticker.Chan():
		case <-ctx.Done():
			return outcome[T]{result: resultError}, l.waitFailed(ctx.Err())
		}
		if o, done, err := l.readAgain(ctx); done {
			return o, err
		}
	}
}

// readAgain reads for a waiter (taking the next wake-up first, so that a
// write landing between the read and the wait is not missed) and answers
// it if the value is there or the claim is now its own; done is false
// when it must wait on.
func (l *lookup[T]) readAgain(ctx context.Context) (o outcome[T], done bool, err error) {
	l.woken = l.sub.wait()
	s, err := l.read(ctx)
	switch {
	case err != nil:
		return l.readFailed(ctx, err)
	case s.state == stateFresh || s.state == stateStale:
		o, err = l.served(ctx, s)
		return o, true, err
	case s.granted:
		o, err = l.loadAndStore(ctx, s.state == stateExpired)
		return o, true, err
	case s.failing:
		return outcome[T]{result: resultError}, true, l.loadFailed()
	}
	if testHookWaiting != nil {
		testHookWaiting(l.key)
	}
	return o, false, nil
}

// readFailed answers a waiter whose read failed: from the source if Redis
// is failing, with an error if its caller is gone; a read that was only
// slow leaves it waiting (done false).
func (l *lookup[T]) readFailed(ctx context.Context, err error) (o outcome[T], done bool, _ error) {
	if cause, failing := l.ca.deg.failing(err); failing {
		o, err = l.fallback(ctx, err, cause)
		return o, true, err
	}
	if ctx.Err() != nil || errors.Is(err, errCallerGone) {
		return outcome[T]{result: resultError}, true, l.waitFailed(err)
	}
	return o, false, nil // slow, not down: wait on
}

// loadFailed is the error of a lookup that has nothing to serve and whose
// load, another caller's, failed; it wraps ErrHardTTLExpired too when all
// the lookup found was past its hard TTL, as the loading caller's does.
func (l *lookup[T]) loadFailed() error {
	if l.pastHard {
		return fmt.Errorf("cachewatch: fetch %q: %w: %w", l.key, ErrHardTTLExpired, ErrLoadFailed)
	}
	return fmt.Errorf("cachewatch: fetch %q: %w", l.key, ErrLoadFailed)
}

// waitFailed is the error of a wait that ended for err.
func (l *lookup[T]) waitFailed(err error) error {
	return fmt.Errorf("cachewatch: fetch %q: waiting for another caller's load: %w", l.key, err)
}

// served answers a waiter with the value another process stored, read
// (refreshing it when the read granted the claim) or carried by the
// wake-up.
func (l *lookup[T]) served(ctx context.Context, s stored) (outcome[T], error) {
	if s.granted {
		l.refreshInBackground(ctx)
	}
	var o outcome[T]
	var err error
	o.val, _, err = l.ca.decode(l.key, s, resultCoalesced)
	o.result = resultCoalesced
	l.keepCopy(o.val, err, s)
	return o, err
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

// watch registers the lookup's interest in the wake-ups of the stored key
// (see hub.watch) and the wake channel its reads register; after Close the
// Cache no longer uses the Client's connection, and its waiters poll.
func (l *lookup[T]) watch() {
	ca := l.ca
	if ca.bg.isClosed() {
		t := newTopic()
		l.sub, l.woken = subscription{h: ca.c.hub, stored: l.k.value, t: t}, t.wake
		return
	}
	l.sub, l.woken = ca.c.hub.watch(l.k.value)
	l.k.wake = l.sub.channel
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
