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
	// Window is the length of the fixed counting windows, aligned on
	// multiples of it since the Unix epoch (default 1s).
	Window time.Duration
	// Threshold is the number of misses in one window that makes a burst
	// (default 50, at most MaxThreshold).
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
//
// Windows are aligned on multiples of Window since the Unix epoch. A
// group's window and its count share one atomic word, changed by
// compare-and-swap, so a miss is counted in exactly one window and a
// window's reset cannot interleave with its misses: bursts are exact under
// concurrency.
type Detector struct {
	window    int64
	threshold uint64
	onBurst   func(string)
	now       func() time.Time

	groups atomic.Pointer[map[string]*Group] // copy-on-write
	mu     sync.Mutex
	bursts atomic.Uint64
}

// A Group's state packs the window's index (mod 2^windowBits) above the
// misses counted in it (saturating at maxCount).
const (
	countBits  = 24
	windowBits = 64 - countBits
	maxCount   = 1<<countBits - 1
	windowMask = 1<<windowBits - 1
)

// MaxThreshold is the largest usable Threshold; larger ones are lowered to it.
const MaxThreshold = maxCount

// New returns a Detector for opts.
func New(opts Options) *Detector {
	d := &Detector{window: int64(opts.Window), onBurst: opts.OnBurst, now: opts.Now}
	if d.window <= 0 {
		d.window = int64(DefaultWindow)
	}
	switch {
	case opts.Threshold <= 0:
		d.threshold = DefaultThreshold
	case opts.Threshold > MaxThreshold:
		d.threshold = MaxThreshold
	default:
		d.threshold = uint64(opts.Threshold)
	}
	if d.now == nil {
		d.now = time.Now
	}
	m := map[string]*Group{}
	d.groups.Store(&m)
	return d
}

// Group is one key group's misses. Callers resolve it once (Detector.Group)
// and count many misses: a stampede's callers each count one at the
// bottom of a fresh goroutine's stack, where a map lookup per miss made
// every one of them grow its stack (instrument's
// TestCrowdCallersKeepTheirFirstStack).
type Group struct {
	d     *Detector
	name  string
	state atomic.Uint64 // see countBits
}

// Miss records one miss of g and reports whether it completed a burst.
func (g *Group) Miss() bool {
	d := g.d
	window := uint64(d.now().UnixNano()/d.window) & windowMask
	for {
		old := g.state.Load()
		next := window<<countBits | 1
		if cur := old >> countBits; old != 0 && !after(window, cur) {
			// The current window, or a later one than this miss's clock
			// reading (its goroutine was preempted): count it there.
			if old&maxCount == maxCount {
				return false
			}
			next = old + 1
		}
		if g.state.CompareAndSwap(old, next) {
			if next&maxCount != d.threshold {
				return false
			}
			break
		}
	}
	d.bursts.Add(1)
	if d.onBurst != nil {
		d.onBurst(g.name)
	}
	return true
}

// after reports whether window a comes after window b, both mod 2^windowBits.
func after(a, b uint64) bool {
	diff := (a - b) & windowMask
	return diff != 0 && diff < 1<<(windowBits-1)
}

// Bursts returns the number of bursts detected so far.
func (d *Detector) Bursts() uint64 { return d.bursts.Load() }

// Group returns group's counter, made on first sight: groups must come
// from a bounded classifier.
func (d *Detector) Group(group string) *Group {
	if g, ok := (*d.groups.Load())[group]; ok {
		return g
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	old := *d.groups.Load()
	if g, ok := old[group]; ok {
		return g
	}
	next := make(map[string]*Group, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	g := &Group{d: d, name: group}
	next[group] = g
	d.groups.Store(&next)
	return g
}
