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
// default classifiers, share one cap: 150 groups read through the hook and
// 150 others locked through the client give at most DefaultMaxGroups
// key_group values on the registry, the rest counted as overflow.
func TestHookAndClientShareOneKeyGroupCap(t *testing.T) {
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
	const each = 150
	for i := 0; i < each; i++ {
		rdb.Get(ctx, fmt.Sprintf("viahook%c%c:1", 'a'+i/26, 'a'+i%26))
	}
	for i := 0; i < each; i++ {
		l, err := c.Lock(ctx, fmt.Sprintf("viaclient%c%c:1", 'a'+i/26, 'a'+i%26), instrument.LockOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	groups := map[string]bool{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "key_group" {
					groups[lp.GetValue()] = true
				}
			}
		}
	}
	if len(groups) > keygroup.DefaultMaxGroups {
		t.Fatalf("%d key_group values on one registry, over the documented cap of %d", len(groups), keygroup.DefaultMaxGroups)
	}
	if !groups[keygroup.Other] {
		t.Fatalf("no %q group after %d distinct groups", keygroup.Other, 2*each)
	}
	// 2*each groups, DefaultMaxGroups-1 places besides Other: the client's
	// last ones overflow, each lock classified once.
	overflowed := float64(2*each - (keygroup.DefaultMaxGroups - 1))
	if got := metricValue(t, reg, "cachewatch_keygroup_overflow_total", nil); got < overflowed {
		t.Fatalf("keygroup_overflow_total = %v, want at least %v", got, overflowed)
	}
}
