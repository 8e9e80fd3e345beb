package instrument

import (
	"math/rand/v2"
	"time"
)

// Backoff is exponential backoff with full jitter: before retry n (from 1)
// the wait is uniform in [0, min(Max, Base·2^(n-1))). Full jitter spreads
// contending workers apart instead of waking them in lockstep.
type Backoff struct {
	// Base is the cap of the first wait (default 5ms).
	Base time.Duration
	// Max caps every wait (default 500ms).
	Max time.Duration
	// Retries is the number of retries after the first attempt (default 10).
	// A negative value means no retries.
	Retries int
}

func (b Backoff) withDefaults() Backoff {
	if b.Base <= 0 {
		b.Base = 5 * time.Millisecond
	}
	if b.Max <= 0 {
		b.Max = 500 * time.Millisecond
	}
	if b.Retries == 0 {
		b.Retries = 10
	}
	if b.Retries < 0 {
		b.Retries = 0
	}
	return b
}

// delay returns the full-jitter wait before retry n (n ≥ 1).
func (b Backoff) delay(n int) time.Duration {
	ceiling := b.Max
	if shift := n - 1; shift < 30 {
		if d := b.Base << shift; d > 0 && d < ceiling {
			ceiling = d
		}
	}
	return rand.N(ceiling)
}
