// Package ctxsleep waits for a duration or until a context ends, whichever
// comes first: the backoff of the lock clients and doctor's waits.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits d, or returns ctx.Err() as soon as ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
