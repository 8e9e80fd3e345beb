package backoff

import (
	"testing"
	"time"
)

func TestBackoffFullJitterBounds(t *testing.T) {
	b := Policy{Base: 10 * time.Millisecond, Max: 80 * time.Millisecond}.WithDefaults()
	for n := 1; n <= 40; n++ {
		ceiling := b.Max
		if n <= 3 {
			ceiling = b.Base << (n - 1)
		}
		var max time.Duration
		for i := 0; i < 2000; i++ {
			d := b.Delay(n)
			if d < 0 || d >= ceiling {
				t.Fatalf("Delay(%d) = %v outside [0, %v)", n, d, ceiling)
			}
			if d > max {
				max = d
			}
		}
		// Full jitter uses the whole range, not just its top.
		if max < ceiling/2 {
			t.Fatalf("Delay(%d) never above %v in 2000 draws (ceiling %v)", n, max, ceiling)
		}
	}
	if got := (Policy{Retries: -1}).WithDefaults().Retries; got != 0 {
		t.Fatalf("negative Retries = %d after defaults, want 0", got)
	}
}
