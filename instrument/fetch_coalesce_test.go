package instrument

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/luascript"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// readGate is a go-redis hook that counts the read script's calls (EVALSHA,
// or EVAL after NOSCRIPT) and, while held, keeps each one from reaching
// Redis until released: a test can then make callers arrive while a read is
// in flight. Nothing Redis decides is faked; the calls go through as sent.
type readGate struct {
	passHooks
	calls   atomic.Int64
	only    string // when set, only the reads of this stored key are held
	mu      sync.Mutex
	release chan struct{} // nil: not held
	entered chan struct{} // receives one value per held call
}

func (g *readGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.release, g.entered = make(chan struct{}), make(chan struct{}, 64)
}

func (g *readGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.release != nil {
		close(g.release)
		g.release = nil
	}
}

// passHooks passes dials and pipelines through: a gate embeds it and
// holds single commands only.
type passHooks struct{}

func (passHooks) DialHook(next redis.DialHook) redis.DialHook { return next }

func (passHooks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (g *readGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isFetchRead(cmd) {
			g.calls.Add(1)
			g.mu.Lock()
			release, entered := g.release, g.entered
			g.mu.Unlock()
			if release != nil && (g.only == "" || cmd.Args()[3] == g.only) {
				entered <- struct{}{}
				<-release
			}
		}
		return next(ctx, cmd)
	}
}

func isFetchRead(cmd redis.Cmder) bool { return isScript(cmd, luascript.FetchRead) }

// isScript reports a single call of script (EVALSHA, or EVAL after
// NOSCRIPT).
func isScript(cmd redis.Cmder, script *luascript.Script) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	switch strings.ToLower(cmd.Name()) {
	case "evalsha":
		return args[1] == script.SHA
	case "eval":
		return args[1] == script.Src
	}
	return false
}

// gatedCache is newFetchCache with rdb passing reads through a readGate,
// which it returns. A held read must not time out into the fallback while
// callers gather, so Redis calls get 30s.
func gatedCache(t *testing.T, rdb *redis.Client, reg prometheus.Registerer, clk *fetchClock, o CacheOptions) (*Cache[string], *readGate) {
	t.Helper()
	gate := &readGate{}
	rdb.AddHook(gate)
	o.RedisTimeout = 30 * time.Second
	ca := newFetchCache(t, rdb, reg, clk, o)
	// The calls asked for while the gate holds one wait for it: the timed
	// flush (TestQueuedCallsDoNotWaitForAStuckRoundTrip) is off.
	ca.batch.flushAfter = time.Hour
	return ca, gate
}

// evalCalls reads EVALSHA + EVAL calls from the server's INFO commandstats.
func evalCalls(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		c, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseInt(c, 10, 64)
		if err != nil {
			t.Fatalf("commandstats %q: %v", line, err)
		}
		n += v
	}
	return n
}

// joinCounter counts the Fetches of key that joined a flight in progress.
func joinCounter(t *testing.T, key string) *atomic.Int64 {
	var joined atomic.Int64
	testHookJoined = func(k string) {
		if k == key {
			joined.Add(1)
		}
	}
	t.Cleanup(func() { testHookJoined = nil })
	return &joined
}

// fetchAll starts n Fetches of key on ca and returns a function that waits
// for them and returns their values (failing on any error).
func fetchAll(t *testing.T, ca *Cache[string], n int, key string, load func(context.Context) (string, error)) func() []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	got, errs := make([]string, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = ca.Fetch(ctx, key, load)
		}()
	}
	return func() []string {
		wg.Wait()
		cancel()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("fetch: %v", err)
			}
		}
		return got
	}
}

// Concurrent Fetches of a hot fresh key in one process share one read
// script call, and each caller still counts one lookup (a hit).
func TestFetchConcurrentReadsShareOneRoundTrip(t *testing.T) {
	rdb, reg := redistest.Start(t).Client(t), prometheus.NewRegistry()
	ca, gate := gatedCache(t, rdb, reg, newFetchClock(), CacheOptions{FreshTTL: time.Hour})
	const key, n = "product:{hot}", 50
	var loads atomic.Int64
	load := func(context.Context) (string, error) { loads.Add(1); return "v1", nil }
	if _, err := ca.Fetch(context.Background(), key, load); err != nil { // the key is now fresh
		t.Fatal(err)
	}
	written(ca, key)
	group := ca.c.group(key)
	hitsBefore, readsBefore, evalsBefore := lookups(ca, group, resultHit), gate.calls.Load(), evalCalls(t, rdb)

	joined := joinCounter(t, key)
	gate.hold()
	wait := fetchAll(t, ca, n, key, load)
	<-gate.entered // the first caller's read is in flight...
	poll.Until(t, "every other caller to join the flight", func() bool { return joined.Load() == n-1 })
	gate.open() // ...and every other caller is waiting for it
	for i, v := range wait() {
		if v != "v1" {
			t.Fatalf("caller %d got %q, want v1", i, v)
		}
	}

	if reads := gate.calls.Load() - readsBefore; reads != 1 {
		t.Errorf("%d read script calls for %d concurrent callers, want 1", reads, n)
	}
	// The server agrees: one script call (INFO itself is not an EVAL).
	if evals := evalCalls(t, rdb) - evalsBefore; evals != 1 {
		t.Errorf("Redis commandstats: %d EVALSHA/EVAL calls for %d callers, want 1", evals, n)
	}
	if got := lookups(ca, group, resultHit) - hitsBefore; got != n {
		t.Errorf("lookups{result=hit} grew by %v, want one per caller (%d)", got, n)
	}
	for _, r := range []string{resultStale, resultMiss, resultCoalesced, resultError, resultFallback} {
		if got := lookups(ca, group, r); r != resultMiss && got != 0 || r == resultMiss && got != 1 {
			t.Errorf("lookups{result=%s} = %v (want only the seeding miss and %d hits)", r, got, n)
		}
	}
	if loads.Load() != 1 {
		t.Errorf("loader called %d times, want 1 (the seed)", loads.Load())
	}
	lintRegistry(t, reg)
}

// A caller judges a shared read at its own clock: a value that was fresh
// when the read ran but is stale when the caller is answered counts as
// stale, with its age then; one past its hard TTL is not served at all —
// the callers read again, and one of them loads.
func TestFetchSharedReadJudgedAtCallersClock(t *testing.T) {
	clk := newFetchClock()
	// Without process copies: callers arriving once the value is stale
	// would be served the copy instead of joining the shared read.
	reg := prometheus.NewRegistry()
	ca, gate := gatedCache(t, redistest.Start(t).Client(t), reg, clk, CacheOptions{FreshTTL: time.Minute, HardTTL: 2 * time.Minute,
		Jitter: -1, LocalCopies: -1})
	const n = 20
	version := atomic.Int64{}
	load := func(context.Context) (string, error) { return "v" + strconv.FormatInt(version.Add(1), 10), nil }

	t.Run("stale by the time it lands", func(t *testing.T) {
		key := "alpha:{1}"
		group := ca.c.group(key)
		for _, v := range sharedReadLandingAfter(t, ca, gate, clk, 90*time.Second, key, n, load) {
			if v != "v1" {
				t.Fatalf("served %q, want the cached v1", v)
			}
		}
		if hit, stale := lookups(ca, group, resultHit), lookups(ca, group, resultStale); hit != 0 || stale != n {
			t.Errorf("lookups hit=%v stale=%v, want 0 and %d", hit, stale, n)
		}
		count, sum := staleAgeSeconds(t, reg, group)
		if count != n || sum != 30*n {
			t.Errorf("stale age observed %d times, sum %vs; want %d, each 30s past fresh", count, sum, n)
		}
	})

	t.Run("past the hard TTL by the time it lands", func(t *testing.T) {
		key := "beta:{1}"
		first := version.Load() + 1 // the seed's
		group := ca.c.group(key)
		served := sharedReadLandingAfter(t, ca, gate, clk, 3*time.Minute, key, n, load)
		want := "v" + strconv.FormatInt(first+1, 10)
		for _, v := range served {
			if v != want {
				t.Fatalf("served %q, want the reloaded %s (never the value past its hard TTL)", v, want)
			}
		}
		if version.Load() != first+1 {
			t.Errorf("loader called %d times after expiry, want 1", version.Load()-first)
		}
		miss, coalesced := lookups(ca, group, resultMiss), lookups(ca, group, resultCoalesced)
		hit, stale := lookups(ca, group, resultHit), lookups(ca, group, resultStale)
		// Every caller answered by a re-read that found the value past its
		// hard TTL counts one: the loader and those who waited for it.
		if got := testutil.ToFloat64(ca.c.m.hardTTLExpired.WithLabelValues(group)); got != miss-1+coalesced || got == 0 {
			t.Errorf("hard TTL expiries counted %v, want %v (the reload's callers)", got, miss-1+coalesced)
		}
		if stale != 0 {
			t.Errorf("lookups stale=%v: the expired value was counted as served", stale)
		}
		// The seed's miss, then one loader and n-1 callers who waited for
		// it — or, on a busy machine, whose re-read came after the reload
		// had landed: a fresh hit of the new value, counted as one.
		if miss != 2 || coalesced+hit != n-1 {
			t.Errorf("lookups miss=%v coalesced=%v hit=%v, want 2 and %d waiting or hitting the reload", miss, coalesced, hit, n-1)
		}
	})
	lintRegistry(t, reg)
}

// sharedReadLandingAfter stores key's value (load), then has n callers
// share one read of it whose reply lands after clk has moved on by d, and
// returns what each was served.
func sharedReadLandingAfter(t *testing.T, ca *Cache[string], gate *readGate, clk *fetchClock, d time.Duration,
	key string, n int, load func(context.Context) (string, error)) []string {
	t.Helper()
	if _, err := ca.Fetch(context.Background(), key, load); err != nil {
		t.Fatal(err)
	}
	joined := joinCounter(t, key)
	gate.hold()
	wait := fetchAll(t, ca, n, key, load)
	<-gate.entered // the read has taken its time: the value is as it was at it
	clk.add(d)
	poll.Until(t, "the other callers to join", func() bool { return joined.Load() == int64(n-1) })
	gate.open()
	return wait()
}

// staleAgeSeconds returns the count and sum of group's stale age histogram.
func staleAgeSeconds(t *testing.T, reg *prometheus.Registry, group string) (uint64, float64) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "cachewatch_cache_stale_age_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "key_group" && l.GetValue() == group {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	t.Fatalf("no stale age series for group %q", group)
	return 0, 0
}

// Callers waiting on one flight leave when their own context ends, and only
// they do: here the flight's read is held in Redis's path while callers
// wait on it under a context shared by several of them (the flight's
// leader among them), another shared context, contexts of their own, and
// no context that can end. Cancelling the first shared context releases
// exactly its callers, and one of their own releases exactly that caller;
// the leader's leaving does not end the flight, which then serves every
// other caller. Each caller counts one lookup: error for those who left.
func TestFetchWaitersLeaveWithTheirOwnContext(t *testing.T) {
	reg := prometheus.NewRegistry()
	ca, gate := gatedCache(t, redistest.Start(t).Client(t), reg, newFetchClock(), CacheOptions{FreshTTL: time.Hour})
	const key = "catalog:{7}"
	load := func(context.Context) (string, error) { return "v1", nil }
	if _, err := ca.Fetch(context.Background(), key, load); err != nil {
		t.Fatal(err)
	}
	group := ca.c.group(key)
	hitsBefore, readsBefore := lookups(ca, group, resultHit), gate.calls.Load()

	shared, cancelShared := context.WithCancel(context.Background())
	other, cancelOther := context.WithCancel(context.Background())
	defer cancelOther()
	own, cancelOwn := context.WithCancel(context.Background())
	callers := &waitingCallers{t: t, ca: ca, key: key, load: load}
	joined := joinCounter(t, key)
	gate.hold()
	leader := callers.start(shared)
	<-gate.entered // the leader's read is in flight and held
	var sharedCallers []chan fetchAnswer
	for range 9 {
		sharedCallers = append(sharedCallers, callers.start(shared))
	}
	served := callers.startStaying(other)
	ownCaller := callers.start(own)
	const joiners = 9 + 10 + 5 + 5 + 1
	poll.Until(t, "every caller to join the held flight", func() bool { return joined.Load() == joiners })

	cancelShared()
	for i, ch := range append([]chan fetchAnswer{leader}, sharedCallers...) {
		if a := callers.recv(ch); !errors.Is(a.err, context.Canceled) {
			t.Fatalf("caller %d of the cancelled context: got (%q, %v), want context.Canceled", i, a.v, a.err)
		}
	}
	// A caller arriving with the ended context leaves at once too.
	if a := callers.recv(callers.start(shared)); !errors.Is(a.err, context.Canceled) {
		t.Fatalf("late caller of the cancelled context: got (%q, %v), want context.Canceled", a.v, a.err)
	}
	cancelOwn()
	if a := callers.recv(ownCaller); !errors.Is(a.err, context.Canceled) {
		t.Fatalf("caller with its own cancelled context: got (%q, %v), want context.Canceled", a.v, a.err)
	}
	if n := callers.returned.Load(); n != 12 {
		t.Fatalf("%d callers returned while the read was held, want the 12 whose context ended", n)
	}

	gate.open()
	for i, ch := range served {
		if a := callers.recv(ch); a.err != nil || a.v != "v1" {
			t.Fatalf("caller %d: got (%q, %v), want v1 from the flight the leader left", i, a.v, a.err)
		}
	}
	checkOneFlightLeftBy(t, ca, group, 12, len(served), lookups(ca, group, resultHit)-hitsBefore, gate.calls.Load()-readsBefore)
	lintRegistry(t, reg)
}

// checkOneFlightLeftBy checks that the callers who left counted left
// errors, that the served ones grew the hits (by hits) and that all shared
// one read (reads, script calls since the flight began).
func checkOneFlightLeftBy(t *testing.T, ca *Cache[string], group string, left, served int, hits float64, reads int64) {
	t.Helper()
	if got := lookups(ca, group, resultError); got != float64(left) {
		t.Errorf("lookups{result=error} = %v, want %d (the callers who left)", got, left)
	}
	if hits != float64(served) {
		t.Errorf("lookups{result=hit} grew by %v, want %d (the callers served)", hits, served)
	}
	if reads != 1 {
		t.Errorf("%d read script calls, want 1 (the one shared flight)", reads)
	}
}

// startStaying starts the callers who stay until served: 10 sharing
// context other, 5 each with a context of its own that ends only with the
// test, 5 whose context cannot end.
func (c *waitingCallers) startStaying(other context.Context) []chan fetchAnswer {
	var served []chan fetchAnswer
	for range 10 {
		served = append(served, c.start(other))
	}
	for range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		c.t.Cleanup(cancel)
		served = append(served, c.start(ctx))
	}
	for range 5 {
		served = append(served, c.start(context.Background()))
	}
	return served
}

// fetchAnswer is what one Fetch returned.
type fetchAnswer struct {
	v   string
	err error
}

// waitingCallers starts Fetch callers of one key, each in a goroutine of
// its own, and counts those that returned.
type waitingCallers struct {
	t        *testing.T
	ca       *Cache[string]
	key      string
	load     func(context.Context) (string, error)
	returned atomic.Int64
}

// start starts one caller under ctx; its answer arrives on the channel.
func (w *waitingCallers) start(ctx context.Context) chan fetchAnswer {
	ch := make(chan fetchAnswer, 1)
	go func() {
		v, err := w.ca.Fetch(ctx, w.key, w.load)
		w.returned.Add(1)
		ch <- fetchAnswer{v, err}
	}()
	return ch
}

// recv bounds each wait (a liveness bound, not a speed assertion).
func (w *waitingCallers) recv(ch chan fetchAnswer) fetchAnswer {
	w.t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(20 * time.Second):
		w.t.Fatal("a caller never returned")
		return fetchAnswer{}
	}
}
