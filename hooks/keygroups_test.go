package hooks_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/keygroup"
)

// A hook and an instrumented client on one registry, both with their
// default classifiers, share one classifier: what the hook learnt from the
// keys it saw, the client uses at once, and both fill one cap of
// DefaultMaxGroups groups, the rest counted as overflow.
func TestHookAndClientShareOneClassifier(t *testing.T) {
	rdb := redistest.NewClient(t, quiet(&redis.Options{Addr: redistest.Start(t).Addr}))
	reg := prometheus.NewRegistry()
	h, err := hooks.New(hooks.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(h)
	c, err := instrument.New(rdb, instrument.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 { // the hook sees 40 users' profiles
		for i := range 40 {
			rdb.Get(ctx, fmt.Sprintf("profile:%s:card", name(i)))
		}
	}
	// The hook remembers the group of each key it saw; once learnt, a key
	// it first counted under other counts under its group: most of the
	// second round's reads.
	if got := metricValue(t, reg, "cachewatch_cache_lookups_total", L("key_group=profile:*:card")); got < 30 {
		t.Fatalf("keys read again once their group was learnt: %v lookups under profile:*:card, want most of 40", got)
	}
	lock(t, c, "profile:zed:card") // the client's first key of that shape
	attempts := "cachewatch_lock_attempts_total"
	if got := metricValue(t, reg, attempts, L("key_group=profile:*:card")); got != 1 {
		t.Fatalf("the client's lock on a group the hook learnt: %v attempts under profile:*:card, want 1", got)
	}

	shared := keygroup.Shared(reg) // the registry's classifier fills its cap
	for range 2 {
		for g := range keygroup.DefaultMaxGroups {
			for i := range 25 {
				shared.Classify(fmt.Sprintf("%s:%d", name(1000+g), i))
			}
		}
	}
	before := metricValue(t, reg, "cachewatch_keygroup_overflow_total", nil)
	for range 2 { // a new group through the client: refused by the full cap
		for i := range 25 {
			lock(t, c, fmt.Sprintf("viaclient:%d", i))
		}
	}
	if got := metricValue(t, reg, "cachewatch_keygroup_overflow_total", nil) - before; got == 0 {
		t.Fatal("the client's new group was not refused by the cap the registry's classifier filled")
	}
	if got := metricValue(t, reg, attempts, L("key_group=viaclient:*")); got != 0 {
		t.Fatalf("%v lock attempts under viaclient:* past the shared cap", got)
	}
}

// name is a word for i: letters only, so that it is a name, not an ID.
func name(i int) string {
	const letters = "bcdfghjklmnpqrstvwxz"
	return string([]byte{letters[i%20], 'a', letters[i/20%20], 'o', letters[i/400%20]})
}

func lock(t *testing.T, c *instrument.Client, key string) {
	t.Helper()
	l, err := c.Lock(context.Background(), key, instrument.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}
