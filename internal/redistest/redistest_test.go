package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/redistest"
)

func TestServerPauseResumeKillRestart(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	// A short read timeout tells a paused server; every other check uses
	// a client that waits as long as a busy machine may need.
	short := redistest.NewClient(t, &redis.Options{Addr: s.Addr, ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	c := redistest.NewClient(t, &redis.Options{Addr: s.Addr, ReadTimeout: 30 * time.Second, MaxRetries: -1})
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	s.Pause()
	err := short.Get(ctx, "k").Err()
	var netErr interface{ Timeout() bool }
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Fatalf("GET on a paused server: got %v, want a timeout", err)
	}
	s.Resume()
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("after resume: %q, %v", got, err)
	}

	s.Kill()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING to a killed server succeeded")
	}
	s.Restart()
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("restarted server should be empty, GET gave %v", err)
	}
}

func TestShared(t *testing.T) {
	c := redistest.NewClient(t, &redis.Options{Addr: redistest.Shared(t)})
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	ctx := context.Background()
	for i := 0; i < 30; i++ {
		if err := c.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var masters atomic.Int32
	err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		masters.Add(1)
		size, err := n.DBSize(ctx).Result()
		if err == nil && size == 0 {
			err = fmt.Errorf("%s holds no keys: slots not spread", n.Options().Addr)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := masters.Load(); n != 3 {
		t.Fatalf("%d masters, want 3", n)
	}
}

func TestSentinel(t *testing.T) {
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master)
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster, SentinelAddrs: []string{sentinel.Addr}})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	if err := c.Set(ctx, "via-sentinel", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The write went to the monitored master.
	if got, err := master.Client(t).Get(ctx, "via-sentinel").Result(); err != nil || got != "1" {
		t.Fatalf("master has %q, %v", got, err)
	}
}
