package instrument

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/cachewatch/cachewatch/internal/luascript"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// pipelineReads records, per pipeline a client sends, how many read
// scripts it carried.
type pipelineReads struct {
	mu    sync.Mutex
	reads []int
}

func (p *pipelineReads) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *pipelineReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (p *pipelineReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			if isFetchRead(c) {
				n++
			}
		}
		if n > 0 {
			p.mu.Lock()
			p.reads = append(p.reads, n)
			p.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

func (p *pipelineReads) get() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.reads...)
}

func queued[T any](ca *Cache[T]) int {
	ca.batch.mu.Lock()
	defer ca.batch.mu.Unlock()
	return len(ca.batch.queue)
}

// Flights of different keys that start while a read is in flight send
// their reads together, as one pipeline, when it returns — not one round
// trip (and one pooled connection) each. Every key is still loaded once
// under its claim and every caller gets its own key's value.
func TestFlightsOfManyKeysShareOnePipeline(t *testing.T) {
	rdb, reg := redistest.Start(t).Client(t), prometheus.NewRegistry()
	ca, gate := gatedCache(t, rdb, reg, newFetchClock(), CacheOptions{})
	pipes := &pipelineReads{}
	rdb.AddHook(pipes)
	var calls atomic.Int64
	load := func(key string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { calls.Add(1); return "v-" + key, nil }
	}
	const n = 20
	got, errs := fetchBehindHeldRead(t, ca, gate, n, load)

	for i := range n {
		if want := fmt.Sprint("v-item:", i); errs[i] != nil || got[i] != want {
			t.Fatalf("item:%d: %q, %v; want %q", i, got[i], errs[i], want)
		}
	}
	if p := pipes.get(); len(p) == 0 || p[0] != n-1 {
		t.Fatalf("read scripts per pipeline = %v; want the %d queued reads in the first", p, n-1)
	}
	if gate.calls.Load() > 2 { // EVALSHA, and EVAL after NOSCRIPT on the fresh server
		t.Fatalf("read scripts sent alone = %d, want only the first key's", gate.calls.Load())
	}
	g := ca.c.group("item:0")
	if calls.Load() != n || lookups(ca, g, resultMiss) != n || loaderCalls(ca, g, "success") != n {
		t.Fatalf("loader calls %d, miss lookups %v, loader_calls %v; want %d each",
			calls.Load(), lookups(ca, g, resultMiss), loaderCalls(ca, g, "success"), n)
	}
	if lookups(ca, g, resultFallback) != 0 {
		t.Fatalf("fallback lookups = %v, want 0", lookups(ca, g, resultFallback))
	}
	// The values were written (in a batch too): read back from Redis.
	for i := range n {
		if v, found, err := ca.Get(context.Background(), fmt.Sprint("item:", i)); err != nil || !found || v != fmt.Sprint("v-item:", i) {
			t.Fatalf("Get item:%d = %q, %v, %v after the batched writes", i, v, found, err)
		}
	}
	lintRegistry(t, reg)
}

// A read waiting in the Cache's own queue is not Redis failing: it never
// sends its caller to the loader (slow is not down) and never counts
// against the breaker (with BreakerFailures 1 a counted failure would open
// it). Its caller waits until its own deadline; the read, abandoned before
// it was sent, is never sent.
func TestQueuedReadWaitsAndNeverFallsBack(t *testing.T) {
	rdb, reg := redistest.Start(t).Client(t), prometheus.NewRegistry()
	ca, gate := gatedCache(t, rdb, reg, newFetchClock(), CacheOptions{BreakerFailures: 1, Name: "queued-test"})
	if err := luascript.FetchRead.Load(context.Background(), rdb).Err(); err != nil { // one EVALSHA, no EVAL after NOSCRIPT
		t.Fatal(err)
	}
	state := func() float64 { return testutil.ToFloat64(ca.c.m.breakerState.WithLabelValues("queued-test")) }
	var calls atomic.Int64
	load := func(v string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { calls.Add(1); return v, nil }
	}
	gate.hold()
	first := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := ca.Fetch(ctx, "item:a", load("a"))
		first <- err
	}()
	<-gate.entered

	// item:b's read queues behind item:a's, held: its caller waits for
	// Redis until its deadline, and the loader is not called.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	v, err := ca.Fetch(ctx, "item:b", load("b"))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || v != "" {
		t.Fatalf("item:b = %q, %v; want its context's deadline, not a value from the loader", v, err)
	}
	gb := ca.c.group("item:b")
	if calls.Load() != 0 || lookups(ca, gb, resultFallback) != 0 || lookups(ca, gb, resultError) != 1 {
		t.Fatalf("loader calls %d, fallback lookups %v, error lookups %v; want 0, 0, 1",
			calls.Load(), lookups(ca, gb, resultFallback), lookups(ca, gb, resultError))
	}
	if n := metrictest.Sum(t, reg, "cachewatch_cache_fallbacks_total"); n != 0 {
		t.Fatalf("cachewatch_cache_fallbacks_total adds up to %v, want 0", n)
	}
	if got := state(); got != float64(gobreaker.StateClosed) {
		t.Fatalf("breaker state gauge = %v after a read waited in the queue, want 0 (closed)", got)
	}

	gate.open()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if got := lookups(ca, ca.c.group("item:a"), resultMiss); got != 1 || calls.Load() != 1 {
		t.Fatalf("item:a miss lookups = %v, loader calls %d; want 1, 1", got, calls.Load())
	}
	if gate.calls.Load() != 1 {
		t.Fatalf("read scripts sent = %d, want 1: item:b's abandoned read must not be sent", gate.calls.Load())
	}
	if got := state(); got != float64(gobreaker.StateClosed) {
		t.Fatalf("breaker state gauge = %v at the end, want 0", got)
	}
}

// A read that times out against a stalled Redis while the breaker stays
// closed is tried once more before the flight goes to the source: when
// Redis answers the second, the key is loaded under its claim (one load for
// the fleet), not by the fallback. The breaker still opens on an outage
// (TestFetchDegradedRedisPausedKilledRestarted, TestBatchedReadsOpenTheBreakerWhenRedisIsDown).
func TestTimedOutReadIsTriedAgain(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	entries := make(chan struct{}, 16) // one per read script sent
	rdb.AddHook(&readHook{onRead: func() { entries <- struct{}{} }})
	reg := prometheus.NewRegistry()
	ca := newFetchCache(t, rdb, reg, newFetchClock(), CacheOptions{RedisTimeout: time.Second, Name: "retry-test"})
	var calls atomic.Int64
	load := func(context.Context) (string, error) { calls.Add(1); return "v", nil }
	if err := rdb.Ping(context.Background()).Err(); err != nil { // dialled before the pause
		t.Fatal(err)
	}

	srv.Pause()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		v, err := ca.Fetch(ctx, "item:1", load)
		if err == nil && v != "v" {
			err = fmt.Errorf("value %q", v)
		}
		done <- err
	}()
	<-entries // the first read, stalled
	select {
	case <-entries: // the second, after the first timed out
	case err := <-done:
		srv.Resume()
		t.Fatalf("fetch returned (%v) without reading again; fallback lookups %v", err,
			lookups(ca, ca.c.group("item:1"), resultFallback))
	}
	srv.Resume()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	g := ca.c.group("item:1")
	if lookups(ca, g, resultFallback) != 0 || lookups(ca, g, resultMiss) != 1 || calls.Load() != 1 {
		t.Fatalf("fallback %v, miss %v, loader calls %d; want 0, 1, 1",
			lookups(ca, g, resultFallback), lookups(ca, g, resultMiss), calls.Load())
	}
	if got := testutil.ToFloat64(ca.c.m.breakerState.WithLabelValues("retry-test")); got != float64(gobreaker.StateClosed) {
		t.Fatalf("breaker state gauge = %v, want 0 (one timeout is not an outage)", got)
	}
}

// With Redis stopped, batched reads of many keys still count as failures:
// the breaker opens and every caller is served by the fallback.
func TestBatchedReadsOpenTheBreakerWhenRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redistest.NewClient(t, &redis.Options{Addr: srv.Addr, MaxRetries: -1})
	reg := prometheus.NewRegistry()
	ca := newFetchCache(t, rdb, reg, newFetchClock(), CacheOptions{
		RedisTimeout: 200 * time.Millisecond, BreakerFailures: 2, BreakerHalfOpenAfter: time.Hour, Name: "down-test"})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	const n = 30
	var calls atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			key := fmt.Sprint("item:", i)
			v, err := ca.Fetch(ctx, key, func(context.Context) (string, error) { calls.Add(1); return key, nil })
			if err == nil && v != key {
				err = fmt.Errorf("%s: value %q", key, v)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(ca.c.m.breakerState.WithLabelValues("down-test")); got != float64(gobreaker.StateOpen) {
		t.Fatalf("breaker state gauge = %v with Redis stopped, want 2 (open)", got)
	}
	g := ca.c.group("item:0")
	if lookups(ca, g, resultFallback) != n || calls.Load() != n || loaderCalls(ca, g, "success") != n {
		t.Fatalf("fallback lookups %v, loader calls %d, loader_calls %v; want %d each",
			lookups(ca, g, resultFallback), calls.Load(), loaderCalls(ca, g, "success"), n)
	}
}

// One call of a pipeline answered with an error (a key of the wrong type)
// fails that call alone: the other calls of the pipeline get their own
// replies, load under their claims, and are not sent to the fallback.
func TestOneFailedCallDoesNotFailItsPipeline(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ca, gate := gatedCache(t, rdb, prometheus.NewRegistry(), newFetchClock(), CacheOptions{})
	const n, bad = 20, 7
	if err := rdb.LPush(context.Background(), keysFor(fmt.Sprint("item:", bad)).value, "not a cache entry").Err(); err != nil {
		t.Fatal(err)
	}
	got, errs := fetchBehindHeldRead(t, ca, gate, n, func(key string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { return "v-" + key, nil }
	})

	for i := range n {
		if want := fmt.Sprint("v-item:", i); i != bad && (errs[i] != nil || got[i] != want) {
			t.Fatalf("item:%d: %q, %v; want %q", i, got[i], errs[i], want)
		}
	}
	g := ca.c.group("item:0")
	if miss, fb := lookups(ca, g, resultMiss), lookups(ca, g, resultFallback); miss != n-1 || fb > 1 {
		t.Fatalf("lookups miss=%v fallback=%v; want %d misses and at most the bad key's fallback", miss, fb, n-1)
	}
}

// fetchBehindHeldRead fetches item:0 … item:n-1, each with load(key), so
// that item:0's read is held in flight while the other n-1 queue behind it;
// then it lets the read go and returns every caller's value and error.
func fetchBehindHeldRead(t *testing.T, ca *Cache[string], gate *readGate, n int,
	load func(key string) func(context.Context) (string, error)) ([]string, []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, errs := make([]string, n), make([]error, n)
	var wg sync.WaitGroup
	fetch := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("item:", i)
			got[i], errs[i] = ca.Fetch(ctx, key, load(key))
		}()
	}
	gate.hold()
	fetch(0)
	<-gate.entered // item:0's read is in flight (held before Redis)
	for i := 1; i < n; i++ {
		fetch(i)
	}
	poll.Until(t, "the other keys' reads to queue behind the one in flight", func() bool { return queued(ca) == n-1 })
	gate.open()
	wg.Wait()
	return got, errs
}

// Calls that queue behind a round trip that does not come back do not wait
// for it: after flushQueuedAfter they go as a pipeline of their own, on
// another connection. Here item:0's read is held before Redis (as a reply
// is held when its goroutine waits behind a crowd of runnable callers) and
// the other keys are read, loaded and written meanwhile.
func TestQueuedCallsDoNotWaitForAStuckRoundTrip(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ca, gate := gatedCache(t, rdb, prometheus.NewRegistry(), newFetchClock(), CacheOptions{})
	ca.batch.flushAfter = 0 // the default
	// Only item:0's read is held: on a busy machine a timed flush may find
	// a single call queued, which goes alone (not as a pipeline), and a
	// gate holding it too would fill the round trips in flight itself.
	gate.only = keysFor("item:0").value
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := luascript.FetchRead.Load(ctx, rdb).Err(); err != nil { // no NOSCRIPT retries to count
		t.Fatal(err)
	}
	pipes := &pipelineReads{}
	rdb.AddHook(pipes)
	var calls atomic.Int64
	load := func(key string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { calls.Add(1); return "v-" + key, nil }
	}
	gate.hold()
	defer gate.open()
	first := make(chan error, 1)
	go func() { first <- fetchChecked(ctx, ca, "item:0", load) }()
	<-gate.entered

	const n = 20
	errs := make(chan error, n)
	for i := 1; i < n; i++ {
		go func() { errs <- fetchChecked(ctx, ca, fmt.Sprint("item:", i), load) }()
	}
	for i := 1; i < n; i++ {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(poll.Bound):
			t.Fatalf("%d of %d fetches still wait for the held read of another key", n-i, n-1)
		}
	}
	reads := 0
	for _, r := range pipes.get() {
		reads += r
	}
	// A call that found no other queued with it goes alone: count it too.
	if alone := gate.calls.Load() - 1; reads+int(alone) != n-1 || reads == 0 {
		t.Fatalf("%d reads in pipelines and %d alone besides item:0's; want the %d queued ones sent, in pipelines but for a few",
			reads, alone, n-1)
	}
	gate.open()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	g := ca.c.group("item:0")
	if calls.Load() != n || lookups(ca, g, resultMiss) != n || loaderCalls(ca, g, "success") != n || lookups(ca, g, resultFallback) != 0 {
		t.Fatalf("loader calls %d, miss lookups %v, loader_calls %v, fallbacks %v; want %d, %d, %d and 0",
			calls.Load(), lookups(ca, g, resultMiss), loaderCalls(ca, g, "success"), lookups(ca, g, resultFallback), n, n, n)
	}
}

// fetchChecked fetches key with load(key), whose value must be "v-"+key.
func fetchChecked(ctx context.Context, ca *Cache[string], key string, load func(string) func(context.Context) (string, error)) error {
	v, err := ca.Fetch(ctx, key, load(key))
	if err == nil && v != "v-"+key {
		err = fmt.Errorf("%s = %q", key, v)
	}
	return err
}

// TestPipelineSendsAgainOnlyWhatRedisRefused: a pipeline that meets a
// server missing one of its scripts (restarted, failed over, SCRIPT FLUSH)
// is sent again for the refused calls only. The others ran: a read run a
// second time would find the claim its first run granted, report it taken,
// and leave its flight waiting RefreshClaimTTL for its own load.
func TestPipelineSendsAgainOnlyWhatRedisRefused(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ca := newFetchCache(t, rdb, prometheus.NewRegistry(), newFetchClock(), CacheOptions{})
	ctx := context.Background()
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := luascript.FetchRead.Load(ctx, rdb).Err(); err != nil { // the write's script is missing
		t.Fatal(err)
	}
	w, r := keysFor("item:w"), keysFor("item:r")
	write := &scriptCall{op: "fetch write", s: luascript.FetchWrite, keys: []string{w.value, w.claim, w.waiters},
		args: []any{"token-w", `"v"`, 1, 2, 0, "0", 60000}, done: make(chan struct{})}
	read := &scriptCall{op: "fetch read", s: luascript.FetchRead, keys: []string{r.value, r.claim, r.waiters},
		args: []any{0, 0, 60000, "token-r", ""}, done: make(chan struct{})}
	ca.sendBatch([]*scriptCall{write, read})
	if write.err != nil || read.err != nil {
		t.Fatalf("write: %v, read: %v", write.err, read.err)
	}
	if write.res != int64(0) { // no claim was held for item:w: refused
		t.Fatalf("write = %v, want 0 (refused)", write.res)
	}
	res, _ := read.res.([]any)
	s, err := parseStored(res)
	if err != nil || s.state != stateMissing || !s.granted {
		t.Fatalf("read = %+v (%v); want missing with the claim granted, as its one run found it", s, err)
	}
	if owner := rdb.Get(ctx, r.claim).Val(); owner != "token-r" {
		t.Fatalf("claim held by %q, want token-r", owner)
	}
}
