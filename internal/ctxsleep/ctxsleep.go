// Package ctxsleep waits for a duration or until a context ends, whichever
// comes first: the backoff of the lock clients, the exporter's pacing and
// doctor's waits.
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
