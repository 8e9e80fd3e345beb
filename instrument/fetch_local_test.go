package instrument

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// TestFetchLocalCopies: with LocalCopies, a stale value is served from the
// process's copy — even while Redis is stopped, and then without the loader
// — and the crowd still causes exactly one refresh across processes.
func TestFetchLocalCopies(t *testing.T) {
	r := newLocalCopiesRig(t)
	ctx, key, caches := context.Background(), r.key, r.caches
	for _, ca := range caches { // one load, two hits: every process has a copy
		if v, err := ca.Fetch(ctx, key, func(context.Context) (string, error) { return "v1", nil }); err != nil || v != "v1" {
			t.Fatal(v, err)
		}
		written(ca, key) // else the next process may find the load's write pending, wait for it: coalesced, not a hit
	}
	r.g = caches[0].c.group(key)

	r.freshCopiesWhileStopped()
	r.clk.add(2 * time.Minute) // stale
	r.staleCopiesWhileStopped()

	for _, v := range stampede(t, caches, 100, key, r.load) {
		if v != "v1" {
			t.Fatalf("served %q during the refresh, want the stale v1", v)
		}
	}
	close(r.release)
	for _, ca := range caches {
		ca.bg.wait()
	}
	if r.calls.Load() != 1 {
		t.Fatalf("%d refreshes, want 1 across 3 processes (claim held: %d, breaker open: %v)",
			r.calls.Load(), r.admin.Exists(ctx, keysFor(key).claim).Val(), caches[0].deg.open())
	}
	if got := lookups(caches[0], r.g, resultStale); got != 3+300 {
		t.Fatalf("stale lookups = %v, want 303", got)
	}
	for i, ca := range caches {
		// A process whose copy is still the stale one serves it once more
		// while revalidating; after that it reads the new value.
		if _, err := ca.Fetch(ctx, key, r.load); err != nil {
			t.Fatal(err)
		}
		ca.bg.wait()
		if v, err := ca.Fetch(ctx, key, r.load); err != nil || v != "v2" {
			t.Fatalf("process %d after the refresh: %q, %v; want v2", i, v, err)
		}
	}
	if r.calls.Load() != 1 {
		t.Fatalf("%d loader calls in all, want 1", r.calls.Load())
	}
	lintRegistry(t, r.reg)
}

// localCopiesRig is three processes with local copies in front of one
// Redis, and a loader of v2 that answers once release is closed.
type localCopiesRig struct {
	t       *testing.T
	srv     *redistest.Server
	admin   *redis.Client
	reg     *prometheus.Registry
	clk     *fetchClock
	caches  []*Cache[string]
	key, g  string
	calls   atomic.Int64
	release chan struct{}
	load    func(context.Context) (string, error)
}

func newLocalCopiesRig(t *testing.T) *localCopiesRig {
	r := &localCopiesRig{t: t, srv: redistest.Start(t), reg: prometheus.NewRegistry(), clk: newFetchClock(),
		key: "menu:3", release: make(chan struct{})}
	r.admin = r.srv.Client(t)
	// RefreshClaimTTL far above the 10s bound below: only an explicit release frees
	// a claim granted to an abandoned read in time.
	// The breaker is kept out of the way (this test is about copies, and a
	// loaded CI machine can make enough reads time out to open it), and a
	// Redis call may take 3s before a copy answers instead: a revalidating
	// read that times out on a loaded machine has its claim released only
	// later, and the crowd below would then see no refresh.
	opts := CacheOptions{FreshTTL: time.Minute, HardTTL: time.Hour, LocalCopies: 100, RedisTimeout: 3 * time.Second,
		RefreshClaimTTL: time.Minute, BreakerFailures: 1 << 20}
	for p := 0; p < 3; p++ {
		r.caches = append(r.caches, newFetchCache(t, r.srv.Client(t), r.reg, r.clk, opts))
	}
	r.load = func(context.Context) (string, error) {
		r.calls.Add(1)
		<-r.release
		return "v2", nil
	}
	return r
}

// freshCopiesWhileStopped: Redis stopped, value fresh: each process
// answers from its copy (a hit), not from the source.
func (r *localCopiesRig) freshCopiesWhileStopped() {
	t, ctx := r.t, context.Background()
	r.srv.Pause()
	for i, ca := range r.caches {
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		v, err := ca.Fetch(short, r.key, func(context.Context) (string, error) { return "", errors.New("source must not be called") })
		cancel()
		if err != nil || v != "v1" {
			t.Fatalf("process %d, fresh copy, Redis stopped: %q, %v", i, v, err)
		}
	}
	r.srv.Resume()
	if got := lookups(r.caches[0], r.g, resultHit); got != 2+3 {
		t.Fatalf("hits = %v, want 5 (2 before, 3 from copies)", got)
	}
}

// staleCopiesWhileStopped: Redis stopped, value stale: each process
// answers from its stale copy without the loader, and the claim an
// abandoned revalidation took is released.
func (r *localCopiesRig) staleCopiesWhileStopped() {
	t, ctx, key := r.t, context.Background(), r.key
	r.srv.Pause()
	for i, ca := range r.caches {
		// Far shorter than RedisTimeout would allow a fallback load: only
		// the process copy can answer.
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		v, err := ca.Fetch(short, key, r.load)
		cancel()
		if err != nil || v != "v1" {
			t.Fatalf("process %d with Redis stopped: %q, %v; want the stale copy", i, v, err)
		}
	}
	for _, ca := range r.caches { // the revalidations failed against the stopped Redis
		poll.Until(t, "the revalidation to fail", func() bool { return !ca.local.get(key).revalidating.Load() })
	}
	r.srv.Resume()
	// Redis ran the abandoned revalidation reads on resuming, and one of
	// them took the refresh claim for a caller long gone: cachewatch
	// releases such claims itself rather than leaving the key unrefreshable
	// for RefreshClaimTTL.
	// Polling for the claim to vanish could look before the stalled reads
	// landed (Redis serves the resumed connections in any order), so wait
	// for the orphan-claim releases to finish their attempts.
	for _, ca := range r.caches {
		ca.bg.wait()
	}
	if r.admin.Exists(ctx, keysFor(key).claim).Val() == 1 {
		t.Fatal("claim granted to an abandoned read still held after the orphan releases ran")
	}
	if r.calls.Load() != 0 || lookups(r.caches[0], r.g, resultStale) != 3 {
		t.Fatalf("Redis stopped: %d loader calls, %v stale lookups; want 0 and 3", r.calls.Load(), lookups(r.caches[0], r.g, resultStale))
	}
}

// Cache.Invalidate names keys as Fetch does: it removes the stored value
// (not the caller's spelling of the key) and this process's copy, so the
// next Fetch loads again instead of serving the copy, and the removal is
// counted under the key's group.
func TestCacheInvalidate(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	clk := newFetchClock()
	ca := newFetchCache(t, srv.Client(t), reg, clk, CacheOptions{FreshTTL: time.Minute, HardTTL: time.Hour, LocalCopies: 10})
	ctx := context.Background()
	var version atomic.Int64
	load := func(context.Context) (string, error) { return "v" + strconv.FormatInt(version.Add(1), 10), nil }
	const key = "price:9"
	if v, err := ca.Fetch(ctx, key, load); err != nil || v != "v1" {
		t.Fatal(v, err)
	}
	clk.add(2 * time.Minute) // stale: a copy would be served from memory
	n, err := ca.Invalidate(ctx, key, "price:absent")
	if err != nil || n != 1 {
		t.Fatalf("Invalidate = %d, %v; want 1 (the one stored)", n, err)
	}
	if v, err := ca.Fetch(ctx, key, load); err != nil || v != "v2" {
		t.Fatalf("Fetch after Invalidate = %q, %v; want a new load, v2", v, err)
	}
	group := ca.c.group(key)
	if got := testutil.ToFloat64(ca.c.m.invalidated.WithLabelValues(group, byKeys)); got != 1 {
		t.Errorf("invalidated keys{key_group=%q, by=keys} = %v, want 1", group, got)
	}
	if stale, miss := lookups(ca, group, resultStale), lookups(ca, group, resultMiss); stale != 0 || miss != 2 {
		t.Errorf("lookups stale=%v miss=%v, want 0 and 2 (the invalidated copy never served)", stale, miss)
	}
}

// Invalidation reaches the copies of every process: a Cache's Invalidate
// makes another process's Cache drop its stale copy of the key (so its next
// Fetch loads instead of serving it), and a pattern invalidation through
// the Client drops all of their copies.
func TestInvalidateReachesOtherProcessesCopies(t *testing.T) {
	clk := newFetchClock()
	a, b := twoSubscribedProcesses(t, redistest.Start(t), clk)
	ctx := context.Background()
	var version atomic.Int64
	load := func(context.Context) (string, error) { return "v" + strconv.FormatInt(version.Add(1), 10), nil }
	const key = "stock:5"
	for _, ca := range []*Cache[string]{a, b} {
		if v, err := ca.Fetch(ctx, key, load); err != nil || v != "v1" {
			t.Fatal(v, err)
		}
	}
	clk.add(2 * time.Minute) // stale: both processes would serve their copy
	if n, err := a.Invalidate(ctx, key); err != nil || n != 1 {
		t.Fatalf("Invalidate = %d, %v", n, err)
	}
	poll.Until(t, "the other process to drop its copy", func() bool {
		_, ok := b.local.usable(key, clk.now().UnixMilli())
		return !ok
	})
	if v, err := b.Fetch(ctx, key, load); err != nil || v != "v2" {
		t.Fatalf("other process after Invalidate: %q, %v; want a new load, v2", v, err)
	}
	if stale := lookups(b, b.c.group(key), resultStale); stale != 0 {
		t.Fatalf("%v stale lookups: an invalidated copy was served", stale)
	}

	for _, k := range []string{"stock:6", "shelf:1"} {
		if _, err := b.Fetch(ctx, k, load); err != nil {
			t.Fatal(err)
		}
	}
	// A Fetch returns before its value is written, and the writing process
	// keeps its copy once the write lands: b's writes land first here, as a
	// copy kept after the notice was written after it, which no notice
	// sent before can cover.
	b.c.writes.waitAll(ctx)
	if _, err := a.c.InvalidateMatch(ctx, "stock:*"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "a pattern invalidation to drop every copy", func() bool {
		return b.local.size.Load() == 0
	})
}

func TestInvalidationNotice(t *testing.T) {
	keys := []string{"a", "", "12:ab", "line\nbreak", "{tag}:x", string([]byte{0, 255, ':'})}
	got, all, err := parseNotice(keysNotice(keys))
	if err != nil || all || !slices.Equal(got, keys) {
		t.Fatalf("keys round trip: %q, %v, %v; want %q", got, all, err, keys)
	}
	if _, all, err := parseNotice(patternNotice("user:*")); err != nil || !all {
		t.Fatalf("pattern notice: all=%v, %v", all, err)
	}
	for _, bad := range []string{"", "x", "k5:ab", "k-1:", "kab", "k3"} {
		if _, _, err := parseNotice(bad); err == nil {
			t.Errorf("malformed notice %q accepted", bad)
		}
	}
}

// Process copies are capped: past LocalCopies keys, each new key replaces
// another; replacing a key's copy does not count twice; invalidation
// notices drop by the name the value is stored under.
func TestLocalCopiesBounded(t *testing.T) {
	l := &localCopies[string]{max: 3}
	for i := range 5 {
		key := "k:" + strconv.Itoa(i)
		l.put(noticeMark{}, key, keysFor(key).value, "k:*", "v", false, 1, 2)
		l.put(noticeMark{}, key, keysFor(key).value, "k:*", "v2", false, 1, 2) // a replacement
	}
	count := 0
	l.m.Range(func(any, any) bool { count++; return true })
	if count != 3 || l.size.Load() != 3 {
		t.Fatalf("%d copies held (size %d), want the cap, 3", count, l.size.Load())
	}
	if c := l.get("k:4"); c == nil || c.val != "v2" {
		t.Fatalf("newest copy %v, want k:4 = v2", c)
	}
	l.dropStored([]string{keysFor("k:4").value, "k:4"}) // only the stored name matches
	if l.get("k:4") != nil || l.size.Load() != 2 {
		t.Fatalf("after dropping k:4's stored name: copy %v, size %d", l.get("k:4"), l.size.Load())
	}
	l.dropAll()
	if l.size.Load() != 0 {
		t.Fatalf("size %d after dropAll", l.size.Load())
	}
}

// The Caches of one Client share one invalidation subscription, held while
// any of them is open: a service with many Caches does not hold as many
// connections on Redis.
func TestInvalidationSubscriptionPerClient(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	subscribers := func() int64 {
		return admin.PubSubNumSub(ctx, DefaultNamespace+":invalidate").Val()[DefaultNamespace+":invalidate"]
	}
	c, err := New(srv.Client(t), Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	var caches []*Cache[string]
	for range 3 {
		caches = append(caches, mustCache[string](t, c, CacheOptions{Name: fmt.Sprint("cache", len(caches))}))
	}
	noCopies := mustCache[string](t, c, CacheOptions{LocalCopies: -1})
	defer noCopies.Close()
	load := func(context.Context) (string, error) { return "v", nil }
	for _, ca := range caches {
		if _, err := ca.Fetch(ctx, "thing:1", load); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "the client's invalidation subscription", func() bool { return subscribers() >= 1 })
	other, err := New(srv.Client(t), Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Invalidate(ctx, keysFor("thing:1").value); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "every Cache to drop its copy on the one notice", func() bool {
		for _, ca := range caches {
			if ca.local.size.Load() != 0 {
				return false
			}
		}
		return true
	})
	if n := subscribers(); n != 1 {
		t.Fatalf("%d subscribers for 3 Caches of one Client, want 1", n)
	}
	for _, ca := range caches {
		if err := ca.Close(); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "the subscription to close with the last Cache", func() bool { return subscribers() == 0 })
}

// A copy is not kept when an invalidation notice that may cover it arrived
// while its lookup ran (the notice could have been sent after the value was
// unlinked in Redis, before the copy was kept); notices of keys in other
// buckets do not void it.
func TestLocalCopyVoidedByANoticeDuringItsLookup(t *testing.T) {
	l := &localCopies[string]{max: 10}
	a := keysFor("a").value
	other := ""
	for i := 0; other == ""; i++ {
		if k := keysFor("b" + strconv.Itoa(i)).value; noticeBucket(k) != noticeBucket(a) {
			other = k
		}
	}
	m := l.mark(a)
	l.dropStored([]string{a})
	l.put(m, "a", a, "g", "v", false, 1, 2)
	if l.get("a") != nil || l.size.Load() != 0 {
		t.Fatalf("copy kept after a notice naming it arrived during its lookup (size %d)", l.size.Load())
	}
	m = l.mark(a)
	l.dropStored([]string{other})
	l.put(m, "a", a, "g", "v", false, 1, 2)
	if l.get("a") == nil || l.size.Load() != 1 {
		t.Fatal("copy voided by a notice of a key in another bucket")
	}
	m = l.mark(a)
	l.dropAll()
	l.put(m, "a", a, "g", "v", false, 1, 2)
	if l.get("a") != nil || l.size.Load() != 0 {
		t.Fatalf("copy kept after a pattern notice arrived during its lookup (size %d)", l.size.Load())
	}
}

// A process whose load began before another process's InvalidateMatch, and
// whose write landed after that pattern's notice, does not keep an
// in-memory copy: it could serve a value invalidated in Redis until its
// fresh TTL ran out.
func TestWriterKeepsNoCopyAfterAPatternNoticeDuringItsLoad(t *testing.T) {
	srv := redistest.Start(t)
	a, b := twoSubscribedProcesses(t, srv, newFetchClock())
	admin := srv.Client(t)
	ctx := context.Background()
	loading, release := make(chan struct{}), make(chan struct{})
	load := func(context.Context) (string, error) {
		close(loading)
		<-release
		return "v1", nil
	}
	const key = "stock:7"
	fetched := make(chan error, 1)
	go func() {
		_, err := b.Fetch(ctx, key, load)
		fetched <- err
	}()
	<-loading
	// A pattern that does not match the key's claim, so the write lands: a
	// pattern notice drops every copy, whatever it matched.
	if _, err := a.c.InvalidateMatch(ctx, "shelf:*"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the loading process to receive the pattern notice", func() bool {
		return b.local.patternNotices.Load() > 0
	})
	close(release)
	if err := <-fetched; err != nil {
		t.Fatal(err)
	}
	b.c.writes.waitAll(ctx)
	if admin.Exists(ctx, keysFor(key).value).Val() != 1 {
		t.Fatal("the write did not land")
	}
	if c := b.local.get(key); c != nil {
		t.Fatalf("copy %q kept although a pattern notice arrived while it was loaded", c.val)
	}
}

// twoSubscribedProcesses returns two processes' Caches (local copies on by
// default) on srv, sharing clk, both subscribed to invalidation notices.
func twoSubscribedProcesses(t *testing.T, srv *redistest.Server, clk *fetchClock) (a, b *Cache[string]) {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts := CacheOptions{FreshTTL: time.Minute, HardTTL: time.Hour}
	a = newFetchCache(t, srv.Client(t), reg, clk, opts)
	b = newFetchCache(t, srv.Client(t), reg, clk, opts)
	admin := srv.Client(t)
	poll.Until(t, "both caches to subscribe to invalidation notices", func() bool {
		ch := DefaultNamespace + ":invalidate"
		return admin.PubSubNumSub(context.Background(), ch).Val()[ch] == 2
	})
	return a, b
}
