package instrument

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// recomputes reads the recompute histogram's sample count of group and
// result.
func recomputes(t *testing.T, reg prometheus.Gatherer, group, result string) float64 {
	t.Helper()
	return metrictest.Sum(t, reg, "cachewatch_loader_duration_seconds", "key_group", group, "result", result)
}

// One call of FetchMany's batch loader is one loader call and one
// recompute per key group among its keys, whatever the batch size; a key
// it leaves out is a not-found answer (left out of the result), not a call
// of its own; a failed call is one error per group; and while Redis is
// unreachable the direct call counts the same way.
func TestFetchManyCountsOneSourceCallPerBatch(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	ca := newFetchCache(t, srv.Client(t), reg, newFetchClock(), CacheOptions{LocalCopies: -1, BreakerFailures: 100})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	items, users := ca.c.group("item:1"), ca.c.group("user:5")
	if items == users {
		t.Fatalf("the test needs two key groups, got %q for both", items)
	}
	src := &batchSource{}
	load := src.load
	read := func(result string) sourceCounts { return readSourceCounts(t, ca, reg, items, users, result) }
	oneGroupBatch(t, ca, src, read)

	// One call spanning two key groups: one call in each.
	if _, err := ca.FetchMany(ctx, []string{"item:4", "user:5", "user:6"}, load); err != nil {
		t.Fatal(err)
	}
	if c := read("success"); src.calls != 2 || c != (sourceCounts{2, 1, 2, 1}) {
		t.Fatalf("after a call spanning 2 groups (%d calls): {success} items=%v users=%v / %v %v; want 2 1 / 2 1",
			src.calls, c.items, c.users, c.itemRecomputes, c.userRecomputes)
	}

	// A failed call: one error per group, no success.
	src.fail = errors.New("source down")
	if _, err := ca.FetchMany(ctx, []string{"item:7", "item:8", "user:9"}, load); !errors.Is(err, src.fail) {
		t.Fatalf("FetchMany with a failing loader: %v", err)
	}
	if c := read("error"); src.calls != 3 || c != (sourceCounts{1, 1, 1, 1}) {
		t.Fatalf("after a failed call spanning 2 groups: {error} items=%v users=%v / %v %v; want 1 1 / 1 1",
			c.items, c.users, c.itemRecomputes, c.userRecomputes)
	}
	if c := read("success"); c != (sourceCounts{2, 1, 2, 1}) {
		t.Fatalf("a failed call counted as a success: %+v", c)
	}

	// Redis gone: the loader is called directly, once, and counted so.
	src.fail = nil
	srv.Kill()
	got, err := ca.FetchMany(ctx, []string{"item:10", "user:11", "user:12"}, load)
	if err != nil || len(got) != 3 || src.calls != 4 {
		t.Fatalf("FetchMany without Redis = %v, %v after %d calls; want 3 values from one call", got, err, src.calls)
	}
	if c := read("success"); c != (sourceCounts{3, 2, 3, 2}) {
		t.Fatalf("after a fallback call spanning 2 groups: {success} items=%v users=%v / %v %v; want 3 2 / 3 2",
			c.items, c.users, c.itemRecomputes, c.userRecomputes)
	}
	if f := lookups(ca, items, resultFallback) + lookups(ca, users, resultFallback); f != 3 {
		t.Fatalf("lookups{fallback} = %v, want one per key (3)", f)
	}
	lintRegistry(t, reg)
}

// sourceCounts are two key groups' loader calls and recomputes of one
// result.
type sourceCounts struct{ items, users, itemRecomputes, userRecomputes float64 }

func readSourceCounts(t *testing.T, ca *Cache[string], g prometheus.Gatherer, items, users, result string) sourceCounts {
	return sourceCounts{loaderCalls(ca, items, result), loaderCalls(ca, users, result),
		recomputes(t, g, items, result), recomputes(t, g, users, result)}
}

// oneGroupBatch fetches three keys of one group, one of them absent at
// the source, in one batch call: one loader call and recompute, and one
// lookup per key.
func oneGroupBatch(t *testing.T, ca *Cache[string], src *batchSource, read func(string) sourceCounts) {
	t.Helper()
	got, err := ca.FetchMany(context.Background(), []string{"item:1", "item:2", "item:3"}, src.load)
	if err != nil || len(got) != 2 || got["item:1"] != "v-item:1" || got["item:2"] != "v-item:2" {
		t.Fatalf("FetchMany = %v, %v; want item:1 and item:2, item:3 left out", got, err)
	}
	if _, ok := got["item:3"]; ok || src.calls != 1 {
		t.Fatalf("item:3 answered %v after %d loader calls; want it left out after 1", got["item:3"], src.calls)
	}
	if c := read("success"); c != (sourceCounts{1, 0, 1, 0}) {
		t.Fatalf("one batch call of 3 keys: loader calls / recomputes {success} items=%v users=%v / %v %v; want 1 0 / 1 0",
			c.items, c.users, c.itemRecomputes, c.userRecomputes)
	}
	if got := lookups(ca, ca.c.group("item:1"), resultMiss); got != 3 {
		t.Fatalf("lookups{miss} = %v, want one per key (3)", got)
	}
}

// batchSource is a batch loader whose source has no item:3; it counts its
// calls, and fails with fail while that is set.
type batchSource struct {
	calls int
	fail  error
}

func (s *batchSource) load(_ context.Context, keys []string) (map[string]string, error) {
	s.calls++
	if s.fail != nil {
		return nil, s.fail
	}
	out := map[string]string{}
	for _, k := range keys {
		if k != "item:3" { // the source has no item:3
			out[k] = "v-" + k
		}
	}
	return out, nil
}
