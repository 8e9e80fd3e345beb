package sampler

import (
	"sync/atomic"
	"time"
)

// Bounds of the estimated server time per key a SCAN visits.
const (
	// defaultScanCost is used until the server's own accounting gives an
	// estimate: 1.5–1.8 µs per key was measured on a shared 2-core machine
	// at 1,000,000 and 10,000,000 keys (docs/exporter.md).
	defaultScanCost = 1500 * time.Nanosecond
	minScanCost     = 50 * time.Nanosecond
	maxScanCost     = 50 * time.Microsecond
	// minScanCostKeys is how many visited keys an estimate needs.
	minScanCostKeys = 10_000
)

// scanCost estimates the server's time per key SCAN visits, from INFO
// commandstats: the server time in SCAN between two INFO reads divided by
// the keys this sampler's SCAN calls visited meanwhile (calls × COUNT).
// Other clients' SCAN calls count against it, which errs on the side of a
// slower pass.
type scanCost struct {
	keys     atomic.Uint64 // visited since the last estimate; both passes add
	prevUsec uint64
	have     bool
	est      time.Duration
}

// visited records a SCAN call of COUNT n.
func (c *scanCost) visited(n int) { c.keys.Add(uint64(n)) }

// update takes a new reading of the server's SCAN time (usec).
func (c *scanCost) update(usec uint64) {
	keys := c.keys.Load()
	if !c.have || usec < c.prevUsec { // first reading, or the server restarted
		c.prevUsec, c.have = usec, true
		c.keys.Add(-keys)
		return
	}
	if keys < minScanCostKeys {
		return
	}
	per := time.Duration(float64(usec-c.prevUsec) * 1000 / float64(keys))
	c.est = min(max(per, minScanCost), maxScanCost)
	c.prevUsec = usec
	c.keys.Add(-keys)
}

// perKey is the current estimate.
func (c *scanCost) perKey() time.Duration {
	if c.est == 0 {
		return defaultScanCost
	}
	return c.est
}
