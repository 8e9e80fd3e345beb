package hooks_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// TestExpositionLints drives every signal of the hook into one registry and
// checks the exposition with client_golang's linter and with promtool.
func TestExpositionLints(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rdb := redistest.NewClient(t, quiet(&redis.Options{Addr: srv.Addr}))
	reg := prometheus.NewRegistry()
	h, err := hooks.New(hooks.Options{Registerer: reg, Name: "api", Pool: rdb, MissBurstThreshold: 2})
	if err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(h)
	script := redis.NewScript(`return redis.call("GET", KEYS[1])`)
	for i := 0; i < 5; i++ {
		rdb.SetNX(ctx, "lock:a", fmt.Sprint(i), time.Minute)
		rdb.Get(ctx, fmt.Sprintf("user:%d", i))
		script.Run(ctx, rdb, []string{"user:1"})
	}
	rdb.Pipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, "x"); return nil })
	rdb.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Incr(ctx, "n"); return nil })
	rdb.Do(ctx, "NOSUCHCOMMAND")
	rdb.ScriptFlush(ctx)
	script.Run(ctx, rdb, []string{"user:1"})

	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	for _, name := range []string{cmdDur, cmdErrs, pipeDur, scrDur, noscript, lookups, attempts, bursts,
		"cachewatch_redis_pool_timeouts_total", "cachewatch_redis_pool_connections"} {
		if metrictest.Series(t, reg, name) == nil {
			t.Errorf("%s missing from the exposition", name)
		}
	}
	metrictest.PromtoolCheck(t, metrictest.Exposition(t, reg))
}
