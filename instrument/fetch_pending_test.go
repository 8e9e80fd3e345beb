package instrument

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/luascript"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// writeGate is a go-redis hook that holds every write script call (a lone
// call, not a pipeline's) until released, after telling entered.
type writeGate struct {
	passHooks
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newWriteGate() *writeGate {
	return &writeGate{entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (g *writeGate) open() { g.once.Do(func() { close(g.release) }) }

func (g *writeGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && strings.EqualFold(cmd.Name(), "evalsha") && args[1] == luascript.FetchWrite.SHA {
			g.entered <- struct{}{}
			<-g.release
		}
		return next(ctx, cmd)
	}
}

// isStored reports whether Redis holds a value for key.
func isStored(t *testing.T, rdb *redis.Client, key string) bool {
	t.Helper()
	n, err := rdb.Exists(context.Background(), keysFor(key).value).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// A Fetch that loaded answers when the loader returns, before its write
// lands; the other process's waiter is woken by that write, and this
// process's Get of the key waits for it: nobody is told "not cached" after a
// Fetch returned the value, and the source is called once.
func TestFetchAnswersBeforeItsWriteLands(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	clk := newFetchClock()
	gate := newWriteGate()
	t.Cleanup(gate.open)
	loading := srv.Client(t)
	loading.AddHook(gate)
	a := newFetchCache(t, loading, reg, clk, CacheOptions{})
	b := newFetchCache(t, srv.Client(t), reg, clk, CacheOptions{})
	const key = "catalog:{7}"
	var loads sync.Map
	load := func(name string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { loads.Store(name, true); return "v", nil }
	}

	if v, err := a.Fetch(context.Background(), key, load("a")); err != nil || v != "v" {
		t.Fatalf("loading Fetch = %q, %v", v, err)
	}
	waitClosed(t, "the write to reach Redis", gate.entered)
	if isStored(t, srv.Client(t), key) {
		t.Fatal("the value is stored while its write is held: Fetch waited for the write")
	}

	waiting := waitingOn(t, key)
	woken := inBackground(func() string {
		v, err := b.Fetch(context.Background(), key, load("b"))
		if err != nil {
			v = err.Error()
		}
		return v
	})
	got := inBackground(func() string {
		v, found, err := a.Get(context.Background(), key)
		if !found || err != nil {
			v = "not found"
		}
		return v
	})
	waitClosed(t, "the other process's caller to wait", waiting)
	gate.open()

	if v := <-woken; v != "v" {
		t.Fatalf("waiting process got %q, want v", v)
	}
	if v := <-got; v != "v" {
		t.Fatalf("Get after the loading Fetch returned: %q, want v (it must wait for the write)", v)
	}
	if _, other := loads.Load("b"); other {
		t.Fatal("the waiting process called its loader")
	}
	group := a.c.group(key)
	if miss, coalesced := lookups(a, group, resultMiss), lookups(b, group, resultCoalesced); miss != 1 || coalesced != 1 {
		t.Fatalf("lookups: miss %v, coalesced %v; want 1 and 1", miss, coalesced)
	}
	if calls := loaderCalls(a, group, "success"); calls != 1 {
		t.Fatalf("loader calls = %v, want 1", calls)
	}
}

// inBackground runs fn on a goroutine of its own and hands over its answer.
func inBackground(fn func() string) <-chan string {
	out := make(chan string, 1)
	go func() { out <- fn() }()
	return out
}

// Close returns only once the writes of loaded values have landed.
func TestCloseWaitsForTheWritesOfLoads(t *testing.T) {
	srv := redistest.Start(t)
	gate := newWriteGate()
	t.Cleanup(gate.open)
	rdb := srv.Client(t)
	rdb.AddHook(gate)
	ca := newFetchCache(t, rdb, prometheus.NewRegistry(), newFetchClock(), CacheOptions{})
	const key = "catalog:8"
	if _, err := ca.Fetch(context.Background(), key, func(context.Context) (string, error) { return "v", nil }); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, "the write to reach Redis", gate.entered)
	closed := make(chan struct{})
	go func() { _ = ca.Close(); close(closed) }()
	gate.open()
	waitClosed(t, "Close", closed)
	if !isStored(t, srv.Client(t), key) {
		t.Fatal("Close returned before the loaded value was stored")
	}
}

// A pending write does not hold up a lookup of another key, a wait on a
// key with no write pending returns at once, and a key's waiters are
// released when its last pending write ends, not before.
func TestPendingWritesAreByKey(t *testing.T) {
	var p pendingWrites
	p.add("a")
	p.add("a")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p.wait(ctx, "b")
	p.mu.Lock()
	done := p.doneLocked("a") // what p.wait(ctx, "a") blocks on
	p.mu.Unlock()
	p.finish("a")
	select {
	case <-done:
		t.Fatal("a's waiters were released with one of its two writes still pending")
	default:
	}
	p.finish("a")
	select {
	case <-done:
	default:
		t.Fatal("a's waiters were not released when its last write ended")
	}
	p.wait(ctx, "a")
	if p.n.Load() != 0 || len(p.count) != 0 || len(p.done) != 0 {
		t.Fatalf("after every write finished: %d pending, %d names, %d channels", p.n.Load(), len(p.count), len(p.done))
	}
}
