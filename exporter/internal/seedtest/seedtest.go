// Package seedtest writes a known state into a real Redis (standalone or
// Cluster) for the tests of the exporter and doctor: locks with and
// without TTL, a group of keys expiring in the same second beside a jittered
// group, a stream with old pending messages, list and delayed-job queues,
// and a slow script with a known number of calls.
package seedtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The seeded state.
const (
	StuckLocks   = 3   // lock:stuck:N without TTL
	TTLLocks     = 4   // lock:order:N with a 30s TTL
	SyncKeys     = 400 // sync:item:N expiring in the same second (over alerts.DefaultConfig().ExpirySyncMinKeys on each node of a 3-node Cluster)
	JitterKeys   = 50  // jit:item:N expiring 2s apart
	PlainKeys    = 10  // plain:user:N without TTL
	StreamLen    = 10  // entries in the "orders" stream
	PendingMsgs  = 5   // delivered to group "workers", not acknowledged
	ScriptCalls  = 3   // EVALSHA calls of the slow script
	ListLen      = 7   // "jobs:list"
	DelayedJobs  = 3   // "jobs:delayed", one overdue by DueAgo
	PendingAgeMs = 600_000
	DueAgo       = 30 * time.Second
)

// Queues are the queue keys Seed writes.
var Queues = []string{"orders", "jobs:list", "jobs:delayed"}

// Seed writes the known state through rdb (a client or a cluster client)
// and returns the stream's base ID time and the overdue job's due time.
func Seed(t testing.TB, rdb redis.UniversalClient) (streamBase int64, due time.Time) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	for i := 1; i <= StuckLocks; i++ {
		must(t, rdb.Set(ctx, fmt.Sprintf("lock:stuck:%d", i), fmt.Sprintf("tok-stuck-%d", i), 0).Err())
	}
	for i := 1; i <= TTLLocks; i++ {
		must(t, rdb.Set(ctx, fmt.Sprintf("lock:order:%d", i), fmt.Sprintf("tok-order-%d", i), 30*time.Second).Err())
	}
	// One absolute expiry, half a second into a second nine minutes away:
	// more seconds ahead than there are keys, so the synchronisation score
	// (the busiest second over an even spread) is the key count.
	at := now.Add(9 * time.Minute).Truncate(time.Second).Add(500 * time.Millisecond)
	for i := 1; i <= SyncKeys; i++ {
		must(t, rdb.Do(ctx, "SET", fmt.Sprintf("sync:item:%d", i), "v", "PXAT", at.UnixMilli()).Err())
	}
	for i := 1; i <= JitterKeys; i++ {
		must(t, rdb.Do(ctx, "SET", fmt.Sprintf("jit:item:%d", i), "v", "PXAT",
			now.Add(time.Minute).Truncate(time.Second).Add(time.Duration(2*i)*time.Second+500*time.Millisecond).UnixMilli()).Err())
	}
	for i := 1; i <= PlainKeys; i++ {
		must(t, rdb.Set(ctx, fmt.Sprintf("plain:user:%d", i), "v", 0).Err())
	}
	streamBase = now.UnixMilli() - PendingAgeMs
	for i := 0; i < StreamLen; i++ {
		must(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", ID: fmt.Sprintf("%d-0", streamBase+int64(i)), Values: []any{"n", i}}).Err())
	}
	must(t, rdb.XGroupCreate(ctx, "orders", "workers", "0").Err())
	must(t, rdb.XGroupCreate(ctx, "orders", "idle", "$").Err())
	got, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "w1", Streams: []string{"orders", ">"}, Count: PendingMsgs}).Result()
	must(t, err)
	if len(got) != 1 || len(got[0].Messages) != PendingMsgs {
		t.Fatalf("XREADGROUP delivered %v", got)
	}
	for i := 0; i < ListLen; i++ {
		must(t, rdb.RPush(ctx, "jobs:list", i).Err())
	}
	due = now.Add(-DueAgo).Truncate(time.Second)
	must(t, rdb.ZAdd(ctx, "jobs:delayed", redis.Z{Score: float64(due.Unix()), Member: "overdue"},
		redis.Z{Score: float64(now.Add(time.Hour).Unix()), Member: "later"},
		redis.Z{Score: float64(now.Add(2 * time.Hour).Unix()), Member: "later2"}).Err())
	// A slow script (a busy loop of several milliseconds) with known calls.
	sha, err := rdb.ScriptLoad(ctx, SlowScript).Result()
	must(t, err)
	for i := 0; i < ScriptCalls; i++ {
		must(t, rdb.EvalSha(ctx, sha, []string{"sync:item:1"}).Err())
	}
	return streamBase, due
}

// SlowScript is a busy loop of several milliseconds.
const SlowScript = "local i = 0 while i < 3000000 do i = i + 1 end return i"

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
