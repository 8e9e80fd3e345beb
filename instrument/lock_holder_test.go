package instrument_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/internal/keygrouptest"
	"github.com/cachewatch/cachewatch/internal/lockholder"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Every lock the client takes names its holder — the client's Name, this
// host, process and instance, and when it was taken — in the value a GET
// reads back, and the owner-checked scripts still release it.
func TestLockValueNamesItsHolder(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c, err := instrument.New(rdb, instrument.Options{Name: "billing", Registerer: prometheus.NewRegistry(), KeyGroups: keygrouptest.Named(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host, _ := os.Hostname()
	for name, opts := range map[string]instrument.LockOptions{
		"plain": {}, "fenced": {Fencing: true}, "renewed": {Renew: true, TTL: time.Minute},
	} {
		before := time.Now().Truncate(time.Millisecond)
		l, err := c.Lock(ctx, "job:"+name, opts)
		if err != nil {
			t.Fatal(err)
		}
		v, err := rdb.Get(ctx, "job:"+name).Result()
		if err != nil || v != l.Token() {
			t.Fatalf("%s: GET = %q, %v; want the lock's value %q", name, v, err, l.Token())
		}
		h := lockholder.Parse(v)
		if h.Kind != lockholder.Cachewatch || h.Service != "billing" || h.Host != host || h.PID != os.Getpid() ||
			h.Instance != lockholder.Instance() || len(h.Token) != 22 || h.Acquired.Before(before) || h.Acquired.After(time.Now()) {
			t.Errorf("%s: value %q reads %+v; want service billing, host %q, pid %d, this instance, acquired after %v",
				name, v, h, host, os.Getpid(), before)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("%s: release: %v", name, err)
		}
		if n, _ := rdb.Exists(ctx, "job:"+name).Result(); n != 0 {
			t.Fatalf("%s: the lock is still there after Release", name)
		}
	}
}

// A release compares the whole value: a value naming the same holder with
// another token is not this lock.
func TestLockReleaseComparesTheWholeValue(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := lockClient(t, rdb, prometheus.NewRegistry(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, "job:whole", instrument.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h := lockholder.Parse(l.Token())
	other := lockholder.NewIdentity(h.Service).Value(h.Token[:21]+"x", h.Acquired)
	if err := rdb.Set(ctx, "job:whole", other, redis.KeepTTL).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err == nil {
		t.Fatal("Release deleted a lock whose value differs in its token")
	}
	if v, _ := rdb.Get(ctx, "job:whole").Result(); v != other {
		t.Fatalf("lock value after the refused release = %q, want %q", v, other)
	}
}
