package demo

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// truth is what the demo counts itself, beside the metrics, so that the
// report can show each signal next to what really happened.
type truth struct {
	requests atomic.Int64
	misses   atomic.Int64 // GET answered nil (unprotected services only)
	stale    atomic.Int64 // values served older than the fresh TTL

	firstAttempts atomic.Int64 // lock attempts that were an owner's first
	firstBusy     atomic.Int64 // … answered "held by someone else", then retried (or the job's)
	jobTries      atomic.Int64 // tries of the periodic job's lock: try-once, losers skip the run
	jobBusy       atomic.Int64 // … answered "held by someone else"
	// skippedBusy are first attempts answered busy whose caller did not
	// retry within the hooks' retry horizon (it found the value instead,
	// or a busy machine stalled it): try-once, as the hook infers.
	skippedBusy atomic.Int64
	locksLost   atomic.Int64 // holders whose lock ended before their release
	// jobLockLost are the job's runs whose lock ended under them, before
	// their release: found gone or taken at release (unprotected), or lost
	// (cachewatch); jobLockTaken those of them whose release found another
	// instance holding it (unprotected: two instances ran the job at once).
	jobLockLost  atomic.Int64
	jobLockTaken atomic.Int64

	olderWrites  atomic.Int64 // writes that carried an older version than the stored one
	olderLanded  atomic.Int64 // … and replaced the newer value
	olderRefused atomic.Int64 // … and were refused by compare-and-set

	latency latencies
}

// latencies records every caller's latency with its time in the phase.
type latencies struct {
	mu      sync.Mutex
	start   time.Time
	offsets []time.Duration
	values  []time.Duration
}

func (l *latencies) record(at time.Time, d time.Duration) {
	l.mu.Lock()
	l.offsets = append(l.offsets, at.Sub(l.start))
	l.values = append(l.values, d)
	l.mu.Unlock()
}

// callerLatency is the p50 and p99 of the callers' latencies over a
// stretch of a phase, and how many latencies there were.
type callerLatency struct {
	p50, p99 time.Duration
	n        int
}

// quantiles returns the p50 and p99 of the latencies recorded in
// [from, to) of the phase.
func (l *latencies) quantiles(from, to time.Duration) callerLatency {
	l.mu.Lock()
	var vs []time.Duration
	for i, off := range l.offsets {
		if off >= from && off < to {
			vs = append(vs, l.values[i])
		}
	}
	l.mu.Unlock()
	if len(vs) == 0 {
		return callerLatency{}
	}
	slices.Sort(vs)
	return callerLatency{p50: quantile(vs, 0.50), p99: quantile(vs, 0.99), n: len(vs)}
}

// quantile is the nearest-rank quantile of sorted values.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// versions tracks, per key, the newest version written, so that the demo
// knows whether each write carried an older version. Writes of a key are
// serialised through it, so the order it sees is the order Redis applied.
type versions struct {
	mu     sync.Mutex
	newest map[string]int64
	keys   map[string]*sync.Mutex
}

func newVersions() *versions {
	return &versions{newest: map[string]int64{}, keys: map[string]*sync.Mutex{}}
}

// write calls do (the Redis write) with the key's writes serialised and
// reports whether version was older than the newest written before it.
// do reports whether the write was applied.
func (v *versions) write(key string, version int64, do func() (applied bool, err error)) (older, applied bool, err error) {
	v.mu.Lock()
	km, ok := v.keys[key]
	if !ok {
		km = &sync.Mutex{}
		v.keys[key] = km
	}
	v.mu.Unlock()

	km.Lock()
	defer km.Unlock()
	v.mu.Lock()
	older = version < v.newest[key]
	v.mu.Unlock()
	if applied, err = do(); err != nil || !applied {
		return older, applied, err
	}
	v.mu.Lock()
	v.newest[key] = max(v.newest[key], version)
	v.mu.Unlock()
	return older, applied, nil
}
