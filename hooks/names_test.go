package hooks_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Two hooked clients on one registry must not share a Name: the second New
// fails with ErrNameTaken, so the registry keeps scraping (two pool
// collectors of one name would make every scrape fail) and no client's
// series silently merge into another's. Distinct names coexist.
func TestHookNamesCannotCollide(t *testing.T) {
	addr := redistest.Start(t).Addr
	a := redistest.NewClient(t, quiet(&redis.Options{Addr: addr}))
	b := redistest.NewClient(t, quiet(&redis.Options{Addr: addr}))
	reg := prometheus.NewRegistry()
	if _, err := hooks.New(hooks.Options{Registerer: reg, Pool: a}); err != nil {
		t.Fatal(err)
	}
	if _, err := hooks.New(hooks.Options{Registerer: reg, Pool: b}); !errors.Is(err, hooks.ErrNameTaken) || !errors.Is(err, instrument.ErrNameTaken) {
		t.Fatalf("second hook with the default name: err = %v, want ErrNameTaken (hooks' and instrument's, one error)", err)
	}
	if _, err := hooks.New(hooks.Options{Registerer: reg, Name: "default"}); !errors.Is(err, hooks.ErrNameTaken) {
		t.Fatalf("second hook named \"default\": err = %v, want ErrNameTaken", err)
	}
	if _, err := testutil.GatherAndCount(reg); err != nil {
		t.Fatalf("scrape after a refused hook: %v", err)
	}
	if _, err := hooks.New(hooks.Options{Registerer: reg, Name: "b", Pool: b}); err != nil {
		t.Fatalf("second hook with its own name: %v", err)
	}
	n, err := testutil.GatherAndCount(reg, "cachewatch_redis_pool_connections")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	if n != 4 { // idle and in_use, per client
		t.Fatalf("pool connection series = %d, want 4 (2 clients x idle, in_use)", n)
	}
	// Another registry is another namespace.
	if _, err := hooks.New(hooks.Options{Registerer: prometheus.NewRegistry(), Pool: b}); err != nil {
		t.Fatalf("default name on a second registry: %v", err)
	}
}

// Two hooked clients with their own Names keep their lock and cache series
// apart: a miss and a busy lock on one client are not the other's.
func TestHookedClientsKeepTheirLockAndCacheSeriesApart(t *testing.T) {
	addr := redistest.Start(t).Addr
	reg := prometheus.NewRegistry()
	clients := map[string]*redis.Client{}
	for _, name := range []string{"checkout", "search"} {
		rdb := redistest.NewClient(t, quiet(&redis.Options{Addr: addr}))
		h, err := hooks.New(hooks.Options{Registerer: reg, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		rdb.AddHook(h)
		clients[name] = rdb
	}
	ctx := context.Background()
	// checkout: 2 misses; search: 1 hit. checkout takes the lock, search finds it busy.
	clients["checkout"].Get(ctx, "cart:1")
	clients["checkout"].Get(ctx, "cart:2")
	clients["search"].Set(ctx, "cart:3", "x", 0)
	clients["search"].Get(ctx, "cart:3")
	if ok, err := clients["checkout"].SetNX(ctx, "lock:cart:1", "t1", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("checkout SET NX: %v %v", ok, err)
	}
	if ok, err := clients["search"].SetNX(ctx, "lock:cart:1", "t2", time.Minute).Result(); ok || err != nil {
		t.Fatalf("search SET NX on a held lock: %v %v", ok, err)
	}
	// search's busy attempt is never retried: it counts once its horizon
	// has passed.
	settled(t, reg, "cachewatch_lock_attempts_total", map[string]float64{"client=search,result=busy": 1})
	for _, c := range []struct {
		name  string
		pairs []string
		want  float64
	}{
		{"cachewatch_cache_lookups_total", []string{"client", "checkout", "result", "miss"}, 2},
		{"cachewatch_cache_lookups_total", []string{"client", "checkout", "result", "hit"}, 0},
		{"cachewatch_cache_lookups_total", []string{"client", "search", "result", "hit"}, 1},
		{"cachewatch_cache_lookups_total", []string{"client", "search", "result", "miss"}, 0},
		{"cachewatch_lock_attempts_total", []string{"client", "checkout", "result", "acquired"}, 1},
		{"cachewatch_lock_attempts_total", []string{"client", "checkout", "result", "busy"}, 0},
		{"cachewatch_lock_attempts_total", []string{"client", "search", "result", "busy"}, 1},
		{"cachewatch_lock_attempts_total", []string{"client", "search", "result", "acquired"}, 0},
	} {
		if got := metrictest.Sum(t, reg, c.name, c.pairs...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.pairs, got, c.want)
		}
	}
}
