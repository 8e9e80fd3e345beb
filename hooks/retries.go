package hooks

import (
	"hash/maphash"
	"sync/atomic"
	"time"
)

// Sizes of the table of recently busy lock attempts: retrySlots slots in
// buckets of retryWays, and the counters of waitSlots key-hash slots.
const (
	retrySlots = 4096
	retryWays  = 8
	waitSlots  = 4096
)

// DefaultRetryHorizon is Options.RetryHorizon's default: longer than the
// backoff between a busy attempt and its retry of the common lock clients
// (cachewatch's own waits at most 500ms by default, redsync 250ms).
const DefaultRetryHorizon = time.Second

// retryTable recognises retries on the wire, tells waiting callers from
// try-once ones, and times whole acquisitions.
//
// Lock libraries (redsync, bsm/redislock, cachewatch's own client) retry with
// the same owner token, so an attempt whose (key, token) was answered busy
// within the horizon is a retry, and its success ends an acquisition that
// began when the first (busy) attempt was sent. A busy first attempt is not
// counted when it is answered: only its fate says what it was. Followed by
// a retry within the horizon, it was a waiting caller's (mode wait, the
// contention the alerts count); not followed by one, a try-once caller's
// that skipped the work (mode try_once), such as a run-once job whose
// losers skip their turn. The entry's fate is settled by the retry, or once
// the horizon has passed by the next attempt on the same slot, by the sweep
// that every lock attempt starts at most twice per horizon, and by the sweep
// of every scrape (Collect).
//
// A slot is one atomic word: a 31-bit tag of the (key, token) hash, a bit
// set once the acquisition retried (its first attempt is counted then), and
// the time of its last attempt in milliseconds (mod 2^32). A second word per
// slot, written once when the entry is made, holds the time its first
// attempt was sent in microseconds (mod 2^32, about 71 minutes), its key
// group's index and its key's waitSlots index. Whoever changes a slot's word
// with a compare-and-swap settles its fate, so no entry is counted twice.
//
// The table is set-associative, bounded and lossy: when more than retryWays
// contenders share a bucket one is evicted, settled as if its horizon had
// passed (an evicted waiting caller's retry then counts as a first attempt);
// a false match needs the same bucket and tag (odds about 2^-31 per
// lookup). Libraries that draw a new token per attempt are counted as
// try-once attempts throughout: the wire cannot tell them apart.
//
// Most attempts are first tries on keys nobody waits for. waiting lets them
// skip hashing the token and searching a bucket: it counts, per slot of key
// hashes, the entries added for keys of that slot, minus those settled.
// A count never falls below the slot's live entries; a stale count only
// sends its keys down the full path.
type retryTable struct {
	seed      maphash.Seed
	horizonMs uint32
	slots     [retrySlots]atomic.Uint64
	meta      [retrySlots]atomic.Uint64
	waiting   [waitSlots]atomic.Uint32
	// nextSweep is the monotonic time (ns) after which the next lock
	// attempt sweeps the whole table.
	nextSweep atomic.Int64
	// settle counts the busy first attempt of an acquisition that never
	// retried, in the key group of its index.
	settle func(group int)
}

// Layout of a slot's words.
const (
	tagShift    = 33
	retriedBit  = uint64(1) << 32
	lowHalf     = uint64(1)<<32 - 1
	groupShift  = 16
	noGroup     = 0xffff // a group index that does not fit: not deferred
	waitMask    = 0xffff
	metaUsShift = 32
)

func newRetryTable(horizon time.Duration, settle func(group int)) *retryTable {
	ms := max(horizon.Milliseconds(), 1)
	return &retryTable{seed: maphash.MakeSeed(), horizonMs: uint32(min(ms, 1<<30)), settle: settle}
}

// hash combines a key's hash (groupSet.keyHash) with its owner token.
func (t *retryTable) hash(keyHash uint64, token string) uint64 {
	return keyHash*0x9e3779b97f4a7c15 ^ maphash.String(t.seed, token)
}

// tag is a slot's upper bits for h; never 0, which marks an empty slot.
func tag(h uint64) uint64 { return (h>>tagShift | 1) << tagShift }

func bucketOf(h uint64) int { return int(h % (retrySlots / retryWays) * retryWays) }

// find returns the index of h's slot and its word, or -1.
func (t *retryTable) find(h uint64) (int, uint64) {
	tg := tag(h)
	first := bucketOf(h)
	for i := first; i < first+retryWays; i++ {
		if v := t.slots[i].Load(); v&^(retriedBit|lowHalf) == tg {
			return i, v
		}
	}
	return -1, 0
}

// expired tells whether the slot word v's last attempt is more than the
// horizon before nowMs.
func (t *retryTable) expired(v uint64, nowMs uint32) bool {
	return v != 0 && nowMs-uint32(v) > t.horizonMs
}

// entry is what an attempt knows when it adds a busy acquisition.
type entry struct {
	h       uint64
	keyHash uint64
	group   int  // the key group's index
	settled bool // counted already (a TryOnce group's attempt)
	nowUs   uint32
	nowMs   uint32
}

// add remembers a busy first attempt. It takes an empty slot of h's bucket,
// else one whose horizon has passed, else evicts one picked by h's bits;
// an entry it replaces is settled.
func (t *retryTable) add(e entry) {
	t.waitCount(e.keyHash).Add(1)
	word := tag(e.h) | uint64(e.nowMs)
	if e.settled {
		word |= retriedBit
	}
	g := uint64(noGroup)
	if e.group < noGroup && !e.settled {
		g = uint64(e.group)
	}
	meta := uint64(e.nowUs)<<metaUsShift | g<<groupShift | e.keyHash>>32%waitSlots
	first := bucketOf(e.h)
	for i := first; i < first+retryWays; i++ {
		if t.take(i, word, meta, e.nowMs, false) {
			return
		}
	}
	t.take(first+int(e.h>>8%retryWays), word, meta, e.nowMs, true)
}

// take puts an entry in slot i if it is empty, its horizon has passed, or
// evict is set, settling the entry it replaces, and reports whether it did.
func (t *retryTable) take(i int, word, meta uint64, nowMs uint32, evict bool) bool {
	v := t.slots[i].Load()
	if v != 0 && !evict && !t.expired(v, nowMs) {
		return false
	}
	old := t.meta[i].Load()
	if !t.slots[i].CompareAndSwap(v, word) {
		return false
	}
	t.meta[i].Store(meta)
	if v != 0 {
		t.settleEntry(v, old)
	}
	return true
}

// settleEntry ends an entry whose slot was taken from it: its key no longer
// waits, and a busy first attempt that never retried was a try-once one.
func (t *retryTable) settleEntry(v, meta uint64) {
	t.waiting[meta&waitMask].Add(^uint32(0))
	if g := int(meta >> groupShift & 0xffff); v&retriedBit == 0 && g != noGroup {
		t.settle(g)
	}
}

// expire settles the entry in slot i, word v, whose horizon has passed.
func (t *retryTable) expire(i int, v uint64) {
	meta := t.meta[i].Load()
	if t.slots[i].CompareAndSwap(v, 0) {
		t.settleEntry(v, meta)
	}
}

// claim empties slot i if it still holds v, settling nothing, and reports
// whether it did: the caller now owns the entry's fate.
func (t *retryTable) claim(i int, v uint64) bool {
	meta := t.meta[i].Load()
	if !t.slots[i].CompareAndSwap(v, 0) {
		return false
	}
	t.waiting[meta&waitMask].Add(^uint32(0))
	return true
}

// retried marks the entry in slot i, word v, as retried at nowMs and
// reports whether this attempt is the one that marked it, which then counts
// the acquisition's first attempt; false when the entry changed meanwhile.
func (t *retryTable) retried(i int, v uint64, nowMs uint32) (first, ok bool) {
	next := v&^lowHalf | retriedBit | uint64(nowMs)
	if !t.slots[i].CompareAndSwap(v, next) {
		return false, false
	}
	return v&retriedBit == 0, true
}

// firstSentUs is when the acquisition in slot i sent its first attempt, in
// microseconds (mod 2^32).
func (t *retryTable) firstSentUs(i int) uint32 { return uint32(t.meta[i].Load() >> metaUsShift) }

// sweep settles every entry whose horizon has passed.
func (t *retryTable) sweep(nowMs uint32) {
	for i := range t.slots {
		if v := t.slots[i].Load(); t.expired(v, nowMs) {
			t.expire(i, v)
		}
	}
}

// maybeSweep sweeps the table when half a horizon has passed since the last
// sweep; one caller at a time does.
func (t *retryTable) maybeSweep(now time.Duration) {
	next := t.nextSweep.Load()
	if int64(now) < next || !t.nextSweep.CompareAndSwap(next, int64(now)+int64(t.horizonMs)*int64(time.Millisecond)/2) {
		return
	}
	t.sweep(uint32(now / time.Millisecond))
}

func (t *retryTable) waitCount(keyHash uint64) *atomic.Uint32 {
	return &t.waiting[keyHash>>32%waitSlots]
}

// mayWait reports whether an attempt on the key of keyHash may have been
// answered busy and not yet settled; false is certain.
func (t *retryTable) mayWait(keyHash uint64) bool { return t.waitCount(keyHash).Load() != 0 }
