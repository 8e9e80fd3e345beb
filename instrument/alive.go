package instrument

import (
	"context"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/cachewatch/cachewatch/internal/lockholder"
	"github.com/cachewatch/cachewatch/internal/luascript"
	"github.com/cachewatch/cachewatch/signals"
)

// DefaultLivenessTTL is the life of a process instance's liveness key when
// Options.LivenessTTL is zero. The client refreshes the key every third of
// it, so a holder killed outright is found dead between 2/3 of it and all
// of it later.
const DefaultLivenessTTL = 1500 * time.Millisecond

// liveness keeps this process instance's liveness key
// (lockholder.AliveKey) on the client's Redis while the client holds, or
// may soon take, live-marked locks: one goroutine per Client, started by
// the first such Lock, stopped by Close. It also holds the proof the
// client's live locks stand on: "alive until", the send time of the last
// refresh Redis accepted plus the TTL. Redis keeps the key at least that
// long, so no waiter can find it gone before then; when that moment passes
// without a newer refresh (the process was stopped, starved or cut off),
// the client can no longer prove it is alive, a waiter may take its locks
// over, and it ends them all as lost (lapse), before any waiter can.
//
// It reads the real clock unless a test sets another: Redis expires the key
// on its own clock, whatever clock the client's other decisions follow.
type liveness struct {
	c     *Client
	key   string
	ttl   time.Duration
	clock clockwork.Clock

	mu      sync.Mutex
	started bool
	closed  bool
	used    time.Time // when a lock last asked for liveness (ensure)
	until   time.Time // proven alive until; zero: never proven
	epoch   uint64    // counts lapses: a lock taken in an earlier epoch is lost
	timer   clockwork.Timer
	locks   map[*Lock]struct{}
	stop    chan struct{}
	done    chan struct{}
}

func newLiveness(c *Client, ttl time.Duration) *liveness {
	if ttl <= 0 {
		ttl = DefaultLivenessTTL
	}
	return &liveness{c: c, key: lockholder.AliveKey(c.holder.Instance), ttl: ttl,
		clock: clockwork.NewRealClock(), locks: map[*Lock]struct{}{}}
}

// ensure makes sure the liveness key stands for at least a third of its
// TTL more, refreshing it first when needed, and starts the refresher. It
// reports the epoch a lock about to be taken belongs to, and ok false when
// the client is closed (a lock is then taken without liveness).
func (lv *liveness) ensure(ctx context.Context) (epoch uint64, ok bool, err error) {
	lv.mu.Lock()
	if lv.closed {
		lv.mu.Unlock()
		return 0, false, nil
	}
	if !lv.started {
		lv.started = true
		lv.stop, lv.done = make(chan struct{}), make(chan struct{})
		go lv.run(lv.stop, lv.done)
	}
	lv.used = lv.clock.Now()
	fresh := lv.until.Sub(lv.used) > lv.ttl/3
	epoch = lv.epoch
	lv.mu.Unlock()
	if fresh {
		return epoch, true, nil
	}
	if err := lv.refresh(ctx); err != nil {
		return 0, false, err
	}
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return lv.epoch, true, nil
}

// idleStop is how many TTLs the refresher keeps running while the client
// holds no live lock and takes none: a client locking at least that often
// never waits for a refresh, and an idle one sends nothing. The next Lock
// after it refreshes first (one round trip more) and starts it again.
const idleStop = 4

// run refreshes the key every TTL/3 until stop closes or the client stays
// idle. A failed refresh is retried at the next tick; the lapse timer
// decides when it is too late.
func (lv *liveness) run(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tick := lv.clock.NewTicker(max(lv.ttl/3, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.Chan():
		}
		if lv.idle() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), lv.ttl/3)
		_ = lv.refresh(ctx)
		cancel()
	}
}

// idle reports whether the refresher may stop, and if so lets the next
// ensure start another.
func (lv *liveness) idle() bool {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if len(lv.locks) > 0 || lv.clock.Since(lv.used) < idleStop*lv.ttl || lv.stop == nil {
		return false
	}
	lv.started, lv.stop, lv.done = false, nil, nil
	return true
}

// refresh sends one refresh and, once Redis accepted it, moves "alive
// until" to its send time plus the TTL and re-arms the lapse timer.
func (lv *liveness) refresh(ctx context.Context) error {
	sent := lv.clock.Now()
	_, err := bounded(ctx, lv.c.rdb, func() (struct{}, error) {
		return struct{}{}, luascript.AliveRefresh.Run(lv.c.ctx(ctx), lv.c.rdb, []string{lv.key}, lv.ttl.Milliseconds()).Err()
	}, nil)
	if err != nil {
		return lv.c.lockErr(ctx, lv.key, err)
	}
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if until := sent.Add(lv.ttl); until.After(lv.until) {
		lv.until = until
		if lv.timer != nil {
			lv.timer.Stop()
		}
		lv.timer = lv.clock.AfterFunc(until.Sub(lv.clock.Now()), lv.lapse)
	}
	return nil
}

// lapse ends every live lock of the client as lost once "alive until" has
// passed without a newer refresh.
func (lv *liveness) lapse() {
	lv.mu.Lock()
	if lv.clock.Now().Before(lv.until) {
		lv.mu.Unlock()
		return // a refresh moved it on meanwhile
	}
	lv.epoch++
	lost := make([]*Lock, 0, len(lv.locks))
	for l := range lv.locks {
		lost = append(lost, l)
	}
	clear(lv.locks)
	lv.mu.Unlock()
	for _, l := range lost {
		l.mu.Lock()
		l.lose(lostRenewFailed, signals.EndLost)
		l.mu.Unlock()
	}
}

// checkDue reports whether a's attempt should check the holder's
// liveness: a retry, at most once every tenth of the TTL (a holder found
// dead is taken over that much later at most, and a crowd of waiters
// costs Redis a plain SET NX per retry in between).
func (lv *liveness) checkDue(a *acquisition) bool {
	now := lv.clock.Now()
	if a.attempt == 0 {
		a.checked = now
		return false
	}
	if now.Sub(a.checked) < lv.ttl/10 {
		return false
	}
	a.checked = now
	return true
}

// register adds a lock taken in epoch to those a lapse ends. It reports
// false when the proof of life lapsed since the lock's acquire was sent:
// the lock may already have been taken over, and is lost.
func (lv *liveness) register(l *Lock, epoch uint64) bool {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.epoch != epoch || !lv.clock.Now().Before(lv.until) {
		return false
	}
	lv.locks[l] = struct{}{}
	return true
}

// unregister forgets a lock that ended.
func (lv *liveness) unregister(l *Lock) {
	lv.mu.Lock()
	delete(lv.locks, l)
	lv.mu.Unlock()
}

// close stops the refresher and waits for it. Live locks still held end as
// lost when the proof of life lapses, as waiters may then take them over.
func (lv *liveness) close() {
	lv.mu.Lock()
	stop, done := lv.stop, lv.done
	wasClosed := lv.closed
	lv.closed, lv.stop = true, nil
	lv.mu.Unlock()
	if stop != nil && !wasClosed {
		close(stop)
	}
	if done != nil {
		<-done
	}
}

// Close stops the goroutine that keeps this process's liveness key while
// the client takes live locks (LockOptions.NoLiveness false). Locks still
// held stay valid until the proof of life lapses (at most the client's
// LivenessTTL), then they end as lost; locks taken after Close are not
// live-marked. Close does not close the go-redis client. It is safe to
// call more than once and concurrently with other calls.
func (c *Client) Close() error {
	c.alive.close()
	return nil
}
