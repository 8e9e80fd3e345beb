package instrument_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Each lease ends once, counted by how: released; expired before its
// holder released it; lost when its renewal found the key gone; taken over
// when, within the lease, another owner holds it at release. The hold
// time is observed under the same outcome.
func TestLockLeaseEnds(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	reg := prometheus.NewRegistry()
	c := lockClient(t, rdb, reg, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lock := func(key string, opts instrument.LockOptions) *instrument.Lock {
		t.Helper()
		l, err := c.Lock(ctx, key, opts)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	if err := lock("lock:{released}", instrument.LockOptions{}).Release(ctx); err != nil {
		t.Fatal(err)
	}

	expired := lock("lock:{expired}", instrument.LockOptions{TTL: 100 * time.Millisecond})
	waitDone(t, expired.Context(), "holder of a lease running out")
	if err := expired.Release(ctx); !errors.Is(err, instrument.ErrNotOwner) {
		t.Fatalf("release after expiry = %v, want ErrNotOwner", err)
	}

	renewed := lock("lock:{lost}", instrument.LockOptions{TTL: 3 * time.Second, Renew: true})
	if err := rdb.Del(ctx, "lock:{lost}").Err(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, renewed.Context(), "holder whose renewal finds the key gone")
	_ = renewed.Release(ctx)

	taken := lock("lock:{taken}", instrument.LockOptions{TTL: time.Minute})
	if err := rdb.Set(ctx, "lock:{taken}", "another holder", redis.KeepTTL).Err(); err != nil {
		t.Fatal(err)
	}
	if err := taken.Release(ctx); !errors.Is(err, instrument.ErrNotOwner) {
		t.Fatalf("release of a lock taken over = %v, want ErrNotOwner", err)
	}

	for outcome, want := range map[string]float64{"released": 1, "expired": 1, "lost": 1, "taken_over": 1, "refused": 0, "error": 0} {
		if got := metrictest.Sum(t, reg, "cachewatch_lock_lease_ends_total", "outcome", outcome); got != want {
			t.Errorf("lease_ends_total{outcome=%s} = %v, want %v", outcome, got, want)
		}
		if got := metrictest.Sum(t, reg, "cachewatch_lock_hold_duration_seconds", "outcome", outcome); got != want {
			t.Errorf("hold_duration_seconds{outcome=%s} count = %v, want %v", outcome, got, want)
		}
	}
}
