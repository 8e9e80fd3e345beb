package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/signals"
)

// newTestStore returns a Store on a fresh server, measured on a new
// registry.
func newTestStore(t *testing.T) (*Store, *prometheus.Registry) {
	t.Helper()
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	store, err := newStore(srv.Client(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	store.Lease = 5 * time.Second // generous on a loaded machine
	return store, reg
}

func post(t *testing.T, c *http.Client, url string, into any) {
	t.Helper()
	resp, err := c.Post(url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", url, resp.Status)
	}
	if into != nil {
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Fatal(err)
		}
	}
}

// Concurrent requests mutating one session lose no update: the lease
// serialises them and each write is the next version by CAS. The lock
// metrics report the contention the crowd caused.
func TestConcurrentMutationsOfOneSessionLoseNothing(t *testing.T) {
	store, reg := newTestStore(t)
	ts := httptest.NewServer(store.Handler())
	t.Cleanup(ts.Close)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	var first Session
	post(t, c, ts.URL+"/login?user=u1", &first) // sets the cookie

	const n = 40
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Post(ts.URL+"/cart?item=x", "", nil)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("POST /cart: %s", resp.Status)
			}
		}()
	}
	wg.Wait()

	var sid string
	for _, ck := range jar.Cookies(mustURL(t, ts.URL)) {
		sid = ck.Value
	}
	sess, version, err := store.Load(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Cart) != n || version != n+1 {
		t.Fatalf("cart has %d items at version %d, want %d at %d", len(sess.Cart), version, n, n+1)
	}
	acquired := metrictest.Sum(t, reg, signals.LockAttempts.String(), "result", "acquired")
	if acquired != n+1 {
		t.Errorf("lock_attempts{result=acquired} = %v, want %d (one per request)", acquired, n+1)
	}
	if busy := metrictest.Sum(t, reg, signals.LockAttempts.String(), "result", "busy", "attempt", "first"); busy == 0 {
		t.Errorf("40 concurrent requests on one session reported no first-try contention")
	}
}

// The sliding TTL is rewritten only once enough of the session's life passed.
func TestSlidingTTLOnlyPastThreshold(t *testing.T) {
	store, _ := newTestStore(t)
	ctx := context.Background()
	if _, err := store.Update(ctx, "s1", func(s *Session) { s.Views++ }); err != nil {
		t.Fatal(err)
	}
	rdb := store.rdb
	key := sessionKey("s1")
	// 70% of the life left: a read must not touch the expiry.
	rdb.PExpire(ctx, key, store.Life*7/10)
	if _, _, err := store.Load(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl > store.Life*7/10 {
		t.Fatalf("TTL slid to %v with 70%% of the life left", ttl)
	}
	// 20% left: past the threshold, the read restores the whole life.
	rdb.PExpire(ctx, key, store.Life/5)
	if _, _, err := store.Load(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl < store.Life*9/10 {
		t.Fatalf("TTL %v not slid back to %v past the threshold", ttl, store.Life)
	}
}

// Logging a user out ends every session of theirs, and only theirs.
func TestLogoutUserUnlinksEverySession(t *testing.T) {
	store, reg := newTestStore(t)
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		if _, err := store.Update(ctx, id, func(s *Session) { s.UserID = "u42" }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Update(ctx, "other", func(s *Session) { s.UserID = "u7" }); err != nil {
		t.Fatal(err)
	}
	n, err := store.LogoutUser(ctx, "u42")
	if err != nil || n != 3 {
		t.Fatalf("LogoutUser = %d, %v; want 3", n, err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, v, _ := store.Load(ctx, id); v != 0 {
			t.Errorf("session %s survived logout", id)
		}
	}
	if _, v, _ := store.Load(ctx, "other"); v == 0 {
		t.Error("another user's session was removed")
	}
	// 3 sessions and the user's index.
	if removed := metrictest.Sum(t, reg, signals.InvalidatedKeys.String(), "by", "keys"); removed != 4 {
		t.Errorf("%s = %v, want 4", signals.InvalidatedKeys.String(), removed)
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
