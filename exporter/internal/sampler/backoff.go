package sampler

import "time"

// backoff is the retry schedule of one failed stage, or of a node that
// could not be sampled: a stage in its backoff is not tried again however
// often the node is sampled, and reports its last error meanwhile. Each
// stage owns its backoffs; a success resets them.
type backoff struct {
	until time.Time
	wait  time.Duration
	// err is the failure that started or extended the backoff.
	err *StageError
}

// due reports whether the stage may be tried again at now.
func (b *backoff) due(now time.Time) bool { return !now.Before(b.until) }

// fail starts or doubles the backoff: refused commands (ACL) are retried
// after interval, doubling up to 8 × interval (permissions rarely change by
// themselves); other failures after 1 s, doubling up to interval.
func (b *backoff) fail(now time.Time, interval time.Duration, se *StageError) {
	base, ceiling := time.Second, interval
	if se.Class == ClassNoPerm {
		base, ceiling = interval, 8*interval
	}
	if b.wait == 0 {
		b.wait = min(base, ceiling)
	} else {
		b.wait = min(2*b.wait, ceiling)
	}
	b.until, b.err = now.Add(b.wait), se
}

// reset ends the backoff after a success.
func (b *backoff) reset() { *b = backoff{} }
