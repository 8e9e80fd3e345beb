package hooks_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/hooks"
)

// The README's hook: on the default registry, measuring lock and miss
// traffic written by hand.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	h, err := hooks.New(hooks.Options{Name: "checkout"}) // metrics on prometheus.DefaultRegisterer
	if err != nil {
		log.Fatal(err)
	}
	rdb.AddHook(h) // once per client; on a ClusterClient, on the cluster client only

	// Code you did not write is measured too: a hand-written lock and a miss.
	ctx := context.Background()
	if err := rdb.SetNX(ctx, "lock:cart:42", "owner-token", 10*time.Second).Err(); err != nil {
		log.Fatal(err)
	}
	if err := rdb.Get(ctx, "cart:42").Err(); errors.Is(err, redis.Nil) {
		fmt.Println("a miss, which the hook counts")
	}
	// Output: a miss, which the hook counts
}
