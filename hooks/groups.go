package hooks

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/cachewatch/cachewatch/internal/burst"
	"github.com/cachewatch/cachewatch/keygroup"
	"github.com/cachewatch/cachewatch/signals"
)

// Label value indexes of the per-key-group metrics.
const (
	lookupHit = iota
	lookupMiss
	numLookupResults
)

const (
	attemptAcquired = iota
	attemptBusy
	attemptError
	numAttemptResults
)

const (
	lostExpired = iota
	lostRenewFailed
	lostNotOwner
	lostExpiredOrNotOwner
	numLostReasons
)

// Lease-end outcomes the wire shows (signals.LockLeaseEnds).
const (
	endReleased = iota
	endRefused
	endExpired
	endLost
	numEnds
)

var (
	endNames           = [numEnds]string{signals.EndReleased, signals.EndRefused, signals.EndExpired, signals.EndLost}
	lookupResultNames  = [numLookupResults]string{"hit", "miss"}
	attemptResultNames = [numAttemptResults]string{"acquired", "busy", "error"}
	attemptNames       = [2]string{"first", "retry"}
	lostReasonNames    = [numLostReasons]string{"expired", "renew_failed", "not_owner", "expired_or_not_owner"}
)

// groupMetrics holds one key group's metric children, created on first use.
type groupMetrics struct {
	name     string
	idx      int // position in groupSet.list
	lookups  [numLookupResults]lazyCounter
	attempts [numAttemptResults][2]lazyCounter // [result][first, retry]
	lost     [numLostReasons]lazyCounter
	ends     [numEnds]lazyCounter
	bursts   lazyCounter
	misses   *burst.Group                    // its misses, counted for the burst detector
	acquired [numAttemptResults]lazyObserver // by attempt result; busy unused
	gaveUp   lazyObserver                    // acquisitions cut off by their caller's context
	// defers: a busy first attempt waits for its fate (retried or not)
	// before it is counted; false in the groups Options.TryOnce names.
	defers bool
	// tryOnceBusy counts the busy first attempts never retried: try-once.
	tryOnceBusy lazyCounter
}

// keyCacheSlots is the size of groupSet's key → group cache.
const keyCacheSlots = 4096

// groupSet maps keys to their key group's metrics. Key groups come from a
// capped classifier, so the set stays bounded; reads do not lock or
// allocate.
//
// Classifying a key costs more than everything else the hook does per
// command, so the last classification of each cache slot is remembered: a
// slot packs 40 bits of the key's hash, the low byte of the classifier's
// epoch when it was classified, and the group's index. A key is classified
// again once the classifier has learnt something that may change its group
// (its epoch moved). Two keys sharing slot and tag (odds 2^-40 per lookup)
// would share a group label; nothing else depends on it. The classifier's
// overflow counter then counts overflowing keys once per cache fill rather
// than once per command.
type groupSet struct {
	seed     maphash.Seed
	classify func(key string) string
	epoch    func() uint64
	cache    [keyCacheSlots]atomic.Uint64
	byName   atomic.Pointer[map[string]*groupMetrics] // copy-on-write
	list     atomic.Pointer[[]*groupMetrics]          // by idx, append-only
	mu       sync.Mutex
	new      func(group string) *groupMetrics
}

func newGroupSet(groups *keygroup.Classifier, newGroup func(string) *groupMetrics) *groupSet {
	s := &groupSet{seed: maphash.MakeSeed(), classify: groups.Classify, epoch: groups.Epoch, new: newGroup}
	s.byName.Store(&map[string]*groupMetrics{})
	s.list.Store(&[]*groupMetrics{})
	return s
}

// keyHash is the hash the key cache and the retry table share.
func (s *groupSet) keyHash(key string) uint64 { return maphash.String(s.seed, key) }

// forKey returns the metrics of the key's group; kh is keyHash(key).
func (s *groupSet) forKey(key string, kh uint64) *groupMetrics {
	slot := &s.cache[kh%keyCacheSlots]
	const tagMask, epochMask = ^uint64(0xffffff), uint64(0xff0000)
	tag := kh&tagMask | s.epoch()<<16&epochMask
	if v := slot.Load(); v != 0 && v&^0xffff == tag {
		if list := *s.list.Load(); int(v&0xffff)-1 < len(list) {
			return list[v&0xffff-1]
		}
	}
	g := s.get(s.classify(key))
	if g.idx < 0xffff {
		slot.Store(tag | uint64(g.idx+1))
	}
	return g
}

func (s *groupSet) get(group string) *groupMetrics {
	if g, ok := (*s.byName.Load())[group]; ok {
		return g
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.byName.Load()
	if g, ok := old[group]; ok {
		return g
	}
	next := make(map[string]*groupMetrics, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	g := s.new(group)
	list := append(*s.list.Load(), g)
	g.name, g.idx = group, len(list)-1
	next[group] = g
	s.list.Store(&list)
	s.byName.Store(&next)
	return g
}
