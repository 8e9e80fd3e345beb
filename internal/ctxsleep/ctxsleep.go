// Package ctxsleep waits for a duration or until a context ends, whichever
// comes first: the backoff of the lock clients, the exporter's pacing and
// doctor's waits; and tells a call that its caller's context ended from
// one that failed (Ended).
package ctxsleep

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"
)

// Sleep waits d on the real clock, or returns ctx.Err() as soon as ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	return On(ctx, realClock, d)
}

var realClock = clockwork.NewRealClock()

// On waits d on clock (a fake one in tests), or returns ctx.Err() as soon
// as ctx ends.
func On(ctx context.Context, clock clockwork.Clock, d time.Duration) error {
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.Chan():
		return nil
	}
}

// Ended returns ctx's error when it has ended or its deadline has passed,
// else nil. A network deadline that go-redis set from ctx
// (ContextTimeoutEnabled) can fire just before ctx's own timer marks it
// done: a call failed by it was still cut off by the caller's deadline.
func Ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}
