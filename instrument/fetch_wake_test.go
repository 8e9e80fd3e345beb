package instrument

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/luascript"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// readHook calls onRead for each read script a client sends on its own (a
// pipeline goes through ProcessPipelineHook, which it passes by).
type readHook struct{ onRead func() }

func (h *readHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *readHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *readHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isFetchRead(cmd) {
			h.onRead()
		}
		return next(ctx, cmd)
	}
}

// readCounter counts the read scripts a client sends.
type readCounter struct {
	readHook
	n atomic.Int64
}

func newReadCounter() *readCounter {
	c := &readCounter{}
	c.onRead = func() { c.n.Add(1) }
	return c
}

// A process woken by another process's write takes the value from the
// wake-up: its waiting caller sends one read (the miss, which registers
// the process as a waiter), not a second after the wake-up. A value too
// large to travel in the message is read again.
func TestWokenWaiterTakesTheValueFromTheWakeUp(t *testing.T) {
	for _, tc := range []struct {
		name      string
		value     string
		wantReads int64
	}{
		{"small value carried", "v1:with:colons", 1},
		{"large value read again", strings.Repeat("x", 70_000), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			loader := unpolledProcess(t, srv, nil)
			reads := newReadCounter()
			waiter := unpolledProcess(t, srv, reads)
			// A read registers the process's wake channel once Redis has
			// confirmed its subscription (before that, a waiter reads
			// again once it is).
			poll.Until(t, "the waiting process's wake channel", waiter.c.hub.subscribed.Load)
			const key = "item:7"
			waiting := waitingOn(t, key)

			release := make(chan struct{})
			loaded := make(chan error, 1)
			go func() {
				_, err := loader.Fetch(ctx, key, func(context.Context) (string, error) { <-release; return tc.value, nil })
				loaded <- err
			}()
			poll.Until(t, "the loader to hold the claim", func() bool {
				return srv.Client(t).Exists(ctx, keysFor(key).claim).Val() == 1
			})
			got := make(chan string, 1)
			go func() {
				v, err := waiter.Fetch(ctx, key, func(context.Context) (string, error) {
					t.Error("the waiting process called its loader")
					return "", nil
				})
				if err != nil {
					t.Error(err)
				}
				got <- v
			}()
			<-waiting
			close(release)
			if err := <-loaded; err != nil {
				t.Fatal(err)
			}
			if v := <-got; v != tc.value {
				t.Fatalf("waiter got %.20q…, want %.20q…", v, tc.value)
			}
			if n := reads.n.Load(); n != tc.wantReads {
				t.Fatalf("waiting process sent %d reads, want %d", n, tc.wantReads)
			}
			assertLoadedOnceForBoth(t, loader, waiter, key)
		})
	}
}

// unpolledProcess returns a process's Cache on srv whose waiters never poll
// (only a wake-up ends their wait), its reads counted by reads if given.
func unpolledProcess(t *testing.T, srv *redistest.Server, reads *readCounter) *Cache[string] {
	t.Helper()
	rdb := srv.Client(t)
	if reads != nil {
		rdb.AddHook(reads)
	}
	c, err := New(rdb, Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	// Generous Redis time too: nothing but the wake-up ends the wait.
	return mustCache[string](t, c, CacheOptions{PollInterval: time.Hour, RedisTimeout: 30 * time.Second})
}

// A write publishes only to the processes that wait for it, each on its
// own wake channel (registered by the read that found the load): a write
// nobody waited for publishes nothing, and a process that does not wait
// for the key gets nothing.
func TestWakeUpsGoOnlyToWaitingProcesses(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	newProcess := func() *Cache[string] { return newWakeProcess(t, srv.Client(t), time.Hour, 30*time.Second) }
	loader, waiter, bystander := newProcess(), newProcess(), newProcess()
	waitSubscribed(t, loader, waiter, bystander)
	observer := srv.Client(t).PSubscribe(ctx, DefaultNamespace+":*")
	defer observer.Close()
	if _, err := observer.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	msgs := observer.Channel()

	if _, err := loader.Fetch(ctx, "item:quiet", func(context.Context) (string, error) { return "q", nil }); err != nil {
		t.Fatal(err)
	}
	const key = "item:7"
	stored := keysFor(key)
	finish := waitBehindLoad(ctx, t, admin, loader, key, waiter)
	if w := wakeQueue(ctx, admin, key); len(w) != 1 || w[0] != waiter.c.hub.wake {
		t.Fatalf("waiters of %s = %q, want only the waiting process's channel %s", key, w, waiter.c.hub.wake)
	}
	finish()
	// One connection delivers in publish order: the first message must be
	// the waiter's wake-up (the quiet write published nothing), and the
	// next the marker published after it (nobody else was woken).
	want := fmt.Sprintf("%d:%s=", len(stored.value), stored.value)
	for _, w := range []struct{ channel, prefix string }{{waiter.c.hub.wake, want}, {DefaultNamespace + ":marker", "end"}} {
		if w.prefix == "end" {
			if err := admin.Publish(ctx, w.channel, "end").Err(); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case m := <-msgs:
			if m.Channel != w.channel || !strings.HasPrefix(m.Payload, w.prefix) {
				t.Fatalf("message on %s: %.40q…, want one on %s starting %q", m.Channel, m.Payload, w.channel, w.prefix)
			}
		case <-ctx.Done():
			t.Fatalf("no message on %s", w.channel)
		}
	}
	if admin.Exists(ctx, stored.waiters).Val() != 0 {
		t.Fatal("the write left its waiters registered")
	}
}

// The processes waiting for a load are woken in the order they arrived,
// the longest waiting first: the write publishes to the last arrival
// first, because Redis writes the sockets of the clients a script gave
// messages to in the reverse order (see luascript's wakeWaiters). A
// process that reads again while it waits keeps its place.
func TestWakeUpsGoInTheOrderProcessesArrived(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	loader := newWakeProcess(t, srv.Client(t), time.Hour, 30*time.Second)
	waiters := make([]*Cache[string], 3)
	for i := range waiters {
		waiters[i] = newWakeProcess(t, srv.Client(t), time.Hour, 30*time.Second)
	}
	waitSubscribed(t, append([]*Cache[string]{loader}, waiters...)...)
	observer := srv.Client(t).PSubscribe(ctx, DefaultNamespace+":wake:*")
	defer observer.Close()
	if _, err := observer.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	msgs := observer.Channel()

	const key = "item:queue"
	stored := keysFor(key)
	finish := waitBehindLoad(ctx, t, admin, loader, key, waiters...)
	// The first waiter reads again (as after a lost wake-up): its place
	// stays first.
	res, err := luascript.FetchRead.Run(ctx, admin, []string{stored.value, stored.claim, stored.waiters},
		time.Now().UnixMilli(), 0, 30_000, "another-token", waiters[0].c.hub.wake).Result()
	if err != nil || res.([]any)[1].(int64) != 0 {
		t.Fatalf("a waiter's second read: %v, %v; want the claim refused", res, err)
	}
	inQueue := wakeQueue(ctx, admin, key)
	finish()
	want := []string{waiters[0].c.hub.wake, waiters[1].c.hub.wake, waiters[2].c.hub.wake}
	if !slices.Equal(inQueue, want) {
		t.Fatalf("queued %q, want the waiters' channels in the order they arrived %q", inQueue, want)
	}
	// One connection receives in publish order: the last arrival first.
	for i := len(want) - 1; i >= 0; i-- {
		select {
		case m := <-msgs:
			if m.Channel != want[i] {
				t.Fatalf("wake-up %d went to %s, want %s (waiter %d)", len(want)-i, m.Channel, want[i], i)
			}
		case <-ctx.Done():
			t.Fatalf("no wake-up for waiter %d", i)
		}
	}
	for i, w := range waiters {
		if n := lookups(w, w.c.group(key), resultCoalesced); n != 1 {
			t.Fatalf("waiter %d counted %v coalesced lookups, want 1", i, n)
		}
	}
}

// A read made before Redis confirmed the process's wake channel (a Cache
// just created) cannot register it: the waiter waits for the confirmation
// and reads again, registered, and is woken by the write like any other.
func TestWaiterReadsAgainOnceItsWakeChannelIsConfirmed(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reads := newReadCounter()
	counted := srv.Client(t)
	counted.AddHook(reads)
	loader := newWakeProcess(t, srv.Client(t), time.Hour, 30*time.Second)
	waiter := newWakeProcess(t, counted, time.Hour, 30*time.Second)
	poll.Until(t, "the waiting process's wake channel", waiter.c.hub.subscribed.Load)
	waiter.c.hub.subscribed.Store(false) // as if the confirmation were still on its way

	const key = "item:8"
	finish := waitBehindLoad(ctx, t, admin, loader, key, waiter)
	if n := reads.n.Load(); n != 2 {
		t.Fatalf("waiting process sent %d reads before waiting, want 2 (unregistered, then registered)", n)
	}
	if w := wakeQueue(ctx, admin, key); len(w) != 1 || w[0] != waiter.c.hub.wake {
		t.Fatalf("waiters of %s = %q, want [%s]", key, w, waiter.c.hub.wake)
	}
	finish()
	if n := lookups(waiter, waiter.c.group(key), resultCoalesced); n != 1 {
		t.Fatalf("coalesced lookups = %v in the waiting process, want 1", n)
	}
}

// waitBehindLoad has loader start loading key (held) and, once it holds the
// claim, each waiter fetch key (their own loader must not run), one after
// the other: each starts once the one before waits, so they queue in that
// order. It returns when the last waits. finish releases the load and
// checks that every caller got its value, "v".
func waitBehindLoad(ctx context.Context, t *testing.T, admin *redis.Client, loader *Cache[string], key string, waiters ...*Cache[string]) (finish func()) {
	t.Helper()
	waiting := waitingOn(t, key)
	release := make(chan struct{})
	loaded := make(chan error, 1)
	go func() {
		_, err := loader.Fetch(ctx, key, func(context.Context) (string, error) { <-release; return "v", nil })
		loaded <- err
	}()
	poll.Until(t, "the loader to hold the claim", func() bool { return admin.Exists(ctx, keysFor(key).claim).Val() == 1 })
	got := make(chan string, len(waiters))
	for _, waiter := range waiters {
		go func() {
			v, err := waiter.Fetch(ctx, key, func(context.Context) (string, error) { return "", errors.New("waiter loaded") })
			if err != nil {
				t.Error(err)
			}
			got <- v
		}()
		<-waiting
	}
	return func() {
		t.Helper()
		close(release)
		if err := <-loaded; err != nil {
			t.Fatal(err)
		}
		for range waiters {
			if v := <-got; v != "v" {
				t.Fatalf("a waiter got %q, want v", v)
			}
		}
	}
}

// waitSubscribed waits until Redis has confirmed every process's wake
// channel, so that their reads register it.
func waitSubscribed(t *testing.T, processes ...*Cache[string]) {
	t.Helper()
	poll.Until(t, "every process's wake channel", func() bool {
		for _, p := range processes {
			if !p.c.hub.subscribed.Load() {
				return false
			}
		}
		return true
	})
}

// wakeQueue returns the wake channels queued for key's load, in queue order.
func wakeQueue(ctx context.Context, admin *redis.Client, key string) []string {
	return admin.ZRange(ctx, keysFor(key).waiters, 0, -1).Val()
}

// A service whose Redis user may use no pub/sub channel (ACL
// "resetchannels") still coalesces across processes: its wake channel is
// never confirmed, so reads register nothing, the loader's write publishes
// nothing (a PUBLISH would be refused and fail the write) and the waiter is
// served by polling.
func TestWaitersPollWithoutChannelPermission(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := admin.Do(ctx, "ACL", "SETUSER", "nochannels", "on", ">nochannels-pw", "~*", "+@all", "resetchannels").Err(); err != nil {
		t.Fatal(err)
	}
	newProcess := func() *Cache[string] {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "nochannels", Password: "nochannels-pw"})
		t.Cleanup(func() { _ = rdb.Close() })
		return newWakeProcess(t, rdb, 20*time.Millisecond, 100*time.Millisecond)
	}
	loader, waiter := newProcess(), newProcess()
	const key = "item:9"
	finish := waitBehindLoad(ctx, t, admin, loader, key, waiter)
	if waiter.c.hub.subscribed.Load() {
		t.Fatal("the wake channel was confirmed for a user without channel permissions")
	}
	if n := admin.Exists(ctx, keysFor(key).waiters).Val(); n != 0 {
		t.Fatal("a read registered a wake channel its process could not subscribe to")
	}
	finish()
	assertLoadedOnceForBoth(t, loader, waiter, key)
}

// assertLoadedOnceForBoth checks, from the metrics, that key was loaded
// once across the two processes and that the waiting one counted its
// lookup as coalesced.
func assertLoadedOnceForBoth(t *testing.T, loader, waiter *Cache[string], key string) {
	t.Helper()
	group := waiter.c.group(key)
	if n := loaderCalls(waiter, group, "success") + loaderCalls(loader, group, "success"); n != 1 {
		t.Fatalf("%v loader calls across both processes, want 1", n)
	}
	if n := lookups(waiter, group, resultCoalesced); n != 1 {
		t.Fatalf("coalesced lookups = %v in the waiting process, want 1", n)
	}
}

// newWakeProcess is one simulated process: its own Client over rdb and a
// Cache whose waiters poll every poll.
func newWakeProcess(t testing.TB, rdb *redis.Client, poll, redisTimeout time.Duration) *Cache[string] {
	t.Helper()
	c, err := New(rdb, Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return mustCache[string](t, c, CacheOptions{PollInterval: poll, RedisTimeout: redisTimeout})
}

// A process's wake channel survives a Redis restart: its pub/sub
// connection is made again and resubscribed, and a waiter that never polls
// is woken by another process's write.
func TestWakeChannelSurvivesRedisRestart(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	loader := newWakeProcess(t, srv.Client(t), time.Hour, 30*time.Second)
	waiter := newWakeProcess(t, srv.Client(t), time.Hour, 30*time.Second)
	admin := srv.Client(t)
	subscribers := func() int64 {
		n, err := admin.PubSubNumSub(ctx, waiter.c.hub.wake).Result()
		if err != nil {
			return 0 // restarting
		}
		return n[waiter.c.hub.wake]
	}
	poll.Until(t, "the waiting process's wake channel", func() bool { return subscribers() == 1 })
	srv.Restart()
	poll.Until(t, "the wake channel subscribed again after the restart", func() bool { return subscribers() == 1 })

	const key = "item:9"
	waitBehindLoad(ctx, t, admin, loader, key, waiter)() // the waiter never polls: only the wake-up ends its wait
	assertLoadedOnceForBoth(t, loader, waiter, key)
}
