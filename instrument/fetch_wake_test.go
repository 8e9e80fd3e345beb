package instrument

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/redistest"
)

// readHook calls onRead for each read script a client sends on its own (a
// pipeline goes through ProcessPipelineHook, which it passes by).
type readHook struct{ onRead func() }

func (h *readHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *readHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *readHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isFetchRead(cmd) {
			h.onRead()
		}
		return next(ctx, cmd)
	}
}

// readCounter counts the read scripts a client sends.
type readCounter struct {
	readHook
	n atomic.Int64
}

func newReadCounter() *readCounter {
	c := &readCounter{}
	c.onRead = func() { c.n.Add(1) }
	return c
}

// A process woken by another process's write takes the value from the
// wake-up: its waiting caller sends two reads (the miss, and the check
// after subscribing), not a third after the wake-up. A value too large to
// travel in the message is read again.
func TestWokenWaiterTakesTheValueFromTheWakeUp(t *testing.T) {
	for _, tc := range []struct {
		name      string
		value     string
		wantReads int64
	}{
		{"small value carried", "v1:with:colons", 2},
		{"large value read again", strings.Repeat("x", 70_000), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			newProcess := func(reads *readCounter) (*Cache[string], *prometheus.Registry) {
				rdb := srv.Client(t)
				if reads != nil {
					rdb.AddHook(reads)
				}
				reg := prometheus.NewRegistry()
				c, err := New(rdb, Options{Registerer: reg})
				if err != nil {
					t.Fatal(err)
				}
				// No polling and generous Redis time: only the wake-up ends the wait.
				ca, err := NewCache[string](c, CacheOptions{PollInterval: time.Hour, RedisTimeout: 30 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = ca.Close() })
				return ca, reg
			}
			loader, _ := newProcess(nil)
			reads := newReadCounter()
			waiter, _ := newProcess(reads)
			const key = "item:7"
			waiting := waitingOn(t, key)

			release := make(chan struct{})
			loaded := make(chan error, 1)
			go func() {
				_, err := loader.Fetch(ctx, key, func(context.Context) (string, error) { <-release; return tc.value, nil })
				loaded <- err
			}()
			waitFor(t, "the loader to hold the lease", func() bool {
				return srv.Client(t).Exists(ctx, keysFor(key).lease).Val() == 1
			})
			got := make(chan string, 1)
			go func() {
				v, err := waiter.Fetch(ctx, key, func(context.Context) (string, error) {
					t.Error("the waiting process called its loader")
					return "", nil
				})
				if err != nil {
					t.Error(err)
				}
				got <- v
			}()
			<-waiting
			close(release)
			if err := <-loaded; err != nil {
				t.Fatal(err)
			}
			if v := <-got; v != tc.value {
				t.Fatalf("waiter got %.20q…, want %.20q…", v, tc.value)
			}
			if n := reads.n.Load(); n != tc.wantReads {
				t.Fatalf("waiting process sent %d reads, want %d", n, tc.wantReads)
			}
			group := waiter.c.group(key)
			if n := lookups(waiter, group, resultCoalesced); n != 1 {
				t.Fatalf("coalesced lookups = %v in the waiting process, want 1", n)
			}
			if n := sourceCalls(waiter, group, "success") + sourceCalls(loader, group, "success"); n != 1 {
				t.Fatalf("%v loader calls across both processes, want 1", n)
			}
		})
	}
}
