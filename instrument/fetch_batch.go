package instrument

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/luascript"
)

// batcher gathers the script calls (reads and writes) of a Cache's
// concurrent flights, of different keys, into pipelines. A flight that
// finds no call in flight sends its own at once, on its goroutine, as a
// single script call; the calls asked for meanwhile wait and go together,
// as one pipeline, when it returns — or, if it has not returned within
// flushQueuedAfter, on another pooled connection (at most maxInFlight round
// trips at once) — while the next ones gather. A queued call waits for its
// turn as long as its lookup may wait (degraded.queuedBound): only its
// round trip is bounded by RedisTimeout.
//
// Why: when a crowd arrives on many keys at once (a page of 100 products
// expiring together), one call per key, each on its own pooled connection
// and goroutine, costs 100 round trips per process and, on a few busy
// cores, could take longer than RedisTimeout — which opened the circuit
// breaker and sent every flight to the source, once per process instead of
// once for the fleet. Batched, the same calls cost a few round trips. A
// lone key's call is sent as before, with no hand-over and no pipeline.
type batcher struct {
	mu       sync.Mutex
	inFlight int           // calls or pipelines in flight
	queue    []*scriptCall // calls waiting for the next pipeline
	armed    bool          // a flush of the queue is timed
	// flushAfter is how long the queue waits for the round trip in flight
	// before it goes as a pipeline of its own (0: flushQueuedAfter).
	flushAfter time.Duration
}

// maxBatch caps the calls of one pipeline; the rest wait for the next.
const maxBatch = 256

// flushQueuedAfter: calls queue behind a round trip in flight for at most
// this long before they go as a pipeline of their own. Why not wait for
// it: its reply may have arrived long before the process runs the goroutine
// waiting for it. Go's scheduler polls the network only when it has
// nothing else to run (or after 10 ms), so in a crowd (a thousand callers
// starting, or being answered) the queue waited for all of them; a due
// timer's goroutine runs next. In BenchmarkStampede (4 processes, 100
// keys) the other keys' loads started 3.4–11.0 ms after the first key's,
// and the loads' last writes returned up to 17 ms after the loads ended.
const flushQueuedAfter = 200 * time.Microsecond

// maxInFlight caps a Cache's round trips in flight.
const maxInFlight = 4

// scriptCall is one flight's script call, and its reply once done is closed.
type scriptCall struct {
	op   string // names the call in errors ("fetch read")
	s    *luascript.Script
	keys []string
	args []any
	done chan struct{}
	res  any
	err  error
	// gone is set when the caller stopped waiting (a call not yet sent is
	// then never sent), sent when the call joined a pipeline; both under
	// batcher.mu.
	gone, sent bool
	// keyv and argv back keys and args: one allocation per call, not three
	// (every flight makes a call, and in a stampede every process starts
	// its flights at once).
	keyv [3]string
	argv [7]any
}

// newScriptCall returns a call of s with keys and args (copied).
func newScriptCall(op string, s *luascript.Script, keys []string, args ...any) *scriptCall {
	c := &scriptCall{op: op, s: s}
	c.keys = append(c.keyv[:0], keys...)
	c.args = append(c.argv[:0], args...)
	return c
}

// errNotSent marks a call abandoned before it was sent: it cannot have
// granted a claim or written anything.
var errNotSent = errors.New("call abandoned before it was sent")

// errQueued: a call gave up waiting for its pipeline (the calls ahead of it
// took the time, up to RefreshClaimTTL or the caller's deadline). The breaker
// counts the round trips themselves, not this, and no lookup falls back
// for it: a queue in this process is not Redis failing.
var errQueued = errors.New("queued call not answered in time")

// run sends c and returns its reply: at once when no call of this Cache is
// in flight, else with the next pipeline. ctx bounds the wait as it bounds
// a single call.
func (ca *Cache[T]) run(ctx context.Context, c *scriptCall) (any, error) {
	b := &ca.batch
	b.mu.Lock()
	if b.inFlight == 0 {
		b.inFlight++
		b.mu.Unlock()
		c.res, c.err = ca.runOne(ctx, c)
		ca.nextBatch(true)
		return c.res, c.err
	}
	c.done = make(chan struct{})
	b.queue = append(b.queue, c)
	if !b.armed && b.inFlight < maxInFlight {
		b.armed = true
		after := b.flushAfter
		if after <= 0 {
			after = flushQueuedAfter
		}
		time.AfterFunc(after, func() { ca.nextBatch(false) })
	}
	b.mu.Unlock()

	// A bound on a Redis call, so on the real clock (like RedisTimeout's),
	// not the Cache's. A timer, not a context: a context derived from the
	// flight's would be registered with it and removed again, which every
	// queued call paid for.
	wait, callerLeaves := ca.deg.queuedBound(ctx)
	bound := startTimer(wait)
	defer stopTimer(bound)
	var cause error
	select {
	case <-c.done:
		return c.res, c.err
	case <-bound.C:
		cause = errQueued
		if callerLeaves { // the caller's deadline, as its own context would say
			cause = fmt.Errorf("%w: %w: %w", errCallerGone, context.DeadlineExceeded, cause)
		}
	case <-ctx.Done():
		cause = fmt.Errorf("%w: %w", errCallerGone, ctx.Err())
	}
	b.mu.Lock()
	c.gone = true
	sent := c.sent
	b.mu.Unlock()
	if !sent {
		cause = fmt.Errorf("%w: %w", errNotSent, cause)
	}
	return nil, redisErr(c.op, cause)
}

// timers holds stopped timers for queued calls to reuse: in a crowd most
// flights' calls queue, each bounded by a timer that almost never fires.
var timers sync.Pool

// startTimer returns a timer, from the pool if it has one, that fires
// after d.
func startTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// stopTimer stops t and pools it, so that whoever takes it next sees only
// its own tick. Since Go 1.23 a stopped timer's channel holds no stale
// one; the drain is for a program run with GODEBUG=asynctimerchan=1.
func stopTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	timers.Put(t)
}

// nextBatch sends the calls gathered meanwhile as one pipeline, on a new
// goroutine: after a round trip returned (returned, which ends its share of
// inFlight) or when the timed flush is due.
func (ca *Cache[T]) nextBatch(returned bool) {
	b := &ca.batch
	b.mu.Lock()
	if returned {
		b.inFlight--
	} else {
		b.armed = false
	}
	// A timed flush after Close leaves the queue to the round trip in
	// flight, whose goroutine sends it: the timer's must not outlive Close.
	if b.inFlight >= maxInFlight || (!returned && ca.bg.isClosed()) {
		b.mu.Unlock()
		return
	}
	batch := b.take()
	if len(batch) == 0 {
		b.mu.Unlock()
		return
	}
	b.inFlight++
	b.mu.Unlock()
	send := func() {
		ca.sendBatch(batch)
		ca.nextBatch(true)
	}
	if !ca.bg.start(send) {
		send() // closed: no goroutine may outlive Close, so this one sends it
	}
}

// take removes up to maxBatch calls still awaited from the queue. b.mu is
// held.
func (b *batcher) take() []*scriptCall {
	var batch []*scriptCall
	i := 0
	for ; i < len(b.queue) && len(batch) < maxBatch; i++ {
		if c := b.queue[i]; !c.gone {
			c.sent = true
			batch = append(batch, c)
		} else {
			close(c.done) // nobody waits for it; never sent
		}
	}
	b.queue = append(b.queue[:0:0], b.queue[i:]...)
	return batch
}

// runOne sends one script call, bounded as every Redis call.
func (ca *Cache[T]) runOne(ctx context.Context, c *scriptCall) (any, error) {
	// The reply travels in the result, not in a captured variable: an
	// abandoned call's goroutine may finish after this returns.
	res, err := ca.deg.call(ctx, c.op, func(rctx context.Context) ([]any, error) {
		v, err := c.s.Run(ca.c.ctx(rctx), ca.c.rdb, c.keys, c.args...).Result()
		return []any{v}, err
	})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// sendBatch sends a batch as one pipeline (one breaker call, bounded by one
// RedisTimeout) and hands each call its reply.
func (ca *Cache[T]) sendBatch(batch []*scriptCall) {
	defer func() {
		for _, c := range batch {
			close(c.done)
		}
	}()
	if len(batch) == 1 {
		batch[0].res, batch[0].err = ca.runOne(context.Background(), batch[0])
		return
	}
	res, err := ca.deg.call(context.Background(), "fetch pipeline", func(rctx context.Context) ([]any, error) {
		cmds, err := ca.pipelineOnce(rctx, batch)
		// Pipelined reports the first command's error reply as the whole
		// pipeline's. Redis answered every call then: each gets its own
		// reply below, and the breaker is not told Redis failed.
		var reply redis.Error
		if errors.As(err, &reply) {
			err = nil
		}
		return []any{cmds}, err
	})
	for i, c := range batch {
		if err != nil {
			c.err = err
			continue
		}
		cmd := res[0].([]*redis.Cmd)[i]
		if c.res, c.err = cmd.Result(); c.err != nil {
			c.err = redisErr(c.op, c.err)
		}
	}
}

// pipelineOnce sends calls as one pipeline and returns their commands (each
// with its own reply or error reply), running each call once: when Redis
// has lost scripts (a restart, a failover, SCRIPT FLUSH), it loads them and
// sends again only the calls Redis refused for it. The others ran, and a
// read run twice would find the claim its first run granted and report it
// taken.
func (ca *Cache[T]) pipelineOnce(ctx context.Context, calls []*scriptCall) ([]*redis.Cmd, error) {
	cmds, err := ca.pipeline(ctx, calls)
	again := refusedForScript(cmds)
	if len(again) == 0 {
		return cmds, err
	}
	refused := make([]*scriptCall, len(again))
	for j, i := range again {
		refused[j] = calls[i]
	}
	if err := ca.loadScripts(ctx, refused); err != nil {
		return cmds, err
	}
	retried, err := ca.pipeline(ctx, refused)
	for j, i := range again {
		cmds[i] = retried[j]
	}
	return cmds, err
}

// pipeline sends calls as one pipeline of EVALSHAs and returns their
// commands (each with its own reply or error reply).
func (ca *Cache[T]) pipeline(ctx context.Context, calls []*scriptCall) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	_, err := ca.c.rdb.Pipelined(ca.c.ctx(ctx), func(p redis.Pipeliner) error {
		for i, c := range calls {
			cmds[i] = c.s.EvalSha(ca.c.ctx(ctx), p, c.keys, c.args...)
		}
		return nil
	})
	return cmds, err
}

// refusedForScript returns the positions of the commands Redis refused
// because it did not have their script (NOSCRIPT).
func refusedForScript(cmds []*redis.Cmd) []int {
	var refused []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			refused = append(refused, i)
		}
	}
	return refused
}

// loadScripts loads the calls' scripts (a server restarted or flushed).
func (ca *Cache[T]) loadScripts(ctx context.Context, calls []*scriptCall) error {
	seen := map[*luascript.Script]bool{}
	for _, c := range calls {
		if seen[c.s] {
			continue
		}
		seen[c.s] = true
		if err := c.s.Load(ca.c.ctx(ctx), ca.c.rdb).Err(); err != nil {
			return err
		}
	}
	return nil
}
