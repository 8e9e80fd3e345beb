package exporter

import (
	"context"
	"errors"
	"hash/maphash"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pacing of the lock pass (SCAN … MATCH over the whole keyspace). Its rate,
// in keys visited per second, is bounded by the share of the server's time
// it may take (Options.LockScanBudget over the measured server time per
// scanned key). Within that bound:
//
//   - without notifications the pass is spread over lockPassShare of the
//     interval, so that lock figures are refreshed every interval while the
//     keyspace is small enough (see the limit in docs/exporter.md);
//   - with notifications, the first pass after a subscription (the sync)
//     runs at the budget, and later passes only reconcile the index, over
//     Options.LockReconcile.
//
// The budget is a share of the server's time over each interval. A pass
// runs only within each sample's MaxDuration, so while it runs it may take
// the budget times Interval/MaxDuration, at most maxBudgetBoost times it.
const (
	lockPassShare = 0.5
	// maxBudgetBoost bounds the share a running pass takes, over the
	// budget, to spend the budget of a whole interval within MaxDuration.
	maxBudgetBoost = 1.25
	// minLockScanRate (keys/s) covers a small keyspace at once.
	minLockScanRate = 20_000
	// unknownLockScanRate (keys/s) is the pace when the key count is
	// unknown (INFO refused), within the budget.
	unknownLockScanRate = 100_000
	// floorLockScanRate (keys/s) keeps a pass moving whatever the budget.
	floorLockScanRate = 1_000
	// maxSuspects bounds the keys a pass found before their notification.
	maxSuspects = 10_000
)

// lockScanRate is the lock pass's pace in keys visited per second (SCAN
// calls × COUNT); negative when pacing is off.
func (e *Exporter) lockScanRate(n *node) float64 {
	if e.opts.KeysPerSecond < 0 {
		return -1
	}
	budget := e.scanShare() / n.scanCost.perKey().Seconds()
	want := float64(unknownLockScanRate)
	switch {
	case !n.dbKnown:
	case n.feed != nil && n.locks.synced:
		want = float64(n.dbKeys) / e.opts.LockReconcile.Seconds()
	case n.feed != nil:
		want = budget // the sync: exact figures as soon as the budget allows
	default:
		spread := min(e.opts.Interval.Seconds()*e.lockShare, e.opts.MaxDuration.Seconds()*0.9)
		want = max(float64(n.dbKeys)/spread, minLockScanRate)
	}
	return max(min(want, budget), floorLockScanRate)
}

// scanShare is the share of the server's time the lock pass's SCAN may take
// while it runs: the budget over each interval, spent within MaxDuration.
func (e *Exporter) scanShare() float64 {
	boost := min(e.opts.Interval.Seconds()/e.opts.MaxDuration.Seconds(), maxBudgetBoost)
	return min(e.opts.LockScanBudget*max(boost, 1), 1)
}

// errTokens marks a lock pass error of the owner-token reads (GETRANGE):
// the locks are still counted, without long-held tracking.
var errTokens = errors.New("owner tokens")

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
}

// lockIndex holds every lock key of a node (at most Options.MaxLocks). SCAN
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

	// view holds the figures last shown, computed at viewAt, the moment
	// the index was exact (or, without notifications, a pass ended); nil
	// when there are none. viewNotified and viewTokens are whether
	// notifications kept the index exact then and owner tokens were read.
	view                     map[string]*GroupStats
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
	// were last classified (regroupLocks).
	groupsEpoch uint64
}

func (x *lockIndex) reset() {
	*x = lockIndex{entries: map[string]lockEntry{}, suspect: map[string]struct{}{}, seq: x.seq, repairs: x.repairs}
}

// restartPass drops the pass in progress: the next one starts from the
// first pattern and cursor 0.
func (x *lockIndex) restartPass() { x.active = false }

// lockStage runs one sample's share of the lock stage. With notifications,
// it first applies the changes they reported and, the index synced, shows
// the figures of the moment settle found them exact at; then it continues
// the SCAN … MATCH pass within the deadline. A completed pass shows its
// figures: exact at a moment settle finds when it was the sync (or a
// reconciling pass), otherwise the pass's reading at its end. published is
// called whenever the figures shown change; no pass in progress is ever
// shown.
func (e *Exporter) lockStage(ctx context.Context, n *node, deadline time.Time, readTokens bool, own lookups, published func()) []*StageError {
	x := &n.locks
	if !readTokens {
		x.tokensRead = false
	}
	errs := e.followNotifications(ctx, n)
	if n.feed.ready(n.feed.generation()) {
		if se := e.settleAndShow(ctx, n, own, published); se != nil {
			if se.fatal() || se.Stage == StageLocks && !errors.Is(se, errTokens) {
				return append(errs, se)
			}
			errs = append(errs, se)
		}
	}
	completed, perrs := e.lockPass(ctx, n, deadline, readTokens, own)
	errs = append(errs, perrs...)
	if x.overflow && !x.overflowLogged {
		x.overflowLogged = true
		e.opts.Logger.Warn("more lock keys than the exporter tracks: lock series are left out (raise --locks.max-tracked)",
			"node", n.addr, "max", e.opts.MaxLocks)
	}
	if !completed {
		return errs
	}
	if n.feed != nil && (x.synced || x.syncPass == x.seq && n.feed.ready(x.feedGen)) {
		x.synced = true
		if se := e.settleAndShow(ctx, n, own, published); se != nil {
			errs = append(errs, se)
		}
		return errs
	}
	// SCAN alone: the pass's reading, the locks it read checked again.
	for _, se := range e.verifyLocks(ctx, n, own) {
		if se.fatal() || !errors.Is(se, errTokens) {
			return append(errs, se)
		}
		errs = append(errs, se)
	}
	e.showLocks(n, e.clock.Now())
	published()
	return errs
}

// settleAndShow settles the index and, when it found a moment the index
// was exact at, shows the figures of that moment.
func (e *Exporter) settleAndShow(ctx context.Context, n *node, own lookups, published func()) *StageError {
	at, exact, se := e.settle(ctx, n, own)
	if exact {
		e.showLocks(n, at)
		published()
	}
	return se
}

// showLocks makes the index's figures at the moment at the ones served,
// until the next moment the index is exact (or, without notifications, the
// next pass ends). More lock keys than MaxLocks show none.
func (e *Exporter) showLocks(n *node, at time.Time) {
	x := &n.locks
	x.view, x.viewAt = nil, at
	x.viewNotified, x.viewTokens = n.feed != nil && x.synced, x.tokensRead
	if !x.overflow {
		x.view = e.lockFigures(n, at)
	}
}

// verifyLocks reads again every lock the index holds once a pass without
// notifications has completed: a lock deleted, or whose TTL or token
// changed, after the pass read it is then shown as it is at the pass's
// end. A lock written during the pass where its cursor had passed is
// still missing, until the next pass.
func (e *Exporter) verifyLocks(ctx context.Context, n *node, own lookups) []*StageError {
	keys := make([]string, 0, len(n.locks.entries))
	for k := range n.locks.entries {
		keys = append(keys, k)
	}
	var errs []*StageError
	for start := 0; start < len(keys); start += e.opts.Batch {
		for _, se := range e.readLocks(ctx, n, keys[start:min(start+e.opts.Batch, len(keys))], own, false) {
			if se.fatal() || !errors.Is(se, errTokens) {
				return append(errs, se)
			}
			errs = append(errs, se)
		}
	}
	return errs
}

// lockPass continues the lock pass: SCAN … MATCH for each lock pattern, and
// for each lock key its TTL and the first MaxTokenBytes of its value
// (GETRANGE: never an unbounded read), paced at lockScanRate. A pass cut by
// the deadline resumes on the next sample. It reports whether a pass
// completed.
func (e *Exporter) lockPass(ctx context.Context, n *node, deadline time.Time, readTokens bool, own lookups) (bool, []*StageError) {
	x := &n.locks
	if !x.active {
		x.scan.start()
		x.active, x.pattern, x.cursor, x.started = true, 0, 0, e.clock.Now()
		x.seq++
		x.tokensRead = readTokens
		if n.feed != nil && !x.synced {
			x.syncPass, x.feedGen = x.seq, n.feed.generation()
		}
		x.seen = nil
		if len(n.patterns) > 1 {
			x.seen = map[string]struct{}{}
		}
	}
	rate := e.lockScanRate(n)
	paced, visited := e.pacer.Now(), 0
	var errs []*StageError
	var batch []string
	for x.pattern < len(n.patterns) {
		if e.pacer.Now().After(deadline) {
			return false, append(errs, e.readLocks(ctx, n, batch, own, true)...)
		}
		keys, cursor, err := n.rdb.Scan(ctx, x.cursor, n.patterns[x.pattern], int64(e.opts.LockScanCount)).Result()
		if err == nil {
			err = x.scan.next(cursor, scanBudget(n, e.opts.LockScanCount))
		}
		if err != nil {
			x.restartPass() // start over after the backoff
			return false, append(errs, stageErr(StageLocks, err))
		}
		n.scanCost.visited(e.opts.LockScanCount)
		batch = x.dedupe(batch, keys)
		x.cursor = cursor
		if cursor == 0 {
			x.pattern, x.cursor = x.pattern+1, 0
			x.scan.start()
		}
		if len(batch) >= e.opts.Batch || x.pattern == len(n.patterns) {
			for _, se := range e.readLocks(ctx, n, batch, own, true) {
				if se.fatal() || !errors.Is(se, errTokens) {
					x.restartPass()
					return false, append(errs, se)
				}
				errs = append(errs, se)
			}
			batch = batch[:0]
		}
		visited += e.opts.LockScanCount
		if err := e.pace(ctx, &paced, visited, rate); err != nil {
			x.restartPass()
			return false, append(errs, stageErr(StageLocks, err))
		}
	}
	e.completeLockPass(n)
	return true, errs
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

// completeLockPass forgets the keys the pass neither saw nor read: SCAN
// returns every key present for the whole pass, and with notifications any
// key changed meanwhile was read again, so those keys are gone. While the
// index was synced, each is a repair (a lost notification).
func (e *Exporter) completeLockPass(n *node) {
	x := &n.locks
	for k, en := range x.entries {
		if en.pass != x.seq {
			delete(x.entries, k)
			if x.synced {
				x.repairs++
			}
		}
	}
	if len(x.entries) < e.opts.MaxLocks {
		x.overflow = false
	}
	x.active, x.seen = false, nil
	x.lastStarted, x.lastEnded = x.started, e.clock.Now()
}

// readLocks reads the TTL and owner token of a batch of lock keys in one
// pipeline and updates the index. fromScan marks keys the lock pass
// returned. A refused token read (NOPERM on GETRANGE) stops token reads for
// this pass and is returned wrapped in errTokens; the locks are still
// indexed.
func (e *Exporter) readLocks(ctx context.Context, n *node, keys []string, own lookups, fromScan bool) []*StageError {
	if len(keys) == 0 {
		return nil
	}
	x := &n.locks
	pipe := n.rdb.Pipeline()
	ttls := make([]*redis.Cmd, len(keys))
	toks := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		ttls[i] = n.readTTL(ctx, pipe, k)
		if x.tokensRead {
			toks[i] = pipe.GetRange(ctx, k, 0, MaxTokenBytes-1)
		}
	}
	_, _ = pipe.Exec(ctx)
	now := e.clock.Now()
	var errs []*StageError
	for i, k := range keys {
		ttl, err := n.ttlOf(ttls[i], now)
		if err != nil {
			return append(errs, stageErr(StageLocks, err))
		}
		own.count(n.ttlCmd, ttl != -2)
		if toks[i] != nil && classify(toks[i].Err()) != ClassNoPerm {
			own.count("getrange", ttl != -2) // GETRANGE of a missing key answers "": the TTL read tells
		}
		if ttl == -2 {
			delete(x.entries, k)
			continue
		}
		if se := e.indexLock(n, k, ttl, toks[i], now, fromScan); se != nil {
			if se.fatal() {
				return append(errs, se)
			}
			x.tokensRead = false
			errs = append(errs, se)
		}
	}
	return errs
}

// indexLock records one read lock key. The owner token is compared as a
// hash of its first MaxTokenBytes with the one indexed before.
func (e *Exporter) indexLock(n *node, key string, ttl time.Duration, get *redis.StringCmd, now time.Time, fromScan bool) *StageError {
	x := &n.locks
	en, known := x.entries[key]
	if !known {
		if len(x.entries) >= e.opts.MaxLocks {
			x.overflow = true
			return nil
		}
		if fromScan && x.synced && !n.feed.pending(key) && len(x.suspect) < maxSuspects {
			x.suspect[key] = struct{}{} // a lock no notification told of, unless its event is in flight
		}
		en = lockEntry{group: e.lockGroups.Classify(key)}
	}
	en.expireAt = -1
	if ttl >= 0 {
		en.expireAt = now.Add(ttl).UnixMilli()
	}
	if x.active {
		en.pass = x.seq
	}
	var se *StageError
	if get != nil && x.tokensRead {
		val, err := get.Result()
		switch {
		case err == nil:
			h := maphash.String(e.seed, val)
			if !en.hasToken || en.token != h {
				en.token, en.hasToken, en.since, en.firstTTL = h, true, now, ttl
			}
		case classify(err) == ClassNoPerm || stageErr(StageLocks, err).fatal():
			se = stageErr(StageLocks, errors.Join(errTokens, err))
		default: // WRONGTYPE: a non-string lock has no token
			en.hasToken = false
		}
	}
	if !en.hasToken && en.since.IsZero() {
		en.since, en.firstTTL = now, ttl
	}
	x.entries[key] = en
	return se
}

// lockFigures aggregates the index per lock group at now: locks whose TTL
// has run out are gone, whether or not the server has expired them yet (as
// Redis sees it: a key whose expiry is the current millisecond is still
// there).
func (e *Exporter) lockFigures(n *node, now time.Time) map[string]*GroupStats {
	e.regroupLocks(n)
	x := &n.locks
	out := map[string]*GroupStats{}
	nowMs := now.UnixMilli()
	for _, en := range x.entries {
		ttl := time.Duration(-1)
		if en.expireAt >= 0 {
			if en.expireAt < nowMs {
				continue
			}
			ttl = time.Duration(en.expireAt-nowMs) * time.Millisecond
		}
		g := out[en.group]
		if g == nil {
			g = &GroupStats{}
			out[en.group] = g
		}
		longHeld := en.hasToken && now.Sub(en.since) >= e.opts.LongHeld
		g.addLock(ttl, longHeld)
		if longHeld && ttl >= 0 && (en.firstTTL < 0 || now.Sub(en.since) > en.firstTTL) {
			g.LocksLongHeldPastTTL++
		}
	}
	return out
}

// keyView copies the key figures to serve: the sampler goes on changing its
// own. Nil when no pass has started.
func (n *node) keyView() (*Pass, float64) {
	base, coverage := n.done, 1.0
	if base == nil {
		base, coverage = n.pass, 0
		if base != nil && n.dbKnown && n.dbKeys > 0 {
			coverage = min(float64(base.Keys)/float64(n.dbKeys), 1)
		}
	}
	if base == nil {
		return nil, 0
	}
	v := &Pass{Started: base.Started, Completed: base.Completed, Keys: base.Keys, Complete: base.Complete,
		HotKeys: base.HotKeys, Groups: make(map[string]*GroupStats, len(base.Groups)), TokensRead: true}
	for name, g := range base.Groups {
		c := *g
		c.expirySeconds = nil
		c.Expiring = g.expiring()
		if g.MemorySampled > 0 {
			c.MemoryBytes = float64(g.memorySum) / float64(g.MemorySampled) * float64(g.Keys)
		}
		v.Groups[name] = &c
	}
	return v, coverage
}

// withLocks returns a copy of p (which it leaves alone) with the lock
// figures of groups (nil: none); nil when there is nothing to show.
func withLocks(p *Pass, groups map[string]*GroupStats, asOf time.Time, tokensRead, notified bool) *Pass {
	if p == nil && groups == nil {
		return nil
	}
	v := &Pass{Groups: map[string]*GroupStats{}, TokensRead: true}
	if p != nil {
		*v = *p
		v.Groups = make(map[string]*GroupStats, len(p.Groups))
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
			g = &GroupStats{}
			v.Groups[name] = g
		}
		g.Locks, g.LocksNoTTL, g.LocksLongHeld, g.LocksLongHeldNoTTL = lg.Locks, lg.LocksNoTTL, lg.LocksLongHeld, lg.LocksLongHeldNoTTL
		g.LocksLongHeldPastTTL = lg.LocksLongHeldPastTTL
		g.LocksExpiring = lg.lockExpiring()
	}
	return v
}
