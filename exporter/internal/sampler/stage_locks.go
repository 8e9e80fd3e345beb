package sampler

import (
	"context"
	"errors"
	"hash/maphash"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
)

// Pacing of the lock pass (SCAN … MATCH over the whole keyspace). Its rate,
// in keys visited per second, is bounded by the share of the server's time
// it may take (Config.LockScanBudget over the measured server time per
// scanned key). Within that bound:
//
//   - without notifications the pass is spread over lockPassShare of the
//     interval, so that lock figures are refreshed every interval while the
//     keyspace is small enough (see the limit in docs/exporter.md);
//   - with notifications, the first pass after a subscription (the sync)
//     runs at the budget, and later passes only reconcile the index, over
//     Config.LockReconcile.
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

// errTokens marks a lock pass error of the owner-token reads (GETRANGE):
// the locks are still counted, without long-held tracking.
var errTokens = errors.New("owner tokens")

// lockStage keeps an index of the node's lock keys (their expiry and a hash
// of their owner token). A SCAN … MATCH pass over the keyspace fills it,
// paced within its share of the server's time; with keyspace
// notifications, every sample reads again the locks that changed, and the
// figures shown are those of a moment the index was exact at. No pass in
// progress is ever shown.
type lockStage struct {
	env *env
	// retry is the backoff of the stage, tokens that of its owner-token
	// reads (GETRANGE can be refused while SCAN and TTL reads are not).
	retry, tokens backoff
	index         lockIndex
	// feed is the subscription to the lock keys' events; notify decides
	// whether there is one.
	feed   *lockFeed
	notify notifier
	seed   maphash.Seed
	// since is when the index was last started afresh; asOf the time of
	// the lock figures the last successful stage showed.
	since, asOf time.Time
	// ok says whether the last sample's lock stage succeeded: its series
	// are left out otherwise.
	ok bool
}

func newLockStage(v *env) lockStage {
	l := lockStage{env: v, seed: maphash.MakeSeed(), notify: notifier{env: v, logged: map[string]bool{}}}
	l.index.reset()
	return l
}

// begin starts the index's age at the node's first sample, or its first
// after a reset.
func (l *lockStage) begin() {
	if l.since.IsZero() {
		l.since = l.env.now()
	}
}

// reset forgets the lock index: it is rebuilt by a new pass (and a new
// subscription, whose events before the failure are lost).
func (l *lockStage) reset() {
	l.stopFeed()
	l.index.reset()
	l.since, l.asOf = time.Time{}, time.Time{}
}

// stopFeed ends the subscription, if any.
func (l *lockStage) stopFeed() {
	if l.feed != nil {
		l.feed.close()
		l.feed = nil
	}
}

// shower publishes lock figures as soon as the stage shows them.
type shower interface{ locksShown() }

// run runs one sample's share of the lock stage. With notifications, it
// first applies the changes they reported and, the index synced, shows the
// figures of the moment settle found them exact at; then it continues the
// SCAN … MATCH pass within the deadline. A completed pass shows its
// figures: exact at a moment settle finds when it was the sync (or a
// reconciling pass), otherwise the pass's reading at its end. shown is
// told whenever the figures shown change.
func (l *lockStage) run(ctx context.Context, deadline time.Time, readTokens bool, own lookups, shown shower) []*StageError {
	x := &l.index
	if !readTokens {
		x.tokensRead = false
	}
	errs := l.follow(ctx)
	if l.feed.ready(l.feed.generation()) {
		if se := l.settleAndShow(ctx, own, shown); se != nil {
			if se.Fatal() || se.Stage == StageLocks && !errors.Is(se, errTokens) {
				return append(errs, se)
			}
			errs = append(errs, se)
		}
	}
	completed, perrs := l.pass(ctx, deadline, readTokens, own)
	errs = append(errs, perrs...)
	l.logOverflow()
	if !completed {
		return errs
	}
	if l.feed != nil && (x.synced || x.syncPass == x.seq && l.feed.ready(x.feedGen)) {
		x.synced = true
		if se := l.settleAndShow(ctx, own, shown); se != nil {
			errs = append(errs, se)
		}
		return errs
	}
	// SCAN alone: the pass's reading, the locks it read checked again.
	for _, se := range l.verify(ctx, own) {
		if se.Fatal() || !errors.Is(se, errTokens) {
			return append(errs, se)
		}
		errs = append(errs, se)
	}
	l.show(ctx, l.env.now(), own)
	shown.locksShown()
	return errs
}

// logOverflow logs, once, that the index holds as many lock keys as it may.
func (l *lockStage) logOverflow() {
	x := &l.index
	if x.overflow && !x.overflowLogged {
		x.overflowLogged = true
		l.env.cfg.Logger.Warn("more lock keys than the exporter tracks: lock series are left out (raise --locks.max-tracked)",
			"node", l.env.addr, "max", l.env.cfg.MaxLocks)
	}
}

// settleAndShow settles the index and, when it found a moment the index
// was exact at, shows the figures of that moment.
func (l *lockStage) settleAndShow(ctx context.Context, own lookups, shown shower) *StageError {
	at, se := l.settle(ctx, own)
	if !at.IsZero() {
		l.show(ctx, at, own)
		shown.locksShown()
	}
	return se
}

// show makes the index's figures at the moment at the ones served, until
// the next moment the index is exact (or, without notifications, the next
// pass ends). More lock keys than MaxLocks show none. The holders that
// keep a liveness key are checked alive now (one pipeline of EXISTS per
// Batch holder processes, at most MaxAliveChecks): in a Cluster, those
// whose key is on another master are unknown.
func (l *lockStage) show(ctx context.Context, at time.Time, own lookups) {
	x := &l.index
	x.view, x.viewAt = nil, at
	x.viewNotified, x.viewTokens = l.feed != nil && x.synced, x.tokensRead
	if x.overflow {
		return
	}
	var alive aliveSet
	if x.tokensRead {
		hs := make([]*snapshot.Holder, 0, len(x.holders.known))
		for _, h := range x.holders.known {
			hs = append(hs, h)
		}
		alive = checkAlive(ctx, []*redis.Client{l.env.rdb}, liveInstances(hs), l.env.cfg.Batch,
			func(hit bool) { own.count("exists", hit) })
	}
	x.view = l.figures(at, alive)
}

// verify reads again every lock the index holds once a pass without
// notifications has completed: a lock deleted, or whose TTL or token
// changed, after the pass read it is then shown as it is at the pass's
// end. A lock written during the pass where its cursor had passed is
// still missing, until the next pass.
func (l *lockStage) verify(ctx context.Context, own lookups) []*StageError {
	keys := make([]string, 0, len(l.index.entries))
	for k := range l.index.entries {
		keys = append(keys, k)
	}
	var errs []*StageError
	batch := l.env.cfg.Batch
	for start := 0; start < len(keys); start += batch {
		for _, se := range l.read(ctx, keys[start:min(start+batch, len(keys))], own, false) {
			if se.Fatal() || !errors.Is(se, errTokens) {
				return append(errs, se)
			}
			errs = append(errs, se)
		}
	}
	return errs
}

// scanRate is the lock pass's pace in keys visited per second (SCAN calls
// × COUNT); negative when pacing is off.
func (l *lockStage) scanRate() float64 {
	rate, _ := l.paceRate()
	return rate
}

// paceRate is scanRate, and whether the budget is what bounds it.
func (l *lockStage) paceRate() (rate float64, atBudget bool) {
	cfg, f := l.env.cfg, &l.env.facts
	if cfg.Unpaced {
		return -1, false
	}
	budget := l.scanShare() / l.env.scanCost.perKey().Seconds()
	want := float64(unknownLockScanRate)
	switch {
	case !f.dbKnown:
	case l.feed != nil && l.index.synced:
		want = float64(f.dbKeys) / cfg.LockReconcile.Seconds()
	case l.feed != nil:
		want = budget // the sync: exact figures as soon as the budget allows
	default:
		spread := min(cfg.Interval.Seconds()*lockPassShare, cfg.MaxDuration.Seconds()*0.9)
		want = max(float64(f.dbKeys)/spread, minLockScanRate)
	}
	return max(min(want, budget), floorLockScanRate), want >= budget
}

// costRefresh is how often a pass paced at the budget reads the server's
// SCAN time again. Without it the pass would keep the estimate its sample
// began with: the default before the info stage's second reading (the first
// interval of a sync at 10,000,000 keys, at the wrong pace), and a reading
// from before the server became busier.
const costRefresh = time.Second

// remeasure reads the server's SCAN time again (INFO commandstats) and
// reports whether the estimate of its cost per key changed. A failed read
// keeps the estimate: the info stage reports INFO's failures.
func (l *lockStage) remeasure(ctx context.Context) bool {
	raw, err := l.env.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return false
	}
	usec, ok := parseScanUsec(raw)
	if !ok {
		return false
	}
	before := l.env.scanCost.perKey()
	l.env.scanCost.update(usec)
	return l.env.scanCost.perKey() != before
}

// scanCount is the COUNT of the lock pass's SCAN: LockScanCount, or once
// notifications keep the index exact the whole-keyspace pass's larger
// ScanCount. A reconciling pass is paced to its keyspace over an hour, not
// to the budget, so its larger calls are as few as they are long: a
// quarter of the round trips at the defaults.
func (l *lockStage) scanCount() int {
	cfg := l.env.cfg
	if l.feed != nil && l.index.synced {
		return max(cfg.LockScanCount, cfg.ScanCount)
	}
	return cfg.LockScanCount
}

// scanShare is the share of the server's time the lock pass's SCAN may take
// while it runs: the budget over each interval, spent within MaxDuration.
func (l *lockStage) scanShare() float64 {
	cfg := l.env.cfg
	boost := min(cfg.Interval.Seconds()/cfg.MaxDuration.Seconds(), maxBudgetBoost)
	return min(cfg.LockScanBudget*max(boost, 1), 1)
}

// pass continues the lock pass: SCAN … MATCH for each lock pattern, and for
// each lock key its TTL and the first MaxTokenBytes of its value (GETRANGE:
// never an unbounded read), paced at scanRate. A pass cut by the deadline
// or by a timeout resumes on the next sample (the keys found but not read
// first). It reports whether a pass completed.
func (l *lockStage) pass(ctx context.Context, deadline time.Time, readTokens bool, own lookups) (bool, []*StageError) {
	cfg, x, patterns := l.env.cfg, &l.index, l.env.cfg.LockPatterns
	if !x.active {
		x.startPass(l.env.now(), readTokens, len(patterns), l.feed)
	}
	rate, atBudget := l.paceRate()
	count := l.scanCount()
	paced, visited := cfg.Pacer.Now(), 0
	measured := paced
	var errs []*StageError
	batch := x.unread
	x.unread = nil
	for x.pattern < len(patterns) || len(batch) > 0 {
		if cfg.Pacer.Now().After(deadline) {
			errs, _ = l.readFound(ctx, batch, own, errs)
			return false, errs
		}
		if x.pattern < len(patterns) {
			keys, cursor, err := l.env.rdb.Scan(ctx, x.cursor, patterns[x.pattern], int64(count)).Result()
			if err == nil {
				err = x.scan.next(cursor, l.env.facts.scanBudget(count))
			}
			if err != nil {
				return false, append(errs, l.passFailed(stageErr(StageLocks, err), batch))
			}
			l.env.scanCost.visited(count)
			batch = x.dedupe(batch, keys)
			x.advance(cursor)
			visited += count
		}
		if len(batch) >= cfg.Batch || x.pattern == len(patterns) {
			var ended bool
			if errs, ended = l.readFound(ctx, batch, own, errs); ended {
				return false, errs
			}
			batch = batch[:0]
		}
		if err := l.env.pace(ctx, &paced, visited, rate); err != nil {
			x.restartPass()
			return false, append(errs, stageErr(StageLocks, err))
		}
		if atBudget && cfg.Pacer.Since(measured) >= costRefresh {
			if measured = cfg.Pacer.Now(); l.remeasure(ctx) {
				rate, atBudget = l.paceRate()
				paced, visited = measured, 0
			}
		}
	}
	x.completePass(l.env.now(), cfg.MaxLocks)
	return true, errs
}

// readFound reads the keys the pass found. It returns errs with the
// refused token reads and the error that ended the sample's share of the
// pass, if any, added, and whether there was one.
func (l *lockStage) readFound(ctx context.Context, batch []string, own lookups, errs []*StageError) ([]*StageError, bool) {
	errs, failed := l.readBatch(ctx, batch, own, errs)
	if failed == nil {
		return errs, false
	}
	return append(errs, l.passFailed(failed, batch)), true
}

// passFailed ends the sample's share of the pass after se, with unread
// the keys it found but has not read. A timeout keeps the pass, those keys
// read first when it resumes: the server answered late, and SCAN's cursor
// only moved for the pages whose keys were kept. Any other failure starts
// the pass over.
func (l *lockStage) passFailed(se *StageError, unread []string) *StageError {
	x := &l.index
	if !answeredLate(se) {
		x.restartPass()
		return se
	}
	x.unread = unread
	return se
}

// readBatch reads a batch of keys the pass found. It returns errs with the
// refused token reads added, and the error that ends the pass, if any.
func (l *lockStage) readBatch(ctx context.Context, batch []string, own lookups, errs []*StageError) ([]*StageError, *StageError) {
	for _, se := range l.read(ctx, batch, own, true) {
		if se.Fatal() || !errors.Is(se, errTokens) {
			return errs, se
		}
		errs = append(errs, se)
	}
	return errs, nil
}

// read reads the TTL and owner token of a batch of lock keys in one
// pipeline and updates the index. fromScan marks keys the lock pass
// returned. A refused token read (NOPERM on GETRANGE) stops token reads for
// this pass and is returned wrapped in errTokens; the locks are still
// indexed.
func (l *lockStage) read(ctx context.Context, keys []string, own lookups, fromScan bool) []*StageError {
	if len(keys) == 0 {
		return nil
	}
	x, f := &l.index, &l.env.facts
	pipe := l.env.rdb.Pipeline()
	ttls := make([]*redis.Cmd, len(keys))
	toks := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		ttls[i] = f.readTTL(ctx, pipe, k)
		if x.tokensRead {
			toks[i] = pipe.GetRange(ctx, k, 0, MaxTokenBytes-1)
		}
	}
	_, _ = pipe.Exec(ctx)
	now := l.env.now()
	var errs []*StageError
	for i, k := range keys {
		ttl, err := f.ttlOf(ttls[i], now)
		if err != nil {
			return append(errs, stageErr(StageLocks, err))
		}
		own.count(f.ttlCmd, ttl != -2)
		if toks[i] != nil && classify(toks[i].Err()) != ClassNoPerm {
			own.count("getrange", ttl != -2) // GETRANGE of a missing key answers "": the TTL read tells
		}
		if ttl == -2 {
			delete(x.entries, k)
			continue
		}
		if se := l.indexLock(k, ttl, toks[i], now, fromScan); se != nil {
			if se.Fatal() {
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
func (l *lockStage) indexLock(key string, ttl time.Duration, get *redis.StringCmd, now time.Time, fromScan bool) *StageError {
	x := &l.index
	en, known := x.entries[key]
	if !known {
		if len(x.entries) >= l.env.cfg.MaxLocks {
			x.overflow = true
			return nil
		}
		if fromScan && x.synced && !l.feed.pending(key) && len(x.suspect) < maxSuspects {
			x.suspect[key] = struct{}{} // a lock no notification told of, unless its event is in flight
		}
		en = lockEntry{group: l.env.cfg.LockGroups.Classify(key)}
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
		se = l.readToken(&en, get, ttl, now)
	}
	if !en.hasToken && en.since.IsZero() {
		en.since, en.firstTTL = now, ttl
	}
	x.entries[key] = en
	return se
}

// readToken updates en with the owner token get read: a new token restarts
// the time it has been held. A refused read is returned wrapped in
// errTokens.
func (l *lockStage) readToken(en *lockEntry, get *redis.StringCmd, ttl time.Duration, now time.Time) *StageError {
	val, err := get.Result()
	switch {
	case err == nil:
		h := maphash.String(l.seed, val)
		if !en.hasToken || en.token != h {
			en.token, en.hasToken, en.since, en.firstTTL = h, true, now, ttl
			en.holder, en.acquired = l.index.holders.of(val)
		}
	case classify(err) == ClassNoPerm || stageErr(StageLocks, err).Fatal():
		return stageErr(StageLocks, errors.Join(errTokens, err))
	default: // WRONGTYPE: a non-string lock has no token
		en.hasToken, en.holder = false, nil
	}
	return nil
}

// figures aggregates the index per lock group at now: locks whose TTL has
// run out are gone, whether or not the server has expired them yet (as
// Redis sees it: a key whose expiry is the current millisecond is still
// there).
func (l *lockStage) figures(now time.Time, alive aliveSet) map[string]*lockGroup {
	x := &l.index
	x.regroup(l.env.cfg.LockGroups)
	out := map[string]*lockGroup{}
	nowMs := now.UnixMilli()
	for key, en := range x.entries {
		ttl := time.Duration(-1)
		if en.expireAt >= 0 {
			if en.expireAt < nowMs {
				continue
			}
			ttl = time.Duration(en.expireAt-nowMs) * time.Millisecond
		}
		g := out[en.group]
		if g == nil {
			g = &lockGroup{}
			out[en.group] = g
		}
		longHeld := en.hasToken && now.Sub(en.since) >= l.env.cfg.LongHeld
		pastTTL := longHeld && ttl >= 0 && (en.firstTTL < 0 || now.Sub(en.since) > en.firstTTL)
		g.add(ttl, longHeld, pastTTL)
		state := alive.of(en.holder)
		if state == snapshot.AliveNo {
			g.deadHolder++
		}
		g.offer(l.env.cfg.LockHolders, key, &en, ttl, longHeld, pastTTL, state)
	}
	return out
}

// view returns a copy of the key figures p (which it leaves alone) with the
// lock figures shown, unless the lock stage failed (ok false): then its
// series are left out, and only their age is exported. Nil when there is
// nothing to show.
func (l *lockStage) view(p *snapshot.Pass, ok bool) *snapshot.Pass {
	x := &l.index
	if !ok || x.view == nil {
		return withLocks(p, nil, time.Time{}, false, false)
	}
	v := withLocks(p, x.view, x.viewAt, x.viewTokens, x.viewNotified)
	v.LockPassStarted, v.LockPassEnded = x.lastStarted, x.lastEnded
	return v
}

// ages records the lock index's state; only the lock stage's goroutine
// changes it. shown says whether s serves the lock figures shown now;
// otherwise (a failing lock stage) their time stays that of the last
// successful stage's.
func (l *lockStage) ages(s *snapshot.Node, shown bool) {
	x := &l.index
	s.LocksAsOf, s.LockRepairs = l.asOf, x.repairs
	if shown {
		s.LocksAsOf = x.viewAt
		if x.view == nil {
			s.LocksAsOf = time.Time{}
		}
	}
	if s.LocksAsOf.IsZero() { // no lock figures since the index started
		s.LocksAsOf = l.since
	}
	s.LockNotifications = l.feed != nil && x.synced
	s.LockNotificationsRefused = l.notify.refused
}

// backoffFor returns the backoff of the part of the stage that failed.
func (l *lockStage) backoffFor(se *StageError) *backoff {
	switch {
	case se.Stage == StageNotifications:
		return &l.notify.retry
	case errors.Is(se, errTokens):
		return &l.tokens
	}
	return &l.retry
}

// settled notes how the sample's stage went: ran (reading tokens or not)
// and failed with errs (those of notifications and token reads leave the
// lock figures standing).
func (l *lockStage) settled(ran, readTokens bool, errs []*StageError) {
	locksFailed, tokensFailed := false, false
	for _, se := range errs {
		switch {
		case se.Stage != StageLocks:
		case errors.Is(se, errTokens):
			tokensFailed = true
		default:
			locksFailed = true
		}
	}
	l.ok = ran && !locksFailed
	if l.ok {
		l.retry.reset()
		l.asOf = time.Time{}
		if l.index.view != nil {
			l.asOf = l.index.viewAt
		}
	}
	if readTokens && !tokensFailed {
		l.tokens.reset()
	}
}
