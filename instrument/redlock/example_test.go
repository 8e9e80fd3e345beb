package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/instrument/redlock"
)

// Redlock over independent Redis nodes, reporting the same lock metrics as
// instrument.Client.Lock. In production list three or five nodes; this
// example runs against one (a quorum of one).
func ExampleMutex_Lock() {
	var pools []redsyncredis.Pool
	for _, addr := range []string{redisAddr} { // e.g. "redis-a:6379", "redis-b:6379", "redis-c:6379"
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		pools = append(pools, goredis.NewPool(rdb))
	}
	rl, err := redlock.New(redsync.New(pools...), redlock.Options{
		Registerer: prometheus.NewRegistry(),
		Name:       "billing",
		Backoff:    instrument.Backoff{Base: 20 * time.Millisecond, Max: 250 * time.Millisecond, Retries: 10},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	m := rl.NewMutex("lock:{nightly-billing}", redsync.WithExpiry(30*time.Second))
	switch err := m.Lock(ctx); {
	case errors.Is(err, instrument.ErrLockBusy):
		return // another process runs it
	case err != nil:
		log.Fatal(err)
	}
	// … work that must finish before m.Until() …
	if err := m.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("billing ran under the lock")
	// Output: billing ran under the lock
}
