package instrument

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cachewatch/cachewatch/internal/emit"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
)

// errCallerGone marks a Redis call abandoned because the caller's context
// ended: not Redis's fault, so the breaker does not count it.
var errCallerGone = errors.New("caller context done")

// degraded is the protection of a Cache against an unreachable Redis: every
// Redis call goes through a circuit breaker and is bounded in time; when
// Redis fails, callers go to the source directly, at most `limit` at a time.
type degraded struct {
	breaker  *gobreaker.CircuitBreaker[[]any]
	slots    chan struct{}
	timeout  time.Duration
	rdb      redis.UniversalClient
	inFlight *emit.Gauge
}

func newDegraded(rdb redis.UniversalClient, name string, o CacheOptions, m *metrics) *degraded {
	state := m.breakerState.WithLabelValues(name)
	state.Set(float64(gobreaker.StateClosed))
	failures := o.BreakerFailures
	return &degraded{
		breaker: gobreaker.NewCircuitBreaker[[]any](gobreaker.Settings{
			Name:          name,
			Timeout:       o.BreakerOpenFor,
			ReadyToTrip:   func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
			IsExcluded:    func(err error) bool { return errors.Is(err, errCallerGone) },
			OnStateChange: func(_ string, _, to gobreaker.State) { state.Set(float64(to)) },
		}),
		slots:    make(chan struct{}, o.FallbackConcurrency),
		timeout:  o.RedisTimeout,
		rdb:      rdb,
		inFlight: m.sourceInFlight.WithLabelValues(name),
	}
}

// call runs one Redis round trip through the breaker, bounded by the
// Redis timeout and by ctx. With the breaker open it fails at once.
func (d *degraded) call(ctx context.Context, op string, fn func(context.Context) ([]any, error)) ([]any, error) {
	res, err := d.breaker.Execute(func() ([]any, error) {
		rctx, cancel := context.WithTimeout(ctx, d.timeoutFor(ctx))
		defer cancel()
		res, err := d.bounded(rctx, fn)
		if err != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", errCallerGone, err)
		}
		return res, err
	})
	if err != nil {
		return nil, redisErr(op, err)
	}
	return res, nil
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

// callerBound returns ctx, ending at the flight's caller's deadline if it
// had one: a caller that has gone must not keep a source slot waiting.
func callerBound(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Value(callerDeadlineKey{}).(time.Time); ok && !dl.IsZero() {
		return context.WithDeadline(ctx, dl)
	}
	return ctx, func() {}
}

// timeoutFor is the time one Redis call may take: RedisTimeout, but at most
// half of what is left of the caller's deadline, so that a stalled Redis
// still leaves the caller time to be served by the fallback.
func (d *degraded) timeoutFor(ctx context.Context) time.Duration {
	t := d.timeout
	if dl, ok := ctx.Value(callerDeadlineKey{}).(time.Time); ok && !dl.IsZero() {
		// Past the deadline the caller has left; the flight now serves
		// only those that joined it, with the full timeout.
		if left := time.Until(dl); left > 0 {
			t = min(t, max(left/2, time.Millisecond))
		}
	}
	return t
}

// queuedBound is how long a read queued behind another batch may wait for
// its own: the caller's share of its deadline when that is the tighter
// bound (so the fallback still has time), else two Redis timeouts — one
// for the batch ahead of it, one for its own. Waiting in this process's
// own queue is not Redis failing, so only the round trips are bounded by
// (and counted against) RedisTimeout.
func (d *degraded) queuedBound(ctx context.Context) time.Duration {
	if t := d.timeoutFor(ctx); t < d.timeout {
		return t
	}
	return 2 * d.timeout
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
