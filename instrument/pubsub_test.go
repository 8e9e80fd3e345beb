package instrument

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// pubsubConnections counts the connections in pub/sub mode on Redis.
func pubsubConnections(t *testing.T, admin *redis.Client) int {
	t.Helper()
	list, err := admin.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		for _, field := range strings.Fields(line) {
			if flags, ok := strings.CutPrefix(field, "flags="); ok && strings.Contains(flags, "P") {
				n++
			}
		}
	}
	return n
}

// One Client holds one pub/sub connection for all its Caches: the
// invalidation notices and the wake-ups of callers waiting for another
// process's load share it.
func TestOnePubSubConnectionPerClient(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	c, err := New(srv.Client(t), Options{Registerer: prometheus.NewRegistry(), Namespace: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	var caches []*Cache[string]
	for range 3 {
		caches = append(caches, mustCache[string](t, c, CacheOptions{PollInterval: time.Hour, Name: fmt.Sprint("cache", len(caches))}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Another process holds each key's claim: every Cache's caller waits.
	var mu sync.Mutex
	waiting := map[string]bool{}
	testHookWaiting = func(key string) { mu.Lock(); waiting[key] = true; mu.Unlock() }
	t.Cleanup(func() { testHookWaiting = nil })
	done := make(chan error, len(caches))
	for i, ca := range caches {
		key := "item:" + string(rune('a'+i))
		if err := admin.Set(ctx, keysFor(key).claim, "another process", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		go func() {
			_, err := ca.Fetch(ctx, key, func(context.Context) (string, error) { return "v", nil })
			done <- err
		}()
	}
	poll.Until(t, "a caller waiting in each Cache", func() bool { mu.Lock(); defer mu.Unlock(); return len(waiting) == 3 })
	// Each waiting read registered the process's one wake channel with its key.
	wake := c.hub.wake
	if !strings.HasPrefix(wake, "shop:wake:") {
		t.Fatalf("wake channel %q is not under the namespace", wake)
	}
	for i := range caches {
		key := "item:" + string(rune('a'+i))
		if w := wakeQueue(ctx, admin, key); len(w) != 1 || w[0] != wake {
			t.Fatalf("waiters of %s = %q, want [%s]", key, w, wake)
		}
	}
	poll.Until(t, "the wake and invalidation subscriptions", func() bool {
		n := admin.PubSubNumSub(ctx, wake, "shop:invalidate").Val()
		return n[wake] == 1 && n["shop:invalidate"] == 1
	})
	if n := pubsubConnections(t, admin); n != 1 {
		t.Fatalf("%d pub/sub connections for one Client with 3 Caches (waiters and copies), want 1", n)
	}
	// The other process's loads fail and give their claims back, waking
	// the waiters bare: every waiter reads again, loads and is served.
	for i := range caches {
		giveBackAndWake(t, admin, wake, "item:"+string(rune('a'+i)))
	}
	for range caches {
		if err := <-done; err != nil {
			t.Fatalf("waiter: %v", err)
		}
	}
}

// giveBackAndWake does what another process's failed load of key does:
// its claim is released, and a bare wake-up is published on wake.
func giveBackAndWake(t *testing.T, admin *redis.Client, wake, key string) {
	t.Helper()
	ctx := context.Background()
	stored := keysFor(key)
	if err := admin.Del(ctx, stored.claim).Err(); err != nil {
		t.Fatal(err)
	}
	msg := fmt.Sprintf("%d:%s1", len(stored.value), stored.value)
	if err := admin.Publish(ctx, wake, msg).Err(); err != nil {
		t.Fatal(err)
	}
}

// Channels live under the Client's namespace: a service's pattern
// invalidation drops its own processes' copies, not those of another
// service sharing the Redis.
func TestInvalidationNoticesStayInTheirNamespace(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	newCache := func(ns string) *Cache[string] {
		c, err := New(srv.Client(t), Options{Registerer: prometheus.NewRegistry(), Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		return mustCache[string](t, c, CacheOptions{})
	}
	orders, users := newCache("orders"), newCache("users")
	admin := srv.Client(t)
	poll.Until(t, "both services' invalidation subscriptions", func() bool {
		n := admin.PubSubNumSub(ctx, "orders:invalidate", "users:invalidate").Val()
		return n["orders:invalidate"] == 1 && n["users:invalidate"] == 1
	})
	load := func(context.Context) (string, error) { return "v", nil }
	for _, f := range []struct {
		ca  *Cache[string]
		key string
	}{{orders, "order:1"}, {users, "user:1"}, {users, "user:2"}} {
		if _, err := f.ca.Fetch(ctx, f.key, load); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := orders.c.InvalidateMatch(ctx, "order:*"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the orders service to drop its copy", func() bool { return orders.local.get("order:1") == nil })
	// A later notice of the users service marks when its earlier ones
	// would have arrived (one connection delivers in publish order).
	if _, err := users.c.Invalidate(ctx, "user:2"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the users service's own notice", func() bool { return users.local.get("user:2") == nil })
	if users.local.get("user:1") == nil {
		t.Fatal("the orders service's pattern invalidation dropped the users service's copy of user:1")
	}
}
