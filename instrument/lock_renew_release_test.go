package instrument

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/luascript"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// slowExtendReply holds the reply of every extend script that renewed the
// lease in Redis until proceed is closed, and counts them: a renewal whose
// answer is slow to come back.
type slowExtendReply struct {
	inFlight chan struct{} // closed when the first renewal has run in Redis
	once     atomicOnce
	proceed  chan struct{}
	renewed  atomic.Int64
}

type atomicOnce struct{ done atomic.Bool }

func (o *atomicOnce) do(f func()) {
	if o.done.CompareAndSwap(false, true) {
		f()
	}
}

func (h *slowExtendReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *slowExtendReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *slowExtendReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if len(args) > 1 && (args[1] == luascript.LockExtend.SHA || args[1] == luascript.LockExtend.Src) {
			if c, ok := cmd.(*redis.Cmd); ok {
				if n, _ := c.Int(); n == 1 {
					h.renewed.Add(1)
					h.once.do(func() { close(h.inFlight) })
					<-h.proceed
				}
			}
		}
		return err
	}
}

// A renewal that Redis ran while Release was cutting the heartbeat is
// counted as what it was: Release waits for the renewal in flight, so its
// result is known (and it cannot land after the release script).
func TestLockRenewalInFlightAtReleaseIsCounted(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	hook := &slowExtendReply{inFlight: make(chan struct{}), proceed: make(chan struct{})}
	rdb.AddHook(hook)
	reg := prometheus.NewRegistry()
	c, err := New(rdb, Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := c.Lock(ctx, "lock:renew-at-release", LockOptions{TTL: 3 * time.Second, Renew: true})
	if err != nil {
		t.Fatal(err)
	}
	waitClosed(t, "a renewal to run in Redis", hook.inFlight)
	released := make(chan error, 1)
	go func() { released <- l.Release(ctx) }()
	// The old code returned from Release without waiting for the renewal;
	// give it the chance to, then let the renewal's reply through.
	select {
	case err := <-released:
		released <- err
	case <-time.After(300 * time.Millisecond):
	}
	close(hook.proceed)
	if err := <-released; err != nil {
		t.Fatalf("Release: %v", err)
	}
	group := c.group("lock:renew-at-release")
	if got, want := testutil.ToFloat64(c.m.lockRenewals.WithLabelValues(group, "renewed")), float64(hook.renewed.Load()); got != want || want < 1 {
		t.Fatalf("lock_renewals_total{renewed} = %v; Redis renewed the lease %v times", got, want)
	}
	if n := rdb.Exists(ctx, "lock:renew-at-release").Val(); n != 0 {
		t.Fatal("lock key survives Release: the renewal landed after the release script")
	}
}
