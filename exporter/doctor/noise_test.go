package doctor_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/doctor"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Findings are what an operator must act on. 3,000 healthy locks taken at
// once with the same TTL and still held one interval later are neither
// long-held nor a stampede; a busy queue and a busy lock are not "hot keys
// without TTL". Beside them, a lock whose owner keeps extending it past
// its TTL, a stuck lock and a hot config key without TTL are reported: the
// checks still fire.
func TestDoctorHealthyLocksAreQuiet(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lfu", "--lfu-log-factor", "0")
	rdb := srv.Client(t)
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := 0; i < 3000; i++ {
		pipe.Set(ctx, fmt.Sprintf("lock:healthy:%d", i), fmt.Sprintf("tok-%d", i), 5*time.Minute)
	}
	_, err := pipe.Exec(ctx)
	must(t, err)
	must(t, rdb.Set(ctx, "lock:stuck:1", "tok", 0).Err())
	must(t, rdb.Set(ctx, "config:1", "v", 0).Err())
	must(t, rdb.RPush(ctx, "jobs", "a").Err())
	for i := 0; i < 60; i++ { // the three hottest keys, none with a TTL
		must(t, rdb.Get(ctx, "config:1").Err())
		must(t, rdb.Get(ctx, "lock:stuck:1").Err())
		must(t, rdb.LLen(ctx, "jobs").Err())
	}
	// A lease of 1.5s renewed every 100ms by the same owner: held past
	// its TTL across the 2s between the samples.
	must(t, rdb.Set(ctx, "lock:renewed:1", "owner", 1500*time.Millisecond).Err())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				_ = rdb.PExpire(ctx, "lock:renewed:1", 1500*time.Millisecond).Err()
			}
		}
	})
	r, err := doctor.Run(ctx, doctor.Options{
		Exporter: exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}, Queues: []string{"jobs"}},
		Interval: 2 * time.Second, HotKeys: 3,
	})
	close(stop)
	wg.Wait()
	must(t, err)
	equal(t, briefs(t, r), []brief{
		{doctor.CheckLocksWithoutTTL, "critical", "lock:stuck:*", 1, 1},
		{doctor.CheckHotKeysNoTTL, "warning", "config:*", 1, 3},
		{doctor.CheckLongHeldLocks, "warning", "lock:renewed:*", 1, 1},
	})
	if len(r.HotKeys) != 3 {
		t.Fatalf("hot keys %+v: the queue and the lock are still listed, only not findings", r.HotKeys)
	}
}

// A --queue that does not exist, or is not a queue, is reported.
func TestDoctorReportsQueuesThatAreNot(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	must(t, rdb.Set(ctx, "orders", "a string", 0).Err())
	must(t, rdb.RPush(ctx, "jobs", "a").Err())
	r, err := doctor.Run(ctx, doctor.Options{
		Exporter: exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}, Queues: []string{"orders", "jobs", "ordrs"}},
		Interval: 10 * time.Millisecond,
	})
	must(t, err)
	if f := r.Findings[0]; f.KeyType != "string" || !strings.Contains(f.Evidence, "queue orders is a string") {
		t.Fatalf("finding %+v", f)
	}
	equal(t, briefs(t, r), []brief{
		{doctor.CheckQueueNotFound, "warning", "orders", 1, 0},
		{doctor.CheckQueueNotFound, "info", "ordrs", 1, 0},
	})
}
