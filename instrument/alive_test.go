package instrument

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/luascript"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// failRefresh is a go-redis hook failing the liveness refreshes while on.
type failRefresh struct{ on atomic.Bool }

func (h *failRefresh) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failRefresh) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *failRefresh) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); h.on.Load() && len(args) > 1 &&
			(args[1] == luascript.AliveRefresh.SHA || args[1] == luascript.AliveRefresh.Src) {
			cmd.SetErr(errors.New("refresh refused by the test"))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

// A holder that cannot refresh its liveness key for LivenessTTL can no
// longer prove it is alive (a waiter may take its locks over from then
// on): its live locks end as lost, with ErrLockLost, before any waiter can
// find the key gone. A lock taken once refreshes work again is valid.
func TestLivenessLapseLosesLocks(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	fail := &failRefresh{}
	rdb.AddHook(fail)
	reg := prometheus.NewRegistry()
	c, err := New(rdb, Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	clk := clockwork.NewFakeClock()
	c.alive.clock = clk
	ctx := context.Background()
	l, err := c.Lock(ctx, "lock:{lapse}", LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := c.Lock(ctx, "lock:{plain}", LockOptions{TTL: time.Minute, NoLiveness: true})
	if err != nil {
		t.Fatal(err)
	}
	fail.on.Store(true)
	clk.Advance(DefaultLivenessTTL)
	select {
	case <-l.Context().Done():
	case <-time.After(time.Minute):
		t.Fatal("the live lock outlived its holder's proof of life")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	if plain.Context().Err() != nil {
		t.Fatal("a NoLiveness lock ended with the proof of life")
	}
	if got := metrictest.Sum(t, reg, "cachewatch_lock_lease_ends_total", "outcome", "lost"); got != 1 {
		t.Errorf("lease_ends{lost} = %v, want 1", got)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_locks_lost_total", "reason", "renew_failed"); got != 1 {
		t.Errorf("locks_lost{renew_failed} = %v, want 1", got)
	}
	if err := l.Release(ctx); !errors.Is(err, ErrNotOwner) && err != nil {
		t.Fatalf("Release after lapse: %v", err)
	}
	fail.on.Store(false)
	again, err := c.Lock(ctx, "lock:{lapse2}", LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if again.Context().Err() != nil {
		t.Fatal("a lock taken after the refreshes came back is lost")
	}
	_ = again.Release(ctx)
	_ = plain.Release(ctx)
}
