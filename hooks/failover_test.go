package hooks_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/internal/keygrouptest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// TestFailoverClient runs known traffic through a failover client that finds
// its master through a real Sentinel, and reads the exact counts back: the
// hook works the same behind Sentinel discovery.
func TestFailoverClient(t *testing.T) {
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: redistest.SentinelMaster, SentinelAddrs: []string{sentinel.Addr},
		DisableIdentity: true,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	reg := prometheus.NewRegistry()
	h, err := hooks.New(hooks.Options{Registerer: reg, Name: "failover", KeyGroups: keygrouptest.Named(t)})
	if err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(h)

	ctx := context.Background()
	for i := 0; i < 20; i++ { // 20 locks acquired, then 10 of them contended
		if ok, err := rdb.SetNX(ctx, fmt.Sprintf("lock:report:%d", i), "a", time.Minute).Result(); !ok || err != nil {
			t.Fatalf("acquire %d: %v %v", i, ok, err)
		}
	}
	for i := 0; i < 10; i++ {
		rdb.SetNX(ctx, fmt.Sprintf("lock:report:%d", i), "b", time.Minute)
	}
	for i := 0; i < 7; i++ { // 7 misses, then 4 hits
		rdb.Get(ctx, fmt.Sprintf("user:%d:profile", i))
	}
	for i := 0; i < 4; i++ {
		rdb.Get(ctx, fmt.Sprintf("lock:report:%d", i))
	}

	settled(t, reg, attempts, map[string]float64{
		"key_group=lock:report:*,result=acquired,attempt=first": 20,
		"key_group=lock:report:*,result=busy,attempt=first":     10,
	})
	expect(t, reg, lookups, map[string]float64{
		"key_group=user:*:profile,result=miss": 7,
		"key_group=lock:report:*,result=hit":   4,
	})
	expect(t, reg, cmdDur, map[string]float64{
		"client=failover,command=set": 30,
		"client=failover,command=get": 11,
	})
}
