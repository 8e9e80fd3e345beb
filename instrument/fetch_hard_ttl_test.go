package instrument

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Every caller that finds only a value past its hard TTL counts one
// refusal, as it counts one lookup: 12 callers in 3 processes, each
// process's 4 sharing one read, count 12 — not one per shared read.
func TestFetchHardTTLRefusalsCountCallers(t *testing.T) {
	const processes, perProcess, key = 3, 4, "report:{7}"
	reg := prometheus.NewRegistry()
	clk := newFetchClock()
	gate := &readGate{}
	caches := hardTTLProcesses(t, reg, clk, gate, processes)
	// The reload waits until the other processes' reads have found the
	// value past its hard TTL and wait for it: otherwise a read that
	// reaches Redis after the reload's write would find the new value.
	othersWaiting := make(chan struct{})
	var waiting, loads atomic.Int64
	load := func(context.Context) (string, error) {
		n := loads.Add(1)
		if n > 1 {
			<-othersWaiting
		}
		return "v" + string(rune('0'+n)), nil
	}
	if _, err := caches[0].Fetch(context.Background(), key, load); err != nil {
		t.Fatal(err)
	}
	written(caches[0], key)
	clk.add(3 * time.Minute) // past the hard TTL; Redis keeps the key a while longer

	testHookWaiting = func(k string) {
		if k == key && waiting.Add(1) == processes-1 {
			close(othersWaiting)
		}
	}
	t.Cleanup(func() { testHookWaiting = nil })
	joined := joinCounter(t, key)
	gate.hold()
	var waits []func() []string
	for _, ca := range caches {
		waits = append(waits, fetchAll(t, ca, perProcess, key, load))
	}
	for range processes {
		<-gate.entered // each process's read is in flight...
	}
	poll.Until(t, "every other caller to join its process's read", func() bool {
		return joined.Load() == processes*(perProcess-1)
	})
	gate.open() // ...and every other caller waits for it
	for _, wait := range waits {
		for _, v := range wait() {
			if v != "v2" {
				t.Fatalf("served %q, want the reloaded v2 (never the value past its hard TTL)", v)
			}
		}
	}
	if loads.Load() != 2 {
		t.Fatalf("loader called %d times, want 2 (the seed and one reload for all processes)", loads.Load())
	}
	checkHardTTLRefusals(t, caches[0], key, processes*perProcess)
	lintRegistry(t, reg)
}

// checkHardTTLRefusals checks, in ca's metrics (shared by every process),
// that each of callers counted a refusal of the value past its hard TTL,
// and that one of them reloaded it (a miss, besides the seed's) while the
// others waited for it (coalesced).
func checkHardTTLRefusals(t *testing.T, ca *Cache[string], key string, callers int) {
	t.Helper()
	g := ca.c.group(key)
	if got := testutil.ToFloat64(ca.c.m.hardTTLExpired.WithLabelValues(g)); got != float64(callers) {
		t.Errorf("hard_ttl_expired_total = %v, want %d (one per caller)", got, callers)
	}
	miss, coalesced := lookups(ca, g, resultMiss), lookups(ca, g, resultCoalesced)
	if miss != 2 || coalesced != float64(callers-1) {
		t.Errorf("lookups miss=%v coalesced=%v, want 2 (seed and reload) and %d", miss, coalesced, callers-1)
	}
}

// hardTTLProcesses returns n processes' Caches (1m fresh, 2m hard, no
// jitter, no copies) on one Redis, whose reads pass gate.
func hardTTLProcesses(t *testing.T, reg prometheus.Registerer, clk *fetchClock, gate *readGate, n int) []*Cache[string] {
	t.Helper()
	srv := redistest.Start(t)
	var caches []*Cache[string]
	for range n {
		rdb := srv.Client(t)
		rdb.AddHook(gate)
		// A held read must not time out into the fallback; a waiter does
		// not poll, so it blocks (testHookWaiting) once, until woken.
		ca := newFetchCache(t, rdb, reg, clk, CacheOptions{FreshTTL: time.Minute, HardTTL: 2 * time.Minute,
			Jitter: -1, LocalCopies: -1, RedisTimeout: 30 * time.Second, PollInterval: time.Hour})
		ca.batch.flushAfter = time.Hour // see gatedCache
		caches = append(caches, ca)
	}
	return caches
}
