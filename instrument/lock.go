package instrument

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cachewatch/cachewatch/internal/ctxsleep"
	"github.com/cachewatch/cachewatch/internal/lockholder"
	"github.com/cachewatch/cachewatch/internal/luascript"
	"github.com/cachewatch/cachewatch/signals"
)

// Lock errors callers branch on, besides ErrLockBusy, ErrRedis and the
// context's own errors (a Lock call cut short by its context returns an error
// wrapping ctx.Err(), so errors.Is(err, context.DeadlineExceeded) works).
var (
	// ErrNotOwner: Release or Extend found the lock gone or held by another
	// owner; the caller's lease had ended before it was done.
	ErrNotOwner = errors.New("cachewatch: lock not owned")
	// ErrLockLost is the cause (context.Cause) of a lock's Context when the
	// lease ended before Release: it ran out, its renewal failed, or Redis
	// reported another owner.
	ErrLockLost = errors.New("cachewatch: lock lost")
	// errReleased is the cause of a lock's Context after Release.
	errReleased = errors.New("cachewatch: lock released")
	// errNotHeld is the cause of a nil Lock's Context.
	errNotHeld = errors.New("cachewatch: no lock was taken")
)

// DefaultLockTTL is the lease of a lock taken with a zero LockOptions.TTL.
const DefaultLockTTL = 10 * time.Second

// fenceCounterTTL is how long a fencing counter outlives the last acquisition
// of its lock name. Tokens are max(counter+1, server µs clock) (see
// luascript.LockAcquireFenced), so they keep increasing after the counter
// expired; the hour only guards names in active use against a server clock
// stepping back. Idle names leave no key behind.
const fenceCounterTTL = time.Hour

// Reasons of cachewatch_locks_lost_total.
const (
	lostExpired     = "expired"      // the lease ran out before Release
	lostRenewFailed = "renew_failed" // renewal could not reach Redis before the lease ran out
	lostNotOwner    = "not_owner"    // Redis reported another owner while the lease still ran
)

// LockOptions configures one Lock call. The zero value takes a
// DefaultLockTTL lease, retries with the default Backoff while the lock is
// busy, is live (see NoLiveness), and neither renews nor fences.
type LockOptions struct {
	// TTL is the lease: the lock key expires this long after it was taken
	// or last renewed. Zero means DefaultLockTTL; a lock without expiry
	// cannot be taken. Negative values and values below 1ms are errors.
	TTL time.Duration
	// Backoff bounds the retries while the lock is busy (full jitter).
	// Backoff{Retries: -1} tries exactly once: for a lock whose losers are
	// meant to skip the work (a periodic job that one instance runs), its
	// attempts and acquisitions are labelled mode="try_once", which the
	// contention and acquire-latency alerts leave out; others are
	// mode="wait".
	Backoff Backoff
	// Renew starts a heartbeat that extends the lease every TTL/3 until
	// Release, for work that may outlast one TTL.
	Renew bool
	// Fencing asks for a fencing token (Lock.Fence), strictly increasing per
	// lock name, so that writers downstream can reject a holder whose lease
	// ended. It costs one Lua script instead of a plain SET NX PX, and a
	// counter key on the lock's hash slot ("{key}:fence", or "key:fence" when
	// key has a hash tag) that expires an hour after the last acquisition.
	Fencing bool
	// NoLiveness takes the lock as before liveness: a plain SET NX PX
	// (unless fenced) that never takes over another holder's lock and
	// whose own value carries no liveness mark, so that it ends only by
	// release or TTL.
	//
	// By default a lock is live: its value ends with lockholder.LiveMark,
	// the client keeps its process's liveness key (Options.LivenessTTL)
	// while it holds it, and it ends as lost (Context done, cause
	// ErrLockLost) when the client could not refresh that key in time. In
	// return, a Lock that finds a lock held by a live-marked holder whose
	// liveness key is gone (its process died, or stalled past its
	// liveness) takes it over in the same round trip on one server, in
	// two more on a Cluster, instead of waiting out its TTL; a fenced
	// lock's token moves on, so fenced writers refuse the old holder.
	// A free lock is still one SET NX PX; retries run a Lua script instead
	// (a try-once caller runs it right after a busy SET NX: one round trip
	// more, only then). See docs/benchmarks.md for the cost, and, once per
	// client, one refresh every LivenessTTL/3. Locks of other libraries
	// and unmarked values are never taken over.
	NoLiveness bool
}

// Lock is a held lease lock. Its methods are safe for concurrent use.
// Always call Release, typically deferred.
//
// A nil *Lock (what Client.Lock returns with an error) is safe to use:
// Release does nothing and returns nil, Extend returns an error wrapping
// ErrNotOwner, Context is already done, and TTL, Fence, Key and Token
// return zero values. A deferred Release cannot panic.
type Lock struct {
	c      *Client
	key    string
	group  string
	token  string
	fence  int64
	ttl    time.Duration
	renew  bool
	live   bool      // registered with the client's liveness (LockOptions.NoLiveness false)
	taken  time.Time // when the acquiring reply arrived (client clock)
	span   trace.Span
	ctx    context.Context
	cancel context.CancelCauseFunc

	stopRenew context.CancelFunc
	renewDone chan struct{}

	mu         sync.Mutex
	validUntil time.Time // client clock; never later than Redis's expiry
	timer      clockwork.Timer
	timerGen   int
	finished   bool // released or lost: hold time observed, Context done
	released   bool // Release ran
}

// Lock takes the lease lock key: one SET key token NX PX ttl (or one script
// when opts.Fencing), retried with full-jitter backoff while another owner
// holds it, for at most opts.Backoff.Retries retries and never past ctx.
//
// It returns an error wrapping ErrLockBusy when the retries are spent,
// ctx.Err() when ctx ended first, and ErrRedis when Redis failed. It returns
// by ctx's end even when the go-redis client does not set
// ContextTimeoutEnabled (that setting saves a goroutine per call).
func (c *Client) Lock(ctx context.Context, key string, opts LockOptions) (*Lock, error) {
	ttl, err := lockTTL(opts.TTL)
	if err != nil {
		return nil, err
	}
	var fenceKey string
	if opts.Fencing {
		if fenceKey, err = fenceKeyFor(key); err != nil {
			return nil, err
		}
	}
	a := &acquisition{key: key, group: c.group(key), mode: lockMode(opts.Backoff), live: !opts.NoLiveness}
	ctx, a.span = c.spans.start(ctx, "cachewatch.lock", trace.WithAttributes(
		attribute.String("cachewatch.key_group", a.group),
		attribute.Int64("cachewatch.lock.ttl_ms", ttl.Milliseconds())))
	b := opts.Backoff.withDefaults()
	a.start = c.now()
	if err := c.prepare(ctx, a); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := c.backoffWait(ctx, a.group, b.Delay(attempt)); err != nil {
				return nil, c.lockFailed(ctx, a, "gave_up", fmt.Errorf("cachewatch: lock %q: waiting to retry: %w", key, err))
			}
		}
		sent := c.now()
		a.attempt = attempt
		t, err := c.tryLock(ctx, a, fenceKey, ttl)
		ok := err == nil && t.got != busy
		if ended := ctxsleep.Ended(ctx); err != nil && ended != nil {
			// The caller's own deadline or cancellation cut the attempt
			// off: not a Redis failure. The caller stopped waiting, as it
			// does when its context ends during the backoff; the attempt's
			// result is unknown, so it is not counted.
			c.countRetry(a.group, attempt)
			return nil, c.lockFailed(ctx, a, "gave_up", fmt.Errorf("cachewatch: lock %q: %w (redis: %v)", key, ended, err))
		}
		c.countAttempt(ctx, a, attempt, ok, err)
		switch {
		case err != nil:
			return nil, c.lockFailed(ctx, a, "error", c.lockErr(ctx, key, err))
		case ok:
			if t.got == takenOver {
				c.tookOver(ctx, a, t.old)
			}
			c.m.lockAcquire.WithLabelValues(a.group, "acquired", a.mode).ObserveContext(ctx, c.now().Sub(a.start).Seconds())
			return c.held(ctx, a, t.fence, ttl, sent, opts.Renew), nil
		case attempt >= b.Retries:
			return nil, c.lockFailed(ctx, a, "gave_up", fmt.Errorf("%w: %q after %d attempts", ErrLockBusy, key, attempt+1))
		}
	}
}

// prepare makes sure a live lock's liveness key stands (a lock is taken
// without liveness when Redis fails meanwhile: the attempt then reports the
// failure, or, if Redis is back, takes the lock without the liveness it
// cannot prove) and sets the value the lock will hold.
func (c *Client) prepare(ctx context.Context, a *acquisition) error {
	if a.live {
		var err error
		if a.epoch, a.live, err = c.alive.ensure(ctx); err != nil {
			if ended := ctxsleep.Ended(ctx); ended != nil {
				return c.lockFailed(ctx, a, "gave_up", fmt.Errorf("cachewatch: lock %q: %w (redis: %v)", a.key, ended, err))
			}
			a.live = false
		}
	}
	token, err := c.lockValue(a.live)
	if err != nil {
		a.span.End()
		return err
	}
	a.token = token
	return nil
}

// acquisition is one Lock call, as its metrics, log lines and span see it.
type acquisition struct {
	key, group, token string
	mode              string // the lock metrics' mode label (lockMode)
	start             time.Time
	span              trace.Span
	live              bool      // live-marked, registered with the client's liveness
	epoch             uint64    // the liveness epoch the lock is taken in
	attempt           int       // the attempt under way, from 0
	checked           time.Time // when an attempt last checked the holder's liveness (liveness clock)
}

// lockMode is the mode label of an acquisition retrying by b: try_once when
// the caller asked not to wait for a busy lock (Backoff{Retries: -1}).
func lockMode(b Backoff) string {
	if b.Retries < 0 {
		return signals.ModeTryOnce
	}
	return signals.ModeWait
}

// What an acquire attempt got.
const (
	busy      = iota // another holder has the lock
	acquired         // the lock was free
	takenOver        // taken over from a dead holder
)

// taken is the result of one acquire attempt: got, the fencing token
// (0 unfenced) and, when taken over, the dead holder's value.
type taken struct {
	got   int
	fence int64
	old   string
}

// tryLock makes one acquire attempt. An attempt abandoned at ctx's end that
// still lands is released at once.
func (c *Client) tryLock(ctx context.Context, a *acquisition, fenceKey string, ttl time.Duration) (taken, error) {
	key, token := a.key, a.token
	t, err := bounded(ctx, c.rdb, func() (taken, error) {
		return c.acquireOnce(c.ctx(ctx), a, fenceKey, ttl)
	}, func(late taken, err error) {
		if err == nil && late.got != busy {
			c.releaseAbandoned(ctx, key, token, ttl)
		}
	})
	if err != nil && ctx.Err() != nil && honoursContext(c.rdb) {
		// Cut off mid-call: the SET may still reach Redis after we left.
		go c.releaseAbandoned(ctx, key, token, ttl)
	}
	if fenceKey == "" {
		t.fence = 0
	}
	return t, err
}

// acquireOnce sends one attempt. An unfenced lock's attempt is SET NX PX,
// as before liveness, except that a live lock's retries run the acquire
// script once every tenth of the LivenessTTL (checkDue): it takes a dead
// holder's lock over where it can read its liveness key (one server);
// elsewhere (Cluster, Ring) it hands back a live-marked holder's value,
// checked here (takeOverIfDead). A fenced lock's attempts always run it. A
// try-once caller, which has no retry, runs it at once when its SET NX
// finds the lock busy.
func (c *Client) acquireOnce(ctx context.Context, a *acquisition, fenceKey string, ttl time.Duration) (taken, error) {
	if fenceKey == "" && !(a.live && c.alive.checkDue(a)) {
		ok, err := c.rdb.SetNX(ctx, a.key, a.token, ttl).Result()
		switch {
		case err != nil:
			return taken{}, err
		case ok:
			return taken{got: acquired}, nil
		case !a.live || a.mode != signals.ModeTryOnce:
			return taken{}, nil
		}
	}
	keys := []string{a.key}
	if fenceKey != "" {
		keys = append(keys, fenceKey)
	}
	check := "0"
	if a.live {
		check = c.aliveCheck
	}
	reply, err := luascript.LockAcquire.Run(ctx, c.rdb, keys, a.token, ttl.Milliseconds(),
		fenceCounterTTL.Milliseconds(), check).Slice()
	if err != nil {
		return taken{}, err
	}
	code, _ := reply[0].(int64)
	switch {
	case (code == acquired || code == takenOver) && len(reply) > 1:
		t := taken{got: int(code)}
		t.fence, _ = reply[1].(int64)
		if len(reply) > 2 {
			t.old, _ = reply[2].(string)
		}
		return t, nil
	case code == 3 && len(reply) > 1:
		old, _ := reply[1].(string)
		return c.takeOverIfDead(ctx, keys, a.token, ttl, old)
	}
	return taken{}, nil
}

// takeOverIfDead takes the lock holding old over when old's holder keeps a
// liveness key and that key is gone: one EXISTS on the key's own slot, then
// a compare-and-take on the lock's (luascript.LockTakeOver), which changes
// nothing if the lock no longer holds old.
func (c *Client) takeOverIfDead(ctx context.Context, keys []string, token string, ttl time.Duration, old string) (taken, error) {
	h := lockholder.Parse(old)
	if !h.Live {
		return taken{}, nil
	}
	n, err := c.rdb.Exists(ctx, lockholder.AliveKey(h.Instance)).Result()
	if err != nil || n != 0 {
		return taken{}, err
	}
	fence, err := luascript.LockTakeOver.Run(ctx, c.rdb, keys, token, ttl.Milliseconds(),
		fenceCounterTTL.Milliseconds(), old).Int64()
	if err != nil || fence == 0 {
		return taken{}, err
	}
	return taken{got: takenOver, fence: fence, old: old}, nil
}

// tookOver counts the end of the dead holder's lease, which its holder
// cannot count: taken_over, on the taker's side.
func (c *Client) tookOver(ctx context.Context, a *acquisition, old string) {
	c.m.leaseEnds.WithLabelValues(a.group, signals.EndTakenOver).Inc()
	h := lockholder.Parse(old)
	a.span.AddEvent("lock taken over: its holder's liveness key is gone", trace.WithAttributes(
		attribute.String("cachewatch.lock.holder.service", h.Service),
		attribute.String("cachewatch.lock.holder.host", h.Host),
		attribute.Int("cachewatch.lock.holder.pid", h.PID)))
	c.logLock(ctx, "taken_over", a.group, a.key, a.token, slog.String("holder_service", h.Service),
		slog.String("holder_host", h.Host), slog.Int("holder_pid", h.PID))
}

// releaseAbandoned deletes a lock taken by an attempt its caller gave up on
// (owner-checked, so a lock that never landed is left alone), bounded by the
// lease, after which the lock expires anyway.
func (c *Client) releaseAbandoned(ctx context.Context, key, token string, ttl time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
	defer cancel()
	_ = luascript.LockRelease.Run(c.ctx(ctx), c.rdb, []string{key}, token).Err()
}

// bounded returns call's result, or ctx's error as soon as ctx ends. go-redis
// honours ctx during network I/O only with ContextTimeoutEnabled; without it
// a stalled server holds a call for its ReadTimeout whatever the caller's
// deadline, so the call then runs in a goroutine and, if abandoned, hands
// its late result to abandoned (nil: dropped).
func bounded[T any](ctx context.Context, rdb redis.UniversalClient, call func() (T, error), abandoned func(T, error)) (T, error) {
	if ctx.Done() == nil || honoursContext(rdb) {
		return call()
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := call()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; abandoned != nil {
				abandoned(r.v, r.err)
			}
		}()
		var zero T
		return zero, ctx.Err()
	}
}

// honoursContext reports whether rdb bounds network I/O by ctx deadlines.
func honoursContext(rdb redis.UniversalClient) bool {
	switch r := rdb.(type) {
	case *redis.Client:
		return r.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return r.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return r.Options().ContextTimeoutEnabled
	}
	return false
}

// lockErr tells a caller whose context ended apart from a Redis failure.
func (c *Client) lockErr(ctx context.Context, key string, err error) error {
	return callErr(ctx, "lock "+strconv.Quote(key), err)
}

// callErr wraps the failure of a Redis call: the context's error when ctx
// ended (the call was cut off, not refused), ErrRedis otherwise.
func callErr(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("cachewatch: %s: %w (redis: %v)", op, ctxErr, err)
	}
	return redisErr(op, err)
}

func (c *Client) countAttempt(ctx context.Context, a *acquisition, attempt int, ok bool, err error) {
	result := "busy"
	switch {
	case err != nil:
		result = "error"
	case ok:
		result = "acquired"
	}
	which := "first"
	if attempt > 0 {
		which = "retry"
	}
	c.countRetry(a.group, attempt)
	c.m.lockAttempts.WithLabelValues(a.group, result, which, a.mode).Inc()
	c.logLock(ctx, result, a.group, a.key, a.token, slog.Int("attempt", attempt+1))
}

// countRetry counts attempt (from 0) as a retry when it is one.
func (c *Client) countRetry(group string, attempt int) {
	if attempt > 0 {
		c.m.retries.WithLabelValues(group).Inc()
	}
}

// backoffWait sleeps d unless ctx ends first, or ends before d would pass:
// then it returns at once with the context's error.
func (c *Client) backoffWait(ctx context.Context, group string, d time.Duration) error {
	c.m.backoff.WithLabelValues(group).Observe(d.Seconds())
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fmt.Errorf("backoff of %v would pass the deadline: %w", d, context.DeadlineExceeded)
	}
	return ctxsleep.On(ctx, c.clock, d)
}

func (c *Client) lockFailed(ctx context.Context, a *acquisition, outcome string, err error) error {
	c.m.lockAcquire.WithLabelValues(a.group, outcome, a.mode).ObserveContext(ctx, c.now().Sub(a.start).Seconds())
	c.logLock(ctx, outcome, a.group, a.key, a.token)
	a.span.SetAttributes(attribute.String("cachewatch.lock.outcome", outcome))
	a.span.SetStatus(codes.Error, outcome)
	a.span.End()
	return err
}

// held builds the Lock after a successful attempt sent at sent.
func (c *Client) held(ctx context.Context, a *acquisition, fence int64, ttl time.Duration, sent time.Time, renew bool) *Lock {
	// The lease, not the acquire deadline, bounds the holder's context.
	lctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	key, group, token, span := a.key, a.group, a.token, a.span
	l := &Lock{c: c, key: key, group: group, token: token, fence: fence, ttl: ttl, renew: renew,
		taken: c.now(), span: span, ctx: lctx, cancel: cancel, live: a.live}
	span.AddEvent("lease acquired", trace.WithAttributes(attribute.Int64("cachewatch.lock.fence", fence)))
	c.logLock(ctx, "acquired", group, key, token, slog.Int64("fence", fence))
	l.mu.Lock()
	l.setValidUntil(sent.Add(ttl))
	l.mu.Unlock()
	if l.live && !c.alive.register(l, a.epoch) {
		// The proof of life lapsed while the acquire was on its way: a
		// waiter may already have taken the lock over.
		l.mu.Lock()
		l.lose(lostRenewFailed, signals.EndLost)
		l.mu.Unlock()
		return l
	}
	if renew {
		// Release stops the heartbeat through stop, between beats: a
		// renewal already sent is waited for, so that its result is known
		// and counted, and it cannot land after the release script.
		stop := make(chan struct{})
		l.stopRenew, l.renewDone = func() { close(stop) }, make(chan struct{})
		go l.heartbeat(stop, lctx)
	}
	return l
}

// Key returns the lock's key.
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.key
}

// Token returns the value stored in the lock key: the holder's identity
// (service, host, pid, process instance, acquisition time) around a random
// owner token, in the documented format of docs/design.md.
func (l *Lock) Token() string {
	if l == nil {
		return ""
	}
	return l.token
}

// TTL returns how much of the lease is left by the client's clock (counted
// from when the acquiring or last renewing command was sent, so never more
// than Redis's own expiry), or 0 once the lock was released or lost.
func (l *Lock) TTL() time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.finished {
		return 0
	}
	return max(l.validUntil.Sub(l.c.now()), 0)
}

// Fence returns the fencing token (LockOptions.Fencing), or 0.
func (l *Lock) Fence() int64 {
	if l == nil {
		return 0
	}
	return l.fence
}

// Context returns a context with the values (trace span included) of the
// one given to Lock but not its deadline: it is done only when the lock is
// released or its lease can no longer be trusted (it ran out without
// renewal, renewal failed until it ran out, or Redis reported another
// owner; context.Cause then wraps ErrLockLost). Do the guarded work under
// this context, combined with the caller's own if need be.
func (l *Lock) Context() context.Context {
	if l == nil {
		return doneContext
	}
	return l.ctx
}

// doneContext is the Context of a nil *Lock: work guarded by a lock that
// was never taken must not start.
var doneContext = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errNotHeld)
	return ctx
}()

// Extend resets the lease to ttl (zero: the lock's TTL) if the caller still
// owns the lock. It returns an error wrapping ErrNotOwner if not, and then
// counts the lock as lost.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return fmt.Errorf("%w: no lock was taken", ErrNotOwner)
	}
	if ttl == 0 {
		ttl = l.ttl
	}
	ttl, err := lockTTL(ttl)
	if err != nil {
		return err
	}
	return l.extend(ctx, ctx, ttl)
}

// extend runs the owner-only extend script under callCtx and records its
// result; a failure after the caller's ctx ended is not a Redis failure.
func (l *Lock) extend(ctx, callCtx context.Context, ttl time.Duration) error {
	sent := l.c.now()
	n, err := bounded(callCtx, l.c.rdb, func() (int, error) {
		return luascript.LockExtend.Run(l.c.ctx(callCtx), l.c.rdb, []string{l.key}, l.token, ttl.Milliseconds()).Int()
	}, nil)
	renewals := l.c.m.lockRenewals
	switch {
	case err != nil:
		if ctx.Err() == nil {
			renewals.WithLabelValues(l.group, "error").Inc()
			l.c.logLock(ctx, "renew_error", l.group, l.key, l.token)
		}
		return l.c.lockErr(callCtx, l.key, err)
	case n == 0:
		renewals.WithLabelValues(l.group, "lost").Inc()
		l.mu.Lock()
		l.lose(l.goneReason(), signals.EndLost)
		l.mu.Unlock()
		return fmt.Errorf("%w: %q: extend found another owner or none", ErrNotOwner, l.key)
	}
	renewals.WithLabelValues(l.group, "renewed").Inc()
	l.c.logLock(ctx, "renewed", l.group, l.key, l.token)
	l.mu.Lock()
	if !l.finished {
		l.setValidUntil(sent.Add(ttl))
	}
	l.mu.Unlock()
	return nil
}

// heartbeat extends the lease every TTL/3 until stopped (Release) or the
// lock's context ends. A failed renewal is retried at the next beat; if none
// succeeds before the lease runs out, the expiry timer ends the lock. Each
// renewal runs to its end (bounded by what is left of the lease), even if
// stop closes meanwhile: Release waits for it.
func (l *Lock) heartbeat(stop <-chan struct{}, lockCtx context.Context) {
	defer close(l.renewDone)
	tick := l.c.clock.NewTicker(max(l.ttl/3, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-lockCtx.Done():
			return
		case <-tick.Chan():
		}
		l.mu.Lock()
		left := l.validUntil.Sub(l.c.now())
		l.mu.Unlock()
		if left <= 0 {
			continue // the expiry timer is about to end the lock
		}
		// Neither Release nor the lock's end cuts a renewal short: it is
		// bounded by the lease left, and its result is always counted.
		runCtx := context.WithoutCancel(lockCtx)
		callCtx, cancel := context.WithTimeout(runCtx, left)
		err := l.extend(runCtx, callCtx, l.ttl)
		cancel()
		if errors.Is(err, ErrNotOwner) {
			return
		}
	}
}

// Release deletes the lock if the caller still owns it and ends its Context.
// With Renew, it first stops the heartbeat, waiting for a renewal already
// sent to come back (it is counted, and cannot land after the release).
// It returns an error wrapping ErrNotOwner when the lease had already ended
// (the lock is then counted as lost, once; a key still there is deleted
// all the same), and ErrRedis when Redis failed
// (the key then expires at its TTL).
func (l *Lock) Release(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	twice, ended := l.released, l.finished
	l.released = true
	l.mu.Unlock()
	if l.stopRenew != nil && !twice {
		l.stopRenew()
		<-l.renewDone // a renewal in flight ends (and is counted) before the release script runs
	}
	if twice {
		return fmt.Errorf("%w: %q: released twice", ErrNotOwner, l.key)
	}
	n, err := bounded(ctx, l.c.rdb, func() (int, error) {
		return luascript.LockRelease.Run(l.c.ctx(ctx), l.c.rdb, []string{l.key}, l.token).Int()
	}, nil)
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.span.End()
	switch {
	case err != nil:
		l.finish("release_error", signals.EndReleaseFailed, errReleased)
		return l.c.lockErr(ctx, l.key, err)
	case n == 0 || ended:
		// Ended before: the lease ran out or could no longer be proven by
		// the client's clock, even if the key, not yet expired on Redis's,
		// was still there to delete.
		l.lose(l.goneReason(), signals.EndTakenOver)
		return fmt.Errorf("%w: %q: the lease had ended", ErrNotOwner, l.key)
	}
	l.span.AddEvent("lease released")
	l.finish("released", signals.EndReleased, errReleased)
	return nil
}

// goneReason says why Redis no longer holds our token: past our own lease
// it expired; within it, someone else deleted or took it. l.mu is held.
func (l *Lock) goneReason() string {
	if l.c.now().Before(l.validUntil) {
		return lostNotOwner
	}
	return lostExpired
}

// setValidUntil moves the lease end and re-arms the expiry timer. l.mu is held.
func (l *Lock) setValidUntil(t time.Time) {
	l.validUntil = t
	l.timerGen++
	gen := l.timerGen
	if l.timer != nil {
		l.timer.Stop()
	}
	l.timer = l.c.clock.AfterFunc(t.Sub(l.c.now()), func() { l.expire(gen) })
}

// expire ends the lock when its lease ran out without a (successful) renewal.
func (l *Lock) expire(gen int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if gen != l.timerGen {
		return // re-armed by a renewal meanwhile
	}
	if l.renew {
		l.lose(lostRenewFailed, signals.EndLost)
	} else {
		l.lose(lostExpired, signals.EndExpired)
	}
}

// lose counts the lock as lost (once) and ends its Context. Within the
// lease, Redis reporting another owner (or none) ends it as ifNotOwner
// says: lost on renewal, taken_over on release; past it, it expired.
// l.mu is held.
func (l *Lock) lose(reason, ifNotOwner string) {
	if l.finished {
		return
	}
	l.c.m.locksLost.WithLabelValues(l.group, reason).Inc()
	l.span.AddEvent("lease lost", trace.WithAttributes(attribute.String("cachewatch.lock.reason", reason)))
	end := ifNotOwner
	if reason == lostExpired {
		end = signals.EndExpired
	}
	l.finish("lost_"+reason, end, fmt.Errorf("%w: %s", ErrLockLost, reason))
}

// finish counts the lease's end (end, a signals.End* outcome), observes
// the hold time, stops the timer and ends the Context with cause. l.mu is
// held.
func (l *Lock) finish(outcome, end string, cause error) {
	if l.finished {
		return
	}
	l.finished = true
	l.timerGen++
	if l.timer != nil {
		l.timer.Stop()
	}
	if l.live {
		l.c.alive.unregister(l)
	}
	l.c.m.leaseEnds.WithLabelValues(l.group, end).Inc()
	l.c.m.lockHold.WithLabelValues(l.group, end).ObserveContext(l.ctx, l.c.now().Sub(l.taken).Seconds())
	l.c.logLock(l.ctx, outcome, l.group, l.key, l.token)
	l.cancel(cause)
}

// logLock writes one debug line per lock decision.
func (c *Client) logLock(ctx context.Context, outcome, group, key, token string, extra ...slog.Attr) {
	if !c.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := append([]slog.Attr{
		slog.String("key_group", group), slog.String("key", key),
		slog.String("token", shortToken(token)), slog.String("outcome", outcome),
	}, extra...)
	c.log.LogAttrs(ctx, slog.LevelDebug, "cachewatch lock", attrs...)
}

// lockTTL applies the default and rejects leases Redis cannot express.
func lockTTL(ttl time.Duration) (time.Duration, error) {
	switch {
	case ttl == 0:
		return DefaultLockTTL, nil
	case ttl < time.Millisecond:
		return 0, fmt.Errorf("cachewatch: lock TTL %v: want 0 (default %v) or at least 1ms", ttl, DefaultLockTTL)
	}
	return ttl, nil
}

// lockValue returns the value a lock of this client holds: its holder's
// identity and a random token of 128 bits from crypto/rand (lockholder).
// The scripts compare it whole, as they compared the bare token.
func (c *Client) lockValue(live bool) (string, error) {
	token, err := lockholder.NewToken()
	if err != nil {
		return "", fmt.Errorf("cachewatch: %w", err)
	}
	if live {
		return c.holder.LiveValue(token, c.now()), nil
	}
	return c.holder.Value(token, c.now()), nil
}

// fenceKeyFor returns the fencing counter's key, on the lock key's hash slot
// so that one script may touch both in Redis Cluster.
func fenceKeyFor(key string) (string, error) {
	if hasHashTag(key) {
		return key + ":fence", nil
	}
	if strings.IndexByte(key, '}') >= 0 {
		return "", fmt.Errorf("cachewatch: fencing lock %q: a key with '}' needs a non-empty hash tag {…}", key)
	}
	return "{" + key + "}:fence", nil
}

// hasHashTag reports whether Redis Cluster hashes key by a {tag}: the text
// between the first '{' and the next '}', when not empty.
func hasHashTag(key string) bool {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return false
	}
	return strings.IndexByte(key[open+1:], '}') > 0
}
