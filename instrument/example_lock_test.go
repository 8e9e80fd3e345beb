package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/instrument"
)

// A job that must not run twice at once, longer than one lease: the lock is
// renewed in the background, and the job stops when the lock is lost.
func ExampleClient_Lock() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	c, err := instrument.New(rdb, instrument.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	l, err := c.Lock(ctx, "lock:{report:2026-11}", instrument.LockOptions{
		TTL:     10 * time.Second,
		Renew:   true, // heartbeat every TTL/3
		Fencing: true, // pass l.Fence() to the store, which rejects older tokens
		Backoff: instrument.Backoff{Base: 10 * time.Millisecond, Max: 200 * time.Millisecond, Retries: 8},
	})
	switch {
	case errors.Is(err, instrument.ErrLockBusy):
		log.Print("another worker builds the report; skipping")
		return
	case errors.Is(err, context.DeadlineExceeded):
		log.Print("gave up waiting for the lock")
		return
	case errors.Is(err, instrument.ErrRedis):
		log.Printf("redis unavailable: %v", err)
		return
	case err != nil:
		log.Fatal(err)
	}

	buildReport(l.Context(), l.Fence()) // stops when l.Context() is done
	if cause := context.Cause(l.Context()); errors.Is(cause, instrument.ErrLockLost) {
		log.Printf("lock lost mid-job: %v", cause)
	}
	if err := l.Release(context.Background()); errors.Is(err, instrument.ErrNotOwner) {
		log.Print("the lease ended before the job did; its result was fenced off")
		return
	}
	fmt.Println("report built under the lock")
	// Output: report built under the lock
}

// buildReport stands for the job: it writes its result with the fencing
// token, and stops when ctx is done.
func buildReport(ctx context.Context, fence int64) { _, _ = ctx, fence }
