package instrument

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/trace"

	"github.com/cachewatch/cachewatch/internal/luascript"
)

// stored is a decoded reply of the read script.
type stored struct {
	state      int64 // 0 missing, 1 fresh, 2 stale, 3 past hard TTL
	granted    bool  // the caller holds the refresh claim
	takenOver  bool  // granted, from a holder whose process is gone
	failing    bool  // a failed load holds the claim for its hold-off
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

// read runs the read script: one round trip for the value, its state and,
// when due, the refresh claim, offered under the returned token.
//
// Slow is not down: a read that Redis did not answer within RedisTimeout,
// or that waited in this Cache's queue, is sent again for as long as the
// breaker lets it, the caller waits and RefreshClaimTTL allows. On a starved
// process or a slow Redis, a flight sent to the source instead would load
// once per process, not once for the fleet — with batched reads, every
// flight of the batch would. Only Redis failing ends the wait early (the
// breaker opens after BreakerFailures timed-out round trips in a row).
//
// Every attempt offers the claim under the same token (l.token, new for
// each read), and the script grants a claim again to the token that holds
// it: whichever attempt Redis ran first, the answered one tells the flight
// it holds the claim. A read abandoned at last, if an attempt may have
// reached Redis, has its claim released as an orphan.
func (l *lookup[T]) read(ctx context.Context) (stored, error) {
	ca := l.ca
	l.token = ca.c.claimToken(ca.c.hub.holder())
	var s stored
	mayHaveRun, err := ca.patiently(ctx, l.key, func() (err error) {
		s, err = ca.readOnce(ctx, l.k, l.token)
		return err
	})
	if err != nil && mayHaveRun {
		ca.releaseOrphan(l.k, l.token)
	}
	l.pastHard = s.state == stateExpired
	if s.takenOver {
		trace.SpanFromContext(ctx).AddEvent("claim taken over: its holder's process is gone")
		ca.c.log.LogAttrs(ctx, slog.LevelDebug, "cachewatch fetch", slog.String("key_group", l.group),
			slog.String("key", l.key), slog.String("outcome", "claim_taken_over"))
	}
	return s, err
}

// patiently runs attempt until it succeeds, again while Redis is slow
// rather than failing (waitOn) for key. mayHaveRun reports whether a failed
// attempt may have reached Redis: on success, whether Redis may have run an
// earlier one too.
func (ca *Cache[T]) patiently(ctx context.Context, key string, attempt func() error) (mayHaveRun bool, err error) {
	var until time.Time
	for {
		if err = attempt(); err == nil {
			return mayHaveRun, nil
		}
		mayHaveRun = mayHaveRun || sentToRedis(err)
		if !ca.waitOn(ctx, key, err, &until) {
			return mayHaveRun, err
		}
		trace.SpanFromContext(ctx).AddEvent("Redis did not answer in time, sending again")
	}
}

// sentToRedis reports whether a failed call may have reached Redis: it was
// neither refused by the breaker nor abandoned before it was sent.
func sentToRedis(err error) bool {
	return !errors.Is(err, gobreaker.ErrOpenState) && !errors.Is(err, gobreaker.ErrTooManyRequests) && !errors.Is(err, errNotSent)
}

// waitOn reports whether a failed read of key is sent again: Redis is
// slow, not failing (degraded.failing), the caller is there, and RefreshClaimTTL
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
		*until = time.Now().Add(ca.o.RefreshClaimTTL)
	}
	return time.Now().Before(*until)
}

// readOnce runs the read script once, under token.
func (ca *Cache[T]) readOnce(ctx context.Context, k keys, token string) (stored, error) {
	xf := 0.0
	if ca.o.Beta > 0 {
		xf = ca.o.Beta * -math.Log(1-rand.Float64()) // 1-U is in (0, 1]
	}
	v, err := ca.run(ctx, newScriptCall("fetch read", luascript.FetchRead, []string{k.value, k.claim, k.waiters},
		ca.c.now().UnixMilli(), xf, ca.o.RefreshClaimTTL.Milliseconds(), token, k.wake))
	if err != nil {
		return stored{}, err
	}
	res, _ := v.([]any)
	return parseStored(res)
}

// releaseOrphan releases the claim that an abandoned read (Redis stalled or
// the call timed out) may yet grant when Redis runs it: otherwise nobody
// could refresh the key until RefreshClaimTTL passed. Redis may run the read only
// once it recovers, so the release is sent, off every caller's path, after
// RedisTimeout, 1s and 4s — three answered attempts, stopping at the one
// that releases the claim. An attempt Redis did not answer (each is given
// at least a second) does not count, and the next waits 1, 2, then 4s: a
// slow Redis or a starved process is given time, as a lookup's reads are,
// until RefreshClaimTTL has passed (the claim has then run out anyway).
//
// Close cuts the waits short: one last attempt, bounded by RedisTimeout,
// then the goroutine ends (a claim it could not release expires after
// RefreshClaimTTL).
func (ca *Cache[T]) releaseOrphan(k keys, token string) {
	ca.bg.start(func() {
		until := time.Now().Add(ca.o.RefreshClaimTTL)
		waits := []time.Duration{ca.o.RedisTimeout, time.Second, 4 * time.Second}
		backoff := time.Second // between attempts Redis did not answer
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
			} else {
				waits[0], backoff = backoff, min(2*backoff, 4*time.Second)
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
	s.granted, s.takenOver = granted >= 1, granted == 2
	if s.state != stateFresh && s.state != stateStale {
		if len(res) > 2 {
			failing, _ := res[2].(int64)
			s.failing = failing == 1
		}
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

// giveBack releases a refresh claim this Cache will not use, bounded by the
// Redis timeout (if that fails, the claim expires after RefreshClaimTTL).
func (ca *Cache[T]) giveBack(k keys, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), ca.o.RedisTimeout)
	defer cancel()
	_, _ = ca.release(ctx, k, token)
}

// release releases the claim token holds, if it still does, bounded by
// ctx, and reports whether it did.
func (ca *Cache[T]) release(ctx context.Context, k keys, token string) (bool, error) {
	n, err := luascript.FetchRelease.Run(ca.c.ctx(ctx), ca.c.rdb, []string{k.claim}, token).Int64()
	return n == 1, err
}
