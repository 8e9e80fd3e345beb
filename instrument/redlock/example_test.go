package redlock_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/instrument/redlock"
)

// Redlock over three independent Redis nodes, reporting the same lock
// metrics as instrument.Client.Lock. (It needs the three nodes, so it is
// compiled but not run.)
func ExampleMutex_Lock() {
	var pools []redsyncredis.Pool
	for _, addr := range []string{"redis-a:6379", "redis-b:6379", "redis-c:6379"} {
		pools = append(pools, goredis.NewPool(redis.NewClient(&redis.Options{Addr: addr})))
	}
	rl, err := redlock.New(redsync.New(pools...), redlock.Options{
		Backoff: instrument.Backoff{Base: 20 * time.Millisecond, Max: 250 * time.Millisecond, Retries: 10},
	})
	if err != nil {
		log.Fatal(err)
	}
	m := rl.NewMutex("lock:{nightly-billing}", redsync.WithExpiry(30*time.Second))
	switch err := m.Lock(context.Background()); {
	case errors.Is(err, instrument.ErrLockBusy):
		return // another process runs it
	case err != nil:
		log.Fatal(err)
	}
	defer m.Unlock(context.Background())
	// … work that must finish before m.Until() …
}
