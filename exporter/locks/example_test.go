package locks_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/locks"
)

// Read lists the locks held now, longest-held first, with who holds them.
// A bare token names nobody: its format is "opaque".
func ExampleReader_Read() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	if err := rdb.Set(ctx, "lock:example:report", "some-token", time.Minute).Err(); err != nil {
		log.Fatal(err)
	}
	defer rdb.Del(ctx, "lock:example:report")

	r, err := locks.New(locks.Options{Target: exporter.Target{Addrs: []string{redisAddr}}, Patterns: []string{"lock:example:*"}})
	if err != nil {
		log.Fatal(err)
	}
	l, err := r.Read(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, lk := range l.Locks {
		fmt.Println(lk.Key, lk.Format, lk.TTL > 0)
	}
	// Output: lock:example:report opaque true
}
