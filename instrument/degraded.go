package instrument

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/cachewatch/cachewatch/internal/emit"
	"github.com/cachewatch/cachewatch/signals"
)

// errCallerGone marks a Redis call abandoned because the caller's context
// ended: not Redis's fault, so the breaker does not count it.
var errCallerGone = errors.New("caller context done")

// errStarved marks a round trip that timed out while this process was
// starved of CPU (see starvation): the breaker does not count it, and the
// lookup waits on, as for any slow round trip.
var errStarved = errors.New("process starved of CPU")

// degraded is the protection of a Cache against an unreachable Redis: every
// Redis call goes through a circuit breaker and is bounded in time; when
// Redis fails, callers go to the source directly, at most `limit` at a time.
//
// Slow is not down: only Redis failing (refused or broken connections,
// error replies, round trips unanswered until the breaker opens) sends a
// caller to the source. A round trip that timed out, or a call still
// waiting in the Cache's own queue, is waited for again (failing). The
// breaker counts a timed-out round trip only if this process was not
// starved of CPU meanwhile (starvation).
type degraded struct {
	breaker  *gobreaker.CircuitBreaker[[]any]
	slots    chan struct{}
	timeout  time.Duration
	patience time.Duration // RefreshClaimTTL: how long a lookup waits for a slow Redis
	rdb      redis.UniversalClient
	inFlight *emit.Gauge
	// fallbacks counts the lookups sent to the source, by cause; tripped
	// is the cause of the last failure the breaker counted, which is what
	// keeps it open.
	fallbacks *emit.CounterVec
	tripped   atomic.Pointer[string]
}

func newDegraded(rdb redis.UniversalClient, name string, o CacheOptions, m *metrics) *degraded {
	state := m.breakerState.WithLabelValues(name)
	state.Set(float64(gobreaker.StateClosed))
	failures := o.BreakerFailures
	d := &degraded{
		slots:     make(chan struct{}, o.FallbackConcurrency),
		timeout:   o.RedisTimeout,
		patience:  o.RefreshClaimTTL,
		rdb:       rdb,
		inFlight:  m.loaderInFlight.WithLabelValues(name),
		fallbacks: m.fallbacks.CurryWith(name),
	}
	d.breaker = gobreaker.NewCircuitBreaker[[]any](gobreaker.Settings{
		Name:        name,
		Timeout:     o.BreakerHalfOpenAfter,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		IsExcluded:  func(err error) bool { return errors.Is(err, errCallerGone) || errors.Is(err, errStarved) },
		IsSuccessful: func(err error) bool {
			if err == nil {
				return true
			}
			cause := failureCause(err)
			d.tripped.Store(&cause)
			return false
		},
		OnStateChange: func(_ string, _, to gobreaker.State) { state.Set(float64(to)) },
	})
	for _, cause := range signals.FallbackCauses {
		d.fallbacks.WithLabelValues(cause) // at 0 from the start: a rate of no fallbacks reads 0, not nothing
	}
	return d
}

// failureCause names the failure err shows of Redis (a fallback's cause):
// a round trip unanswered in time, an error reply, or else a connection
// that could not be made or broke.
func failureCause(err error) string {
	var reply redis.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return signals.FallbackTimeout
	case errors.As(err, &reply):
		return signals.FallbackRedisError
	default:
		return signals.FallbackRedisDown
	}
}

// failing reports whether err shows Redis failing, and then the cause to
// count the fallback under: the breaker refused the call (under the failure
// that opened it), the connection failed or Redis replied an error. A
// round trip that timed out while the breaker stays closed (errStarved
// among them), a call that waited in the Cache's queue and a caller that
// left are not Redis failing:
// the lookup waits for Redis instead (or ends with its caller).
func (d *degraded) failing(err error) (cause string, ok bool) {
	switch {
	case err == nil, errors.Is(err, errCallerGone), errors.Is(err, errNotSent), errors.Is(err, errQueued):
		return "", false
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
		if c := d.tripped.Load(); c != nil {
			return *c, true
		}
		return signals.FallbackRedisDown, true
	case errors.Is(err, context.DeadlineExceeded):
		return "", false
	}
	return failureCause(err), true
}

// errBreakerOpen is the error of a lookup that found the breaker open
// before it asked Redis anything.
var errBreakerOpen = redisErr("fetch", gobreaker.ErrOpenState)

// call runs one Redis round trip through the breaker, bounded by the
// Redis timeout and by ctx. With the breaker open it fails at once.
func (d *degraded) call(ctx context.Context, op string, fn func(context.Context) ([]any, error)) ([]any, error) {
	res, err := d.breaker.Execute(func() ([]any, error) {
		t, callerLeaves := d.timeoutFor(ctx)
		rctx, cancel := context.WithTimeout(ctx, t)
		defer cancel()
		res, err := d.bounded(rctx, fn)
		switch {
		case err == nil:
		case ctx.Err() != nil || callerLeaves && rctx.Err() != nil:
			return nil, fmt.Errorf("%w: %w", errCallerGone, err)
		case errors.Is(err, context.DeadlineExceeded) && d.starvedDuring(rctx, t):
			return nil, fmt.Errorf("%w: %w", errStarved, err)
		}
		return res, err
	})
	if err != nil {
		return nil, redisErr(op, err)
	}
	return res, nil
}

// starvedDuring reports whether the round trip bounded by ctx (timeout t)
// timed out because this process was starved of CPU.
func (d *degraded) starvedDuring(ctx context.Context, t time.Duration) bool {
	dl, _ := ctx.Deadline()
	return processStarvation().starved(dl, t)
}

// bounded runs fn, returning by the time ctx ends even if the go-redis
// client ignores deadlines (lock.go's bounded does the work).
func (d *degraded) bounded(ctx context.Context, fn func(context.Context) ([]any, error)) ([]any, error) {
	return bounded(ctx, d.rdb, func() ([]any, error) { return fn(ctx) }, nil)
}

// callerDeadlineKey carries the deadline of the caller that started a
// flight (whose own context is detached from it).
type callerDeadlineKey struct{}

// withCallerDeadline records dl as the caller's deadline; the zero time
// means none (a background refresh).
func withCallerDeadline(ctx context.Context, dl time.Time) context.Context {
	return context.WithValue(ctx, callerDeadlineKey{}, dl)
}

// callerDeadline is the deadline withCallerDeadline recorded in ctx; the
// zero time for none.
func callerDeadline(ctx context.Context) time.Time {
	dl, _ := ctx.Value(callerDeadlineKey{}).(time.Time)
	return dl
}

// callerBound returns ctx, ending at the deadline of the caller who started
// the lookup if it had one: a caller that has gone must not keep a source
// slot waiting.
func (l *lookup[T]) callerBound(ctx context.Context) (context.Context, context.CancelFunc) {
	if !l.deadline.IsZero() {
		return context.WithDeadline(ctx, l.deadline)
	}
	return ctx, func() {}
}

// timeoutFor is the time one Redis call may take: RedisTimeout, or half of
// what is left of the caller's deadline when that is shorter, so that the
// process's copy of the value (LocalCopies) can still answer the caller in
// time. callerLeaves: the call's end is then the caller's, not Redis
// failing, and the breaker does not count it.
func (d *degraded) timeoutFor(ctx context.Context) (t time.Duration, callerLeaves bool) {
	if left, ok := callerLeft(ctx); ok && left/2 < d.timeout {
		return max(left/2, time.Millisecond), true
	}
	return d.timeout, false
}

// callerLeft is what is left of the deadline of the caller that started a
// flight; ok is false when it had none or has already left (the flight then
// serves only those that joined it, with the full timeout).
func callerLeft(ctx context.Context) (left time.Duration, ok bool) {
	dl, ok := ctx.Value(callerDeadlineKey{}).(time.Time)
	if !ok || dl.IsZero() {
		return 0, false
	}
	left = time.Until(dl)
	return left, left > 0
}

// queuedBound is how long a call queued behind the Cache's round trips in
// flight may wait to be sent and answered: the caller's share of its
// deadline, as timeoutFor gives it (callerLeaves), else RefreshClaimTTL. A queue
// in this process is not Redis failing, so it is not bounded by
// RedisTimeout: on a starved process the calls ahead of it take what the
// scheduler gives them.
func (d *degraded) queuedBound(ctx context.Context) (t time.Duration, callerLeaves bool) {
	if t, callerLeaves := d.timeoutFor(ctx); callerLeaves {
		return t, true
	}
	return d.patience, false
}

// open reports whether the breaker currently refuses Redis calls.
func (d *degraded) open() bool { return d.breaker.State() == gobreaker.StateOpen }

// acquire takes one of the fallback's source slots, waiting at most until
// ctx ends. release must follow a successful acquire.
func (d *degraded) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if expired(ctx) {
		return context.DeadlineExceeded
	}
	select {
	case d.slots <- struct{}{}:
		d.inFlight.Inc()
		return nil
	default:
	}
	select {
	case d.slots <- struct{}{}:
		if expired(ctx) { // both were ready: the deadline wins
			<-d.slots
			return context.DeadlineExceeded
		}
		d.inFlight.Inc()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// expired reports whether ctx's deadline has passed, even if its timer has
// not fired yet (a slot freed in that instant must not go to a caller that
// has already left).
func expired(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

func (d *degraded) release() {
	d.inFlight.Dec()
	<-d.slots
}

// fallback serves a lookup from the source directly because Redis failed
// (err, counted under cause: see degraded.failing): bounded concurrency,
// bounded by ctx, nothing written.
func (l *lookup[T]) fallback(ctx context.Context, err error, cause string) (outcome[T], error) {
	ca := l.ca
	o := outcome[T]{result: resultError}
	if revalidating(ctx) { // a background revalidation does not load past a failed Redis
		return o, err
	}
	ca.deg.fallbacks.WithLabelValues(cause).Inc()
	ctx, cancelLoad := ca.claimBound(ctx)
	defer cancelLoad()
	span := trace.SpanFromContext(ctx)
	span.AddEvent("fallback", trace.WithAttributes(attribute.String("cause", cause), attribute.String("error", err.Error())))
	actx, cancel := l.callerBound(ctx)
	defer cancel()
	if aerr := ca.deg.acquire(actx); aerr != nil {
		ca.c.m.loaderCalls.WithLabelValues(l.group, "rejected").Inc()
		return o, fmt.Errorf("cachewatch: fetch %q: Redis unavailable (%w) and no source slot free: %w", l.key, err, aerr)
	}
	defer ca.deg.release()
	v, lerr := ca.callLoader(ctx, l.group, l.load)
	if lerr != nil {
		return o, fmt.Errorf("cachewatch: fetch %q: Redis unavailable (%w), load: %w", l.key, err, lerr)
	}
	o.val, o.result = v, resultFallback
	return o, nil
}
