package instrument

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

func staleWritesRefused(ca *Cache[string], group string) float64 {
	return testutil.ToFloat64(ca.c.m.staleWritesRefused.WithLabelValues(group))
}

// slowSource is a loader that reports when it has read the source (closes
// started) and returns v once release is closed, ignoring its context.
type slowSource struct {
	v                string
	started, release chan struct{}
}

func newSlowSource(v string) *slowSource {
	return &slowSource{v: v, started: make(chan struct{}), release: make(chan struct{})}
}

func (s *slowSource) load(context.Context) (string, error) {
	close(s.started)
	<-s.release
	return s.v, nil
}

// fetchInBackground runs ca.Fetch(key) and delivers its value and error.
func fetchInBackground(ca *Cache[string], key string, load func(context.Context) (string, error)) <-chan [2]any {
	done := make(chan [2]any, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		v, err := ca.Fetch(ctx, key, load)
		done <- [2]any{v, err}
	}()
	return done
}

func waitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// A load that read the source before an invalidation (in this process or
// another) must not be stored as fresh after it: its caller gets what it
// loaded, the write is refused and counted, and the next Fetch loads again.
func TestFetchLoadStartedBeforeInvalidateIsNotStored(t *testing.T) {
	srv := redistest.Start(t)
	for _, where := range []string{"same process", "other process", "other process, by pattern"} {
		t.Run(where, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			clk := newFetchClock()
			a := newFetchCache(t, srv.Client(t), reg, clk, CacheOptions{})
			invalidator := a
			if where != "same process" {
				invalidator = newFetchCache(t, srv.Client(t), reg, clk, CacheOptions{})
			}
			ctx := context.Background()
			key := "product:" + map[string]string{"same process": "1", "other process": "2", "other process, by pattern": "3"}[where]
			src := newSlowSource("v1")
			done := fetchInBackground(a, key, src.load)
			waitClosed(t, "the loader to read the source", src.started)
			// The source changes to v2 and the writer invalidates.
			invalidate := func() (int64, error) { return invalidator.Invalidate(ctx, key) }
			if where == "other process, by pattern" {
				invalidate = func() (int64, error) { return invalidator.c.InvalidateMatch(ctx, "product:3*") }
			}
			if _, err := invalidate(); err != nil {
				t.Fatal(err)
			}
			close(src.release)
			got := <-done
			if got[0] != "v1" || got[1] != nil {
				t.Fatalf("Fetch during invalidation = %v, %v; want its own load v1, nil", got[0], got[1])
			}
			calls := 0
			v, err := a.Fetch(ctx, key, func(context.Context) (string, error) { calls++; return "v2", nil })
			if err != nil || v != "v2" || calls != 1 {
				t.Fatalf("Fetch after invalidation = %q, %v with %d loader calls; want v2 from one call (v1 was loaded before the invalidation)", v, err, calls)
			}
			g := a.c.group(key)
			if n := staleWritesRefused(a, g); n != 1 {
				t.Fatalf("stale_writes_refused_total = %v, want 1 (the v1 write refused, the v2 one stored)", n)
			}
		})
	}
}

// A slow loader whose claim ran out must not overwrite the value that the
// next claim holder (another process) loaded and stored meanwhile.
func TestFetchSlowLoaderCannotOverwriteNextClaimHolder(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	reg := prometheus.NewRegistry()
	clk := newFetchClock()
	a := newFetchCache(t, srv.Client(t), reg, clk, CacheOptions{})
	b := newFetchCache(t, srv.Client(t), reg, clk, CacheOptions{})
	ctx := context.Background()
	const key = "product:7"
	src := newSlowSource("v1")
	done := fetchInBackground(a, key, src.load)
	waitClosed(t, "the slow loader to start", src.started)

	// The claim runs out in Redis while the loader still works (Redis
	// decides expiry; the claim is cut short instead of waiting RefreshClaimTTL).
	claim := keysFor(key).claim
	if err := rdb.PExpire(ctx, claim, time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the claim to expire", func() bool { return rdb.Exists(ctx, claim).Val() == 0 })
	if v, err := b.Fetch(ctx, key, func(context.Context) (string, error) { return "v2", nil }); err != nil || v != "v2" {
		t.Fatalf("next claim holder's Fetch = %q, %v; want v2", v, err)
	}
	close(src.release)
	if got := <-done; got[0] != "v1" || got[1] != nil {
		t.Fatalf("slow loader's Fetch = %v, %v; want its own v1", got[0], got[1])
	}
	v, err := a.Fetch(ctx, key, func(context.Context) (string, error) {
		t.Error("loader called: the newer value should be fresh")
		return "", nil
	})
	if err != nil || v != "v2" {
		t.Fatalf("Fetch after both loads = %q, %v; want the newer v2", v, err)
	}
	g := a.c.group(key)
	if n := staleWritesRefused(a, g); n != 1 {
		t.Fatalf("stale_writes_refused_total = %v, want 1", n)
	}
}

// A write that fails (here: a value larger than the server's
// proto-max-bulk-len, refused by Redis) stores nothing, so its claim is given
// back: other processes need not wait RefreshClaimTTL (a minute here) for a value
// that will not come. The caller is still served what it loaded.
func TestFailedWriteGivesTheClaimBack(t *testing.T) {
	srv := redistest.Start(t, "--proto-max-bulk-len", "1mb")
	reg := prometheus.NewRegistry()
	ca := newFetchCache(t, srv.Client(t), reg, newFetchClock(), CacheOptions{RefreshClaimTTL: time.Minute, RedisTimeout: 2 * time.Second})
	big := strings.Repeat("x", 2<<20)
	ctx := context.Background()
	key := "report:{big}"
	v, err := ca.Fetch(ctx, key, func(context.Context) (string, error) { return big, nil })
	if err != nil || v != big {
		t.Fatalf("Fetch: %d bytes, %v; want the loaded value", len(v), err)
	}
	admin := srv.Client(t)
	k := keysFor(key)
	if n := admin.Exists(ctx, k.value).Val(); n != 0 {
		t.Fatalf("the oversized value was stored (%d)", n)
	}
	g := ca.c.group(key)
	if got := loaderCalls(ca, g, "success"); got != 1 {
		t.Fatalf("loader_calls_total{success} = %v, want 1", got)
	}
	poll.Until(t, "the failed write's claim to be given back", func() bool { return admin.Exists(ctx, k.claim).Val() == 0 })
}
