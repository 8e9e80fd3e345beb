// Package backoff is the full-jitter exponential backoff shared by the
// instrument client's locks and its Redlock adapter: one definition of the
// defaults and of the wait before each retry.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy has the fields of instrument.Backoff, so that one converts to
// the other: Base caps the first wait, Max every wait, Retries counts the
// retries after the first attempt (negative: none).
type Policy struct {
	Base    time.Duration
	Max     time.Duration
	Retries int
}

// WithDefaults fills the zero fields: Base 5ms, Max 500ms, Retries 10; a
// negative Retries becomes 0.
func (p Policy) WithDefaults() Policy {
	if p.Base <= 0 {
		p.Base = 5 * time.Millisecond
	}
	if p.Max <= 0 {
		p.Max = 500 * time.Millisecond
	}
	if p.Retries == 0 {
		p.Retries = 10
	}
	if p.Retries < 0 {
		p.Retries = 0
	}
	return p
}

// Delay returns the wait before retry n (n ≥ 1): uniform in
// [0, min(Max, Base·2^(n-1))). Full jitter spreads contending workers
// apart instead of waking them in lockstep.
func (p Policy) Delay(n int) time.Duration {
	ceiling := p.Max
	if shift := n - 1; shift < 30 {
		if d := p.Base << shift; d > 0 && d < ceiling {
			ceiling = d
		}
	}
	return rand.N(ceiling)
}
