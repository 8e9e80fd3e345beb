package exporter

import (
	"context"
	"errors"
	"hash/maphash"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pacing of the lock pass. It is spread over lockPassShare of the interval
// (within 90 % of MaxDuration, the sample's time budget), at a rate derived
// from the node's key count (INFO keyspace): on 1,000,000 keys at the
// default 15 s interval that is about 133,000 keys/s, 5,300 SCAN calls of
// COUNT 25 per second, ending about 7.5 s into the interval. On a quiet
// 2-core machine BenchmarkSample measured other clients' GET p99 at 1.11–1.51×
// idle (median 1.22) with half the interval and 1.23–1.63× (median 1.28)
// with 80 % of it, in interleaved runs: spreading the same work thinner
// bought nothing, and half the interval publishes exact locks 4 s sooner
// (docs/benchmarks.md).
const (
	lockPassShare = 0.5
	// minLockScanRate (keys/s) covers a small keyspace at once: below
	// about 230,000 keys the pass takes less than the spread.
	minLockScanRate = 20_000
	// unknownLockScanRate (keys/s) is the pace when the key count is
	// unknown (INFO refused).
	unknownLockScanRate = 100_000
)

// lockScanRate is the lock pass's pace in keys per second (SCAN calls × COUNT);
// negative when pacing is off.
func (e *Exporter) lockScanRate(n *node) float64 {
	if e.opts.KeysPerSecond < 0 {
		return -1
	}
	if !n.dbKnown {
		return unknownLockScanRate
	}
	spread := min(e.opts.Interval.Seconds()*e.lockShare, e.opts.MaxDuration.Seconds()*0.9)
	return max(float64(n.dbKeys)/spread, minLockScanRate)
}

// errTokens marks a lock pass error of the owner-token reads (GETRANGE):
// the locks are still counted, without long-held tracking.
var errTokens = errors.New("owner tokens")

// lockScan is a lock pass in progress: one SCAN … MATCH walk per pattern.
type lockScan struct {
	res     *lockResult
	pattern int
	cursor  uint64
	seq     uint64
	// seen drops keys matched by two patterns (several patterns only).
	seen map[string]struct{}
}

// lockResult is the lock state found by one complete lock pass.
type lockResult struct {
	started, completed time.Time
	groups             map[string]*GroupStats // lock fields only
	tokensRead         bool
}

// lockPass continues the lock pass: SCAN … MATCH for each lock pattern, and
// for each lock key its TTL and the first MaxTokenBytes of its value
// (GETRANGE: never an unbounded read). It is paced by lockScanRate to end
// within the interval, so that lock figures are exact and refreshed every
// interval while each SCAN holds the server briefly and rarely. A pass cut
// by the deadline resumes on the next sample.
func (e *Exporter) lockPass(ctx context.Context, n *node, deadline time.Time, readTokens bool, own lookups) []*StageError {
	ls := &n.locks
	if ls.res == nil {
		ls.res = &lockResult{started: e.clock.Now(), groups: map[string]*GroupStats{}, tokensRead: readTokens}
		ls.pattern, ls.cursor = 0, 0
		ls.seq++
		if len(n.patterns) > 1 {
			ls.seen = map[string]struct{}{}
		}
	}
	if !readTokens {
		ls.res.tokensRead = false
	}
	rate := e.lockScanRate(n)
	began, visited := e.pacer.Now(), 0
	var errs []*StageError
	var batch []string
	for ls.pattern < len(n.patterns) {
		if e.pacer.Now().After(deadline) {
			return append(errs, e.readLocks(ctx, n, batch, own)...)
		}
		keys, cursor, err := n.rdb.Scan(ctx, ls.cursor, n.patterns[ls.pattern], int64(e.opts.LockScanCount)).Result()
		if err != nil {
			ls.res = nil // start over after the backoff
			return append(errs, stageErr(StageLocks, err))
		}
		for _, k := range keys {
			if ls.seen != nil {
				if _, dup := ls.seen[k]; dup {
					continue
				}
				if len(ls.seen) < maxTrackedLocks {
					ls.seen[k] = struct{}{}
				}
			}
			batch = append(batch, k)
		}
		ls.cursor = cursor
		if cursor == 0 {
			ls.pattern, ls.cursor = ls.pattern+1, 0
		}
		if len(batch) >= e.opts.Batch || ls.pattern == len(n.patterns) {
			for _, se := range e.readLocks(ctx, n, batch, own) {
				if se.fatal() || !errors.Is(se, errTokens) {
					ls.res = nil
					return append(errs, se)
				}
				errs = append(errs, se)
			}
			batch = batch[:0]
		}
		visited += e.opts.LockScanCount
		if err := e.pace(ctx, began, visited, rate); err != nil {
			ls.res = nil
			return append(errs, stageErr(StageLocks, err))
		}
	}
	e.completeLocks(n)
	return errs
}

func (e *Exporter) completeLocks(n *node) {
	ls := &n.locks
	ls.res.completed = e.clock.Now()
	for k, t := range n.tokens { // locks gone since the last pass
		if t.pass != ls.seq {
			delete(n.tokens, k)
		}
	}
	n.lockDone, ls.res, ls.seen = ls.res, nil, nil
}

// readLocks reads the TTL and owner token of a batch of lock keys in one
// pipeline. A refused token read (NOPERM on GETRANGE) stops token reads for
// this pass and is returned wrapped in errTokens; the locks are still
// counted.
func (e *Exporter) readLocks(ctx context.Context, n *node, keys []string, own lookups) []*StageError {
	if len(keys) == 0 {
		return nil
	}
	res := n.locks.res
	pipe := n.rdb.Pipeline()
	ttls := make([]*redis.Cmd, len(keys))
	toks := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		ttls[i] = n.readTTL(ctx, pipe, k)
		if res.tokensRead {
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
			continue
		}
		longHeld := false
		if toks[i] != nil && res.tokensRead {
			var se *StageError
			longHeld, se = e.trackToken(n, k, ttl, toks[i], now)
			if se != nil {
				if se.fatal() {
					return append(errs, se)
				}
				res.tokensRead = false
				errs = append(errs, se)
			}
		}
		g := res.groups[e.groups.Classify(k)]
		if g == nil {
			g = &GroupStats{}
			res.groups[e.groups.Classify(k)] = g
		}
		g.addLock(ttl, longHeld)
		if t, ok := n.tokens[k]; longHeld && ttl >= 0 && ok && (t.ttl < 0 || now.Sub(t.since) > t.ttl) {
			g.LocksLongHeldPastTTL++
		}
	}
	return errs
}

// trackToken compares a lock's owner token (as a hash of its first
// MaxTokenBytes) with the one seen in earlier passes and reports whether it
// has been held past LongHeld.
func (e *Exporter) trackToken(n *node, key string, ttl time.Duration, get *redis.StringCmd, now time.Time) (bool, *StageError) {
	val, err := get.Result()
	if err != nil {
		se := stageErr(StageLocks, err)
		if se.Class == ClassNoPerm || se.fatal() {
			se.Err = errors.Join(errTokens, err)
			return false, se
		}
		return false, nil // WRONGTYPE: a non-string lock has no token
	}
	h := maphash.String(e.seed, val)
	prev, seen := n.tokens[key]
	if !seen && len(n.tokens) >= maxTrackedLocks {
		return false, nil
	}
	if !seen || prev.hash != h {
		prev = tokenSeen{hash: h, since: now, ttl: ttl}
	}
	prev.pass = n.locks.seq
	n.tokens[key] = prev
	return now.Sub(prev.since) >= e.opts.LongHeld, nil
}

// view returns the keyspace view to serve, and the fraction of the
// keyspace its key figures cover: the last complete pass (1), or the pass in
// progress, with the lock figures of the last complete lock pass.
func (n *node) view() (*Pass, float64) {
	p, coverage := n.keyView()
	return withLocks(p, n.lockDone), coverage
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
		v.Groups[name] = &c
	}
	return v, coverage
}

// withLocks returns a copy of p (which it leaves alone) with the lock
// figures of l; nil when both are nil.
func withLocks(p *Pass, l *lockResult) *Pass {
	if p == nil && l == nil {
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
	if l == nil {
		return v
	}
	v.TokensRead, v.LocksStarted, v.LocksComplete = l.tokensRead, l.started, l.completed
	for name, lg := range l.groups {
		g := v.Groups[name]
		if g == nil {
			g = &GroupStats{}
			v.Groups[name] = g
		}
		g.Locks, g.LocksNoTTL, g.LocksLongHeld, g.LocksLongHeldNoTTL = lg.Locks, lg.LocksNoTTL, lg.LocksLongHeld, lg.LocksLongHeldNoTTL
		g.LocksLongHeldPastTTL = lg.LocksLongHeldPastTTL
		g.LockTTL, g.LockTTLSum, g.LockTTLCount = lg.LockTTL, lg.LockTTLSum, lg.LockTTLCount
	}
	return v
}

// lookup counts one command's key lookups as the server counts them in
// keyspace_hits and keyspace_misses.
type lookup struct{ calls, hits, misses uint64 }

// lookups are the sampler's own lookups by commandstats name.
type lookups map[string]*lookup

func (l lookups) count(cmd string, hit bool) {
	c := l[cmd]
	if c == nil {
		c = &lookup{}
		l[cmd] = c
	}
	c.calls++
	if hit {
		c.hits++
	} else {
		c.misses++
	}
}

// countReply counts a key read from its reply: a value or an error such as
// WRONGTYPE found the key, nil did not, and NOPERM or a lost connection
// never looked.
func (l lookups) countReply(cmd string, err error) {
	switch {
	case err == nil:
		l.count(cmd, true)
	case errors.Is(err, redis.Nil):
		l.count(cmd, false)
	case classify(err) == ClassOther:
		l.count(cmd, true)
	}
}

func (l lookups) merge(o lookups) {
	for cmd, c := range o {
		m := l[cmd]
		if m == nil {
			m = &lookup{}
			l[cmd] = m
		}
		m.calls += c.calls
		m.hits += c.hits
		m.misses += c.misses
	}
}

func (l lookups) total() (hits, misses uint64) {
	for _, c := range l {
		hits += c.hits
		misses += c.misses
	}
	return hits, misses
}

// samplerKeyCommands are the per-key reads only samplers send (applications
// read values and TTLs with GET and PTTL, not PEXPIRETIME, GETRANGE of a
// lock, or OBJECT FREQ). Every call of them since the server started — this
// exporter's, other exporters', earlier doctor runs' — is taken out of the
// hit and miss counts: this sampler's own as counted, the others' as hits
// (a sampler reads keys SCAN just returned; a miss needs the key to vanish
// in between).
var samplerKeyCommands = []string{"pexpiretime", "getrange", "object|freq"}

// queueCommands are the reads of the configured queues. Samplers send one
// TYPE per queue and sample (applications do not send TYPE), so the other
// samplers' queue reads are estimated as this sampler's, scaled by the
// TYPE calls of the others against its own.
var queueCommands = []string{"type", "llen", "xlen", "xrange", "xinfo|groups", "xpending", "zcard", "zrange"}

// samplerCommands are the commands whose server-wide calls correct needs.
var samplerCommands = append(append([]string{}, samplerKeyCommands...), "type")

// correct returns the server's keyspace hits and misses less the samplers'
// lookups.
func (l lookups) correct(st *ServerStats) (hits, misses uint64) {
	var h, m float64 // samplers' hits and misses
	done := map[string]bool{}
	for _, cmd := range samplerKeyCommands {
		done[cmd] = true
		own := l.get(cmd)
		others := float64(sub(st.samplerCalls[cmd], own.calls))
		h += float64(own.hits) + others
		m += float64(own.misses)
	}
	scale := 1.0
	if own := l.get("type"); own.calls > 0 {
		scale = float64(max(st.samplerCalls["type"], own.calls)) / float64(own.calls)
	}
	for _, cmd := range queueCommands {
		done[cmd] = true
		own := l.get(cmd)
		h += float64(own.hits) * scale
		m += float64(own.misses) * scale
	}
	for cmd, c := range l {
		if !done[cmd] {
			h += float64(c.hits)
			m += float64(c.misses)
		}
	}
	return sub(st.KeyspaceHits, uint64(h+0.5)), sub(st.KeyspaceMisses, uint64(m+0.5))
}

func (l lookups) get(cmd string) lookup {
	if c := l[cmd]; c != nil {
		return *c
	}
	return lookup{}
}
