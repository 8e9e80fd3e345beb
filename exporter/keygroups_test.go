package exporter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/keygroup"
)

// With its default classifier the exporter learns key groups from the
// keyspace it walks: keys and locks named after users are exported under
// "user:*:profile" and "lock:job:*", never under a user's name, and locks
// indexed before their group was learnt move to it.
func TestExporterLearnsKeyGroups(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	names := userNames(60)
	pipe := rdb.Pipeline()
	for _, n := range names {
		pipe.Set(ctx, "user:"+n+":profile", "{}", time.Hour)
		pipe.Set(ctx, "lock:job:"+n, "owner", 0)
	}
	_, err := pipe.Exec(ctx)
	must(t, err)
	e, err := exporter.New(exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}})
	must(t, err)
	t.Cleanup(func() { _ = e.Close() })
	for range 3 { // the first pass learns, the next ones are classified by what it learnt
		if s := e.Sample(ctx)[0]; !s.Up {
			t.Fatal(s.Err)
		}
	}
	s := e.Snapshots()[0]
	for group := range s.Pass.Groups {
		for _, n := range names {
			if strings.Contains(group, n) {
				t.Errorf("group %q holds the name %q", group, n)
			}
		}
	}
	if g := s.Pass.Groups["user:*:profile"]; g == nil || g.Keys != uint64(len(names)) {
		t.Errorf("user:*:profile: %+v, want %d keys; groups %v", g, len(names), keys(s.Pass.Groups))
	}
	if g := s.Pass.Groups["lock:job:*"]; g == nil || g.Locks != uint64(len(names)) || g.LocksNoTTL != uint64(len(names)) {
		t.Errorf("lock:job:*: %+v, want %d locks without TTL; groups %v", g, len(names), keys(s.Pass.Groups))
	}
	if g := s.Pass.Groups[keygroup.Other]; g != nil && (g.Keys > 0 || g.Locks > 0) {
		t.Errorf("other still holds %d keys and %d locks once learnt", g.Keys, g.Locks)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// An exporter embedded in a service shares the registry's classifier with
// the service's hooks and clients (keygroup.Shared): all register on one
// registry, the overflow series is exported once, and what the exporter
// learnt from the keyspace the hook uses for its first read of a key.
func TestExporterSharesTheRegistrysClassifier(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	names := userNames(60)
	for _, n := range names {
		must(t, rdb.Set(ctx, "user:"+n+":profile", "{}", time.Hour).Err())
	}
	reg := prometheus.NewRegistry()
	h, err := hooks.New(hooks.Options{Registerer: reg})
	must(t, err)
	e, err := exporter.New(exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}, KeyGroups: keygroup.Shared(reg)})
	must(t, err)
	t.Cleanup(func() { _ = e.Close() })
	must(t, reg.Register(e))
	for range 2 {
		e.Sample(ctx)
	}
	app := redistest.NewClient(t, &redis.Options{Addr: srv.Addr})
	app.AddHook(h)
	if err := app.Get(ctx, "user:zed:profile").Err(); err != redis.Nil {
		t.Fatalf("GET of a missing key: %v", err)
	}
	if got := metrictest.Sum(t, reg, "cachewatch_cache_lookups_total", "key_group", "user:*:profile"); got != 1 {
		t.Errorf("the hook's first read of a key the exporter's groups cover: %v lookups under user:*:profile, want 1", got)
	}
	if n, err := testutil.GatherAndCount(reg, "cachewatch_keygroup_overflow_total"); err != nil || n != 1 {
		t.Errorf("overflow series: %d, %v; want 1", n, err)
	}
}

// userNames returns n names of letters only (not IDs).
func userNames(n int) []string {
	var out []string
	for _, a := range "bcdfghjklmnpqrstvwxz" {
		for _, b := range "aeiouy" {
			if len(out) == n {
				return out
			}
			out = append(out, string([]rune{a, b, 'r', b, 'n'}))
		}
	}
	return out
}
