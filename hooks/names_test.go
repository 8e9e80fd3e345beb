package hooks_test

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Two hooked clients on one registry must not share a Name: the second New
// fails with ErrNameTaken, so the registry keeps scraping (two pool
// collectors of one name used to make every scrape fail) and no client's
// series silently merge into another's. Distinct names coexist.
func TestHookNamesCannotCollide(t *testing.T) {
	addr := redistest.Start(t).Addr
	a := redistest.NewClient(t, quiet(&redis.Options{Addr: addr}))
	b := redistest.NewClient(t, quiet(&redis.Options{Addr: addr}))
	reg := prometheus.NewRegistry()
	if _, err := hooks.New(hooks.Options{Registerer: reg, Pool: a}); err != nil {
		t.Fatal(err)
	}
	if _, err := hooks.New(hooks.Options{Registerer: reg, Pool: b}); !errors.Is(err, hooks.ErrNameTaken) {
		t.Fatalf("second hook with the default name: err = %v, want ErrNameTaken", err)
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
