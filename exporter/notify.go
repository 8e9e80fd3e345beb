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
	// NotifyAuto follows lock keys through keyspace notifications: when the
	// server does not publish NotifyFlags (notify-keyspace-events, read
	// with CONFIG GET every sample), the exporter adds the missing classes
	// with CONFIG SET, keeping the operator's, and puts the operator's
	// value back on Close unless it was changed since. A CONFIG GET or SET
	// the server refuses (ACL, a renamed CONFIG, a managed service) is
	// logged once and reported by NodeSnapshot.LockNotificationsRefused;
	// the lock figures then come from SCAN passes.
	NotifyAuto NotifyMode = iota
	// NotifyOff never subscribes: lock figures come from SCAN passes.
	NotifyOff
	// NotifyEnable adds the missing NotifyFlags as NotifyAuto does, but
	// leaves them on at Close (for a setting several exporters share), and
	// a refusal is an error of StageNotifications.
	NotifyEnable
	// NotifyExisting follows keyspace notifications only when the server
	// already publishes NotifyFlags: the exporter never writes its
	// configuration.
	NotifyExisting
)

// NotifyFlags are the notify-keyspace-events classes the lock index needs:
// keyspace channels (K) for generic commands (g: DEL, EXPIRE, RENAME…),
// string commands ($: SET), expiries (x) and evictions (e).
const NotifyFlags = "Kg$xe"

// String returns "auto", "off", "enable" or "existing".
func (m NotifyMode) String() string {
	switch m {
	case NotifyOff:
		return "off"
	case NotifyEnable:
		return "enable"
	case NotifyExisting:
		return "existing"
	}
	return "auto"
}

// NotifyModes lists every mode, the default first.
var NotifyModes = []NotifyMode{NotifyAuto, NotifyExisting, NotifyEnable, NotifyOff}

// ParseNotifyMode parses "auto", "existing", "enable" or "off".
func ParseNotifyMode(s string) (NotifyMode, error) {
	for _, m := range NotifyModes {
		if s == m.String() {
			return m, nil
		}
	}
	return NotifyAuto, fmt.Errorf("exporter: notification mode %q: want auto, existing, enable or off", s)
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
// follows keyspace notifications: it reads notify-keyspace-events (and adds
// what is missing unless the mode forbids it), starts or stops the
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
// the lock index needs, adding the missing classes when the mode allows it
// (NotifyAuto, NotifyEnable). A CONFIG GET or SET the server refuses or
// does not know is sent again only after its backoff; see notifyRefused.
func (e *Exporter) notificationsOn(ctx context.Context, n *node) (bool, *StageError) {
	mode := e.opts.LockNotifications
	if mode == NotifyOff || !e.due(n, string(StageNotifications)) {
		return false, nil
	}
	have, err := n.notifyConfig(ctx)
	if err != nil {
		return false, e.notifyRefused(n, "config|get", err)
	}
	missing := missingFlags(have)
	switch {
	case missing == "":
		n.notifyRefused = false
		return true, nil
	case mode == NotifyExisting:
		n.notifyRefused = false
		return false, nil
	case mode == NotifyAuto && n.notifyYielded:
		return false, nil
	case mode == NotifyAuto && n.notifySet:
		// The classes this exporter added were taken away since: an
		// operator's choice, which it keeps until the server restarts.
		n.notifySet, n.notifyYielded = false, true
		e.opts.Logger.Warn("notify-keyspace-events no longer holds the classes the exporter added: left as it is; lock figures come from SCAN passes",
			"node", n.addr, "notify-keyspace-events", have)
		return false, nil
	}
	return e.enableNotifications(ctx, n, have, missing)
}

// enableNotifications adds the missing classes to notify-keyspace-events,
// keeping the operator's, and remembers what to put back on Close.
func (e *Exporter) enableNotifications(ctx context.Context, n *node, have, missing string) (bool, *StageError) {
	if err := n.rdb.ConfigSet(ctx, "notify-keyspace-events", have+missing).Err(); err != nil {
		return false, e.notifyRefused(n, "config|set", err)
	}
	ours, err := n.notifyConfig(ctx) // as the server spells it, to compare on Close
	if err != nil {
		return false, e.notifyRefused(n, "config|get", err)
	}
	n.notifyRefused = false
	restore := e.opts.LockNotifications == NotifyAuto
	if restore {
		n.notifySet, n.notifyWas, n.notifyOurs = true, have, ours
	}
	e.opts.Logger.Info("enabled keyspace notifications for the lock index (CONFIG SET)", "node", n.addr,
		"notify-keyspace-events", ours, "was", have, "restored_on_exit", restore)
	return true, nil
}

// notifyConfig reads notify-keyspace-events.
func (n *node) notifyConfig(ctx context.Context) (string, error) {
	vals, err := n.rdb.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		return "", err
	}
	have, ok := vals["notify-keyspace-events"]
	if !ok {
		return "", fmt.Errorf("%w: CONFIG GET notify-keyspace-events returned no value", ErrMalformed)
	}
	return have, nil
}

// notifyRefused handles a CONFIG GET or SET of notify-keyspace-events that
// failed. A node that cannot be reached is the sample's failure. Otherwise
// (NOPERM, a renamed or missing CONFIG) the lock figures come from SCAN
// passes, NodeSnapshot.LockNotificationsRefused says so, and the command
// is sent again only after its backoff: NotifyEnable counts it as an error
// of StageNotifications, the other modes log it once.
func (e *Exporter) notifyRefused(n *node, cmd string, err error) *StageError {
	se := stageErr(StageNotifications, err)
	if se.fatal() {
		return se
	}
	n.notifyRefused = true
	if e.opts.LockNotifications == NotifyEnable {
		return se
	}
	e.failed(n, string(StageNotifications), se)
	if key := "notifications/" + cmd; !n.refusals[key] {
		n.refusals[key] = true
		e.opts.Logger.Warn("cannot turn on keyspace notifications: lock figures come from SCAN passes, exact once per pass "+
			"(set notify-keyspace-events to include "+NotifyFlags+" in the server's configuration, or grant "+cmd+")",
			"node", n.addr, "command", cmd, "err", err.Error())
	}
	return nil
}

// restoreNotifications puts back the operator's notify-keyspace-events
// where this exporter added classes to it (NotifyAuto), unless it was
// changed since.
func (e *Exporter) restoreNotifications(ctx context.Context, n *node) {
	if !n.notifySet {
		return
	}
	n.notifySet = false
	have, err := n.notifyConfig(ctx)
	if err == nil && have != n.notifyOurs {
		e.opts.Logger.Info("left notify-keyspace-events as it is: changed since the exporter set it",
			"node", n.addr, "notify-keyspace-events", have)
		return
	}
	if err == nil {
		err = n.rdb.ConfigSet(ctx, "notify-keyspace-events", n.notifyWas).Err()
	}
	if err != nil {
		e.opts.Logger.Warn("could not restore notify-keyspace-events", "node", n.addr, "was", n.notifyWas, "err", err.Error())
		return
	}
	e.opts.Logger.Info("restored notify-keyspace-events", "node", n.addr, "notify-keyspace-events", n.notifyWas)
}

// Bounds of settle: the PING rounds it takes to find a moment the index is
// exact at, and the time they may take (at most a tenth of the interval).
const (
	maxSettleRounds = 32
	maxSettleTime   = time.Second
)

// settle brings the lock index up to date with the notifications and, when
// the index is synced, finds a moment it is exact at. A PING on the
// subscription's connection is answered after every event published before
// it, so each answer closes a window of events: the keys they removed are
// dropped and the others read again, then a PING is sent again. A window
// without events means no lock key changed between two answers while every
// key the index holds had been read after its last change: the index is
// exact at the moment that window's PING was sent, which settle returns.
// While lock keys never pause for a round trip, it finds no such moment
// within its bounds, and the figures keep their older time.
func (e *Exporter) settle(ctx context.Context, n *node, own lookups) (time.Time, bool, *StageError) {
	x := &n.locks
	until := e.pacer.Now().Add(min(maxSettleTime, e.opts.Interval/10))
	for round := 0; ; round++ {
		at := e.clock.Now()
		if err := n.feed.barrier(ctx, feedWait); err != nil {
			// Events are lost only with the connection, which a new
			// generation tells; a late answer brings them next time.
			return time.Time{}, false, stageErr(StageNotifications, err)
		}
		changed, overflow := n.feed.take()
		if round == 0 {
			x.countSuspects(changed, overflow)
		}
		if overflow {
			x.synced = false
			x.restartPass()
			return time.Time{}, false, stageErr(StageNotifications, fmt.Errorf("more than %d lock keys changed between two samples: resyncing by SCAN", e.opts.MaxLocks))
		}
		if len(changed) == 0 {
			return at, x.synced, nil
		}
		if se := e.applyChanges(ctx, n, changed, own); se != nil {
			return time.Time{}, false, se
		}
		if !x.synced || round+1 >= maxSettleRounds || e.pacer.Now().After(until) {
			return time.Time{}, false, nil
		}
	}
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

// applyChanges drops the changed keys that are gone and reads the others
// again. A failed read loses what it was to read: the index then waits for
// a new sync.
func (e *Exporter) applyChanges(ctx context.Context, n *node, changed map[string]bool, own lookups) *StageError {
	x := &n.locks
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
	return nil
}

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
		done: make(chan struct{}), answer: make(chan struct{}, 1), open: map[string]bool{}, closed: map[string]bool{}}
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
		f.lastErr = nil
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
