package exporter

import (
	"container/heap"
	"math"
	"time"
)

// Horizons of cachewatch_exporter_keys_expiring, cumulative; the last one is
// every key with a TTL.
var horizons = []struct {
	label string
	d     time.Duration
}{
	{"1s", time.Second}, {"10s", 10 * time.Second}, {"1m", time.Minute}, {"10m", 10 * time.Minute},
	{"1h", time.Hour}, {"1d", 24 * time.Hour}, {"inf", math.MaxInt64},
}

// syncHorizon bounds the expiry-synchronisation score to keys expiring within
// it, which bounds the per-group memory to one counter per second.
const syncHorizon = time.Hour

// ExpiringWithin counts the keys of a group whose TTL is at most Within
// (cumulative over horizons). Label is the "within" label value: "1s",
// "10s", "1m", "10m", "1h", "1d", and "inf" (every key with a TTL, Within
// the largest Duration).
type ExpiringWithin struct {
	Label  string
	Within time.Duration
	Keys   uint64
}

// GroupStats is the expiry shape and lock state of one key group: keys from
// the whole-keyspace pass, locks from the lock pass.
type GroupStats struct {
	Keys, NoTTL uint64
	// Expiring has one entry per horizon, shortest first.
	Expiring []ExpiringWithin
	// SyncScore is the keys expiring in the group's busiest second divided
	// by what an even spread until its last expiry (within an hour) would
	// put in one second, at least one key: 1 is even, K means K keys share
	// one second. 0 when no key expires within the hour.
	SyncScore float64
	// BusiestSecond is the number of keys in the busiest second.
	BusiestSecond uint64

	Locks, LocksNoTTL, LocksLongHeld uint64
	// LocksLongHeldNoTTL counts the long-held locks that also have no
	// expiry (doctor reports those once, as locks without TTL).
	LocksLongHeldNoTTL uint64
	// LocksLongHeldPastTTL counts the long-held locks with a TTL whose
	// token was held longer than the TTL it had when first seen: the owner
	// kept extending the lease (doctor judges long-held by these).
	LocksLongHeldPastTTL uint64
	// LocksExpiring counts the locks whose remaining TTL is within each
	// horizon (cumulative, shortest first); locks without TTL are not in
	// it.
	LocksExpiring []ExpiringWithin

	// MemoryBytes estimates the memory of the group's keys: the mean
	// MEMORY USAGE of the MemorySampled keys read times Keys (0 when no
	// key was sampled).
	MemoryBytes   float64
	MemorySampled uint64
	memorySum     uint64

	expiringN     [7]uint64        // per horizon, as Expiring
	lockExpiringN [7]uint64        // per horizon, as LocksExpiring
	expirySeconds map[int64]uint32 // unix second → keys expiring then
}

// expiring returns the horizon counts as Expiring.
func (g *GroupStats) expiring() []ExpiringWithin { return withinHorizons(&g.expiringN) }

// lockExpiring returns the lock horizon counts as LocksExpiring.
func (g *GroupStats) lockExpiring() []ExpiringWithin { return withinHorizons(&g.lockExpiringN) }

func withinHorizons(n *[7]uint64) []ExpiringWithin {
	out := make([]ExpiringWithin, len(horizons))
	for i, h := range horizons {
		out[i] = ExpiringWithin{Label: h.label, Within: h.d, Keys: n[i]}
	}
	return out
}

// HotKey is a key with a high LFU access frequency (OBJECT FREQ). Keys are
// only reported by doctor, never as labels.
type HotKey struct {
	Key   string `json:"key"`
	Group string `json:"key_group"`
	Freq  int64  `json:"freq"`
	NoTTL bool   `json:"no_ttl"`
}

// Pass is the keyspace view of a node: the key figures of a whole-keyspace
// SCAN pass (which may span several samples) and the lock figures shown
// (see LocksAsOf).
type Pass struct {
	Started, Completed time.Time
	// Complete is false for a pass still in progress (served only until the
	// first pass completes); Keys then counts the keys seen so far.
	Complete bool
	Keys     uint64
	Groups   map[string]*GroupStats
	// LocksAsOf is the moment the lock figures shown describe: with
	// keyspace notifications (LocksNotified), a moment the index was exact
	// at, found by the last sample that found one; without, the end of the
	// SCAN pass they come from (a lock written during the pass behind its
	// cursor is missing from it). Zero when no lock figures are shown.
	LocksAsOf     time.Time
	LocksNotified bool
	// LockPassStarted and LockPassEnded are when the last complete lock
	// pass (SCAN … MATCH over the keyspace) started and ended.
	LockPassStarted, LockPassEnded time.Time
	// TokensRead is false when lock values could not be read (NOPERM on
	// GETRANGE): long-held counts are then unknown and not exported.
	TokensRead bool
	// HotKeys is the top-K by OBJECT FREQ, hottest first (LFU policy only).
	HotKeys []HotKey
}

func newPass(start time.Time) *Pass {
	return &Pass{Started: start, Groups: map[string]*GroupStats{}, TokensRead: true}
}

func (p *Pass) group(name string) *GroupStats {
	g := p.Groups[name]
	if g == nil {
		g = &GroupStats{}
		p.Groups[name] = g
	}
	return g
}

// addKey records one key's remaining TTL (ttl < 0: no expiry) seen at now.
func (p *Pass) addKey(group string, ttl time.Duration, now time.Time) *GroupStats {
	g := p.group(group)
	g.Keys++
	p.Keys++
	if ttl < 0 {
		g.NoTTL++
		return g
	}
	for i, h := range horizons {
		if ttl <= h.d {
			g.expiringN[i]++
		}
	}
	if ttl <= syncHorizon {
		if g.expirySeconds == nil {
			g.expirySeconds = map[int64]uint32{}
		}
		g.expirySeconds[now.Add(ttl).Unix()]++
	}
	return g
}

// addLock records a lock key and its remaining TTL.
func (g *GroupStats) addLock(ttl time.Duration, longHeld bool) {
	g.Locks++
	if longHeld {
		g.LocksLongHeld++
	}
	if ttl < 0 {
		g.LocksNoTTL++
		if longHeld {
			g.LocksLongHeldNoTTL++
		}
		return
	}
	for i, h := range horizons {
		if ttl <= h.d {
			g.lockExpiringN[i]++
		}
	}
}

// finish computes the synchronisation scores and drops the per-second maps.
func (p *Pass) finish(now time.Time) {
	p.Completed, p.Complete = now, true
	start := p.Started.Unix()
	for _, g := range p.Groups {
		if len(g.expirySeconds) == 0 {
			continue
		}
		var n, busiest uint64
		last := start
		for sec, c := range g.expirySeconds {
			n += uint64(c)
			busiest = max(busiest, uint64(c))
			last = max(last, sec)
		}
		span := float64(last - start + 1)
		g.BusiestSecond = busiest
		g.SyncScore = float64(busiest) / math.Max(1, float64(n)/span)
		g.expirySeconds = nil
	}
}

// hotKeys keeps the top K keys by frequency (a min-heap on Freq).
type hotKeys struct {
	k int
	h hotHeap
}

func (t *hotKeys) offer(hk HotKey) {
	if t.k <= 0 || hk.Freq <= 0 {
		return
	}
	if len(t.h) < t.k {
		heap.Push(&t.h, hk)
		return
	}
	if hk.Freq > t.h[0].Freq {
		t.h[0] = hk
		heap.Fix(&t.h, 0)
	}
}

// sorted returns the kept keys, hottest first, and empties t.
func (t *hotKeys) sorted() []HotKey {
	out := make([]HotKey, len(t.h))
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(&t.h).(HotKey)
	}
	return out
}

type hotHeap []HotKey

func (h hotHeap) Len() int           { return len(h) }
func (h hotHeap) Less(i, j int) bool { return h[i].Freq < h[j].Freq }
func (h hotHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *hotHeap) Push(x any)        { *h = append(*h, x.(HotKey)) }
func (h *hotHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
