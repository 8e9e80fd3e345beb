package instrument

import (
	"context"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"
)

// hub is a Client's one pub/sub connection, shared by all its Caches (a
// service with many Caches must not hold as many connections on the Redis
// it shares). It carries two kinds of message, on channels under the
// Client's namespace:
//
//   - <ns>:invalidate: what Invalidate and InvalidateMatch removed, handed
//     to the Caches that keep process copies (listeners);
//   - <ns>:fetch:<stored key>: published by the write script, waking the
//     callers waiting for another process's load (topics, subscribed while
//     someone in this process waits, reference-counted).
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

	mu        sync.Mutex
	caches    int // Caches open (NewCache until Close): the connection lives while one is
	ps        *redis.PubSub
	wg        *sync.WaitGroup // the connection's goroutines; one per connection
	listeners map[*int]func(notice string)
	topics    map[string]*topic
}

type topic struct {
	refs  int
	ready chan struct{} // closed when Redis confirms the subscription
	once  sync.Once
	wake  *wakeup // closed and replaced on every message
}

// wakeup is one message's delivery to the waiters of a topic: done closes
// when it arrives, after payload is set.
type wakeup struct {
	done    chan struct{}
	payload string
}

func newWakeup() *wakeup { return &wakeup{done: make(chan struct{})} }

func newHub(rdb redis.UniversalClient, mark func(context.Context) context.Context, ns string, clock clockwork.Clock) *hub {
	return &hub{rdb: rdb, mark: mark, ns: ns, clock: clock, invalidate: ns + ":invalidate",
		listeners: map[*int]func(string){}, topics: map[string]*topic{}}
}

// fetchChannel is the wake-up channel of a stored key.
func (h *hub) fetchChannel(stored string) string { return h.ns + ":fetch:" + stored }

// open registers a Cache; close must follow.
func (h *hub) open() {
	h.mu.Lock()
	h.caches++
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
		h.topics = map[string]*topic{} // their waiters poll on
	}
	h.mu.Unlock()
	if wg != nil {
		wg.Wait()
	}
	return err
}

// connLocked returns the connection, opening it (and starting its dispatch)
// on first use, or nil when no Cache is open. h.mu is held.
func (h *hub) connLocked() *redis.PubSub {
	if h.ps == nil && h.caches > 0 {
		h.ps = h.rdb.Subscribe(h.mark(context.Background()))
		h.wg = new(sync.WaitGroup)
		ps := h.ps
		h.goLocked(func() { h.dispatch(ps) })
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

// subscription is one waiter's interest in a channel.
type subscription struct {
	h       *hub
	channel string
	t       *topic
}

// subscribe registers interest in channel and waits, at most until ctx ends
// or bound passes, for Redis to confirm the subscription. Without the
// confirmation (or without an open Cache) the waiter still works, by
// polling.
func (h *hub) subscribe(ctx context.Context, channel string, bound time.Duration) *subscription {
	h.mu.Lock()
	ps := h.connLocked()
	if ps == nil {
		h.mu.Unlock()
		return &subscription{h: h, channel: channel, t: &topic{ready: make(chan struct{}), wake: newWakeup()}}
	}
	t, ok := h.topics[channel]
	if !ok {
		t = &topic{ready: make(chan struct{}), wake: newWakeup()}
		h.topics[channel] = t
		// Subscribe may wait on the connection's lock while it
		// reconnects: never on the caller's time.
		h.goLocked(func() { _ = ps.Subscribe(h.mark(context.Background()), channel) })
	}
	t.refs++
	h.mu.Unlock()

	timer := h.clock.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-t.ready:
	case <-timer.Chan():
	case <-ctx.Done():
	}
	return &subscription{h: h, channel: channel, t: t}
}

// wait returns the delivery of the next message on the subscription's
// channel. Take it before re-reading the value, so that a write landing
// between the read and the wait is not missed.
func (s *subscription) wait() *wakeup {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.t.wake
}

// close drops the waiter's interest; the last one unsubscribes.
func (s *subscription) close() {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.topics[s.channel] != s.t {
		return
	}
	if s.t.refs--; s.t.refs > 0 {
		return
	}
	delete(h.topics, s.channel)
	if ps := h.ps; ps != nil {
		h.goLocked(func() { _ = ps.Unsubscribe(h.mark(context.Background()), s.channel) })
	}
}

// dispatch delivers confirmations, wake-ups and invalidation notices.
func (h *hub) dispatch(ps *redis.PubSub) {
	for m := range ps.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				h.mu.Lock()
				if t := h.topics[m.Channel]; t != nil {
					t.once.Do(func() { close(t.ready) })
				}
				h.mu.Unlock()
			}
		case *redis.Message:
			if m.Channel == h.invalidate {
				h.notice(m.Payload)
				continue
			}
			h.mu.Lock()
			if t := h.topics[m.Channel]; t != nil {
				t.wake.payload = m.Payload
				close(t.wake.done)
				t.wake = newWakeup()
			}
			h.mu.Unlock()
		}
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
