package hooks_test

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/keygroup"
)

func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()

	reg := prometheus.NewRegistry()
	groups, err := keygroup.New(keygroup.Options{Rules: []keygroup.Rule{keygroup.Glob("cart:*", "cart")}})
	if err != nil {
		panic(err)
	}
	h, err := hooks.New(hooks.Options{
		Registerer: reg,
		Name:       "checkout",
		KeyGroups:  groups,
		Scripts:    []hooks.Script{{Name: "reserve_stock", Src: `return redis.call("DECR", KEYS[1])`}},
		Pool:       rdb,
	})
	if err != nil {
		panic(err)
	}
	rdb.AddHook(h) // every command of rdb is now measured

	// The hook counts what the wire shows, e.g. a miss when GET answers nil.
	_ = rdb.Get(context.Background(), "cart:8f3a9c0e11aa").Err()
	n, _ := testutil.GatherAndCount(reg, "cachewatch_cache_lookups_total")
	fmt.Println("cart lookup series:", n)
	// Output: cart lookup series: 1
}
