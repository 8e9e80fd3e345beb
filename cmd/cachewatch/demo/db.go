package demo

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// Product is the value the simulated services cache.
type Product struct {
	Key string `json:"key"`
	// LoadedAt is when the database answered, in Unix milliseconds: the
	// demo judges by it whether a served value was stale.
	LoadedAt int64 `json:"loaded_at"`
}

// database is the simulated source of truth: every load takes a latency
// drawn from a range with a slow tail, and is counted, so that the demo knows
// exactly how many calls reached it and how they group into refreshes.
type database struct {
	latency    func() time.Duration
	refreshGap time.Duration // loads of one key closer than this are one refresh

	mu         sync.Mutex
	calls      int64
	refreshes  int64
	stampedes  int64 // refreshes that took more than one call
	lastStart  map[string]time.Time
	perRefresh map[string]int64 // calls in the key's current refresh
}

func newDatabase(latency func() time.Duration, refreshGap time.Duration) *database {
	return &database{latency: latency, refreshGap: refreshGap,
		lastStart: map[string]time.Time{}, perRefresh: map[string]int64{}}
}

// defaultLatency is 100–200 ms (a query worth caching), with one load in
// ten taking 300–500 ms: the slow tail that outlives a too-short lock TTL.
func defaultLatency() time.Duration {
	if rand.IntN(10) == 0 {
		return 300*time.Millisecond + rand.N(200*time.Millisecond)
	}
	return 100*time.Millisecond + rand.N(100*time.Millisecond)
}

// Load answers key after the simulated latency (or ctx's end).
func (d *database) Load(ctx context.Context, key string) (Product, error) {
	d.count(key)
	t := time.NewTimer(d.latency())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return Product{}, ctx.Err()
	case <-t.C:
	}
	return Product{Key: key, LoadedAt: time.Now().UnixMilli()}, nil
}

// count records one call. A call starting within refreshGap of the previous
// call for the same key belongs to the same refresh (a stampede's calls all
// start within the waiters' patience, far less than the fresh TTL apart).
func (d *database) count(key string) {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	last, seen := d.lastStart[key]
	if !seen || now.Sub(last) >= d.refreshGap {
		d.refreshes++
		d.perRefresh[key] = 0
	}
	d.perRefresh[key]++
	if d.perRefresh[key] == 2 {
		d.stampedes++
	}
	d.lastStart[key] = now
}

// newPhase forgets when each key was last loaded, so that a phase's first
// loads start refreshes of their own rather than joining the last ones of
// the phase before.
func (d *database) newPhase() {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.lastStart)
	clear(d.perRefresh)
}

type dbCounts struct{ calls, refreshes, stampedes int64 }

func (d *database) counts() dbCounts {
	d.mu.Lock()
	defer d.mu.Unlock()
	return dbCounts{d.calls, d.refreshes, d.stampedes}
}
