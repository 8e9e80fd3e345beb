// Package burst detects miss bursts: a key group whose cache misses within a
// short window reach a threshold — the signature of a stampede in progress.
package burst

import (
	"sync"
	"sync/atomic"
	"time"
)

// Defaults used when Options leaves a field zero.
const (
	DefaultWindow    = time.Second
	DefaultThreshold = 50
)

// Options configures a Detector. The zero value is usable.
type Options struct {
	// Window is the length of the fixed counting window (default 1s).
	Window time.Duration
	// Threshold is the number of misses in one window that makes a burst
	// (default 50).
	Threshold int64
	// OnBurst is called once per window in which a group's misses reach the
	// threshold, on the goroutine whose miss reached it.
	OnBurst func(group string)
	// Now is the clock (default time.Now); tests inject their own.
	Now func() time.Time
}

// Detector counts misses per key group in fixed windows. It is safe for
// concurrent use and does not allocate once a group has been seen. Groups
// must come from a bounded classifier: the detector keeps one small record
// per group for its lifetime.
type Detector struct {
	window    int64
	threshold int64
	onBurst   func(string)
	now       func() time.Time

	groups atomic.Pointer[map[string]*counter] // copy-on-write
	mu     sync.Mutex
	bursts atomic.Uint64
}

type counter struct {
	start atomic.Int64 // window start, unix nanoseconds
	n     atomic.Int64
}

// New returns a Detector for opts.
func New(opts Options) *Detector {
	d := &Detector{window: int64(opts.Window), threshold: opts.Threshold, onBurst: opts.OnBurst, now: opts.Now}
	if d.window <= 0 {
		d.window = int64(DefaultWindow)
	}
	if d.threshold <= 0 {
		d.threshold = DefaultThreshold
	}
	if d.now == nil {
		d.now = time.Now
	}
	m := map[string]*counter{}
	d.groups.Store(&m)
	return d
}

// Miss records one miss of group and reports whether it completed a burst.
func (d *Detector) Miss(group string) bool {
	now := d.now().UnixNano()
	c := d.counter(group)
	start := c.start.Load()
	if now-start >= d.window && c.start.CompareAndSwap(start, now) {
		c.n.Store(0)
	}
	if c.n.Add(1) != d.threshold {
		return false
	}
	d.bursts.Add(1)
	if d.onBurst != nil {
		d.onBurst(group)
	}
	return true
}

// Bursts returns the number of bursts detected so far.
func (d *Detector) Bursts() uint64 { return d.bursts.Load() }

func (d *Detector) counter(group string) *counter {
	if c, ok := (*d.groups.Load())[group]; ok {
		return c
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	old := *d.groups.Load()
	if c, ok := old[group]; ok {
		return c
	}
	next := make(map[string]*counter, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	c := &counter{}
	next[group] = c
	d.groups.Store(&next)
	return c
}
