package exporter

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

// NotifyMode says whether the exporter follows lock keys through Redis
// keyspace notifications.
type NotifyMode int

// Notification modes.
const (
	// NotifyAuto follows lock keys through keyspace notifications when the
	// server already publishes them (notify-keyspace-events holds
	// NotifyFlags, read with CONFIG GET every sample), and walks the
	// keyspace with SCAN alone otherwise.
	NotifyAuto NotifyMode = iota
	// NotifyOff never subscribes: lock figures come from SCAN passes.
	NotifyOff
	// NotifyEnable adds the missing NotifyFlags to notify-keyspace-events
	// with CONFIG SET (the only write the exporter ever sends, and only in
	// this mode), then behaves as NotifyAuto.
	NotifyEnable
)

// NotifyFlags are the notify-keyspace-events classes the lock index needs:
// keyspace channels (K) for generic commands (g: DEL, EXPIRE, RENAME…),
// string commands ($: SET), expiries (x) and evictions (e).
const NotifyFlags = "Kg$xe"

// String returns "auto", "off" or "enable".
func (m NotifyMode) String() string {
	switch m {
	case NotifyOff:
		return "off"
	case NotifyEnable:
		return "enable"
	}
	return "auto"
}

// ParseNotifyMode parses "auto", "off" or "enable".
func ParseNotifyMode(s string) (NotifyMode, error) {
	for _, m := range []NotifyMode{NotifyAuto, NotifyOff, NotifyEnable} {
		if s == m.String() {
			return m, nil
		}
	}
	return NotifyAuto, fmt.Errorf("exporter: notification mode %q: want auto, off or enable", s)
}

// feedWait bounds how long a sample waits for a subscription to be
// confirmed or for the barrier PING's answer.
const feedWait = 2 * time.Second

// missingFlags returns the classes of NotifyFlags that the
// notify-keyspace-events value have lacks ("A" stands for "g$lshzxetd").
func missingFlags(have string) string {
	have = strings.ReplaceAll(have, "A", "g$lshzxetd")
	var out []byte
	for i := 0; i < len(NotifyFlags); i++ {
		if !strings.ContainsRune(have, rune(NotifyFlags[i])) {
			out = append(out, NotifyFlags[i])
		}
	}
	return string(out)
}

// followNotifications decides, every sample, whether the node's lock index
// follows keyspace notifications: it reads notify-keyspace-events (and in
// NotifyEnable mode adds what is missing), starts or stops the
// subscription, and restarts the lock pass when a new subscription needs a
// sync pass. A server that stops publishing the events, or a subscription
// that broke, makes the index fall back to SCAN until a new sync.
func (e *Exporter) followNotifications(ctx context.Context, n *node) []*StageError {
	x := &n.locks
	want, se := e.notificationsOn(ctx, n)
	if !want {
		if n.feed != nil {
			n.feed.close()
			n.feed, x.synced = nil, false
			x.restartPass()
		}
		if se != nil {
			return []*StageError{se}
		}
		return nil
	}
	if n.feed == nil {
		n.feed = e.startFeed(ctx, n)
		n.feed.waitReady(ctx, feedWait)
	}
	switch gen := n.feed.generation(); {
	case gen != x.feedGen && n.feed.ready(gen):
		// A new subscription: events from before it are lost, so the
		// index is exact again only after a pass that starts now.
		x.synced = false
		x.restartPass()
		x.feedGen = gen
	case !n.feed.ready(gen):
		// None yet, or broken: the pass goes on as without notifications
		// until the subscription is whole again.
		x.synced = false
	}
	if err := n.feed.failure(); err != nil {
		return []*StageError{stageErr(StageNotifications, err)}
	}
	return nil
}

// notificationsOn reports whether the node publishes the keyspace events
// the lock index needs, enabling them in NotifyEnable mode. A CONFIG GET
// the server refuses or does not know means no: logged once in NotifyAuto
// mode, an error of the stage in NotifyEnable mode; either way it is sent
// again only after its backoff.
func (e *Exporter) notificationsOn(ctx context.Context, n *node) (bool, *StageError) {
	if e.opts.LockNotifications == NotifyOff || !e.due(n, string(StageNotifications)) {
		return false, nil
	}
	vals, err := n.rdb.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		se := stageErr(StageNotifications, err)
		if e.opts.LockNotifications == NotifyEnable {
			return false, se
		}
		// In auto mode a server that hides its configuration (ACL,
		// managed services, miniredis) is one without notifications.
		e.failed(n, string(StageNotifications), se)
		if key := "notifications/config"; !n.refusals[key] {
			n.refusals[key] = true
			e.opts.Logger.Info("cannot read notify-keyspace-events: lock figures come from SCAN passes alone (grant +config|get, or --locks.notifications off)",
				"node", n.addr, "err", err.Error())
		}
		return false, nil
	}
	have := vals["notify-keyspace-events"]
	missing := missingFlags(have)
	if missing == "" {
		return true, nil
	}
	if e.opts.LockNotifications != NotifyEnable {
		return false, nil
	}
	set := have + missing
	if err := n.rdb.ConfigSet(ctx, "notify-keyspace-events", set).Err(); err != nil {
		return false, stageErr(StageNotifications, err)
	}
	e.opts.Logger.Info("enabled keyspace notifications for the lock index (CONFIG SET)", "node", n.addr,
		"notify-keyspace-events", set, "was", have)
	return true, nil
}

// flushFeed brings the lock index up to date with the notifications: a
// PING on the subscription's connection is answered after every event
// published before it, so once its answer arrives the changed keys are
// known; those removed are dropped and the others read again. With the
// index synced, it is then exact as of the PING.
func (e *Exporter) flushFeed(ctx context.Context, n *node, own lookups) *StageError {
	x := &n.locks
	at := e.clock.Now()
	if err := n.feed.barrier(ctx, feedWait); err != nil {
		// Not exact now; events are lost only with the connection, which
		// a new generation tells (a new sync then starts).
		x.synced = false
		return stageErr(StageNotifications, err)
	}
	changed, overflow := n.feed.take()
	for k := range x.suspect { // keys SCAN found first: lost events unless theirs has come since
		if _, ok := changed[k]; !ok && !overflow {
			x.repairs++
		}
	}
	clear(x.suspect)
	if overflow {
		x.synced = false
		x.restartPass()
		return stageErr(StageNotifications, fmt.Errorf("more than %d lock keys changed between two samples: resyncing by SCAN", e.opts.MaxLocks))
	}
	read := make([]string, 0, len(changed))
	for k, gone := range changed {
		if gone {
			delete(x.entries, k)
		} else {
			read = append(read, k)
		}
	}
	for start := 0; start < len(read); start += e.opts.Batch {
		for _, se := range e.readLocks(ctx, n, read[start:min(start+e.opts.Batch, len(read))], own, false) {
			if se.fatal() || !errors.Is(se, errTokens) {
				x.synced = false
				x.restartPass()
				return se
			}
		}
	}
	if x.synced && n.feed.ready(x.feedGen) {
		x.asOf = at
	}
	return nil
}

// goneEvents are the keyspace events after which the key no longer exists
// under its name; after any other event it is read again.
var goneEvents = map[string]bool{"del": true, "expired": true, "evicted": true, "rename_from": true, "move_from": true}

// lockFeed is a node's subscription to the keyspace events of its lock
// patterns (PSUBSCRIBE __keyspace@<db>__:<pattern>). A goroutine records
// which lock keys changed; the sample reads them.
type lockFeed struct {
	ps       *redis.PubSub
	prefix   string
	patterns int
	max      int
	cancel   context.CancelFunc
	done     chan struct{}
	pong     chan struct{}

	mu sync.Mutex
	// changed maps each lock key changed since the last take to whether
	// its last event removed it.
	changed  map[string]bool
	overflow bool
	// confirmed counts the pattern subscriptions confirmed on the current
	// connection; gen counts the connections on which all were.
	confirmed int
	gen       uint64
	lastErr   error
}

func (e *Exporter) startFeed(ctx context.Context, n *node) *lockFeed {
	prefix := "__keyspace@" + strconv.Itoa(e.opts.Target.DB) + "__:"
	channels := make([]string, len(n.patterns))
	for i, p := range n.patterns {
		channels[i] = prefix + p
	}
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &lockFeed{prefix: prefix, patterns: len(channels), max: e.opts.MaxLocks, cancel: cancel,
		done: make(chan struct{}), pong: make(chan struct{}, 1), changed: map[string]bool{}}
	f.ps = n.rdb.PSubscribe(fctx, channels...)
	go f.receive(fctx, e.pacer, e.opts.Interval)
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
		msg, err := f.ps.Receive(ctx)
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
			select {
			case f.pong <- struct{}{}:
			default:
			}
		}
	}
}

func (f *lockFeed) event(key string, gone bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.overflow {
		return
	}
	if _, ok := f.changed[key]; !ok && len(f.changed) >= f.max {
		f.overflow, f.changed = true, map[string]bool{}
		return
	}
	f.changed[key] = gone
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
		f.lastErr = nil
	}
}

// generation is the number of connections on which every pattern was
// subscribed; it changes when events may have been lost.
func (f *lockFeed) generation() uint64 {
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

// failure is the error that broke the subscription, while it is broken.
func (f *lockFeed) failure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.confirmed == f.patterns {
		return nil
	}
	return f.lastErr
}

// pending reports whether an event for key awaits the next take.
func (f *lockFeed) pending(key string) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.changed[key]
	return ok
}

// take returns the keys changed since the last take, and whether more
// changed than it could hold (then nothing is returned).
func (f *lockFeed) take() (map[string]bool, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out, overflow := f.changed, f.overflow
	f.changed, f.overflow = map[string]bool{}, false
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
// recorded: Redis answers the PING on the subscription's connection after
// them.
func (f *lockFeed) barrier(ctx context.Context, d time.Duration) error {
	if f.failure() != nil || f.generation() == 0 {
		return errors.New("keyspace notification subscription not established")
	}
	select { // an answer to an earlier, timed-out PING
	case <-f.pong:
	default:
	}
	if err := f.ps.Ping(ctx); err != nil {
		return fmt.Errorf("keyspace notification subscription: %w", err)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-f.pong:
		return nil
	case <-t.C:
		return errors.New("keyspace notification subscription: no answer to PING in time")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *lockFeed) close() {
	f.cancel()
	_ = f.ps.Close()
	<-f.done
}
