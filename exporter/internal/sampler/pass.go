package sampler

import (
	"container/heap"
	"math"
	"time"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
)

// Horizons of cachewatch_exporter_keys_expiring, cumulative; the last one is
// every key with a TTL.
var horizons = [...]struct {
	label string
	d     time.Duration
}{
	{"1s", time.Second}, {"10s", 10 * time.Second}, {"1m", time.Minute}, {"10m", 10 * time.Minute},
	{"1h", time.Hour}, {"1d", 24 * time.Hour}, {"inf", math.MaxInt64},
}

// horizonCounts counts keys per horizon, as ExpiringWithin does.
type horizonCounts [len(horizons)]uint64

// add counts a TTL in every horizon it is within.
func (c *horizonCounts) add(ttl time.Duration) {
	for i, h := range horizons {
		if ttl <= h.d {
			c[i]++
		}
	}
}

// within returns the counts as the snapshot lists them.
func (c *horizonCounts) within() []snapshot.ExpiringWithin {
	out := make([]snapshot.ExpiringWithin, len(horizons))
	for i, h := range horizons {
		out[i] = snapshot.ExpiringWithin{Label: h.label, Within: h.d, Keys: c[i]}
	}
	return out
}

// syncHorizon bounds the expiry-synchronisation score to keys expiring within
// it, which bounds the per-group memory to one counter per second.
const syncHorizon = time.Hour

// keyPass accumulates a whole-keyspace SCAN pass, which may span several
// samples.
type keyPass struct {
	started, completed time.Time
	complete           bool
	keys               uint64
	groups             map[string]*keyGroup
	hot                []snapshot.HotKey
}

// keyGroup is what a pass found of one key group.
type keyGroup struct {
	keys, noTTL            uint64
	expiring               horizonCounts
	syncScore              float64
	busiest                uint64
	memorySum, memoryReads uint64
	// expirySeconds counts the keys expiring in each Unix second (within
	// syncHorizon) until the pass completes.
	expirySeconds map[int64]uint32
}

func newKeyPass(start time.Time) *keyPass {
	return &keyPass{started: start, groups: map[string]*keyGroup{}}
}

// addKey records one key's remaining TTL (ttl < 0: no expiry) seen at now.
func (p *keyPass) addKey(group string, ttl time.Duration, now time.Time) *keyGroup {
	g := p.groups[group]
	if g == nil {
		g = &keyGroup{}
		p.groups[group] = g
	}
	g.keys++
	p.keys++
	if ttl < 0 {
		g.noTTL++
		return g
	}
	g.expiring.add(ttl)
	if ttl <= syncHorizon {
		if g.expirySeconds == nil {
			g.expirySeconds = map[int64]uint32{}
		}
		g.expirySeconds[now.Add(ttl).Unix()]++
	}
	return g
}

// finish computes the synchronisation scores and drops the per-second maps.
func (p *keyPass) finish(now time.Time) {
	p.completed, p.complete = now, true
	start := p.started.Unix()
	for _, g := range p.groups {
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
		g.busiest = busiest
		g.syncScore = float64(busiest) / math.Max(1, float64(n)/span)
		g.expirySeconds = nil
	}
}

// view returns the pass's key figures to publish: the sampler goes on
// changing its own.
func (p *keyPass) view() *snapshot.Pass {
	v := &snapshot.Pass{Started: p.started, Completed: p.completed, Keys: p.keys, Complete: p.complete,
		HotKeys: p.hot, Groups: make(map[string]*snapshot.GroupStats, len(p.groups)), TokensRead: true}
	for name, g := range p.groups {
		gs := &snapshot.GroupStats{Keys: g.keys, NoTTL: g.noTTL, Expiring: g.expiring.within(),
			SyncScore: g.syncScore, BusiestSecond: g.busiest, MemorySampled: g.memoryReads}
		if g.memoryReads > 0 {
			gs.MemoryBytes = float64(g.memorySum) / float64(g.memoryReads) * float64(g.keys)
		}
		v.Groups[name] = gs
	}
	return v
}

// hotKeys keeps the top K keys by frequency (a min-heap on Freq).
type hotKeys struct {
	k int
	h hotHeap
}

func (t *hotKeys) offer(hk snapshot.HotKey) {
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
func (t *hotKeys) sorted() []snapshot.HotKey {
	out := make([]snapshot.HotKey, len(t.h))
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(&t.h).(snapshot.HotKey)
	}
	return out
}

type hotHeap []snapshot.HotKey

func (h hotHeap) Len() int           { return len(h) }
func (h hotHeap) Less(i, j int) bool { return h[i].Freq < h[j].Freq }
func (h hotHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *hotHeap) Push(x any)        { *h = append(*h, x.(snapshot.HotKey)) }
func (h *hotHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
