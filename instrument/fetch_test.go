package instrument

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/keygrouptest"
	"github.com/cachewatch/cachewatch/internal/luascript"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// fetchClock is an injectable clock for TTL decisions: its readings are
// stepped by the test (add), its timers and tickers are real, so waiters
// still poll and Redis calls still time out.
type fetchClock struct {
	clockwork.Clock
	mu sync.Mutex
	t  time.Time
}

func newFetchClock() *fetchClock {
	return &fetchClock{Clock: clockwork.NewRealClock(), t: time.Unix(1_800_000_000, 0)}
}

func (c *fetchClock) Now() time.Time { return c.now() }

func (c *fetchClock) Since(t time.Time) time.Duration { return c.now().Sub(t) }

func (c *fetchClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fetchClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// fetchProcess is one simulated process: its own go-redis client, Client
// and Cache. All share one registry, so counters read back are the sum over
// processes, as Prometheus would add them up.

func newFetchCache(t *testing.T, rdb redis.UniversalClient, reg prometheus.Registerer, clk *fetchClock, o CacheOptions) *Cache[string] {
	t.Helper()
	c, err := New(rdb, Options{Registerer: reg, Clock: clk, KeyGroups: keygrouptest.Named(t)})
	if err != nil {
		t.Fatal(err)
	}
	if o.Name == "" { // each simulated process its own breaker series on the shared registry
		o.Name = fmt.Sprint("process", processes.Add(1))
	}
	if o.RedisTimeout == 0 {
		// Far above the default 1s: on a busy CI machine a round trip can
		// wait that long for the CPU. A timed-out read is sent again, but
		// BreakerFailures timeouts in a row open the breaker, and an open
		// breaker sends lookups to the loader, which the coalescing tests
		// would count as a stampede. Tests of timeouts set their own.
		o.RedisTimeout = 10 * time.Second
	}
	return mustCache[string](t, c, o)
}

var processes atomic.Int64

// written waits until ca's writes of keys have landed: a Fetch that loaded
// returns before its write (pendingWrites), and a test that reads Redis or
// the write's counters directly, not through the Cache, waits for it.
func written[T any](ca *Cache[T], keys ...string) {
	for _, k := range keys {
		ca.c.writes.wait(context.Background(), keysFor(k).value)
	}
}

func lookups(ca *Cache[string], group, result string) float64 {
	return testutil.ToFloat64(ca.c.m.lookups.WithLabelValues(group, result))
}

// fallbacks reads cachewatch_cache_fallbacks_total of ca for cause.
func fallbacks(ca *Cache[string], cause string) float64 {
	return testutil.ToFloat64(ca.deg.fallbacks.WithLabelValues(cause))
}

func loaderCalls(ca *Cache[string], group, result string) float64 {
	return testutil.ToFloat64(ca.c.m.loaderCalls.WithLabelValues(group, result))
}

func lintRegistry(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Fatalf("metrics lint: %v %v", err, problems)
	}
}

// stampede runs perCache concurrent Fetches of key on every cache and
// returns the values served.
func stampede(t *testing.T, caches []*Cache[string], perCache int, key string, load func(context.Context) (string, error)) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	got := make([]string, len(caches)*perCache)
	errs := make([]error, len(got))
	for i, ca := range caches {
		for j := 0; j < perCache; j++ {
			wg.Add(1)
			go func(n int) {
				defer wg.Done()
				got[n], errs[n] = ca.Fetch(ctx, key, load)
			}(i*perCache + j)
		}
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("Fetch: %v", err)
		}
	}
	return got
}

// crowdLoader returns a loader for a stampede of processes×perCache
// Fetches of key (see stampede) that counts its calls and answers v once
// every caller has arrived: in each process, all callers but the flight's
// leader have joined its flight, and the flight of every process but the
// loading one waits for the load. So no caller can come late enough to
// find the value already stored.
func crowdLoader(t *testing.T, key string, processes, perCache int, v string, calls *atomic.Int64) func(context.Context) (string, error) {
	joined := joinCounter(t, key)
	var waiting atomic.Int64
	testHookWaiting = func(k string) {
		if k == key {
			waiting.Add(1)
		}
	}
	t.Cleanup(func() { testHookWaiting = nil })
	return func(ctx context.Context) (string, error) {
		calls.Add(1)
		err := poll.Check(ctx, poll.Bound, time.Millisecond, func() error {
			if j, w := joined.Load(), waiting.Load(); j < int64(processes*(perCache-1)) || w < int64(processes-1) {
				return fmt.Errorf("%d callers joined a flight, %d flights wait", j, w)
			}
			return nil
		})
		return v, err
	}
}

func TestFetchColdStampedeOneLoaderCall(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	clk := newFetchClock()
	opts := CacheOptions{MissBurstWindow: time.Minute, MissBurstThreshold: 50}
	var caches []*Cache[string]
	for p := 0; p < 3; p++ {
		caches = append(caches, newFetchCache(t, srv.Client(t), reg, clk, opts))
	}
	var calls atomic.Int64
	const perCache = 200
	load := crowdLoader(t, "product:42", len(caches), perCache, "v1", &calls)
	for _, v := range stampede(t, caches, perCache, "product:42", load) {
		if v != "v1" {
			t.Fatalf("served %q, want v1", v)
		}
	}
	ca := caches[0]
	g := ca.c.group("product:42")
	if calls.Load() != 1 {
		t.Fatalf("loader called %d times by %d callers in 3 processes, want 1", calls.Load(), 3*perCache)
	}
	if got := loaderCalls(ca, g, "success"); got != 1 {
		t.Fatalf("loader_calls_total{success} = %v, want 1", got)
	}
	miss, coalesced := lookups(ca, g, resultMiss), lookups(ca, g, resultCoalesced)
	other := lookups(ca, g, resultHit) + lookups(ca, g, resultStale) + lookups(ca, g, resultFallback) + lookups(ca, g, resultError)
	if miss != 1 || miss+coalesced+other != 3*perCache || other != 0 {
		t.Fatalf("lookups miss=%v coalesced=%v other=%v, want 1 + %d + 0", miss, coalesced, other, 3*perCache-1)
	}
	// Each process's detector saw 200 misses in one window: one burst each.
	if got := testutil.ToFloat64(ca.c.m.missBursts.WithLabelValues(g)); got != 3 {
		t.Fatalf("miss bursts = %v, want 3 (one per process)", got)
	}
	// The value is now cached: a hit, no new load.
	if v, err := caches[2].Fetch(context.Background(), "product:42", load); err != nil || v != "v1" || calls.Load() != 1 {
		t.Fatalf("after stampede: %q, %v, %d calls", v, err, calls.Load())
	}
	if got := lookups(ca, g, resultHit); got != 1 {
		t.Fatalf("hits = %v, want 1", got)
	}
	lintRegistry(t, reg)
}

func TestFetchStaleServedOneRefresh(t *testing.T) {
	reg := prometheus.NewRegistry()
	clk := newFetchClock()
	caches := staleValueInThreeProcesses(t, reg, clk, "price:7", "old")
	ctx := context.Background()

	var calls atomic.Int64
	release := make(chan struct{})
	load := func(ctx context.Context) (string, error) {
		calls.Add(1)
		<-release // the refresh outlasts every stale caller
		return "new", nil
	}
	const perCache = 200
	for _, v := range stampede(t, caches, perCache, "price:7", load) {
		if v != "old" {
			t.Fatalf("served %q while refreshing, want the stale value", v)
		}
	}
	close(release)
	for _, ca := range caches {
		ca.bg.wait()
	}
	ca := caches[0]
	g := ca.c.group("price:7")
	if calls.Load() != 1 {
		t.Fatalf("%d refreshes for one stale key, want 1", calls.Load())
	}
	if got := lookups(ca, g, resultStale); got != 3*perCache {
		t.Fatalf("stale lookups = %v (hit %v, miss %v, coalesced %v, fallback %v, error %v), want %d",
			got, lookups(ca, g, resultHit), lookups(ca, g, resultMiss), lookups(ca, g, resultCoalesced),
			lookups(ca, g, resultFallback), lookups(ca, g, resultError), 3*perCache)
	}
	if got := testutil.CollectAndCount(ca.c.m.staleAge); got != 1 {
		t.Fatalf("stale age series = %d", got)
	}
	if got := loaderCalls(ca, g, "success"); got != 2 { // first load + one refresh
		t.Fatalf("loader_calls_total{success} = %v, want 2", got)
	}
	v, err := caches[1].Fetch(ctx, "price:7", load)
	if err != nil || v != "new" {
		t.Fatalf("after refresh: %q, %v; want new", v, err)
	}
	if got := lookups(ca, g, resultHit); got != 1 {
		t.Fatalf("hits = %v, want 1", got)
	}
	lintRegistry(t, reg)
}

// staleValueInThreeProcesses returns three processes' Caches on one Redis
// where key holds value, loaded by the first process and now stale.
func staleValueInThreeProcesses(t *testing.T, reg prometheus.Registerer, clk *fetchClock, key, value string) []*Cache[string] {
	t.Helper()
	srv := redistest.Start(t)
	// Without process copies every caller reads Redis (TestFetchLocalCopies
	// covers them): the refresh, once written, is what the next caller of
	// any process is served. The refresh claim outlasts the stampede however
	// slow the machine: lapsed, it would let a second process refresh.
	opts := CacheOptions{FreshTTL: time.Minute, HardTTL: time.Hour, LocalCopies: -1, RefreshClaimTTL: 5 * time.Minute}
	var caches []*Cache[string]
	held := &heldFirstWrite{release: make(chan struct{})}
	for p := 0; p < 3; p++ {
		rdb := srv.Client(t)
		if p == 0 {
			rdb.AddHook(held) // as on a busy machine
		}
		caches = append(caches, newFetchCache(t, rdb, reg, clk, opts))
	}
	if _, err := caches[0].Fetch(context.Background(), key, func(context.Context) (string, error) { return value, nil }); err != nil {
		t.Fatal(err)
	}
	// Fetch answers before its write lands. Until it has, the key is not
	// stale but missing to the other processes: their callers would wait
	// for that write and count as coalesced (rightly: they waited for
	// another caller's load), and how many did would depend on how soon
	// the write landed.
	if caches[0].c.writes.n.Load() != 1 {
		t.Fatal("Fetch returned after its write landed, want before")
	}
	close(held.release)
	written(caches[0], key)
	clk.add(2 * time.Minute) // past fresh (≤ 1m with jitter), far from hard
	return caches
}

// heldFirstWrite is a go-redis hook that holds the first write of a
// loaded value (the write script) until release closes, as a busy machine
// may delay it: the loader's callers are answered meanwhile.
type heldFirstWrite struct {
	passHooks
	release chan struct{}
	done    atomic.Bool
}

func (h *heldFirstWrite) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd, luascript.FetchWrite) && !h.done.Swap(true) {
			select {
			case <-h.release:
			case <-time.After(poll.Bound): // a Fetch that waits for its write fails, not hangs
			}
		}
		return next(ctx, cmd)
	}
}

// failingRefreshCache returns a Cache on a fresh server for the
// failing-refresh tests: 1m fresh, 10m hard, no jitter, and no hold-off, so
// each failure is retried by the next stale read.
func failingRefreshCache(t *testing.T, reg prometheus.Registerer, clk *fetchClock) *Cache[string] {
	t.Helper()
	return newFetchCache(t, redistest.Start(t).Client(t), reg, clk, CacheOptions{
		FreshTTL: time.Minute, HardTTL: 10 * time.Minute, Jitter: -1, FailureHoldoff: -1})
}

func TestFetchFailingRefreshServesStaleUntilHardTTL(t *testing.T) {
	reg, clk := prometheus.NewRegistry(), newFetchClock()
	ca := failingRefreshCache(t, reg, clk)
	ctx := context.Background()
	key := "report:9"
	g := ca.c.group(key)
	if _, err := ca.Fetch(ctx, key, func(context.Context) (string, error) { return "v1", nil }); err != nil {
		t.Fatal(err)
	}
	errSource := errors.New("source down")
	var calls atomic.Int64
	failing := func(context.Context) (string, error) { calls.Add(1); return "", errSource }

	clk.add(2 * time.Minute)
	const failures = 3
	for i := 1; i <= failures; i++ {
		v, err := ca.Fetch(ctx, key, failing)
		if err != nil || v != "v1" {
			t.Fatalf("stale fetch %d: %q, %v; want v1", i, v, err)
		}
		ca.bg.wait() // the background refresh has failed
		if got := testutil.ToFloat64(ca.c.m.loaderConsecutive.WithLabelValues(g)); got != float64(i) {
			t.Fatalf("consecutive failures gauge = %v after %d failed refreshes", got, i)
		}
	}
	if got := testutil.ToFloat64(ca.c.m.loaderRefreshFailures.WithLabelValues(g)); got != failures {
		t.Fatalf("loader_refresh_failures_total = %v, want %d", got, failures)
	}

	clk.add(9 * time.Minute) // 11m after the write: past the hard TTL
	v, err := ca.Fetch(ctx, key, failing)
	if !errors.Is(err, ErrHardTTLExpired) || !errors.Is(err, errSource) || v != "" {
		t.Fatalf("past hard TTL: %q, %v; want no value and ErrHardTTLExpired wrapping the source error", v, err)
	}
	if got := testutil.ToFloat64(ca.c.m.hardTTLExpired.WithLabelValues(g)); got != 1 {
		t.Fatalf("hard_ttl_expired_total = %v, want 1", got)
	}
	if calls.Load() != failures+1 || loaderCalls(ca, g, "error") != failures+1 {
		t.Fatalf("loader calls %d, loader_calls{error} %v; want %d", calls.Load(), loaderCalls(ca, g, "error"), failures+1)
	}
	if got := testutil.ToFloat64(ca.c.m.loaderConsecutive.WithLabelValues(g)); got != failures+1 {
		t.Fatalf("consecutive failures gauge = %v, want %d", got, failures+1)
	}
	if got := lookups(ca, g, resultStale); got != failures {
		t.Fatalf("stale lookups = %v, want %d", got, failures)
	}
	if got := lookups(ca, g, resultError); got != 1 {
		t.Fatalf("error lookups = %v, want 1", got)
	}

	// The source recovers: a new value, the failure run is over.
	if v, err := ca.Fetch(ctx, key, func(context.Context) (string, error) { return "v2", nil }); err != nil || v != "v2" {
		t.Fatalf("after recovery: %q, %v", v, err)
	}
	written(ca, key)
	if got := testutil.ToFloat64(ca.c.m.loaderConsecutive.WithLabelValues(g)); got != 0 {
		t.Fatalf("consecutive failures gauge = %v after a success, want 0", got)
	}
	lintRegistry(t, reg)
}

// A key whose refreshes keep failing leaves the consecutive-failures gauge
// once its stored value has expired in Redis, even if nobody fetches it
// again: any later read of the cache ends such runs.
func TestFetchFailureRunEndsWithTheValue(t *testing.T) {
	clk := newFetchClock()
	ca := failingRefreshCache(t, prometheus.NewRegistry(), clk)
	ctx := context.Background()
	ok := func(context.Context) (string, error) { return "v", nil }
	failing := func(context.Context) (string, error) { return "", errors.New("source down") }
	if _, err := ca.Fetch(ctx, "ledger:1", ok); err != nil {
		t.Fatal(err)
	}
	g := ca.c.group("ledger:1")
	gauge := func() float64 { return testutil.ToFloat64(ca.c.m.loaderConsecutive.WithLabelValues(g)) }
	clk.add(2 * time.Minute)
	for range 2 {
		if _, err := ca.Fetch(ctx, "ledger:1", failing); err != nil {
			t.Fatal(err)
		}
		ca.bg.wait()
	}
	if got := gauge(); got != 2 {
		t.Fatalf("gauge = %v after 2 failed refreshes, want 2", got)
	}
	// The value is kept in Redis 11m (hard TTL + 10%); nobody asks for
	// ledger:1 again, but another key of the group is read past that.
	clk.add(12 * time.Minute)
	if _, err := ca.Fetch(ctx, "ledger:2", ok); err != nil {
		t.Fatal(err)
	}
	if got := gauge(); got != 0 || ca.fails.size.Load() != 0 {
		t.Fatalf("gauge = %v (%d runs kept) once the failing value expired, want 0 and none", got, ca.fails.size.Load())
	}
}

func TestFetchWaitersWokenByWrite(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	clk := newFetchClock()
	// Polling alone would take an hour: only the notification can wake the
	// waiter before its 10s deadline.
	opts := CacheOptions{PollInterval: time.Hour}
	a := newFetchCache(t, srv.Client(t), reg, clk, opts)
	b := newFetchCache(t, srv.Client(t), reg, clk, opts)
	key := "feed:{77}"

	waiting := waitingOn(t, key)

	started, release := make(chan struct{}), make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Fetch(context.Background(), key, func(context.Context) (string, error) {
			close(started)
			<-release
			return "landed", nil
		})
		aDone <- err
	}()
	<-started // a holds the claim

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bDone := make(chan error, 1)
	var got string
	go func() {
		var err error
		got, err = b.Fetch(ctx, key, func(context.Context) (string, error) { return "", errors.New("b must not load") })
		bDone <- err
	}()
	select {
	case <-waiting: // b read a miss, found the claim taken, and blocks
	case err := <-bDone:
		t.Fatalf("b returned before waiting: %v", err)
	}
	close(release)
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; err != nil {
		t.Fatalf("waiter not woken by the write (poll interval 1h, deadline 10s): %v", err)
	}
	g := a.c.group(key)
	if got != "landed" || lookups(a, g, resultMiss) != 1 || lookups(a, g, resultCoalesced) != 1 {
		t.Fatalf("b got %q; lookups miss=%v coalesced=%v", got, lookups(a, g, resultMiss), lookups(a, g, resultCoalesced))
	}
}

func TestFetchNegativeCaching(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	clk := newFetchClock()
	ca := newFetchCache(t, srv.Client(t), reg, clk, CacheOptions{NegativeTTL: time.Minute})
	var calls atomic.Int64
	load := func(context.Context) (string, error) {
		calls.Add(1)
		return "", fmt.Errorf("user 5: %w", ErrNotFound)
	}
	for i := 0; i < 3; i++ {
		if _, err := ca.Fetch(context.Background(), "user:5", load); !errors.Is(err, ErrNotFound) {
			t.Fatalf("fetch %d: %v, want ErrNotFound", i, err)
		}
	}
	g := ca.c.group("user:5")
	if calls.Load() != 1 || lookups(ca, g, resultMiss) != 1 || lookups(ca, g, resultHit) != 2 {
		t.Fatalf("calls=%d miss=%v hit=%v; want the not-found cached after one call",
			calls.Load(), lookups(ca, g, resultMiss), lookups(ca, g, resultHit))
	}
	clk.add(2 * time.Minute) // negative entry past its TTL: asked again
	if _, err := ca.Fetch(context.Background(), "user:5", load); !errors.Is(err, ErrNotFound) || calls.Load() != 2 {
		t.Fatalf("after negative TTL: %v, %d calls", err, calls.Load())
	}
}

func TestFetchXFetchRefreshesEarly(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	clk := newFetchClock()
	// A huge β makes the early refresh certain once a load has taken time.
	ca := newFetchCache(t, srv.Client(t), reg, clk, CacheOptions{FreshTTL: time.Hour, Beta: 1e9})
	var calls atomic.Int64
	load := func(context.Context) (string, error) {
		clk.add(time.Second) // the load takes a (simulated) second
		return fmt.Sprint("v", calls.Add(1)), nil
	}
	if v, err := ca.Fetch(context.Background(), "rank:1", load); err != nil || v != "v1" {
		t.Fatal(v, err)
	}
	v, err := ca.Fetch(context.Background(), "rank:1", load)
	ca.bg.wait()
	g := ca.c.group("rank:1")
	if err != nil || v != "v1" || calls.Load() != 2 || lookups(ca, g, resultHit) != 1 {
		t.Fatalf("fresh fetch with XFetch: %q, %v, %d calls, %v hits; want v1 served and one early refresh",
			v, err, calls.Load(), lookups(ca, g, resultHit))
	}
}

func TestFetchCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	reg := prometheus.NewRegistry()
	clk := newFetchClock()
	var caches []*Cache[string]
	for p := 0; p < 2; p++ {
		caches = append(caches, newFetchCache(t, cl.Client(t), reg, clk, CacheOptions{PollInterval: time.Hour}))
	}
	// A plain key (wrapped in a hash tag) and one with its own tag.
	for _, key := range []string{"plain:key", "order:{31}"} {
		var calls atomic.Int64
		load := crowdLoader(t, key, len(caches), 50, "v-"+key, &calls)
		for _, v := range stampede(t, caches, 50, key, load) {
			if v != "v-"+key {
				t.Fatalf("%s: served %q", key, v)
			}
		}
		if calls.Load() != 1 {
			g := caches[0].c.group(key)
			t.Fatalf("%s: loader called %d times on the cluster, want 1 miss=%v coal=%v fb=%v err=%v refused=%v hit=%v", key, calls.Load(), lookups(caches[0], g, resultMiss), lookups(caches[0], g, resultCoalesced), lookups(caches[0], g, resultFallback), lookups(caches[0], g, resultError), staleWritesRefused(caches[0], g), lookups(caches[0], g, resultHit))
		}
		g := caches[0].c.group(key)
		if m, c := lookups(caches[0], g, resultMiss), lookups(caches[0], g, resultCoalesced); m != 1 || m+c != 100 {
			t.Fatalf("%s: lookups miss=%v coalesced=%v", key, m, c)
		}
	}
}

func TestKeysForSameSlot(t *testing.T) {
	for key, want := range map[string]string{
		"plain:key": "plain:{key}", "user:42:profile": "user:{42:profile}", "order:{31}": "order:{31}",
		"odd:{}": "odd:{{}}", "nocolon": "{nocolon}", "trailing:": "{trailing:}",
	} {
		k := keysFor(key)
		if k.value != want || k.claim != want+":claim" || k.waiters != want+":waitq" {
			t.Fatalf("keysFor(%q) = %+v", key, k)
		}
	}
}

// waitingOn signals (once, without blocking) each time a caller starts
// waiting for another process's load of key.
func waitingOn(t *testing.T, key string) <-chan struct{} {
	waiting := make(chan struct{}, 1)
	testHookWaiting = func(k string) {
		if k == key {
			select {
			case waiting <- struct{}{}:
			default:
			}
		}
	}
	t.Cleanup(func() { testHookWaiting = nil })
	return waiting
}

// The loader's context is bounded by RefreshClaimTTL (Fetch's doc), whether the
// flight loads under the claim or, with Redis unavailable, as a fallback; a
// flight that finds the value calls no loader.
func TestFetchLoaderContextBoundedByRefreshClaimTTL(t *testing.T) {
	srv := redistest.Start(t)
	const claimTTL = 7 * time.Second
	ca := newFetchCache(t, srv.Client(t), prometheus.NewRegistry(), newFetchClock(), CacheOptions{
		RefreshClaimTTL: claimTTL, RedisTimeout: 100 * time.Millisecond, BreakerFailures: 1, BreakerHalfOpenAfter: time.Hour})
	var loads atomic.Int64
	load := func(ctx context.Context) (string, error) {
		loads.Add(1)
		dl, ok := ctx.Deadline()
		if left := time.Until(dl); !ok || left <= 0 || left > claimTTL {
			return "", fmt.Errorf("loader's deadline %v away (set: %v), want within RefreshClaimTTL %v", left, ok, claimTTL)
		}
		return "v", nil
	}
	// The caller's own context has no deadline: the bound is the flight's.
	ctx := context.Background()
	for _, key := range []string{"bound:loaded", "bound:loaded"} { // the second finds the value
		if _, err := ca.Fetch(ctx, key, load); err != nil {
			t.Fatal(err)
		}
	}
	if n := loads.Load(); n != 1 {
		t.Fatalf("loader called %d times for a load and a hit, want 1", n)
	}
	srv.Pause()
	defer srv.Resume()
	if _, err := ca.Fetch(ctx, "bound:fallback", load); err != nil {
		t.Fatal(err)
	}
	if got := loaderCalls(ca, ca.c.group("bound:fallback"), "success"); got != 1 {
		t.Fatalf("fallback loader calls = %v, want 1", got)
	}
}
