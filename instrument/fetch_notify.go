package instrument

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier wakes callers waiting for another process's load. One pub/sub
// connection per Cache carries a subscription per key being waited on (the
// write script publishes on it); subscriptions are reference-counted and
// dropped when the last waiter in this process leaves. A lost message (a
// reconnect, a failover) only costs the waiter a poll interval.
type notifier struct {
	rdb  redis.UniversalClient
	mark func(context.Context) context.Context // origin marker for the hook

	mu     sync.Mutex
	ps     *redis.PubSub
	topics map[string]*topic
	closed bool
	wg     sync.WaitGroup // the goroutines below, awaited by close
}

type topic struct {
	refs  int
	ready chan struct{} // closed when Redis confirms the subscription
	once  sync.Once
	wake  chan struct{} // closed and replaced on every message
}

func newNotifier(rdb redis.UniversalClient, mark func(context.Context) context.Context) *notifier {
	return &notifier{rdb: rdb, mark: mark, topics: map[string]*topic{}}
}

// connLocked returns the pub/sub connection, opening it (and starting its
// dispatch) on first use. n.mu must be held.
func (n *notifier) connLocked(ctx context.Context) *redis.PubSub {
	if n.ps == nil {
		n.ps = n.rdb.Subscribe(n.mark(context.WithoutCancel(ctx)))
		n.goLocked(func() { n.dispatch(n.ps) })
	}
	return n.ps
}

// subscription is one waiter's interest in a channel.
type subscription struct {
	n       *notifier
	channel string
	t       *topic
}

// subscribe registers interest in channel and waits, at most until ctx ends
// or bound passes, for Redis to confirm the subscription. Without the
// confirmation the waiter still works, by polling.
func (n *notifier) subscribe(ctx context.Context, channel string, bound time.Duration) *subscription {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return &subscription{n: n, channel: channel, t: &topic{ready: make(chan struct{}), wake: make(chan struct{})}}
	}
	t, ok := n.topics[channel]
	if !ok {
		t = &topic{ready: make(chan struct{}), wake: make(chan struct{})}
		n.topics[channel] = t
	}
	t.refs++
	ps := n.connLocked(ctx)
	if !ok {
		// Subscribe may wait on the pub/sub connection's lock while it
		// reconnects: never on the caller's time.
		n.goLocked(func() { _ = ps.Subscribe(n.mark(context.WithoutCancel(ctx)), channel) })
	}
	n.mu.Unlock()

	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-t.ready:
	case <-timer.C:
	case <-ctx.Done():
	}
	return &subscription{n: n, channel: channel, t: t}
}

// wait returns a channel closed by the next message on the subscription's
// channel. Take it before re-reading the value, so that a write landing
// between the read and the wait is not missed.
func (s *subscription) wait() <-chan struct{} {
	s.n.mu.Lock()
	defer s.n.mu.Unlock()
	return s.t.wake
}

// close drops the waiter's interest; the last one unsubscribes.
func (s *subscription) close() {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.topics[s.channel] != s.t {
		return
	}
	if s.t.refs--; s.t.refs > 0 {
		return
	}
	delete(n.topics, s.channel)
	if ps := n.ps; ps != nil && !n.closed {
		n.goLocked(func() { _ = ps.Unsubscribe(n.mark(context.Background()), s.channel) })
	}
}

// dispatch delivers confirmations and messages to the topics.
func (n *notifier) dispatch(ps *redis.PubSub) {
	for m := range ps.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				n.mu.Lock()
				if t := n.topics[m.Channel]; t != nil {
					t.once.Do(func() { close(t.ready) })
				}
				n.mu.Unlock()
			}
		case *redis.Message:
			n.mu.Lock()
			if t := n.topics[m.Channel]; t != nil {
				close(t.wake)
				t.wake = make(chan struct{})
			}
			n.mu.Unlock()
		}
	}
}

// goLocked runs fn in a goroutine that close waits for. n.mu is held (so
// close, which sets closed under it, cannot be waiting yet).
func (n *notifier) goLocked(fn func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		fn()
	}()
}

// close ends the pub/sub connection and waits for the notifier's
// goroutines, which end with it.
func (n *notifier) close() error {
	n.mu.Lock()
	n.closed = true
	var err error
	if n.ps != nil {
		err = n.ps.Close()
	}
	n.mu.Unlock()
	n.wg.Wait()
	return err
}
