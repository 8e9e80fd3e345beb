package snapshot

import "time"

// Holder is who holds a lock, as its value tells: the service, host,
// process and per-process instance of the client that took it. Format
// says how the value was read: "cachewatch" (instrument's holder value),
// "redislock" (bsm/redislock's metadata) or "opaque" (a bare token, which
// names nobody: only Format is set).
type Holder struct {
	Format   string `json:"format"`
	Service  string `json:"service,omitempty"`
	Host     string `json:"host,omitempty"`
	PID      int    `json:"pid,omitempty"`
	Instance string `json:"instance,omitempty"`
	// Live: the holder keeps its instance's liveness key while it runs
	// (a live cachewatch lock), so whether it is alive can be told.
	Live bool `json:"live,omitempty"`
}

// Whether a lock's holder is alive (HeldLock.Alive).
const (
	AliveYes     = "yes"     // its liveness key exists
	AliveNo      = "no"      // its liveness key is gone: a waiter takes the lock over
	AliveUnknown = "unknown" // another library's or an unmarked lock, or not checked
)

// Opaque is the Format of a value that names no holder.
const Opaque = "opaque"

// HeldLock is one held lock and its holder. Key is for the operator's
// reports (doctor, cachewatch locks), never a label.
type HeldLock struct {
	Key    string `json:"key"`
	Group  string `json:"key_group"`
	Holder Holder `json:"holder"`
	// Since is when the holder took the lock: the acquisition time its
	// value tells, unless that is missing or in the future (another
	// host's clock), then when the sampler first saw its owner token.
	Since time.Time `json:"held_since"`
	// TTL is the lock's remaining time to live; -1 when it has none.
	TTL time.Duration `json:"ttl"`
	// LongHeld: its owner token was seen unchanged for longer than the
	// long-held threshold; PastTTL: and longer than the TTL it had when
	// first seen (the owner kept extending it).
	LongHeld bool `json:"long_held"`
	PastTTL  bool `json:"past_ttl"`
	// Alive says whether the holder is alive: AliveYes, AliveNo or
	// AliveUnknown.
	Alive string `json:"alive"`
}
