package instrument_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/internal/lockholder"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// deadHolder is the value of a live-marked lock whose holder's liveness key
// does not exist: a process that died holding it.
func deadHolder(instance string) string {
	return fmt.Sprintf("cw1|tok%s|reports|host-1|4242|%s|%d@", instance, instance, time.Now().UnixMilli())
}

// A lock held by a dead live-marked holder is taken over by the next
// Lock, at once, whatever its TTL; its fencing token moves on; the taker
// counts the old lease's end as taken_over. A live holder's lock, an
// unmarked value and another library's token are never taken over.
func TestLockTakesOverDeadHolder(t *testing.T) {
	srv := redistest.Start(t)
	testTakeOver(t, srv.Client(t))
}

// On a Cluster the liveness key and the lock are on different slots: the
// acquire script hands the holder's value back, the client checks the key
// and takes over by compare-and-take.
func TestLockTakesOverDeadHolderCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	testTakeOver(t, cl.Client(t))
}

func testTakeOver(t *testing.T, rdb redis.UniversalClient) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg := prometheus.NewRegistry()
	c := lockClient(t, rdb, reg, nil)
	defer c.Close()
	once := instrument.LockOptions{TTL: 10 * time.Second, Backoff: instrument.Backoff{Retries: -1}}
	for i, key := range []string{"lock:{dead-plain}", "lock:{dead-fenced}", "lock:dead-untagged"} {
		old := deadHolder(fmt.Sprintf("deadInst%d", i))
		if err := rdb.Set(ctx, key, old, 30*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		opts := once
		opts.Fencing = i == 1
		var before int64
		if opts.Fencing {
			before = time.Now().Add(time.Hour).UnixMicro() // a counter ahead of the server clock
			if err := rdb.Set(ctx, key+":fence", before, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
		}
		l, err := c.Lock(ctx, key, opts)
		if err != nil {
			t.Fatalf("%s: Lock over a dead holder: %v", key, err)
		}
		if got := rdb.Get(ctx, key).Val(); got != l.Token() || !strings.HasSuffix(got, lockholder.LiveMark) {
			t.Fatalf("%s holds %q, want the taker's live value %q", key, got, l.Token())
		}
		if ttl := rdb.PTTL(ctx, key).Val(); ttl > 10*time.Second || ttl <= 0 {
			t.Fatalf("%s: PTTL %v after takeover, want the taker's lease (≤ 10s)", key, ttl)
		}
		if opts.Fencing && l.Fence() != before+1 {
			t.Fatalf("%s: fence %d after takeover, want %d", key, l.Fence(), before+1)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_lease_ends_total", "outcome", "taken_over"); got != 3 {
		t.Errorf("lease_ends{outcome=taken_over} = %v, want 3", got)
	}

	// Not taken over: a live holder (another client of this process, whose
	// liveness key stands), an unmarked value, another library's token.
	holder := lockClient(t, rdb, prometheus.NewRegistry(), nil)
	defer holder.Close()
	live, err := holder.Lock(ctx, "lock:{live}", instrument.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release(ctx)
	unmarked := strings.TrimSuffix(deadHolder("deadInst9"), lockholder.LiveMark)
	for key, value := range map[string]string{"lock:{live}": "", "lock:{unmarked}": unmarked, "lock:{other}": "abcdefghijklmnopqrstuv"} {
		if value != "" {
			if err := rdb.Set(ctx, key, value, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Lock(ctx, key, once); err == nil {
			t.Errorf("%s: taken over, want busy", key)
		}
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_lease_ends_total", "outcome", "taken_over"); got != 3 {
		t.Errorf("lease_ends{outcome=taken_over} = %v after busy locks, want still 3", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_attempts_total", "result", "acquired"); got != 3 {
		t.Errorf("attempts{result=acquired} = %v, want 3", got)
	}
}

// NoLiveness is the plain lock: it neither marks its value nor takes over.
func TestLockNoLiveness(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	c := lockClient(t, rdb, prometheus.NewRegistry(), nil)
	defer c.Close()
	if err := rdb.Set(ctx, "lock:{nl}", deadHolder("deadInstNL"), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	opts := instrument.LockOptions{NoLiveness: true, Backoff: instrument.Backoff{Retries: -1}}
	if _, err := c.Lock(ctx, "lock:{nl}", opts); err == nil {
		t.Fatal("NoLiveness took a dead holder's lock over")
	}
	l, err := c.Lock(ctx, "lock:{nl2}", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if h := lockholder.Parse(l.Token()); h.Kind != lockholder.Cachewatch || h.Live {
		t.Fatalf("NoLiveness value %q reads %+v, want an unmarked cachewatch value", l.Token(), h)
	}
	if n := rdb.Exists(ctx, lockholder.AliveKey(lockholder.Instance())).Val(); n != 0 {
		t.Fatalf("liveness key kept by a client taking NoLiveness locks only")
	}
}

// A live lock's holder keeps its liveness key: it exists, with a TTL of
// at most LivenessTTL, while the lock is held.
func TestLockKeepsLivenessKey(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	c, err := instrument.New(rdb, instrument.Options{Registerer: prometheus.NewRegistry(), LivenessTTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Lock(ctx, "lock:{alive}", instrument.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := lockholder.AliveKey(lockholder.Parse(l.Token()).Instance)
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > 3*time.Second {
		t.Fatalf("liveness key %s PTTL %v, want (0, 3s]", key, ttl)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := c.Lock(ctx, "lock:{alive}", instrument.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer after.Release(ctx)
	if lockholder.Parse(after.Token()).Live {
		t.Fatal("a lock taken after Close is live-marked: nobody keeps its liveness key")
	}
}
