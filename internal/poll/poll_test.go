package poll

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestCheckReturnsOnceTheCheckPasses(t *testing.T) {
	var n atomic.Int64
	err := Check(context.Background(), time.Minute, time.Millisecond, func() error {
		if n.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || n.Load() != 3 {
		t.Fatalf("Check = %v after %d checks, want nil after 3", err, n.Load())
	}
}

func TestCheckGivesTheLastErrorAtItsBound(t *testing.T) {
	last := errors.New("still down")
	err := Check(context.Background(), 0, time.Millisecond, func() error { return last })
	if !errors.Is(err, last) {
		t.Fatalf("Check past its bound = %v, want the check's last error", err)
	}
}

func TestCheckEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	last := errors.New("still down")
	err := Check(ctx, time.Hour, time.Hour, func() error { return last })
	if !errors.Is(err, context.Canceled) || !errors.Is(err, last) {
		t.Fatalf("Check on an ended context = %v, want context.Canceled and the last error (and no hour's wait)", err)
	}
}

// failRecorder records a Fatalf instead of ending the test.
type failRecorder struct {
	testing.TB
	failed bool
}

func (r *failRecorder) Helper()               {}
func (r *failRecorder) Fatalf(string, ...any) { r.failed = true }

func TestUntil(t *testing.T) {
	var n atomic.Int64
	r := &failRecorder{TB: t}
	Until(r, "the third check", func() bool { return n.Add(1) == 3 })
	if r.failed || n.Load() != 3 {
		t.Fatalf("Until failed=%v after %d checks, want success after 3", r.failed, n.Load())
	}
}
