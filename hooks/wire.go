package hooks

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/ctxsleep"
	"github.com/cachewatch/cachewatch/internal/origin"
)

// isInstrumented reports commands of cachewatch's own client, whose lock and
// cache outcomes that client counts itself.
func isInstrumented(ctx context.Context) bool { return origin.IsInstrumented(ctx) }

// argString returns args[i] as a string, when it is one (go-redis sends keys
// and tokens as given: almost always strings).
func argString(args []any, i int) (string, bool) {
	if i >= len(args) {
		return "", false
	}
	switch v := args[i].(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

// argInt returns args[i] as an integer (EVAL's numkeys).
func argInt(args []any, i int) (int, bool) {
	if i >= len(args) {
		return 0, false
	}
	switch v := args[i].(type) {
	case int:
		return v, true
	case int64:
		return int(v), true
	case string:
		n, err := strconv.Atoi(v)
		return n, err == nil
	}
	return 0, false
}

// intReply returns an integer reply.
func intReply(cmd redis.Cmder) (int64, bool) {
	switch c := cmd.(type) {
	case *redis.Cmd:
		n, ok := c.Val().(int64)
		return n, ok
	case *redis.IntCmd:
		return c.Val(), true
	case *redis.BoolCmd:
		if c.Val() {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// sliceReply returns the replies of MGET and HMGET.
func sliceReply(cmd redis.Cmder) ([]any, bool) {
	switch c := cmd.(type) {
	case *redis.SliceCmd:
		return c.Val(), true
	case *redis.Cmd:
		v, ok := c.Val().([]any)
		return v, ok
	}
	return nil, false
}

// lookup counts the cache outcome of a read command: a hit or a miss. A
// read that failed got no answer from the cache: it is a failed command
// (its class says why), not a lookup.
func (h *Hook) lookup(kind cmdKind, f *finished) {
	cmd, args := f.cmd, f.args
	key, ok := argString(args, 1)
	if !ok || f.failed {
		return
	}
	switch kind {
	case kindGet, kindHGet:
		result := lookupHit
		if f.err == redis.Nil {
			result = lookupMiss
		}
		h.lookupResult(key, result)
	case kindMGet:
		vals, _ := sliceReply(cmd)
		for i := 1; i < len(args) && i-1 < len(vals); i++ {
			key, _ := argString(args, i)
			h.lookupResult(key, elemResult(vals, i-1))
		}
	case kindHMGet:
		vals, _ := sliceReply(cmd)
		for i := 2; i < len(args) && i-2 < len(vals); i++ {
			h.lookupResult(key, elemResult(vals, i-2))
		}
	}
}

// elemResult is the outcome of the i-th key (or field) of a multi-key read.
func elemResult(vals []any, i int) int {
	if vals[i] == nil {
		return lookupMiss
	}
	return lookupHit
}

func (h *Hook) lookupResult(key string, result int) {
	g := h.byGroup.forKey(key, h.byGroup.keyHash(key))
	g.lookups[result].Inc()
	if result == lookupMiss && g.misses.Miss() {
		g.bursts.Inc()
	}
	if h.hot != nil {
		h.hot.requested(g.name, key)
	}
}

// setNX counts SET ... NX (and legacy SETNX) as a lock attempt, unless
// cachewatch's own client sent it.
func (h *Hook) setNX(ctx context.Context, kind cmdKind, f *finished) {
	cmd, args := f.cmd, f.args
	if kind == kindSet && !isLockSet(args) || isInstrumented(ctx) {
		return
	}
	key, ok := argString(args, 1)
	if !ok {
		return
	}
	token, hasToken := argString(args, 2)
	result := attemptResult(f.err)
	if result == attemptAcquired {
		// go-redis's SetNX turns SET NX's nil reply into false, and legacy
		// SETNX answers 0 when the key exists.
		if n, ok := intReply(cmd); ok && n == 0 {
			result = attemptBusy
		}
	}
	h.lockAttempt(ctx, key, token, hasToken, result, f)
}

// isLockSet reports a SET with NX and without GET (SET NX GET reads the old
// value: not a lock attempt).
func isLockSet(args []any) bool {
	nx := false
	for i := 3; i < len(args); i++ {
		s, ok := args[i].(string)
		if !ok {
			continue
		}
		switch { // option names are ASCII: |0x20 lowers a letter
		case len(s) == 2 && s[0]|0x20 == 'n' && s[1]|0x20 == 'x':
			nx = true
		case len(s) == 3 && strings.EqualFold(s, "get"):
			return false
		}
	}
	return nx
}

func attemptResult(err error) int {
	switch err {
	case nil:
		return attemptAcquired
	case redis.Nil:
		return attemptBusy
	}
	return attemptError
}

// lockAttempt counts one attempt, telling retries from first attempts by the
// owner token, and waiting callers from try-once ones by whether a busy
// first attempt is retried within the horizon (see retryTable).
//
// An acquisition that succeeds (or fails with an error) ends there: its
// duration is the attempt's own latency on the first try, or the time since
// the first attempt was sent (so it includes that attempt's round trip).
// Giving up between attempts leaves no trace on the wire; but an attempt
// that fails because its caller's context ended (deadline, cancellation)
// was cut off by the caller, not refused by Redis: it gave up, and the
// attempt, whose result Redis never gave, is not counted.
func (h *Hook) lockAttempt(ctx context.Context, key, token string, hasToken bool, result int, f *finished) {
	cutOff := result == attemptError && ctxsleep.Ended(ctx) != nil
	kh := h.byGroup.keyHash(key)
	g := h.byGroup.forKey(key, kh)
	h.retries.maybeSweep(f.end)
	t := tracked{waited: f.d}
	if hasToken && (result == attemptBusy || h.retries.mayWait(kh)) {
		t = h.follow(g, kh, token, result, f)
	}
	switch {
	case cutOff:
		g.gaveUp.Observe(t.waited)
	case result == attemptBusy:
		if !t.deferred {
			g.attempts[result][t.attempt].Inc()
		}
	default:
		g.attempts[result][t.attempt].Inc()
		g.acquired[result].Observe(t.waited)
	}
	if h.hot != nil && result == attemptBusy {
		h.hot.contended(g.name, key)
	}
}

// tracked is what the retry table says of an attempt: first (0) or retry
// (1), how long its acquisition has waited, and whether it is a busy first
// attempt left to be counted once its fate is known.
type tracked struct {
	attempt  int
	waited   float64
	deferred bool
}

// follow looks the attempt up in the retry table and records it there: a
// retry marks its acquisition as waiting (counting its busy first attempt,
// mode wait, the first time), a final one ends it, and a busy first attempt
// is added, to be counted when it is retried or its horizon passes.
func (h *Hook) follow(g *groupMetrics, kh uint64, token string, result int, f *finished) tracked {
	rt := h.retries
	sum := rt.hash(kh, token)
	nowMs := uint32(f.end / time.Millisecond)
	t := tracked{waited: f.d}
	i, v := rt.find(sum)
	if i >= 0 && rt.expired(v, nowMs) {
		rt.expire(i, v) // past the horizon: this attempt begins anew
		i = -1
	}
	if i >= 0 {
		waited := seconds(time.Duration(uint32(f.end/time.Microsecond)-rt.firstSentUs(i)) * time.Microsecond)
		first, ok := false, true
		if result == attemptBusy {
			first, ok = rt.retried(i, v, nowMs)
		} else if rt.claim(i, v) {
			first = v&retriedBit == 0
		}
		if ok {
			t.attempt, t.waited = 1, waited
		}
		if first {
			g.attempts[attemptBusy][0].Inc()
		}
		if ok || result != attemptBusy {
			return t
		}
	}
	if result == attemptBusy {
		t.deferred = g.defers && g.idx < noGroup
		rt.add(entry{h: sum, keyHash: kh, group: g.idx, settled: !t.deferred,
			nowUs: uint32(f.start / time.Microsecond), nowMs: nowMs})
	}
	return t
}

// script times a script command under the script's name and reads lock
// outcomes from the replies of known lock scripts.
func (h *Hook) script(ctx context.Context, c *command, f *finished) {
	cmd, args, err := f.cmd, f.args, f.err
	id, _ := argString(args, 1)
	s := h.scripts.lookup(c.script, id)
	noscript := f.noscript
	if h.on(Scripts) {
		s.dur[c.script].ObserveContext(ctx, f.d)
		if noscript {
			s.noscript.Inc()
		}
	}
	if f.span != nil {
		f.span.SetAttributes(attrStoredProcedure.String(s.name))
	}
	// A NOSCRIPT is followed by the EVAL fallback, which carries the outcome.
	if s.role == RoleNone || noscript || !h.on(Locks) {
		return
	}
	reason, end := -1, -1
	if s.role != RoleAcquire { // most replies (a renewal's) end no lease: look no further then
		n, ok := intReply(cmd)
		if err != nil || !ok {
			return
		}
		if end, reason = replyEnd(s.role, n); end < 0 {
			return
		}
	}
	if isInstrumented(ctx) {
		return
	}
	nkeys, ok := argInt(args, 2)
	if !ok || nkeys < 1 {
		return
	}
	key, ok := argString(args, 3)
	if !ok {
		return
	}
	token, hasToken := argString(args, 3+nkeys)
	if s.role == RoleAcquire {
		h.lockAttempt(ctx, key, token, hasToken, attemptResult(err), f)
		return
	}
	h.lockEnd(s.role, key, token, hasToken, reason, end, uint32(f.end/time.Millisecond))
}

// replyEnds is what an owner-checked release's or extension's reply says
// of the lease: how it ended and, when the lock was lost, why. A release
// answered 0 is refused: the lock was gone or someone else's, which only a
// release that answers -1 for a gone lock tells apart (expired). Replies
// not listed (most: a renewal's 1) end no lease.
var replyEnds = [...]struct {
	role        Role
	reply       int64
	end, reason int
}{
	{RoleRelease, 1, endReleased, -1},
	{RoleReleaseTellsExpiry, 1, endReleased, -1},
	{RoleRelease, 0, endRefused, lostExpiredOrNotOwner},
	{RoleReleaseTellsExpiry, 0, endRefused, lostNotOwner},
	{RoleRelease, -1, endExpired, lostExpired},
	{RoleReleaseTellsExpiry, -1, endExpired, lostExpired},
	{RoleExtend, 0, endLost, lostRenewFailed},
}

// replyEnd is the lease end (-1 for none) and lost-lock reason (-1 for
// none) of reply n to a script of role.
func replyEnd(role Role, n int64) (end, reason int) {
	for _, e := range replyEnds {
		if e.role == role && e.reply == n {
			return e.end, e.reason
		}
	}
	return -1, -1
}

// lockEnd counts the end of a lease (and a lost lock, reason ≥ 0) from an
// owner-checked release or extension. A release by a token whose last
// attempt was answered busy is the cleanup after a failed acquisition
// (redsync releases on every pool then): no lease of it ended.
func (h *Hook) lockEnd(role Role, key, token string, hasToken bool, reason, end int, nowMs uint32) {
	kh := h.byGroup.keyHash(key)
	if role.releases() && hasToken && h.retries.mayWait(kh) {
		if i, v := h.retries.find(h.retries.hash(kh, token)); i >= 0 && !h.retries.expired(v, nowMs) {
			return
		}
	}
	g := h.byGroup.forKey(key, kh)
	if reason >= 0 {
		g.lost[reason].Inc()
	}
	g.ends[end].Inc()
}
