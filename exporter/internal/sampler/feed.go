package sampler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/ctxsleep"
)

// feedWait bounds how long a sample waits for a subscription to be
// confirmed or for the barrier PING's answer.
const feedWait = 2 * time.Second

// goneEvents are the keyspace events after which the key no longer exists
// under its name; after any other event it is read again.
var goneEvents = map[string]bool{"del": true, "expired": true, "evicted": true, "rename_from": true, "move_from": true}

// lockFeed is a node's subscription to the keyspace events of its lock
// patterns (PSUBSCRIBE __keyspace@<db>__:<pattern>). A goroutine records
// which lock keys changed, window by window: each answer to a PING on the
// subscription closes the window of the events published before it.
type lockFeed struct {
	ps       *redis.PubSub
	prefix   string
	patterns int
	max      int
	cancel   context.CancelFunc
	done     chan struct{}
	// answer is signalled whenever a PING is answered.
	answer chan struct{}

	mu sync.Mutex
	// open maps each lock key changed since the last PING answer to
	// whether its last event removed it; closed holds the windows up to
	// that answer not yet taken. A window with more than max keys is
	// replaced by its overflow flag.
	open, closed                 map[string]bool
	openOverflow, closedOverflow bool
	// pinged numbers the PINGs sent, answered the last one answered.
	pinged, answered uint64
	// confirmed counts the pattern subscriptions confirmed on the current
	// connection; gen counts the connections on which all were. lastErr
	// is the last connection's failure.
	confirmed int
	gen       uint64
	lastErr   error
}

// startFeed subscribes to the keyspace events of the lock patterns.
func (l *lockStage) startFeed(ctx context.Context) *lockFeed {
	cfg := l.env.cfg
	prefix := "__keyspace@" + strconv.Itoa(cfg.Conn.DB) + "__:"
	channels := make([]string, len(cfg.LockPatterns))
	for i, p := range cfg.LockPatterns {
		channels[i] = prefix + p
	}
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &lockFeed{prefix: prefix, patterns: len(channels), max: cfg.MaxLocks, cancel: cancel,
		done: make(chan struct{}), answer: make(chan struct{}, 1), open: map[string]bool{}, closed: map[string]bool{}}
	f.ps = l.env.rdb.PSubscribe(fctx, channels...)
	go f.receive(fctx, cfg.Pacer, cfg.Interval)
	return f
}

// receive records events until the feed is closed. A failed connection is
// dialled again (go-redis subscribes again on the new one) after a backoff
// of 1 s doubling up to the interval; events published meanwhile are lost,
// which the next confirmation tells the sampler (a new generation).
func (f *lockFeed) receive(ctx context.Context, clock clockwork.Clock, ceiling time.Duration) {
	defer close(f.done)
	wait := time.Second
	for ctx.Err() == nil {
		msg, err := receiveSafely(ctx, f.ps)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.mu.Lock()
			f.confirmed, f.lastErr = 0, err
			f.mu.Unlock()
			_ = ctxsleep.On(ctx, clock, wait)
			wait = min(2*wait, ceiling)
			continue
		}
		switch m := msg.(type) {
		case *redis.Message:
			f.event(strings.TrimPrefix(m.Channel, f.prefix), goneEvents[m.Payload])
		case *redis.Subscription:
			f.subscribed(m)
			wait = time.Second
		case *redis.Pong:
			f.pong(m.Payload)
		}
	}
}

func (f *lockFeed) event(key string, gone bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.openOverflow {
		return
	}
	if _, ok := f.open[key]; !ok && len(f.open) >= f.max {
		f.openOverflow, f.open = true, map[string]bool{}
		return
	}
	f.open[key] = gone
}

// pong closes the open window: every event published before the PING
// numbered payload has been recorded.
func (f *lockFeed) pong(payload string) {
	f.mu.Lock()
	if seq, err := strconv.ParseUint(payload, 10, 64); err == nil && seq > f.answered {
		f.answered = seq
	}
	switch {
	case len(f.closed) == 0 && !f.closedOverflow:
		f.closed, f.open = f.open, map[string]bool{}
	case !f.closedOverflow && !f.openOverflow:
		for k, gone := range f.open {
			f.closed[k] = gone
		}
		clear(f.open)
	}
	f.closedOverflow = f.closedOverflow || f.openOverflow || len(f.closed) > f.max
	if f.closedOverflow {
		f.closed, f.open = map[string]bool{}, map[string]bool{}
	}
	f.openOverflow = false
	f.mu.Unlock()
	select {
	case f.answer <- struct{}{}:
	default:
	}
}

func (f *lockFeed) subscribed(m *redis.Subscription) {
	if m.Kind != "psubscribe" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.confirmed++
	if f.confirmed == f.patterns {
		f.gen++
	}
}

// readAgain gives back keys taken whose read failed: the next take
// returns them as changed, unless a later event of theirs is there.
func (f *lockFeed) readAgain(keys []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closedOverflow {
		return
	}
	for _, k := range keys {
		if _, later := f.closed[k]; !later {
			f.closed[k] = false
		}
	}
	if len(f.closed) > f.max {
		f.closedOverflow, f.closed = true, map[string]bool{}
	}
}

// generation is the number of connections on which every pattern was
// subscribed; it changes when events may have been lost.
func (f *lockFeed) generation() uint64 {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen
}

// ready reports whether the subscription of generation gen is still whole.
func (f *lockFeed) ready(gen uint64) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return gen != 0 && f.gen == gen && f.confirmed == f.patterns
}

// lostSince reports why events published since generation gen's
// subscription was confirmed may be lost (nil while it is whole): the
// connection failed, and a new one does not bring back what it missed.
func (f *lockFeed) lostSince(gen uint64) error {
	if f.ready(gen) {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lastErr == nil {
		return errors.New("keyspace notification subscription not established")
	}
	return fmt.Errorf("keyspace notification subscription lost: %w", f.lastErr)
}

// failure is the error that broke the subscription, while it is broken.
func (f *lockFeed) failure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.confirmed == f.patterns {
		return nil
	}
	return f.lastErr
}

// pending reports whether an event for key awaits a take.
func (f *lockFeed) pending(key string) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, open := f.open[key]
	_, closed := f.closed[key]
	return open || closed || f.openOverflow || f.closedOverflow
}

// take returns the keys changed in the windows closed since the last take,
// and whether more changed than it could hold (then nothing is returned).
func (f *lockFeed) take() (map[string]bool, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out, overflow := f.closed, f.closedOverflow
	f.closed, f.closedOverflow = map[string]bool{}, false
	if overflow {
		return nil, true
	}
	return out, false
}

// waitReady waits up to d for the first subscription.
func (f *lockFeed) waitReady(ctx context.Context, d time.Duration) {
	deadline := time.Now().Add(d)
	for f.generation() == 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
}

// barrier returns once every event published before it was called has been
// recorded in a closed window: Redis answers the PING on the subscription's
// connection after them.
func (f *lockFeed) barrier(ctx context.Context, d time.Duration) error {
	if f.failure() != nil || f.generation() == 0 {
		return errors.New("keyspace notification subscription not established")
	}
	f.mu.Lock()
	f.pinged++
	seq := f.pinged
	f.mu.Unlock()
	if err := f.ps.Ping(ctx, strconv.FormatUint(seq, 10)); err != nil {
		return fmt.Errorf("keyspace notification subscription: %w", err)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		f.mu.Lock()
		done := f.answered >= seq
		f.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-f.answer:
		case <-t.C:
			return errors.New("keyspace notification subscription: no answer to PING in time")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (f *lockFeed) close() {
	f.cancel()
	_ = f.ps.Close()
	<-f.done
}
