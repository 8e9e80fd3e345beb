package instrument

import (
	"time"

	"github.com/cachewatch/cachewatch/internal/backoff"
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

func (b Backoff) withDefaults() backoff.Policy { return backoff.Policy(b).WithDefaults() }
