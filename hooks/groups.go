package hooks

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
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
	numLostReasons
)

var (
	lookupResultNames  = [numLookupResults]string{"hit", "miss", "error"}
	attemptResultNames = [numAttemptResults]string{"acquired", "busy", "error"}
	attemptNames       = [2]string{"first", "retry"}
	lostReasonNames    = [numLostReasons]string{"expired", "renew_failed", "not_owner"}
)

// groupMetrics holds one key group's metric children, created on first use.
type groupMetrics struct {
	lookups  [numLookupResults]lazyCounter
	attempts [numAttemptResults][2]lazyCounter // [result][first, retry]
	lost     [numLostReasons]lazyCounter
	bursts   lazyCounter
}

// groupSet is a copy-on-write map from key group to its metrics. Key groups
// come from a capped classifier, so it stays bounded; reads do not lock or
// allocate.
type groupSet struct {
	m   atomic.Pointer[map[string]*groupMetrics]
	mu  sync.Mutex
	new func(group string) *groupMetrics
}

func newGroupSet(newGroup func(string) *groupMetrics) *groupSet {
	s := &groupSet{new: newGroup}
	empty := map[string]*groupMetrics{}
	s.m.Store(&empty)
	return s
}

func (s *groupSet) get(group string) *groupMetrics {
	if g, ok := (*s.m.Load())[group]; ok {
		return g
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.m.Load()
	if g, ok := old[group]; ok {
		return g
	}
	next := make(map[string]*groupMetrics, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	g := s.new(group)
	next[group] = g
	s.m.Store(&next)
	return g
}

// retrySlots is the size of the table of recently busy lock attempts, in
// buckets of retryWays slots.
const (
	retrySlots = 4096
	retryWays  = 8
)

// retryTable recognises retries on the wire. Lock libraries (redsync,
// bsm/redislock, cachewatch's own client) retry with the same owner token, so
// an attempt whose (key, token) was answered busy a moment ago is a retry.
// The table is set-associative and lossy: when more than retryWays busy
// contenders share a bucket, one is evicted and its retry then counts as a
// first attempt, never the other way round (a 64-bit hash collision aside).
// Libraries that draw a new token per attempt are counted as first attempts
// throughout.
type retryTable struct {
	seed  maphash.Seed
	slots [retrySlots]atomic.Uint64
}

func newRetryTable() *retryTable { return &retryTable{seed: maphash.MakeSeed()} }

func (t *retryTable) hash(key, token string) uint64 {
	h := maphash.String(t.seed, key)*0x9e3779b97f4a7c15 ^ maphash.String(t.seed, token)
	return h | 1 // 0 marks an empty slot
}

func (t *retryTable) bucket(h uint64) []atomic.Uint64 {
	b := int(h % (retrySlots / retryWays) * retryWays)
	return t.slots[b : b+retryWays]
}

// isRetry reports whether the attempt h follows a busy one.
func (t *retryTable) isRetry(h uint64) bool {
	b := t.bucket(h)
	for i := range b {
		if b[i].Load() == h {
			return true
		}
	}
	return false
}

// busy remembers h as answered busy, in a free slot of its bucket or, when
// the bucket is full, in place of an entry picked by h's high bits.
func (t *retryTable) busy(h uint64) {
	b := t.bucket(h)
	for i := range b {
		if v := b[i].Load(); v == h || v == 0 && b[i].CompareAndSwap(0, h) {
			return
		}
	}
	b[(h>>56)%retryWays].Store(h)
}

// done forgets h once the attempt succeeded.
func (t *retryTable) done(h uint64) {
	b := t.bucket(h)
	for i := range b {
		b[i].CompareAndSwap(h, 0)
	}
}
