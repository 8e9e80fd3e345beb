package instrument

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Whatever name a caller passes to Fetch is the name it passes to any
// invalidation — the Client's or the Cache's, by key or by pattern — and
// the value is removed: never a silent 0 because the Cache stores
// "product:42" as "product:{42}".
func TestInvalidateTakesTheNamePassedToFetch(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	reg := prometheus.NewRegistry()
	clk := newFetchClock()
	ca := newFetchCache(t, rdb, reg, clk, CacheOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	invalidations := map[string]func(key string) (int64, error){
		"Client.Invalidate":           func(key string) (int64, error) { return ca.c.Invalidate(ctx, key) },
		"Cache.Invalidate":            func(key string) (int64, error) { return ca.Invalidate(ctx, key) },
		"InvalidateMatch exact":       func(key string) (int64, error) { return ca.c.InvalidateMatch(ctx, key) },
		"InvalidateMatch prefix glob": func(key string) (int64, error) { return ca.c.InvalidateMatch(ctx, key[:len(key)-1]+"*") },
		"Client.Invalidate storage name": func(key string) (int64, error) {
			return ca.c.Invalidate(ctx, keysFor(key).value) // the other mix-up: the name seen in redis-cli
		},
	}
	n := 0
	for name, invalidate := range invalidations {
		n++
		c := string(rune('a' + n)) // each case its own keys: the Fetch after the check stores them again
		for _, key := range []string{"product" + c + ":42", "plain" + c + "x", "order" + c + ":{7}"} {
			loads := 0
			load := func(context.Context) (string, error) { loads++; return "v", nil }
			if _, err := ca.Fetch(ctx, key, load); err != nil {
				t.Fatal(err)
			}
			before := metrictest.Sum(t, reg, "cachewatch_cache_invalidated_keys_total")
			removed, err := invalidate(key)
			if err != nil || removed != 1 {
				t.Errorf("%s(%q) after Fetch(%q) = %d, %v; want 1 key removed", name, key, key, removed, err)
			}
			if got := metrictest.Sum(t, reg, "cachewatch_cache_invalidated_keys_total") - before; got != 1 {
				t.Errorf("%s(%q): invalidated_keys_total rose by %v, want 1", name, key, got)
			}
			if _, err := ca.Fetch(ctx, key, load); err != nil || loads != 2 {
				t.Errorf("%s(%q): next Fetch made %d loads in all, want 2 (the value was not removed)", name, key, loads)
			}
		}
	}
	// Keys not written by a Cache are removed under their own names.
	if err := rdb.Set(ctx, "session:9", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if removed, err := ca.c.Invalidate(ctx, "session:9", "absent:1"); err != nil || removed != 1 {
		t.Fatalf("Invalidate(plain key, absent key) = %d, %v; want 1", removed, err)
	}
	if rdb.Exists(ctx, "session:9").Val() != 0 {
		t.Fatal("plain key survived Invalidate")
	}
}

// InvalidateMatch counts the Cache values it removes under the key group of
// the names passed to Fetch, the group their lookups are counted under —
// not the group of the stored names ("bulk:{1:2}" is "bulk:*" where
// "bulk:1:2" is "bulk:*:*").
func TestInvalidateMatchCountsUnderTheFetchNamesGroup(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	ca := newFetchCache(t, srv.Client(t), reg, newFetchClock(), CacheOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	keys := []string{"bulk:1:2", "bulk:3:4", "bulk:5:6", "solo", "order:{7}"}
	lookedUp, stored := ca.c.group(keys[0]), ca.c.group(keysFor(keys[0]).value)
	if lookedUp == stored {
		t.Fatalf("the test needs the stored name's group to differ from the looked-up name's, both are %q", lookedUp)
	}
	for _, key := range keys {
		if _, err := ca.Fetch(ctx, key, func(context.Context) (string, error) { return "v", nil }); err != nil {
			t.Fatal(err)
		}
	}
	for _, pattern := range []string{"bulk:*", "solo", "order:*"} {
		if _, err := ca.c.InvalidateMatch(ctx, pattern); err != nil {
			t.Fatal(err)
		}
	}
	const name = "cachewatch_cache_invalidated_keys_total"
	for _, key := range keys {
		g := ca.c.group(key)
		want := float64(len(keys) - 2) // the bulk keys share a group
		if g != lookedUp {
			want = 1
		}
		if got := metrictest.Sum(t, reg, name, "key_group", g, "by", "pattern"); got != want {
			t.Errorf("%s{key_group=%q} = %v, want %v", name, g, got, want)
		}
		if got := lookups(ca, g, resultMiss); got != want {
			t.Errorf("lookups{key_group=%q, result=miss} = %v, want %v", g, got, want)
		}
	}
	if got := metrictest.Sum(t, reg, name, "key_group", stored); got != 0 {
		t.Errorf("%s{key_group=%q} (the stored names' group) = %v, want 0", name, stored, got)
	}
	if got := metrictest.Sum(t, reg, name); got != float64(len(keys)) {
		t.Errorf("%s = %v in all, want %d", name, got, len(keys))
	}
}
