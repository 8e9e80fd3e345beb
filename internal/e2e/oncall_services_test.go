package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/cmd/cachewatch/demo"
	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/instrument"
)

// The on-call test's services are what adopting teams run: go-redis
// clients with the hook added (code they did not write), and a service on
// the instrumented cache. Each serves its own registry as one scrape job.

// startHookOnly runs a service that sends 20 commands a second (GETs, a
// SET now and then) through one hooked go-redis client named client, with
// go-redis's default options, and serves its metrics.
func startHookOnly(t *testing.T, redisAddr, client string) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	rdb := hookedClient(t, reg, redisAddr, client)
	n := 0
	background(t, 1, 50*time.Millisecond, func(ctx context.Context) {
		n++
		key := "order:" + strconv.Itoa(n%50)
		if err := rdb.Get(ctx, key).Err(); errors.Is(err, redis.Nil) {
			_ = rdb.Set(ctx, key, "o", time.Minute).Err()
		}
	})
	return serve(t, reg)
}

// hookedClient is a go-redis client of addr with a hook named name on reg.
func hookedClient(t *testing.T, reg *prometheus.Registry, addr, name string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	h, err := hooks.New(hooks.Options{Registerer: reg, Name: name, Pool: rdb})
	if err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(h)
	return rdb
}

func newToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startRunOnceJob runs four instances of a periodic job, each a hooked
// client with no configuration: every 2 s each takes the job's lock once
// (SET job-lock token NX PX 30000) and skips its turn when it is busy.
// The winner lets the lock expire: nearly every attempt is busy.
func startRunOnceJob(t *testing.T, redisAddr string) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	for i := range 4 {
		rdb := hookedClient(t, reg, redisAddr, fmt.Sprintf("job-%d", i))
		background(t, 1, 2*time.Second, func(ctx context.Context) {
			_ = rdb.SetNX(ctx, "job-lock:nightly", newToken(), 30*time.Second).Err() // busy: skip the run
		})
	}
	return serve(t, reg)
}

// startWaitingWorkers runs four workers, each a hooked client, that wait
// for one lock: SET NX with their token, retried every 20 ms until
// acquired, held 50 ms and released by an owner-checked script. Their
// waits stay well within the lock-wait objective's 500 ms.
func startWaitingWorkers(t *testing.T, redisAddr string) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	release := redis.NewScript(releaseSrc)
	for i := range 4 {
		rdb := hookedClient(t, reg, redisAddr, fmt.Sprintf("worker-%d", i))
		background(t, 1, 100*time.Millisecond, func(ctx context.Context) {
			token := newToken()
			for try := 0; try < 50; try++ {
				if ok, err := rdb.SetNX(ctx, "lock:ledger:7", token, 2*time.Second).Result(); err != nil || ok {
					if ok {
						sleep(ctx, 50*time.Millisecond)
						_ = release.Run(ctx, rdb, []string{"lock:ledger:7"}, token).Err()
					}
					return
				}
				sleep(ctx, 20*time.Millisecond)
			}
		})
	}
	return serve(t, reg)
}

// catalogService is a service that reads 20 items through an instrumented
// cache, 10 lookups a second; its loader can be made to fail.
type catalogService struct {
	addr    string
	failing atomic.Bool
	errors  atomic.Int64
}

func startCatalog(t *testing.T, redisAddr string) *catalogService {
	t.Helper()
	s := &catalogService{}
	reg := prometheus.NewRegistry()
	cw := newInstrumented(t, reg, redisAddr, "catalog")
	// Values are fresh for 200ms and served stale up to 400ms: a failing
	// source reaches callers almost at once.
	items, err := instrument.NewCache[string](cw, instrument.CacheOptions{
		FreshTTL: 200 * time.Millisecond, HardTTL: 400 * time.Millisecond, FailureHoldoff: 100 * time.Millisecond,
		RedisTimeout: liveTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { items.Close() })
	load := func(context.Context) (string, error) {
		if s.failing.Load() {
			return "", errors.New("catalog database unavailable")
		}
		return "item", nil
	}
	background(t, 1, 100*time.Millisecond, func(ctx context.Context) {
		if _, err := items.Fetch(ctx, "item:"+strconv.Itoa(mrand.IntN(20)), load); err != nil {
			s.errors.Add(1)
		}
	})
	s.addr = serve(t, reg)
	return s
}

// startDemoPhase runs one phase of the demo's fleet (unprotected or on
// cachewatch) on its own Redis for d, serving its metrics, as `cachewatch
// demo --phase … --duration …` does.
func startDemoPhase(t *testing.T, redisAddr, phase string, d time.Duration) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := demo.Run(ctx, demo.Options{RedisURL: "redis://" + redisAddr, Duration: d, Phase: phase, Registry: reg})
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("demo %s: %v", phase, err)
		}
	})
	return serve(t, reg)
}

// quietLogs keeps go-redis's dial errors against killed servers out of
// the test's output; the metrics report them.
func quietLogs() { redis.SetLogger(discardLogger{}) }

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}
