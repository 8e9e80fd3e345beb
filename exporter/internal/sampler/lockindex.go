package sampler

import (
	"time"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
	"github.com/cachewatch/cachewatch/keygroup"
)

// lockEntry is what the lock index knows of one lock key: its expiry and
// the hash of its owner token (never the token).
type lockEntry struct {
	group    string
	expireAt int64 // Unix ms; -1 no expiry
	token    uint64
	hasToken bool
	// since is when this token was first seen, firstTTL the lock's
	// remaining TTL then (-1: none): held longer than that, the owner
	// extended the lease.
	since    time.Time
	firstTTL time.Duration
	// pass is the lock pass that last saw or read the key.
	pass uint64
	// holder is who its value names (interned: shared by the locks of one
	// holder), acquired the acquisition time it tells (Unix ms; 0: none).
	holder   *snapshot.Holder
	acquired int64
}

// lockIndex holds every lock key of a node (at most Config.MaxLocks). SCAN
// passes fill it; with keyspace notifications, each sample also re-reads the
// keys that changed, which keeps it exact between passes.
type lockIndex struct {
	entries map[string]lockEntry

	// The SCAN … MATCH pass in progress; scan follows its cursors.
	scan    scanWatch
	active  bool
	seq     uint64
	pattern int
	cursor  uint64
	started time.Time
	// lastStarted and lastEnded are the last complete pass's.
	lastStarted, lastEnded time.Time
	// seen drops keys matched by two patterns (several patterns only).
	seen map[string]struct{}
	// unread are keys the pass found whose read timed out: they are read
	// first when the pass resumes.
	unread []string

	// view holds the figures last shown, computed at viewAt, the moment
	// the index was exact (or, without notifications, a pass ended); nil
	// when there are none. viewNotified and viewTokens are whether
	// notifications kept the index exact then and owner tokens were read.
	view                     map[string]*lockGroup
	viewAt                   time.Time
	viewNotified, viewTokens bool

	tokensRead bool
	overflow   bool
	// overflowLogged is set once the overflow has been logged.
	overflowLogged bool
	// repairs counts keys the index was wrong about while synced; suspect
	// holds keys a pass found that no notification had told of yet.
	repairs uint64
	suspect map[string]struct{}

	// With notifications: synced once a pass that started after the
	// subscription (feedGen) has completed; syncPass is that pass.
	synced   bool
	feedGen  uint64
	syncPass uint64

	// groupsEpoch is the lock classifier's epoch when the entries' groups
	// were last classified (regroup).
	groupsEpoch uint64

	// holders interns the holders the entries point to (see holder.go).
	holders holders
}

func (x *lockIndex) reset() {
	*x = lockIndex{entries: map[string]lockEntry{}, suspect: map[string]struct{}{}, seq: x.seq, repairs: x.repairs,
		holders: x.holders}
}

// restartPass drops the pass in progress: the next one starts from the
// first pattern and cursor 0.
func (x *lockIndex) restartPass() { x.active, x.unread = false, nil }

// startPass starts a pass over patterns lock patterns at now; with a
// subscription not synced yet, it is the pass that will sync it.
func (x *lockIndex) startPass(now time.Time, readTokens bool, patterns int, feed *lockFeed) {
	x.scan.start()
	x.active, x.pattern, x.cursor, x.started = true, 0, 0, now
	x.seq++
	x.tokensRead = readTokens
	if feed != nil && !x.synced {
		x.syncPass, x.feedGen = x.seq, feed.generation()
	}
	x.seen = nil
	if patterns > 1 {
		x.seen = map[string]struct{}{}
	}
}

// advance moves the pass to the cursor SCAN returned: the next pattern
// once the cursor is back at 0.
func (x *lockIndex) advance(cursor uint64) {
	x.cursor = cursor
	if cursor == 0 {
		x.pattern, x.cursor = x.pattern+1, 0
		x.scan.start()
	}
}

// dedupe appends keys to batch, dropping those an earlier pattern of the
// pass matched.
func (x *lockIndex) dedupe(batch, keys []string) []string {
	for _, k := range keys {
		if x.seen != nil {
			if _, dup := x.seen[k]; dup {
				continue
			}
			x.seen[k] = struct{}{}
		}
		batch = append(batch, k)
	}
	return batch
}

// completePass forgets the keys the pass neither saw nor read: SCAN
// returns every key present for the whole pass, and with notifications any
// key changed meanwhile was read again, so those keys are gone. While the
// index was synced, each is a repair (a lost notification).
func (x *lockIndex) completePass(now time.Time, maxLocks int) {
	for k, en := range x.entries {
		if en.pass != x.seq {
			delete(x.entries, k)
			if x.synced {
				x.repairs++
			}
		}
	}
	if len(x.entries) < maxLocks {
		x.overflow = false
	}
	x.holders.prune(x.entries)
	x.active, x.seen = false, nil
	x.lastStarted, x.lastEnded = x.started, now
}

// countSuspects counts as repairs the keys a pass found before any
// notification told of them, unless their event has come since: lost
// events.
func (x *lockIndex) countSuspects(changed map[string]bool, overflow bool) {
	for k := range x.suspect {
		if _, ok := changed[k]; !ok && !overflow {
			x.repairs++
		}
	}
	clear(x.suspect)
}

// regroup classifies the indexed lock keys again when the lock classifier
// has learnt something since they were classified (its epoch moved): a
// lock indexed while its group was still being learnt (under "other")
// moves to its group, however long it stays held.
func (x *lockIndex) regroup(groups *keygroup.Classifier) {
	epoch := groups.Epoch()
	if epoch == x.groupsEpoch {
		return
	}
	for key, en := range x.entries {
		en.group = groups.Classify(key)
		x.entries[key] = en
	}
	x.groupsEpoch = epoch
}

// lockGroup is the lock figures of one lock group.
type lockGroup struct {
	locks, noTTL, longHeld, longHeldNoTTL, longHeldPastTTL uint64
	// deadHolder counts the locks whose holder's liveness key is gone.
	deadHolder uint64
	expiring   horizonCounts
	// holders are the longest-held locks, longest first.
	holders []snapshot.HeldLock
}

// add counts a lock and its remaining TTL (< 0: none); pastTTL marks a
// long-held lock whose token was held longer than the TTL it had when
// first seen.
func (g *lockGroup) add(ttl time.Duration, longHeld, pastTTL bool) {
	g.locks++
	if longHeld {
		g.longHeld++
	}
	if pastTTL {
		g.longHeldPastTTL++
	}
	if ttl < 0 {
		g.noTTL++
		if longHeld {
			g.longHeldNoTTL++
		}
		return
	}
	g.expiring.add(ttl)
}

// withLocks returns a copy of p (which it leaves alone) with the lock
// figures of groups (nil: none); nil when there is nothing to show.
func withLocks(p *snapshot.Pass, groups map[string]*lockGroup, asOf time.Time, tokensRead, notified bool) *snapshot.Pass {
	if p == nil && groups == nil {
		return nil
	}
	v := &snapshot.Pass{Groups: map[string]*snapshot.GroupStats{}, TokensRead: true}
	if p != nil {
		*v = *p
		v.Groups = make(map[string]*snapshot.GroupStats, len(p.Groups))
		for name, g := range p.Groups {
			c := *g
			v.Groups[name] = &c
		}
	}
	if groups == nil {
		return v
	}
	v.TokensRead, v.LocksAsOf, v.LocksNotified = tokensRead, asOf, notified
	for name, lg := range groups {
		g := v.Groups[name]
		if g == nil {
			g = &snapshot.GroupStats{}
			v.Groups[name] = g
		}
		g.Locks, g.LocksNoTTL, g.LocksLongHeld, g.LocksLongHeldNoTTL = lg.locks, lg.noTTL, lg.longHeld, lg.longHeldNoTTL
		g.LocksLongHeldPastTTL, g.LocksDeadHolder = lg.longHeldPastTTL, lg.deadHolder
		g.LocksExpiring = lg.expiring.within()
		g.Holders = lg.holders
	}
	return v
}
