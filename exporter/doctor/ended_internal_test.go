package doctor

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A read cut by its connection deadline returns as soon as the deadline
// passes, possibly before the context's timer has fired: once the deadline
// has passed, the run must see its context as ended, however busy the
// machine.
func TestEndedErrOnceTheDeadlinePassed(t *testing.T) {
	for range 1000 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		dl, _ := ctx.Deadline()
		for time.Now().Before(dl) { // spin: a sleep would let the timer fire first
		}
		if err := endedErr(ctx); !errors.Is(err, context.DeadlineExceeded) {
			cancel()
			t.Fatalf("deadline passed, endedErr = %v; want context.DeadlineExceeded", err)
		}
		cancel()
	}
}
