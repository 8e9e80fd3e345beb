package exporter_test

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
)

// The truth of the lock probes: a log of every write of lock keys, kept by
// the one goroutine that sends them (so they apply in the log's order), and
// what the lock figures were at any moment according to it.

// lockOp is one write of a lock key: SET (with an absolute expiry or none),
// DEL, PERSIST or PEXPIREAT. sent and acked bound when the server applied it
// (a pipeline's writes share them).
type lockOp struct {
	key  string
	kind byte // 's' SET, 'd' DEL, 'p' PERSIST, 'e' PEXPIREAT
	// expireAt is the Unix ms expiry a SET or PEXPIREAT gives, -1 none.
	expireAt    int64
	sent, acked time.Time
}

// lockState is a lock key as the writes left it.
type lockState struct {
	expireAt int64 // Unix ms, -1 none
	// setAt is when its token was written (for the long-held bound).
	setAt time.Time
}

// alive reports whether the key exists at Unix ms t as Redis sees it (a key
// is expired once the clock is past its expiry millisecond).
func (s lockState) alive(t int64) bool { return s.expireAt < 0 || t <= s.expireAt }

// truthLog is the log of lock writes.
type truthLog struct {
	mu  sync.Mutex
	ops []lockOp
}

func (l *truthLog) add(ops ...lockOp) {
	l.mu.Lock()
	l.ops = append(l.ops, ops...)
	l.mu.Unlock()
}

func (l *truthLog) snapshot() []lockOp {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]lockOp(nil), l.ops...)
}

// apply replays one write on the state (writes to keys that do not exist
// when they run change nothing, as in Redis; the writers never touch a key
// within a few hundred milliseconds of its expiry, so "when" is clear).
func apply(st map[string]lockState, op lockOp) {
	cur, ok := st[op.key]
	live := ok && cur.alive(op.sent.UnixMilli())
	switch op.kind {
	case 's':
		st[op.key] = lockState{expireAt: op.expireAt, setAt: op.sent}
	case 'd':
		delete(st, op.key)
	case 'p', 'e':
		if live {
			cur.expireAt = op.expireAt
			st[op.key] = cur
		} else {
			delete(st, op.key)
		}
	}
}

// lockGroup is the key group the exporter's default classifier gives a
// probe key: its last (numeric) segment becomes "*".
func lockGroup(key string) string { return key[:strings.LastIndexByte(key, ':')+1] + "*" }

// lockHorizons are the exporter's "within" labels of locks_expiring, in ms.
var lockHorizons = []struct {
	label string
	ms    int64
}{{"1s", 1e3}, {"10s", 1e4}, {"1m", 6e4}, {"10m", 6e5}, {"1h", 36e5}, {"1d", 864e5}, {"inf", math.MaxInt64}}

// figureRange is the range a lock figure may take at a moment: exact
// unless keys expire within the millisecond the moment rounds to.
type figureRange struct{ lo, hi float64 }

func (r figureRange) holds(v float64) bool { return r.lo <= v && v <= r.hi }

// add counts a key that is in the figure for sure, or maybe.
func (r *figureRange) add(sure, maybe bool) {
	if sure {
		r.lo++
	}
	if sure || maybe {
		r.hi++
	}
}

// lockFigures are what the exporter exports of one moment, per series
// (`locks_held{key_group="…"}`…): the observed values, or the true ranges.
type lockFigures map[string]float64

type truthFigures map[string]*figureRange

func (f truthFigures) at(series string) *figureRange {
	r := f[series]
	if r == nil {
		r = &figureRange{}
		f[series] = r
	}
	return r
}

// truthAt returns the lock figures of the state st at t, with the long-held
// threshold longHeld (only bounded above: the exporter counts from when it
// first saw a token, later than its write).
func truthAt(st map[string]lockState, t time.Time, longHeld time.Duration) truthFigures {
	out := truthFigures{}
	ms := t.UnixMilli()
	for key, s := range st {
		// A moment read back from a float is off by under a microsecond:
		// a key expiring in the millisecond next to it may be either way.
		near := s.expireAt >= 0 && s.expireAt >= ms-1 && s.expireAt <= ms+1
		sure, maybe := s.alive(ms) && !near, near
		if !sure && !maybe {
			continue
		}
		g := lockGroup(key)
		out.at(`locks_held{key_group="`+g+`"}`).add(sure, maybe)
		out.at(`locks_long_held{key_group="`+g+`"}`).add(false, !s.setAt.After(t.Add(-longHeld)))
		if s.expireAt < 0 {
			out.at(`locks_without_ttl{key_group="`+g+`"}`).add(sure, maybe)
			continue
		}
		ttl := s.expireAt - ms
		for _, h := range lockHorizons {
			edge := h.ms != math.MaxInt64 && ttl >= h.ms-1 && ttl <= h.ms+1
			in := ttl <= h.ms
			out.at(`locks_expiring{key_group="`+g+`",within="`+h.label+`"}`).add(sure && in && !edge, maybe || edge)
		}
	}
	return out
}

// matches reports whether the observed figures hold in truth: every series
// of either within its range, a series missing counted as 0.
func (f truthFigures) matches(seen lockFigures) (bool, string) {
	for series, r := range f {
		if v := seen[series]; !r.holds(v) {
			return false, fmt.Sprintf("%s = %v, true %v–%v", series, v, r.lo, r.hi)
		}
	}
	for series, v := range seen {
		if _, ok := f[series]; !ok && v != 0 {
			return false, fmt.Sprintf("%s = %v, true 0", series, v)
		}
	}
	return true, ""
}

// checkAt reports whether the figures seen, stamped t, were true at t:
// the writes acknowledged before t applied, those sent after not, and of
// the one request in flight at t (a write or a pipeline of them) any
// prefix, since it applies in order. A stamp read back from a float is
// within a microsecond of the exporter's: writes that close are in flight.
func checkAt(ops []lockOp, seen lockFigures, t time.Time, longHeld time.Duration) (bool, string) {
	const slack = time.Microsecond
	st := map[string]lockState{}
	i := 0
	for ; i < len(ops) && ops[i].acked.Before(t.Add(-slack)); i++ {
		apply(st, ops[i])
	}
	ok, why := truthAt(st, t, longHeld).matches(seen)
	for ; !ok && i < len(ops) && !ops[i].sent.After(t.Add(slack)); i++ {
		apply(st, ops[i])
		ok, _ = truthAt(st, t, longHeld).matches(seen)
	}
	return ok, why
}

// boundsOver returns, for the SCAN passes without notifications, the lock
// held counts per group that were surely there for the whole of [a, b]
// (lo) and that may have been there at some moment of it (hi).
func boundsOver(ops []lockOp, a, b time.Time) truthFigures {
	st := map[string]lockState{}
	touched := map[string]bool{}
	revived := map[string]bool{}
	for _, op := range ops {
		switch {
		case op.acked.Before(a):
			apply(st, op)
		case !op.sent.After(b):
			touched[op.key] = true
			revived[op.key] = revived[op.key] || op.kind != 'd'
		}
	}
	out := truthFigures{}
	keys := map[string]bool{}
	for key := range st {
		keys[key] = true
	}
	for key := range revived {
		keys[key] = true
	}
	for key := range keys {
		s, ok := st[key]
		sure := ok && !touched[key] && s.alive(a.UnixMilli()) && s.alive(b.UnixMilli()+1)
		maybe := ok && s.alive(a.UnixMilli()-1) || revived[key]
		out.at(`locks_held{key_group="`+lockGroup(key)+`"}`).add(sure, maybe)
	}
	return out
}
