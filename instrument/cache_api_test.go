package instrument

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Set stores without a loader and voids a load in flight; Get reads
// without a loader, claim or refresh.
func TestCacheSetAndGet(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	clk := newFetchClock()
	ca := newFetchCache(t, srv.Client(t), reg, clk, CacheOptions{FreshTTL: time.Minute, HardTTL: time.Hour, Jitter: -1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "price:9"
	g := ca.c.group(key)
	if _, found, err := ca.Get(ctx, key); found || err != nil {
		t.Fatalf("Get before any write: found=%v err=%v", found, err)
	}
	src := newSlowSource("from-source-before-the-write")
	done := fetchInBackground(ca, key, src.load)
	waitClosed(t, "the load", src.started)
	if err := ca.Set(ctx, key, "set-by-writer"); err != nil {
		t.Fatal(err)
	}
	close(src.release)
	<-done
	written(ca, key)
	if n := staleWritesRefused(ca, g); n != 1 {
		t.Fatalf("stale_writes_refused_total = %v, want 1 (the load in flight read before Set)", n)
	}
	v, found, err := ca.Get(ctx, key)
	if err != nil || !found || v != "set-by-writer" {
		t.Fatalf("Get after Set = %q, %v, %v", v, found, err)
	}
	clk.add(2 * time.Minute)
	if v, found, _ := ca.Get(ctx, key); !found || v != "set-by-writer" {
		t.Fatalf("Get of a stale value = %q, %v; want it served", v, found)
	}
	if claim := srv.Client(t).Exists(ctx, keysFor(key).claim).Val(); claim != 0 {
		t.Fatal("Get took a refresh claim")
	}
	if hits, stale, misses := lookups(ca, g, resultHit), lookups(ca, g, resultStale), lookups(ca, g, resultMiss); hits < 1 || stale < 1 || misses < 1 {
		t.Fatalf("lookups hit=%v stale=%v miss=%v; want each counted", hits, stale, misses)
	}
	clk.add(time.Hour)
	if _, found, _ := ca.Get(ctx, key); found {
		t.Fatal("Get served a value past its hard TTL")
	}
}

// pipelineCounter counts round trips: single commands and pipelines.
type pipelineCounter struct{ trips atomic.Int64 }

func (p *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { p.trips.Add(1); return next(ctx, cmd) }
}
func (p *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { p.trips.Add(1); return next(ctx, cmds) }
}

// FetchMany reads every key in one round trip and loads the missing ones
// in one loader call.
func TestCacheFetchMany(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	counter := &pipelineCounter{}
	rdb.AddHook(counter)
	ca := newFetchCache(t, rdb, prometheus.NewRegistry(), newFetchClock(), CacheOptions{LocalCopies: -1})
	// The Cache opens its pub/sub connection in the background, and the
	// handshake of a new connection (HELLO, CLIENT SETINFO) goes through the
	// client's hooks: 3 more round trips, counted whenever that goroutine
	// gets to run. On a busy machine it ran inside the counted window
	// ("2 round trips to read 4 keys"), so wait for it first.
	poll.Until(t, "the wake channel's subscription", ca.c.hub.subscribed.Load)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := ca.Fetch(ctx, "item:1", func(context.Context) (string, error) { return "one", nil }); err != nil {
		t.Fatal(err)
	}
	var calls [][]string
	var tripsAtLoad int64
	load := func(_ context.Context, keys []string) (map[string]string, error) {
		calls = append(calls, slices.Clone(keys))
		tripsAtLoad = counter.trips.Load()
		out := map[string]string{}
		for _, k := range keys {
			if k != "item:absent" {
				out[k] = "loaded-" + k
			}
		}
		return out, nil
	}
	// Warm the script cache so the round trips counted are the steady state.
	if _, err := ca.FetchMany(ctx, []string{"item:1"}, load); err != nil {
		t.Fatal(err)
	}
	before := counter.trips.Load()
	got, err := ca.FetchMany(ctx, []string{"item:1", "item:2", "item:3", "item:absent"}, load)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"item:1": "one", "item:2": "loaded-item:2", "item:3": "loaded-item:3"}
	if len(got) != len(want) || got["item:1"] != want["item:1"] || got["item:2"] != want["item:2"] || got["item:3"] != want["item:3"] {
		t.Fatalf("FetchMany = %v, want %v", got, want)
	}
	if len(calls) != 1 || !slices.Equal(calls[0], []string{"item:2", "item:3", "item:absent"}) {
		t.Fatalf("loader calls = %v, want one with the three missing keys", calls)
	}
	if trips := tripsAtLoad - before; trips != 1 {
		t.Fatalf("%d round trips to read 4 keys, want 1", trips)
	}
	before = counter.trips.Load()
	got, err = ca.FetchMany(ctx, []string{"item:1", "item:2", "item:3"}, func(context.Context, []string) (map[string]string, error) {
		return nil, errors.New("loader called for cached keys")
	})
	if err != nil || len(got) != 3 {
		t.Fatalf("FetchMany of cached keys = %v, %v", got, err)
	}
	if trips := counter.trips.Load() - before; trips != 1 {
		t.Fatalf("%d round trips for 3 cached keys, want 1", trips)
	}
}
