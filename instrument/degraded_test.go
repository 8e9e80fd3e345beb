package instrument

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/signals"
)

func TestFetchDegradedRedisPausedKilledRestarted(t *testing.T) {
	r := newDegradedRig(t)

	r.fetch("healthy")
	if lookups(r.ca, r.g, resultMiss) != 1 || r.state() != float64(gobreaker.StateClosed) {
		t.Fatalf("healthy: miss=%v state=%v", lookups(r.ca, r.g, resultMiss), r.state())
	}
	r.paused()
	r.killed()
	r.restarted()
	r.checkEveryFetchCounted()
	lintRegistry(t, r.reg)
}

// degradedRig is one cache in front of a Redis that the degraded-mode
// test stops, kills and restarts, with the loader calls it made.
type degradedRig struct {
	t     *testing.T
	srv   *redistest.Server
	reg   *prometheus.Registry
	clk   *fetchClock
	ca    *Cache[string]
	g     string
	calls atomic.Int64
	load  func(context.Context) (string, error)
	reads *readsSent // the cache's fetch reads, announced as they are sent
}

func newDegradedRig(t *testing.T) *degradedRig {
	r := &degradedRig{t: t, srv: redistest.Start(t), reg: prometheus.NewRegistry(), clk: newFetchClock()}
	// MaxRetries -1 and one dial attempt: a dead server fails fast instead
	// of being retried (go-redis's default five dials take 500ms, longer
	// than RedisTimeout: the fallback would count a timeout).
	rdb := redistest.NewClient(t, &redis.Options{Addr: r.srv.Addr, MaxRetries: -1, DialerRetries: 1})
	r.reads = &readsSent{sent: make(chan struct{}, 1)}
	rdb.AddHook(r.reads)
	r.ca = newFetchCache(t, rdb, r.reg, r.clk, CacheOptions{
		RedisTimeout: 300 * time.Millisecond, BreakerFailures: 2, BreakerHalfOpenAfter: 200 * time.Millisecond,
		FallbackConcurrency: 2, Name: "degraded-test"})
	r.load = func(context.Context) (string, error) { r.calls.Add(1); return "from-source", nil }
	r.g = r.ca.c.group("item:1")
	return r
}

// state is the breaker state gauge.
func (r *degradedRig) state() float64 {
	return testutil.ToFloat64(r.ca.c.m.breakerState.WithLabelValues("degraded-test"))
}

func (r *degradedRig) fetch(what string) {
	r.t.Helper()
	// The deadline is the bound: Fetch must answer within it although
	// go-redis itself would wait for its 3s ReadTimeout.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if v, err := r.ca.Fetch(ctx, "item:1", r.load); err != nil || v != "from-source" {
		r.t.Fatalf("%s: %q, %v; want the source's value within the deadline", what, v, err)
	}
}

// paused: a stopped Redis (SIGSTOP: connections open, nothing answered)
// is a fallback counted as a timeout.
func (r *degradedRig) paused() {
	t, ca, g := r.t, r.ca, r.g
	r.srv.Pause()
	r.clk.add(time.Hour)
	r.fetch("paused")
	if got := lookups(ca, g, resultFallback); got != 1 {
		t.Fatalf("fallback lookups = %v after a fetch against a stopped Redis, want 1", got)
	}
	// The read timed out and was sent again until the timeouts opened the
	// breaker: a stalled Redis is counted as the timeout it is.
	if got, down := fallbacks(ca, signals.FallbackTimeout), fallbacks(ca, signals.FallbackRedisDown); got != 1 || down != 0 {
		t.Fatalf("fallbacks{cause=timeout} = %v, {cause=redis_down} = %v against a stopped Redis; want 1, 0", got, down)
	}
}

// killed: Redis killed mid-fetch opens the breaker; its trial counts the
// refused connection, and with the breaker open every fetch falls back.
func (r *degradedRig) killed() {
	t, ca, g := r.t, r.ca, r.g
	done := make(chan struct{})
	r.reads.forget()
	go func() { defer close(done); r.fetch("killed mid-fetch") }()
	// Kill once the read is on its way to the stalled server (or the fetch
	// has been answered without one: the breaker may still be open).
	select {
	case <-r.reads.sent:
	case <-done:
	}
	// Kill continues the process before killing it, so the stalled read may
	// still be answered: this fetch is served either way, by Redis or by
	// the fallback.
	r.srv.Kill()
	<-done
	// With Redis dead, every fetch is a fallback and a Redis failure until
	// the breaker opens (2 consecutive failures).
	for i := 0; r.state() != float64(gobreaker.StateOpen); i++ {
		if i == 3 {
			t.Fatalf("breaker state gauge = %v after %d fetches against a dead Redis, want 2 (open)", r.state(), i)
		}
		r.fetch("redis dead")
	}
	// Once BreakerHalfOpenAfter has passed, the breaker lets one trial through:
	// it finds the connection refused, and its fallback counts that cause.
	poll.Until(t, "the breaker to let a trial through", func() bool { return ca.deg.breaker.State() == gobreaker.StateHalfOpen })
	r.fetch("trial against a dead Redis")
	if got := fallbacks(ca, signals.FallbackRedisDown); got != 1 {
		t.Fatalf("fallbacks{cause=redis_down} = %v after a trial against a dead Redis, want 1 (timeout %v, fallback lookups %v, state %v)", got, fallbacks(ca, signals.FallbackTimeout), lookups(ca, g, resultFallback), ca.deg.breaker.State())
	}
	before := lookups(ca, g, resultFallback)
	r.fetch("breaker open")
	if got := lookups(ca, g, resultFallback); got != before+1 {
		t.Fatalf("fallback lookups = %v with the breaker open, want %v", got, before+1)
	}
}

// restarted: once Redis is back (empty), lookups are served by it again
// and the breaker closes.
func (r *degradedRig) restarted() {
	t, ca, g := r.t, r.ca, r.g
	r.srv.Restart()
	servedByRedis := func() float64 { return lookups(ca, g, resultMiss) + lookups(ca, g, resultHit) }
	beforeRestart := servedByRedis()
	poll.Until(t, "a lookup served by Redis after its restart", func() bool {
		r.fetch("recovering")
		return servedByRedis() != beforeRestart
	})
	if got := r.state(); got != float64(gobreaker.StateClosed) {
		t.Fatalf("breaker state gauge = %v after recovery, want 0", got)
	}
}

// checkEveryFetchCounted: the loader calls, loader calls, lookups and
// fallbacks by cause agree, and nothing is left in flight.
func (r *degradedRig) checkEveryFetchCounted() {
	t, ca, g := r.t, r.ca, r.g
	// Every fetch loaded: by the fallback or, on a miss, under the claim.
	loads := lookups(ca, g, resultFallback) + lookups(ca, g, resultMiss)
	if int64(loaderCalls(ca, g, "success")) != r.calls.Load() || r.calls.Load() != int64(loads) {
		t.Fatalf("loader calls %d, loader_calls %v, fallback+miss lookups %v; want all equal",
			r.calls.Load(), loaderCalls(ca, g, "success"), loads)
	}
	var byCause float64
	for _, cause := range signals.FallbackCauses {
		byCause += fallbacks(ca, cause)
	}
	if fb := lookups(ca, g, resultFallback); byCause != fb || fallbacks(ca, signals.FallbackRedisError) != 0 {
		t.Fatalf("fallbacks by cause add up to %v (redis_error %v), fallback lookups %v; want equal, no redis_error",
			byCause, fallbacks(ca, signals.FallbackRedisError), fb)
	}
	if got := testutil.ToFloat64(ca.c.m.loaderInFlight.WithLabelValues("degraded-test")); got != 0 {
		t.Fatalf("loader_in_flight = %v at rest", got)
	}
}

func TestFetchFallbackConcurrencyBounded(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	clk := newFetchClock()
	ca := newFetchCache(t, srv.Client(t), reg, clk, CacheOptions{
		RedisTimeout: 100 * time.Millisecond, BreakerFailures: 1, BreakerHalfOpenAfter: time.Hour,
		FallbackConcurrency: 2, Name: "limit-test"})
	srv.Pause()
	inFlight := func() float64 { return testutil.ToFloat64(ca.c.m.loaderInFlight.WithLabelValues("limit-test")) }

	loads := &heldLoads{release: make(chan struct{})}
	load, release, peak := loads.load, loads.release, &loads.peak
	// Distinct keys, so in-process coalescing does not hide the limit.
	const callers = 6
	errs := make(chan error, callers)
	for i := 0; i < callers; i++ {
		go func(i int) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := ca.Fetch(ctx, "k:"+string(rune('a'+i)), load)
			errs <- err
		}(i)
	}
	poll.Until(t, "two fallback loads in flight", func() bool { return inFlight() >= 2 })
	// A caller whose context ends while every slot is taken is rejected,
	// not blocked.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := ca.Fetch(ctx, "k:late", load)
	cancel()
	if err == nil {
		t.Fatal("fetch with every source slot taken and its context ended: no error")
	}
	close(release)
	for i := 0; i < callers; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// The late caller's flight gives up its wait for a slot at the caller's
	// deadline, on its own goroutine: wait (bounded) until it has counted.
	rejected := func() float64 { return loaderCalls(ca, ca.c.group("k:late"), "rejected") }
	poll.Until(t, "the late caller's rejection to be counted", func() bool { return rejected() != 0 })
	if got := rejected(); got != 1 {
		t.Fatalf("loader_calls_total{rejected} = %v, want 1 (late fetch: %v; success %v error %v)", got, err, loaderCalls(ca, ca.c.group("k:late"), "success"), loaderCalls(ca, ca.c.group("k:late"), "error"))
	}
	if peak.Load() != 2 {
		t.Fatalf("peak concurrent fallback loads = %d, want the limit 2", peak.Load())
	}
	if inFlight() != 0 {
		t.Fatalf("loader_in_flight = %v at rest", inFlight())
	}
	srv.Resume()
}

// Error replies are Redis failing too: a user the ACL denies scripts gets
// NOPERM for every read, each lookup is served by the loader, and the
// fallbacks count the cause redis_error.
func TestFetchFallbackOnErrorReplies(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	if err := admin.Do(context.Background(), "ACL", "SETUSER", "noscripts", "on", ">pw", "~*", "&*", "+@all", "-@scripting").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redistest.NewClient(t, &redis.Options{Addr: srv.Addr, Username: "noscripts", Password: "pw"})
	reg := prometheus.NewRegistry()
	ca := newFetchCache(t, rdb, reg, newFetchClock(), CacheOptions{BreakerFailures: 100, Name: "noperm-test"})
	var calls atomic.Int64
	load := func(context.Context) (string, error) { calls.Add(1); return "from-source", nil }
	const n = 3
	for range n {
		if v, err := ca.Fetch(context.Background(), "item:1", load); err != nil || v != "from-source" {
			t.Fatalf("Fetch = %q, %v; want the source's value", v, err)
		}
	}
	g := ca.c.group("item:1")
	if calls.Load() != n || lookups(ca, g, resultFallback) != n || fallbacks(ca, signals.FallbackRedisError) != n {
		t.Fatalf("loader calls %d, fallback lookups %v, fallbacks{cause=redis_error} %v; want %d each",
			calls.Load(), lookups(ca, g, resultFallback), fallbacks(ca, signals.FallbackRedisError), n)
	}
	if got := fallbacks(ca, signals.FallbackTimeout) + fallbacks(ca, signals.FallbackRedisDown); got != 0 {
		t.Fatalf("fallbacks of other causes = %v, want 0", got)
	}
	lintRegistry(t, reg)
}

// readsSent is a go-redis hook that announces on sent (without waiting for
// room) each fetch read script call as it is sent, alone or in a pipeline.
type readsSent struct {
	passHooks
	sent chan struct{}
}

func (h *readsSent) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isFetchRead(cmd) {
			h.announce()
		}
		return next(ctx, cmd)
	}
}

func (h *readsSent) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, isFetchRead) {
			h.announce()
		}
		return next(ctx, cmds)
	}
}

func (h *readsSent) announce() {
	select {
	case h.sent <- struct{}{}:
	default:
	}
}

// forget drops an announcement not taken yet.
func (h *readsSent) forget() {
	select {
	case <-h.sent:
	default:
	}
}

// heldLoads is a loader whose calls wait for release, keeping the peak of
// calls running at once.
type heldLoads struct {
	running, peak atomic.Int64
	release       chan struct{}
}

func (h *heldLoads) load(context.Context) (string, error) {
	n := h.running.Add(1)
	for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
	}
	<-h.release
	h.running.Add(-1)
	return "v", nil
}
