package ctxsleep

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep = %v, want nil once the duration passed", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on an ended context = %v, want context.Canceled (and no hour's wait)", err)
	}
}

func TestEnded(t *testing.T) {
	if err := Ended(context.Background()); err != nil {
		t.Fatalf("Ended(Background) = %v", err)
	}
	live, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if err := Ended(live); err != nil {
		t.Fatalf("Ended(an hour left) = %v", err)
	}
	cancel()
	if err := Ended(live); !errors.Is(err, context.Canceled) {
		t.Fatalf("Ended(cancelled) = %v", err)
	}
	// A deadline passed that the context's timer has not marked yet.
	if err := Ended(unmarked{context.Background(), time.Now().Add(-time.Millisecond)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ended(deadline passed, not yet marked) = %v", err)
	}
}

// unmarked is a context whose deadline has passed but whose timer has not
// run yet.
type unmarked struct {
	context.Context
	dl time.Time
}

func (u unmarked) Deadline() (time.Time, bool) { return u.dl, true }
