package instrument

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/luascript"
)

// hub is a Client's one pub/sub connection, shared by all its Caches (a
// service with many Caches must not hold as many connections on the Redis
// it shares). It carries two kinds of message, on channels under the
// Client's namespace:
//
//   - <ns>:invalidate: what Invalidate and InvalidateMatch removed, handed
//     to the Caches that keep process copies (listeners);
//   - <ns>:wake:<process id>: this process's wake-ups, one channel for all
//     its keys. A read that finds a key being loaded elsewhere registers
//     the channel with the key (luascript.FetchRead), and the write that
//     ends the load publishes the value, led by the key's name, to every
//     registered channel. A waiter so costs no command of its own beyond
//     its read: no SUBSCRIBE and UNSUBSCRIBE per key, and no second read
//     to cover a write that lands before a subscription is confirmed.
//     Waiters register locally (topics) before that read, so a wake-up
//     that overtakes its reply is not missed.
//
// The connection opens on first use and closes when the last Cache closes;
// its goroutines end before that Close returns. A lost message (a
// reconnect, a failover) only costs a waiter a poll interval, or a copy a
// revalidating read.
type hub struct {
	rdb        redis.UniversalClient
	mark       func(context.Context) context.Context // origin marker for the hook
	ns         string
	clock      clockwork.Clock
	invalidate string // <ns>:invalidate
	wake       string // <ns>:wake:<process id>

	mu        sync.Mutex
	caches    int // Caches open (NewCache until Close): the connection lives while one is
	ps        *redis.PubSub
	wg        *sync.WaitGroup // the connection's goroutines; one per connection
	wakeReady chan struct{}   // closed when Redis confirms the wake channel's subscription
	listeners map[*int]func(notice string)

	subscribed atomic.Bool // wakeReady is closed: reads may register the wake channel
	// lively: Redis runs the claim scripts where the wake channel is
	// subscribed (one server, not a Cluster), so a claim token may name the
	// channel as its holder's sign of life (holder).
	lively bool
	seed   maphash.Seed
	topics [topicShards]topicShard // by stored key
}

// topicShards spreads the waiters' registry over locks of their own: every
// flight registers before its read and drops out after it, and in a
// stampede on many keys a flight that found one shared lock taken would
// park behind the crowd of runnable callers, its read and load delayed.
const topicShards = 64

type topicShard struct {
	mu sync.Mutex
	m  map[string]*topic
}

func (h *hub) shard(stored string) *topicShard {
	return &h.topics[maphash.String(h.seed, stored)%topicShards]
}

type topic struct {
	refs int
	// wake is the next message's delivery: closed when it arrives, then nil
	// until a waiter asks for the next (most flights never wait, and a
	// message wakes the flights of a key all at once: the hub, which
	// delivers every wake-up in turn, does not make one nobody takes).
	wake  *wakeup
	first wakeup // the first delivery, allocated with the topic
}

// next returns the topic's next delivery. The shard's lock is held.
func (t *topic) next() *wakeup {
	if t.wake == nil {
		t.wake = newWakeup()
	}
	return t.wake
}

// newTopic returns a topic whose first delivery is ready.
func newTopic() *topic {
	t := &topic{first: wakeup{done: make(chan struct{})}}
	t.wake = &t.first
	return t
}

// wakeup is one message's delivery to the waiters of a topic: done closes
// when it arrives, after payload is set.
type wakeup struct {
	done    chan struct{}
	payload string
}

func newWakeup() *wakeup { return &wakeup{done: make(chan struct{})} }

func newHub(rdb redis.UniversalClient, mark func(context.Context) context.Context, ns string, clock clockwork.Clock) *hub {
	var id [8]byte
	_, _ = crand.Read(id[:])
	_, lively := rdb.(*redis.Client)
	return &hub{rdb: rdb, mark: mark, ns: ns, clock: clock, invalidate: ns + ":invalidate",
		wake: ns + ":wake:" + hex.EncodeToString(id[:]), wakeReady: make(chan struct{}),
		listeners: map[*int]func(string){}, seed: maphash.MakeSeed(), lively: lively}
}

// holder returns the channel a claim token names as its holder's sign of
// life (luascript.FetchRead): the wake channel, once subscribed, on a
// single Redis server; "" otherwise. In a Cluster a script sees only the
// subscribers of its own node, so the claim there lasts its RefreshClaimTTL.
func (h *hub) holder() string {
	if h.lively && h.subscribed.Load() {
		return h.wake
	}
	return ""
}

// open registers a Cache; close must follow. The first one opens the
// connection, so the wake channel is subscribed before a crowd arrives.
func (h *hub) open() {
	h.mu.Lock()
	h.caches++
	h.connLocked()
	h.mu.Unlock()
}

// close unregisters a Cache; the last one closes the connection and waits
// for its goroutines.
func (h *hub) close() error {
	h.mu.Lock()
	h.caches--
	var err error
	var wg *sync.WaitGroup
	if h.caches == 0 && h.ps != nil {
		err = h.ps.Close()
		h.ps, wg = nil, h.wg
		h.wakeReady = make(chan struct{})
		h.subscribed.Store(false)
		for i := range h.topics { // their waiters poll on
			sh := &h.topics[i]
			sh.mu.Lock()
			sh.m = nil
			sh.mu.Unlock()
		}
	}
	h.mu.Unlock()
	if wg != nil {
		wg.Wait()
	}
	return err
}

// connLocked returns the connection, opening it (subscribed to the wake
// channel, and starting its dispatch) on first use, or nil when no Cache is
// open. h.mu is held.
func (h *hub) connLocked() *redis.PubSub {
	if h.ps == nil && h.caches > 0 {
		h.ps = h.rdb.Subscribe(h.mark(context.Background()))
		h.wg = new(sync.WaitGroup)
		ps := h.ps
		h.goLocked(func() { h.dispatch(ps) })
		h.goLocked(func() { _ = ps.Subscribe(h.mark(context.Background()), h.wake) })
	}
	return h.ps
}

// goLocked runs fn in a goroutine of the current connection, awaited when
// it closes. h.mu is held.
func (h *hub) goLocked(fn func()) {
	wg := h.wg
	wg.Add(1)
	go func() {
		defer wg.Done()
		fn()
	}()
}

// listen hands every invalidation notice to fn until the returned function
// is called. The subscription is made in the background: no Cache waits on
// Redis to be created.
func (h *hub) listen(fn func(notice string)) (stop func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	id := new(int)
	h.listeners[id] = fn
	if len(h.listeners) == 1 {
		if ps := h.connLocked(); ps != nil {
			h.goLocked(func() { _ = ps.Subscribe(h.mark(context.Background()), h.invalidate) })
		}
	}
	return func() { h.unlisten(id) }
}

func (h *hub) unlisten(id *int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.listeners[id]; !ok {
		return
	}
	delete(h.listeners, id)
	if len(h.listeners) == 0 && h.ps != nil {
		ps := h.ps
		h.goLocked(func() { _ = ps.Unsubscribe(h.mark(context.Background()), h.invalidate) })
	}
}

// subscription is one flight's interest in a stored key's wake-ups (a
// value: every flight takes one), and channel the wake channel for its
// reads to register, "" while Redis has not confirmed the subscription (or
// no Cache is open) — a waiter then waits for ready and reads again, or
// polls.
type subscription struct {
	h       *hub
	stored  string
	t       *topic
	channel string
}

// watch registers interest in stored's wake-ups, locally: no command goes
// to Redis. Call it before the read that may register this process as a
// waiter: next is the delivery that read's waiter waits for.
func (h *hub) watch(stored string) (s subscription, next *wakeup) {
	if h.subscribed.Load() {
		s.channel = h.wake
	}
	sh := h.shard(stored)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t, ok := sh.m[stored]
	if !ok {
		if sh.m == nil {
			sh.m = map[string]*topic{}
		}
		t = newTopic()
		sh.m[stored] = t
	}
	t.refs++
	s.h, s.stored, s.t = h, stored, t
	return s, t.next()
}

// ready waits, at most until ctx ends or bound passes, for Redis to
// confirm the wake channel's subscription, and reports whether it did.
func (h *hub) ready(ctx context.Context, bound time.Duration) bool {
	h.mu.Lock()
	if h.connLocked() == nil {
		h.mu.Unlock()
		return false
	}
	ready := h.wakeReady
	h.mu.Unlock()
	timer := h.clock.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-ready:
		return true
	case <-timer.Chan():
	case <-ctx.Done():
	}
	return false
}

// wait returns the delivery of the next wake-up of the subscription's key.
// Take it before the read, so that a write landing between the read and
// the wait is not missed.
func (s *subscription) wait() *wakeup {
	sh := s.h.shard(s.stored)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return s.t.next()
}

// close drops the waiter's interest.
func (s *subscription) close() {
	sh := s.h.shard(s.stored)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m[s.stored] != s.t {
		return
	}
	if s.t.refs--; s.t.refs == 0 {
		delete(sh.m, s.stored)
	}
}

// dispatch delivers confirmations, wake-ups and invalidation notices.
func (h *hub) dispatch(ps *redis.PubSub) {
	for m := range ps.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && m.Channel == h.wake {
				h.mu.Lock()
				if h.ps == ps && !h.subscribed.Load() {
					close(h.wakeReady)
					h.subscribed.Store(true)
				}
				h.mu.Unlock()
			}
		case *redis.Message:
			switch m.Channel {
			case h.invalidate:
				h.notice(m.Payload)
			case h.wake:
				h.deliver(m.Payload)
			}
		}
	}
}

// deliver wakes the waiters of the key a wake-up names
// (luascript.ParseWake) with its payload.
func (h *hub) deliver(msg string) {
	w, ok := luascript.ParseWake(msg)
	if !ok {
		return
	}
	sh := h.shard(w.Stored)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t := sh.m[w.Stored]; t != nil && t.wake != nil {
		t.wake.payload = w.Payload
		close(t.wake.done)
		t.wake = nil
	}
}

// notice hands an invalidation notice to every listener.
func (h *hub) notice(payload string) {
	h.mu.Lock()
	fns := make([]func(string), 0, len(h.listeners))
	for _, fn := range h.listeners {
		fns = append(fns, fn)
	}
	h.mu.Unlock()
	for _, fn := range fns {
		fn(payload)
	}
}
