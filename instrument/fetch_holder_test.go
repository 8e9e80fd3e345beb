package instrument

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/redistest"
)

// A claim whose holder's process is gone — the wake channel its token
// names has no subscriber: Redis closed the dead process's connections —
// is taken over by the next read, not after RefreshClaimTTL; a claim whose holder
// is still subscribed is waited for.
func TestFetchTakesOverTheClaimOfAGoneHolder(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ca := newFetchCache(t, rdb, prometheus.NewRegistry(), newFetchClock(), CacheOptions{RefreshClaimTTL: time.Minute, PollInterval: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	live := rdb.Subscribe(ctx, "orders:wake:live")
	defer live.Close()
	if _, err := live.Receive(ctx); err != nil { // the subscription is confirmed
		t.Fatal(err)
	}
	var calls int
	load := func(context.Context) (string, error) { calls++; return "loaded", nil }

	const gone = "item:gone"
	holdClaim(t, rdb, gone, "t1@orders:wake:dead")
	if v, err := ca.Fetch(ctx, gone, load); err != nil || v != "loaded" || calls != 1 {
		t.Fatalf("Fetch behind a gone holder = %q, %v after %d loader calls; want it loaded at once, once", v, err, calls)
	}
	g := ca.c.group(gone)
	if lookups(ca, g, resultMiss) != 1 || loaderCalls(ca, g, "success") != 1 {
		t.Fatalf("lookups miss = %v, loader calls = %v; want 1 and 1", lookups(ca, g, resultMiss), loaderCalls(ca, g, "success"))
	}

	const alive = "item:alive"
	holdClaim(t, rdb, alive, "t2@orders:wake:live")
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if v, err := ca.Fetch(short, alive, load); !errors.Is(err, context.DeadlineExceeded) || calls != 1 {
		t.Fatalf("Fetch behind a live holder = %q, %v after %d loader calls; want it to wait (deadline exceeded), no load", v, err, calls)
	}
	// The flight waits on for the callers that may join it (RefreshClaimTTL):
	// a value set ends it.
	if err := ca.Set(ctx, alive, "set"); err != nil {
		t.Fatal(err)
	}
}

// holdClaim makes token hold key's refresh claim, for a minute.
func holdClaim(t *testing.T, rdb *redis.Client, key, token string) {
	t.Helper()
	if err := rdb.Set(context.Background(), keysFor(key).claim, token, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
}

// A claim token names its holder's wake channel only where a script sees
// that channel's subscribers: on a single server, not in a Cluster (whose
// nodes each see their own).
func TestClaimTokenNamesItsHolderOnASingleServer(t *testing.T) {
	single := newHub(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), nil, "ns", nil)
	cluster := newHub(redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), nil, "ns", nil)
	if single.holder() != "" || cluster.holder() != "" {
		t.Fatal("a holder named before the wake channel's subscription is confirmed")
	}
	single.subscribed.Store(true)
	cluster.subscribed.Store(true)
	if single.holder() != single.wake || cluster.holder() != "" {
		t.Fatalf("holder: single server %q (want %q), Cluster %q (want none)", single.holder(), single.wake, cluster.holder())
	}
}

// The processes waiting for a load that fails share its failure: they are
// woken with it (polling off) and get ErrLoadFailed without calling their
// loaders; a caller arriving during the hold-off gets it at once too, and
// the source is called once for all of them.
func TestFetchWaitersShareAFailedLoad(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	clk := newFetchClock()
	opts := CacheOptions{PollInterval: time.Hour, RefreshClaimTTL: time.Minute, FailureHoldoff: time.Minute}
	a := newFetchCache(t, srv.Client(t), reg, clk, opts)
	b := newFetchCache(t, srv.Client(t), reg, clk, opts)
	const key = "quote:{9}"
	waiting := waitingOn(t, key)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	errSource := errors.New("source down")
	started, release := make(chan struct{}), make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Fetch(ctx, key, func(context.Context) (string, error) { close(started); <-release; return "", errSource })
		aDone <- err
	}()
	<-started
	mustNotLoad := func(context.Context) (string, error) { t.Error("b called its loader"); return "", nil }
	bDone := make(chan error, 1)
	go func() { _, err := b.Fetch(ctx, key, mustNotLoad); bDone <- err }()
	select {
	case <-waiting:
	case err := <-bDone:
		t.Fatalf("b returned before waiting: %v", err)
	}
	close(release)
	if err := <-aDone; !errors.Is(err, errSource) {
		t.Fatalf("the loading caller got %v, want its loader's error", err)
	}
	if err := <-bDone; !errors.Is(err, ErrLoadFailed) {
		t.Fatalf("the waiting process got %v, want ErrLoadFailed (woken by the failure, polling off)", err)
	}
	if _, err := b.Fetch(ctx, key, mustNotLoad); !errors.Is(err, ErrLoadFailed) {
		t.Fatalf("a caller during the hold-off got %v, want ErrLoadFailed at once", err)
	}
	g := a.c.group(key)
	if loaderCalls(a, g, "error") != 1 || lookups(a, g, resultError) != 3 {
		t.Fatalf("loader calls (error) = %v, lookups (error) = %v; want 1 and 3", loaderCalls(a, g, "error"), lookups(a, g, resultError))
	}
}

// A value past its hard TTL whose refresh failed is not served, and the
// callers during the hold-off get what the loading caller got: an error
// wrapping ErrHardTTLExpired (and ErrLoadFailed), without a loader call.
func TestFetchPastHardTTLDuringTheHoldoff(t *testing.T) {
	srv := redistest.Start(t)
	clk := newFetchClock()
	ca := newFetchCache(t, srv.Client(t), prometheus.NewRegistry(), clk, CacheOptions{FreshTTL: time.Second,
		HardTTL: 2 * time.Second, Jitter: -1, FailureHoldoff: time.Minute, PollInterval: time.Hour, LocalCopies: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "rate:{5}"
	if _, err := ca.Fetch(ctx, key, func(context.Context) (string, error) { return "v1", nil }); err != nil {
		t.Fatal(err)
	}
	written(ca, key)
	clk.add(3 * time.Second) // past the hard TTL at the Cache's clock; Redis keeps the key a second longer
	errSource := errors.New("source down")
	if _, err := ca.Fetch(ctx, key, func(context.Context) (string, error) { return "", errSource }); !errors.Is(err, ErrHardTTLExpired) || !errors.Is(err, errSource) {
		t.Fatalf("the loading caller got %v, want ErrHardTTLExpired and its loader's error", err)
	}
	_, err := ca.Fetch(ctx, key, func(context.Context) (string, error) { t.Error("loader called during the hold-off"); return "", nil })
	if !errors.Is(err, ErrHardTTLExpired) || !errors.Is(err, ErrLoadFailed) {
		t.Fatalf("a caller during the hold-off got %v, want ErrHardTTLExpired and ErrLoadFailed", err)
	}
	if got := testutil.ToFloat64(ca.c.m.hardTTLExpired.WithLabelValues(ca.c.group(key))); got != 2 {
		t.Fatalf("hard TTL refusals counted %v, want 2", got)
	}
}
