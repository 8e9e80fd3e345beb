package hooks

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/cachewatch/cachewatch/internal/burst"
)

// Label value indexes of the per-key-group metrics.
const (
	lookupHit = iota
	lookupMiss
	lookupError
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

var (
	lookupResultNames  = [numLookupResults]string{"hit", "miss", "error"}
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
	bursts   lazyCounter
	misses   *burst.Group                    // its misses, counted for the burst detector
	acquired [numAttemptResults]lazyObserver // by attempt result; busy unused
	gaveUp   lazyObserver                    // acquisitions cut off by their caller's context
}

// keyCacheSlots is the size of groupSet's key → group cache.
const keyCacheSlots = 4096

// groupSet maps keys to their key group's metrics. Key groups come from a
// capped classifier, so the set stays bounded; reads do not lock or
// allocate.
//
// Classifying a key costs more than everything else the hook does per
// command, so the last classification of each cache slot is remembered: a
// slot packs 48 bits of the key's hash with the group's index. Two keys
// sharing slot and tag (odds 2^-48 per lookup) would share a group label;
// nothing else depends on it. The classifier's overflow counter then counts
// overflowing keys once per cache fill rather than once per command.
type groupSet struct {
	seed     maphash.Seed
	classify func(key string) string
	cache    [keyCacheSlots]atomic.Uint64
	byName   atomic.Pointer[map[string]*groupMetrics] // copy-on-write
	list     atomic.Pointer[[]*groupMetrics]          // by idx, append-only
	mu       sync.Mutex
	new      func(group string) *groupMetrics
}

func newGroupSet(classify func(string) string, newGroup func(string) *groupMetrics) *groupSet {
	s := &groupSet{seed: maphash.MakeSeed(), classify: classify, new: newGroup}
	s.byName.Store(&map[string]*groupMetrics{})
	s.list.Store(&[]*groupMetrics{})
	return s
}

// keyHash is the hash the key cache and the retry table share.
func (s *groupSet) keyHash(key string) uint64 { return maphash.String(s.seed, key) }

// forKey returns the metrics of the key's group; kh is keyHash(key).
func (s *groupSet) forKey(key string, kh uint64) *groupMetrics {
	slot := &s.cache[kh%keyCacheSlots]
	const tagMask = ^uint64(0xffff)
	if v := slot.Load(); v != 0 && v&tagMask == kh&tagMask {
		if list := *s.list.Load(); int(v&0xffff)-1 < len(list) {
			return list[v&0xffff-1]
		}
	}
	g := s.get(s.classify(key))
	if g.idx < 0xffff {
		slot.Store(kh&tagMask | uint64(g.idx+1))
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

// retrySlots is the size of the table of recently busy lock attempts, in
// buckets of retryWays slots.
const (
	retrySlots = 4096
	retryWays  = 8
	waitSlots  = 4096 // of retryTable.waiting
)

// retryTable recognises retries on the wire and times whole acquisitions.
// Lock libraries (redsync, bsm/redislock, cachewatch's own client) retry with
// the same owner token, so an attempt whose (key, token) was answered busy a
// moment ago is a retry, and its success ends an acquisition that began when
// the first (busy) attempt was sent.
//
// A slot packs a 32-bit tag of the (key, token) hash with the time the
// first busy attempt was sent, in microseconds (mod 2^32, about 71 minutes), so one
// atomic word holds an entry. The table is set-associative and lossy: when
// more than retryWays contenders share a bucket one is evicted, and its
// retry then counts as a first attempt; a false match needs the same bucket
// and tag (odds about 2^-32 per lookup). Libraries that draw a new token
// per attempt are counted as first attempts throughout.
//
// Most attempts are first tries on keys nobody waits for. waiting lets them
// skip hashing the token and searching a bucket: it counts, per slot of key
// hashes, the entries added for keys of that slot, minus those forgotten.
// Entries evicted from a full bucket or left by a caller that gave up stay
// counted, so a count never falls below the slot's live entries; a stale
// count only sends its keys down the full path.
type retryTable struct {
	seed    maphash.Seed
	slots   [retrySlots]atomic.Uint64
	waiting [waitSlots]atomic.Uint32
}

func newRetryTable() *retryTable { return &retryTable{seed: maphash.MakeSeed()} }

// hash combines a key's hash (groupSet.keyHash) with its owner token.
func (t *retryTable) hash(keyHash uint64, token string) uint64 {
	return keyHash*0x9e3779b97f4a7c15 ^ maphash.String(t.seed, token)
}

func (t *retryTable) bucket(h uint64) []atomic.Uint64 {
	b := int(h % (retrySlots / retryWays) * retryWays)
	return t.slots[b : b+retryWays]
}

// tag is the upper half of a slot; never 0, which marks an empty slot.
func tag(h uint64) uint64 { return (h>>32 | 1) << 32 }

const lowHalf = 1<<32 - 1

// busySince returns when the acquisition h's first attempt, answered busy,
// was sent (in monotonic microseconds mod 2^32), if it was.
func (t *retryTable) busySince(h uint64) (uint32, bool) {
	i := t.find(h)
	if i < 0 {
		return 0, false
	}
	return uint32(t.slots[i].Load()), true
}

// find returns the index of h's slot, or -1.
func (t *retryTable) find(h uint64) int {
	tg := tag(h)
	first := int(h % (retrySlots / retryWays) * retryWays)
	for i := first; i < first+retryWays; i++ {
		if t.slots[i].Load()&^lowHalf == tg {
			return i
		}
	}
	return -1
}

// busy remembers h as answered busy for an attempt sent at nowUs, unless it
// is already (a retry keeps its first attempt's time), and reports whether
// it added an entry.
// A full bucket loses an entry picked by h's low bits.
func (t *retryTable) busy(h uint64, nowUs uint32) bool {
	tg := tag(h)
	b := t.bucket(h)
	for i := range b {
		v := b[i].Load()
		if v&^lowHalf == tg {
			return false
		}
		if v == 0 && b[i].CompareAndSwap(0, tg|uint64(nowUs)) {
			return true
		}
	}
	b[(h>>8)%retryWays].Store(tg | uint64(nowUs))
	return true
}

// forget empties slot i (from find) if it still holds h, and reports whether
// it did.
func (t *retryTable) forget(i int, h uint64) bool {
	if v := t.slots[i].Load(); v&^lowHalf == tag(h) {
		return t.slots[i].CompareAndSwap(v, 0)
	}
	return false
}

func (t *retryTable) waitCount(keyHash uint64) *atomic.Uint32 {
	return &t.waiting[keyHash>>32%waitSlots]
}

// mayWait reports whether an attempt on the key of keyHash may have been
// answered busy and not yet ended; false is certain.
func (t *retryTable) mayWait(keyHash uint64) bool { return t.waitCount(keyHash).Load() != 0 }

// busyKey is busy for an attempt on the key of keyHash; retry says find
// found h's entry just before. For a new entry the count goes up before the
// entry appears, so that mayWait is true whenever find could succeed; a
// retry's entry is counted already, unless it was evicted meanwhile.
func (t *retryTable) busyKey(keyHash, h uint64, nowUs uint32, retry bool) {
	n := t.waitCount(keyHash)
	if retry {
		if t.busy(h, nowUs) {
			n.Add(1)
		}
		return
	}
	n.Add(1)
	if !t.busy(h, nowUs) {
		n.Add(^uint32(0))
	}
}

// forgetKey is forget for an attempt on the key of keyHash.
func (t *retryTable) forgetKey(keyHash uint64, i int, h uint64) {
	if t.forget(i, h) {
		t.waitCount(keyHash).Add(^uint32(0))
	}
}
