package locks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/locks"
	"github.com/cachewatch/cachewatch/internal/lockholder"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/internal/syncbuf"
	"github.com/cachewatch/cachewatch/keygroup"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// truth is a lock as the test wrote it.
type truth struct {
	service string
	held    time.Duration // before now, by the value's acquisition time
	ttl     time.Duration // 0: none
}

var services = []string{"billing", "search", "reports"}

// seedLocks writes n locks of three services (lockholder values: their
// acquisition i seconds before now), one in 7 without TTL, with a
// pipeline, and returns the truth by key.
func seedLocks(t *testing.T, rdb *redis.Client, n int, now time.Time) map[string]truth {
	ctx := context.Background()
	ids := make([]*lockholder.Identity, len(services))
	for i, s := range services {
		ids[i] = lockholder.NewIdentity(s)
	}
	want := make(map[string]truth, n)
	pipe := rdb.Pipeline()
	for i := range n {
		tok, err := lockholder.NewToken()
		must(t, err)
		tr := truth{service: services[i%3], held: time.Duration(i%600) * time.Second, ttl: time.Hour}
		if i%7 == 0 {
			tr.ttl = 0
		}
		key := fmt.Sprintf("lock:%s:%d", tr.service, i)
		pipe.Set(ctx, key, ids[i%3].Value(tok, now.Add(-tr.held)), tr.ttl)
		want[key] = tr
		if pipe.Len() >= 1000 {
			_, err := pipe.Exec(ctx)
			must(t, err)
		}
	}
	_, err := pipe.Exec(ctx)
	must(t, err)
	// Keys that are not locks: SCAN visits them, the listing leaves them out.
	for i := range 1000 {
		pipe.Set(ctx, fmt.Sprintf("cache:item:%d", i), "v", time.Hour)
	}
	_, err = pipe.Exec(ctx)
	must(t, err)
	return want
}

func newReader(t *testing.T, addr string, clk clockwork.Clock) *locks.Reader {
	groups, err := keygroup.New(keygroup.Options{MinKeys: 1})
	must(t, err)
	r, err := locks.New(locks.Options{Target: exporter.Target{Addrs: []string{addr}}, Groups: groups, Clock: clk})
	must(t, err)
	return r
}

// checkAgainst compares a listing with the truth, lock by lock.
func checkAgainst(t *testing.T, l *locks.Listing, want map[string]truth) {
	t.Helper()
	host, err := os.Hostname()
	must(t, err)
	if len(l.Locks) != len(want) {
		t.Fatalf("%d locks listed, want %d", len(l.Locks), len(want))
	}
	bad := 0
	for i, lk := range l.Locks {
		tr, ok := want[lk.Key]
		wantTTL := tr.ttl.Seconds()
		if tr.ttl == 0 {
			wantTTL = -1
		}
		switch {
		case !ok:
			t.Errorf("%s listed, not written", lk.Key)
		case lk.Format != "cachewatch" || lk.Service != tr.service || lk.Host != host || lk.PID != os.Getpid() ||
			lk.Instance != lockholder.Instance() || lk.HeldAtLeast || lk.HeldFor != tr.held.Seconds() ||
			lk.Group != "lock:"+tr.service+":*":
			t.Errorf("%s: %+v, want %+v", lk.Key, lk, tr)
		case lk.TTL > wantTTL || wantTTL > 0 && lk.TTL < wantTTL-60:
			t.Errorf("%s: TTL %v, want about %v", lk.Key, lk.TTL, wantTTL)
		case i > 0 && l.Locks[i-1].HeldFor < lk.HeldFor:
			t.Errorf("%s listed after a lock held for less", lk.Key)
		default:
			continue
		}
		if bad++; bad > 10 {
			t.FailNow()
		}
	}
}

// The listing agrees with what was written, lock by lock: 10,000 locks
// of three services, found among other keys.
func TestReadAgreesWithTruth(t *testing.T) {
	srv := redistest.Start(t)
	now := time.UnixMilli(time.Now().UnixMilli())
	want := seedLocks(t, srv.Client(t), 10_000, now)
	r := newReader(t, srv.Addr, clockwork.NewFakeClockAt(now))
	start := time.Now()
	l, err := r.Read(context.Background())
	took := time.Since(start)
	must(t, err)
	t.Logf("10,000 locks among 11,000 keys listed in %s", took)
	checkAgainst(t, l, want)
}

// A bare token names nobody; held for is then a lower bound from when the
// Reader first saw it, and a new token starts it again. Watch prints the
// table once with Once.
func TestOpaqueHeldAtLeast(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	must(t, rdb.Set(ctx, "lock:job:1", "bare-token", 0).Err())
	clk := clockwork.NewFakeClockAt(time.Now())
	r := newReader(t, srv.Addr, clk)
	_, err := r.Read(ctx)
	must(t, err)
	clk.Advance(40 * time.Second)
	l, err := r.Read(ctx)
	must(t, err)
	if lk := l.Locks[0]; lk.Format != "opaque" || !lk.HeldAtLeast || lk.HeldFor != 40 || lk.TTL != -1 || lk.Service != "" {
		t.Fatalf("%+v, want opaque held at least 40s, no TTL", lk)
	}
	must(t, rdb.Set(ctx, "lock:job:1", "another-token", time.Minute).Err())
	clk.Advance(time.Second)
	var out bytes.Buffer
	must(t, r.Watch(ctx, &out, locks.WatchOptions{Once: true, JSON: true}))
	var got locks.Listing
	must(t, json.Unmarshal(out.Bytes(), &got))
	if lk := got.Locks[0]; lk.HeldFor != 0 || lk.TTL <= 0 {
		t.Fatalf("after a new token: %+v, want held for 0 with a TTL", lk)
	}
	out.Reset()
	must(t, r.Watch(ctx, &out, locks.WatchOptions{Once: true}))
	if !strings.Contains(out.String(), "lock:job:1") || !strings.Contains(out.String(), "opaque") || strings.Contains(out.String(), "\x1b[") {
		t.Fatalf("table:\n%s", out.String())
	}
}

// Watch refreshes until its context ends, clearing the screen before each
// listing when asked (a terminal).
func TestWatchRefreshes(t *testing.T) {
	srv := redistest.Start(t)
	must(t, srv.Client(t).Set(context.Background(), "lock:job:1", "bare-token", 0).Err())
	clk := clockwork.NewFakeClock()
	r := newReader(t, srv.Addr, clk)
	ctx, cancel := context.WithCancel(context.Background())
	var out syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- r.Watch(ctx, &out, locks.WatchOptions{Refresh: time.Second, Clear: true}) }()
	for range 2 {
		must(t, clk.BlockUntilContext(ctx, 1))
		clk.Advance(time.Second)
	}
	must(t, clk.BlockUntilContext(ctx, 1))
	cancel()
	must(t, <-done)
	if n := strings.Count(out.String(), "\x1b[H\x1b[2J"); n != 3 {
		t.Fatalf("%d screens, want 3:\n%q", n, out.String())
	}
	if !strings.Contains(out.String(), "≥2s") {
		t.Fatalf("the third listing does not show the lock held at least 2s:\n%s", out.String())
	}
}
