package crowd

import (
	"errors"
	"sync/atomic"
	"testing"
)

func TestRun(t *testing.T) {
	var calls atomic.Int64
	lat, failed := Run(50, func() error {
		if calls.Add(1)%5 == 0 {
			return errors.New("every fifth fails")
		}
		return nil
	})
	if len(lat) != 50 || calls.Load() != 50 || failed != 10 {
		t.Fatalf("%d latencies, %d calls, %d failed; want 50, 50 and 10", len(lat), calls.Load(), failed)
	}
	for i, d := range lat {
		if d <= 0 {
			t.Fatalf("latency %d is %v, want it measured", i, d)
		}
	}
}
