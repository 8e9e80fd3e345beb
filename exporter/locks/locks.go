// Package locks lists the locks a live Redis holds and who holds them: for
// each lock key its group, its holder (service, host, process, as the
// lock's value names it: instrument's holder value, bsm/redislock's
// metadata, else opaque), whether that holder is alive (for a holder that
// keeps a liveness key), how long it has been held and its TTL left. It
// is what `cachewatch locks` prints, once or refreshed like top.
//
// It reads as the exporter does, and as little: SCAN … MATCH over the lock
// patterns (never KEYS), paced, and for each lock key its TTL and the first
// 256 bytes of its value, every reply bounded by the exporter's reply
// guard. Keys and holders are printed for the operator; none becomes a
// metric label.
package locks

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/internal/sampler"
	"github.com/cachewatch/cachewatch/keygroup"
)

// Defaults of Options' zero values.
const (
	// DefaultRate is the keys SCAN may visit per second on each node: at
	// about 1.5 µs of server time per key visited, a third of the server's
	// time while the listing runs.
	DefaultRate = 200_000
	// DefaultMax bounds the locks listed.
	DefaultMax = 100_000
	// DefaultRefresh is the time between two listings of Watch.
	DefaultRefresh = 2 * time.Second
)

// ErrTruncated is wrapped by the error of a listing that found more than
// Options.Max locks: the listing holds the first Max found.
var ErrTruncated = errors.New("locks: more locks than the listing's maximum")

// Options configures a Reader.
type Options struct {
	// Target is the Redis to read (standalone, or every master of a
	// Cluster).
	Target exporter.Target
	// Patterns are the globs of lock keys; default exporter's
	// DefaultLockPattern.
	Patterns []string
	// Groups classifies lock keys; nil learns the groups from the keys.
	Groups *keygroup.Classifier
	// Rate is the keys SCAN may visit per second on each node; default
	// DefaultRate.
	Rate float64
	// Max bounds the locks listed; default DefaultMax.
	Max int
	// Clock tells the time of a listing (how long locks have been held);
	// nil means the real clock.
	Clock clockwork.Clock
}

// Lock is one held lock.
type Lock struct {
	Node  string `json:"node"`
	Key   string `json:"key"`
	Group string `json:"key_group"`
	// Format is how the value was read: "cachewatch" (instrument's holder
	// value), "redislock" (bsm/redislock's metadata) or "opaque" (a bare
	// token naming nobody: the holder fields are empty).
	Format   string `json:"format"`
	Service  string `json:"service,omitempty"`
	Host     string `json:"host,omitempty"`
	PID      int    `json:"pid,omitempty"`
	Instance string `json:"instance,omitempty"`
	// HeldSince is when the holder took the lock: the acquisition time its
	// value tells (HeldAtLeast false) or, for a value that tells none, when
	// this Reader first saw its token (HeldAtLeast true: held at least
	// since then).
	HeldSince   time.Time `json:"held_since"`
	HeldAtLeast bool      `json:"held_at_least"`
	// HeldFor is the time from HeldSince to the listing, in seconds.
	HeldFor float64 `json:"held_for_seconds"`
	// TTL is the remaining time to live in seconds; -1 when it has none.
	TTL float64 `json:"ttl_seconds"`
	// Alive says whether the holder is alive: "yes" (its liveness key
	// exists), "no" (it is gone: the process died, and the next waiter of
	// a live lock takes it over) or "unknown" (a holder that keeps no
	// liveness key: another library's lock, an unmarked one, opaque).
	Alive string `json:"alive"`
}

// Listing is what one read found, longest-held first.
type Listing struct {
	At    time.Time `json:"at"`
	Locks []Lock    `json:"locks"`
	// Truncated says more locks matched than Options.Max.
	Truncated bool `json:"truncated,omitempty"`
}

// Reader lists locks, remembering when it first saw each token so that a
// lock whose value tells no acquisition time still shows a lower bound of
// its hold. It is not safe for concurrent use.
type Reader struct {
	cfg   sampler.Config
	opts  Options
	first map[string]seenToken
}

// seenToken is when a Reader first saw a lock key's token.
type seenToken struct {
	token uint64
	at    time.Time
}

// New returns a Reader of opts. It does not connect: each Read does.
func New(opts Options) (*Reader, error) {
	if len(opts.Target.Addrs) == 0 {
		return nil, errors.New("locks: no Redis address")
	}
	cfg, err := sampler.Config{Conn: conn(opts.Target), LockPatterns: opts.Patterns, LockGroups: opts.Groups,
		KeyGroups: opts.Groups, LockScanCount: 1000, Batch: 500}.WithDefaults()
	if err != nil {
		return nil, err
	}
	if opts.Rate <= 0 {
		opts.Rate = DefaultRate
	}
	if opts.Max <= 0 {
		opts.Max = DefaultMax
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	return &Reader{cfg: cfg, opts: opts, first: map[string]seenToken{}}, nil
}

// conn is the sampler's connection of a target.
func conn(t exporter.Target) sampler.Conn {
	mode := sampler.ModeAuto
	switch t.Mode {
	case exporter.ModeStandalone:
		mode = sampler.ModeStandalone
	case exporter.ModeCluster:
		mode = sampler.ModeCluster
	}
	return sampler.Conn{Addrs: t.Addrs, Username: t.Username, Password: t.Password, DB: t.DB, TLS: t.TLS,
		Mode: mode, DialTimeout: t.DialTimeout, ReadTimeout: t.ReadTimeout}
}

// Read lists the locks held now. A listing cut by more than Options.Max
// locks is returned with an error wrapping ErrTruncated; one cut by a
// failing node, with that node's error.
func (r *Reader) Read(ctx context.Context) (*Listing, error) {
	reads, truncated, err := sampler.ReadLocks(ctx, r.cfg, sampler.ReadLocksOptions{Max: r.opts.Max, Rate: r.opts.Rate})
	now := r.opts.Clock.Now()
	l := &Listing{At: now, Locks: make([]Lock, 0, len(reads)), Truncated: truncated}
	seen := make(map[string]seenToken, len(reads))
	for _, rd := range reads {
		lk := Lock{Node: rd.Node, Key: rd.Key, Group: rd.Group, Format: rd.Holder.Format, Service: rd.Holder.Service,
			Host: rd.Holder.Host, PID: rd.Holder.PID, Instance: rd.Holder.Instance, TTL: -1, Alive: rd.Alive}
		if rd.TTL >= 0 {
			lk.TTL = rd.TTL.Seconds()
		}
		id := rd.Node + "\x00" + rd.Key
		first, ok := r.first[id]
		if !ok || first.token != rd.Token {
			first = seenToken{token: rd.Token, at: now}
		}
		seen[id] = first
		lk.HeldSince = rd.Acquired
		if rd.Acquired.IsZero() || rd.Acquired.After(now) {
			lk.HeldSince, lk.HeldAtLeast = first.at, true
		}
		lk.HeldFor = now.Sub(lk.HeldSince).Seconds()
		l.Locks = append(l.Locks, lk)
	}
	if err == nil { // a node that failed keeps nothing: its locks start afresh
		r.first = seen
	}
	sort.SliceStable(l.Locks, func(i, j int) bool { return l.Locks[i].HeldFor > l.Locks[j].HeldFor })
	if truncated && err == nil {
		err = ErrTruncated
	}
	return l, err
}
