package exporter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cachewatch/cachewatch/exporter"
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
	names := make([]string, 0, 60)
	for _, a := range "bcdfghjklm" {
		for _, b := range "aeiouy" {
			names = append(names, string([]rune{a, b, 'r', b, 'n'}))
		}
	}
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
