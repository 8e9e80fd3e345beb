package sampler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// notifier decides, every sample, whether a node's lock index follows
// keyspace notifications: it reads notify-keyspace-events and, as the mode
// allows, adds the classes the index needs, remembering what to put back on
// Close.
type notifier struct {
	env *env
	// retry is the backoff of a refused CONFIG GET or SET, and of the
	// subscription's failures.
	retry backoff
	// set is true while notify-keyspace-events holds classes this sampler
	// added (NotifyAuto): was is the value before, put back on close
	// unless the value is no longer ours. yielded is set once someone took
	// them away (kept until the server restarts); refused while the server
	// refuses CONFIG GET or SET.
	set, yielded, refused bool
	was, ours             string
	// logged are the refused commands already logged.
	logged map[string]bool
}

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

// serverRestarted forgets what the sampler set: a restarted server read
// its configuration afresh.
func (nt *notifier) serverRestarted() { nt.set, nt.yielded = false, false }

// follow decides, every sample, whether the lock index follows keyspace
// notifications: it reads notify-keyspace-events (and adds what is missing
// unless the mode forbids it), starts or stops the subscription, and
// restarts the lock pass when a new subscription needs a sync pass. A
// server that stops publishing the events, or a subscription that broke,
// makes the index fall back to SCAN until a new sync.
func (l *lockStage) follow(ctx context.Context) []*StageError {
	x := &l.index
	want, se := l.notify.on(ctx)
	if !want {
		if l.feed != nil {
			l.stopFeed()
			x.synced = false
			x.restartPass()
		}
		if se != nil {
			return []*StageError{se}
		}
		return nil
	}
	if l.feed == nil {
		l.feed = l.startFeed(ctx)
		l.feed.waitReady(ctx, feedWait)
	}
	switch gen := l.feed.generation(); {
	case gen != x.feedGen && l.feed.ready(gen):
		// A new subscription: events from before it are lost, so the
		// index is exact again only after a pass that starts now.
		x.synced = false
		x.restartPass()
		x.feedGen = gen
	case !l.feed.ready(gen):
		// None yet, or broken: the pass goes on as without notifications
		// until the subscription is whole again.
		x.synced = false
	}
	if err := l.feed.failure(); err != nil {
		return []*StageError{stageErr(StageNotifications, err)}
	}
	return nil
}

// on reports whether the node publishes the keyspace events the lock index
// needs, adding the missing classes when the mode allows it (NotifyAuto,
// NotifyEnable). A CONFIG GET or SET the server refuses or does not know is
// sent again only after its backoff; see refusedBy.
func (nt *notifier) on(ctx context.Context) (bool, *StageError) {
	mode := nt.env.cfg.Notify
	if mode == NotifyOff || !nt.retry.due(nt.env.now()) {
		return false, nil
	}
	have, err := nt.config(ctx)
	if err != nil {
		return false, nt.refusedBy("config|get", err)
	}
	missing := missingFlags(have)
	switch {
	case missing == "":
		nt.refused = false
		return true, nil
	case mode == NotifyExisting:
		nt.refused = false
		return false, nil
	case mode == NotifyAuto && nt.yielded:
		return false, nil
	case mode == NotifyAuto && nt.set:
		// The classes this sampler added were taken away since: an
		// operator's choice, which it keeps until the server restarts.
		nt.set, nt.yielded = false, true
		nt.env.cfg.Logger.Warn("notify-keyspace-events no longer holds the classes the exporter added: left as it is; lock figures come from SCAN passes",
			"node", nt.env.addr, "notify-keyspace-events", have)
		return false, nil
	}
	return nt.enable(ctx, have, missing)
}

// enable adds the missing classes to notify-keyspace-events, keeping the
// operator's, and remembers what to put back on Close.
func (nt *notifier) enable(ctx context.Context, have, missing string) (bool, *StageError) {
	if err := nt.env.rdb.ConfigSet(ctx, "notify-keyspace-events", have+missing).Err(); err != nil {
		return false, nt.refusedBy("config|set", err)
	}
	ours, err := nt.config(ctx) // as the server spells it, to compare on Close
	if err != nil {
		return false, nt.refusedBy("config|get", err)
	}
	nt.refused = false
	restore := nt.env.cfg.Notify == NotifyAuto
	if restore {
		nt.set, nt.was, nt.ours = true, have, ours
	}
	nt.env.cfg.Logger.Info("enabled keyspace notifications for the lock index (CONFIG SET)", "node", nt.env.addr,
		"notify-keyspace-events", ours, "was", have, "restored_on_exit", restore)
	return true, nil
}

// config reads notify-keyspace-events.
func (nt *notifier) config(ctx context.Context) (string, error) {
	vals, err := nt.env.rdb.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		return "", err
	}
	have, ok := vals["notify-keyspace-events"]
	if !ok {
		return "", fmt.Errorf("%w: CONFIG GET notify-keyspace-events returned no value", ErrMalformed)
	}
	return have, nil
}

// refusedBy handles a CONFIG GET or SET of notify-keyspace-events that
// failed. A node that cannot be reached is the sample's failure. Otherwise
// (NOPERM, a renamed or missing CONFIG) the lock figures come from SCAN
// passes, snapshot.Node.LockNotificationsRefused says so, and the command
// is sent again only after its backoff: NotifyEnable counts it as an error
// of StageNotifications, the other modes log it once.
func (nt *notifier) refusedBy(cmd string, err error) *StageError {
	se := stageErr(StageNotifications, err)
	if se.Fatal() {
		return se
	}
	nt.refused = true
	if nt.env.cfg.Notify == NotifyEnable {
		return se
	}
	nt.retry.fail(nt.env.now(), nt.env.cfg.Interval, se)
	if !nt.logged[cmd] {
		nt.logged[cmd] = true
		nt.env.cfg.Logger.Warn("cannot turn on keyspace notifications: lock figures come from SCAN passes, exact once per pass "+
			"(set notify-keyspace-events to include "+NotifyFlags+" in the server's configuration, or grant "+cmd+")",
			"node", nt.env.addr, "command", cmd, "err", err.Error())
	}
	return nil
}

// restoreNotifications puts back the operator's notify-keyspace-events
// where this sampler added classes to it (NotifyAuto), unless it was
// changed since.
func (l *lockStage) restoreNotifications(ctx context.Context) {
	nt := &l.notify
	if !nt.set {
		return
	}
	nt.set = false
	log := nt.env.cfg.Logger
	have, err := nt.config(ctx)
	if err == nil && have != nt.ours {
		log.Info("left notify-keyspace-events as it is: changed since the exporter set it",
			"node", nt.env.addr, "notify-keyspace-events", have)
		return
	}
	if err == nil {
		err = nt.env.rdb.ConfigSet(ctx, "notify-keyspace-events", nt.was).Err()
	}
	if err != nil {
		log.Warn("could not restore notify-keyspace-events", "node", nt.env.addr, "was", nt.was, "err", err.Error())
		return
	}
	log.Info("restored notify-keyspace-events", "node", nt.env.addr, "notify-keyspace-events", nt.was)
}

// Bounds of settle: the PING rounds it takes to find a moment the index is
// exact at, and the time they may take (at most a tenth of the interval).
const (
	maxSettleRounds = 32
	maxSettleTime   = time.Second
)

// settle brings the lock index up to date with the notifications and, when
// the index is synced, finds a moment it is exact at, which it returns
// (zero when it found none). A PING on the subscription's connection is
// answered after every event published before it, so each answer closes a
// window of events: the keys they removed are dropped and the others read
// again, then a PING is sent again. A window without events means no lock
// key changed between two answers while every key the index holds had been
// read after its last change: the index is exact at the moment that
// window's PING was sent. While lock keys never pause for a round trip, it
// finds no such moment within its bounds, and the figures keep their older
// time.
func (l *lockStage) settle(ctx context.Context, own lookups) (time.Time, *StageError) {
	x, cfg := &l.index, l.env.cfg
	until := cfg.Pacer.Now().Add(min(maxSettleTime, cfg.Interval/10))
	for round := 0; ; round++ {
		at := l.env.now()
		err := l.feed.barrier(ctx, feedWait)
		if lost := l.feed.lostSince(x.feedGen); lost != nil {
			// The connection failed since the index was last exact: its
			// events are lost, even when a new connection answered.
			x.synced = false
			return time.Time{}, stageErr(StageNotifications, lost)
		}
		if err != nil {
			// A late answer brings the events next time.
			return time.Time{}, stageErr(StageNotifications, err)
		}
		changed, overflow := l.feed.take()
		if round == 0 {
			x.countSuspects(changed, overflow)
		}
		if overflow {
			x.synced = false
			x.restartPass()
			return time.Time{}, stageErr(StageNotifications, fmt.Errorf("more than %d lock keys changed between two samples: resyncing by SCAN", cfg.MaxLocks))
		}
		if len(changed) == 0 {
			if !x.synced {
				return time.Time{}, nil
			}
			return at, nil
		}
		if se := l.applyChanges(ctx, changed, own); se != nil {
			return time.Time{}, se
		}
		if !x.synced || round+1 >= maxSettleRounds || cfg.Pacer.Now().After(until) {
			return time.Time{}, nil
		}
	}
}

// applyChanges drops the changed keys that are gone and reads the others
// again. A read that timed out leaves what it was to read to the next
// sample's (the feed takes those keys back); any other failure loses it,
// and the index waits for a new sync.
func (l *lockStage) applyChanges(ctx context.Context, changed map[string]bool, own lookups) *StageError {
	x, batch := &l.index, l.env.cfg.Batch
	read := make([]string, 0, len(changed))
	for k, gone := range changed {
		if gone {
			delete(x.entries, k)
		} else {
			read = append(read, k)
		}
	}
	for start := 0; start < len(read); start += batch {
		for _, se := range l.read(ctx, read[start:min(start+batch, len(read))], own, false) {
			switch {
			case !se.Fatal() && errors.Is(se, errTokens):
			case answeredLate(se):
				l.feed.readAgain(read[start:])
				return se
			default:
				x.synced = false
				x.restartPass()
				return se
			}
		}
	}
	return nil
}
