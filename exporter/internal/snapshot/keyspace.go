package snapshot

import "time"

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

// GroupStats is the expiry shape and lock state of one key group: keys from
// the whole-keyspace pass, locks from the lock index.
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
	// LocksDeadHolder counts the locks whose holder keeps a liveness key
	// (a live cachewatch lock) that is gone: held by a dead process, for a
	// waiter to take over.
	LocksDeadHolder uint64
	// LocksExpiring counts the locks whose remaining TTL is within each
	// horizon (cumulative, shortest first); locks without TTL are not in
	// it.
	LocksExpiring []ExpiringWithin
	// Holders are the group's longest-held locks, longest first: at most
	// the sampler's LockHolders (Config), whose holders the exporter
	// exports and doctor names.
	Holders []HeldLock

	// MemoryBytes estimates the memory of the group's keys: the mean
	// MEMORY USAGE of the MemorySampled keys read times Keys (0 when no
	// key was sampled).
	MemoryBytes   float64
	MemorySampled uint64
}

// ExpiringWithin counts the keys of a group whose TTL is at most Within
// (cumulative over horizons). Label is the "within" label value: "1s",
// "10s", "1m", "10m", "1h", "1d", and "inf" (every key with a TTL, Within
// the largest Duration).
type ExpiringWithin struct {
	Label  string
	Within time.Duration
	Keys   uint64
}

// HotKey is a key with a high LFU access frequency (OBJECT FREQ). Keys are
// only reported by doctor, never as labels.
type HotKey struct {
	Key   string `json:"key"`
	Group string `json:"key_group"`
	Freq  int64  `json:"freq"`
	NoTTL bool   `json:"no_ttl"`
}
