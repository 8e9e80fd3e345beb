package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/internal/locktest"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// A caller whose own deadline or cancellation ends during an acquire
// attempt gave up, as when it ends during the backoff: the acquisition
// counts as gave_up, the attempt (whose result Redis never gave) is not
// counted, and nothing is a Redis error — whether go-redis bounds its I/O
// by the context or the client does, and for plain and fencing locks.
func TestLockCallerContextEndingDuringAttemptGivesUp(t *testing.T) {
	for _, honours := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", honours), func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := redistest.NewClient(t, &redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: honours})
			hold := &locktest.HoldAttempts{Entered: make(chan struct{}, 1)}
			rdb.AddHook(hold)
			reg := prometheus.NewRegistry()
			c := lockClient(t, rdb, reg, nil)
			endings := map[string]func() (context.Context, error){
				"deadline": func() (context.Context, error) {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
					t.Cleanup(cancel)
					return ctx, context.DeadlineExceeded
				},
				"cancel": func() (context.Context, error) {
					ctx, cancel := context.WithCancel(context.Background())
					go func() { <-hold.Entered; hold.Entered <- struct{}{}; cancel() }()
					return ctx, context.Canceled
				},
			}
			n := 0
			for name, ending := range endings {
				for _, fencing := range []bool{false, true} {
					n++
					ctx, want := ending()
					_, err := c.Lock(ctx, fmt.Sprintf("lock:{cut}:%d", n), instrument.LockOptions{Fencing: fencing})
					<-hold.Entered
					if !errors.Is(err, want) || errors.Is(err, instrument.ErrRedis) || errors.Is(err, instrument.ErrLockBusy) {
						t.Fatalf("%s during the attempt (fencing %v): Lock = %v, want only %v", name, fencing, err, want)
					}
				}
			}
			locktest.CheckCutOff(t, reg, n)
		})
	}
}
