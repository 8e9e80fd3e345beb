package exporter_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/internal/lockholder"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// The holders of a group's longest-held locks are exported by service and
// host, held for as long as the index has seen their token (or as their
// value tells); a bare token names nobody and is "opaque". Never a key or
// token in a label, and at most LockHolders series per group.
func TestLockHoldersOpaque(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for _, k := range []string{"lock:job:1", "lock:job:2", "lock:job:3"} {
		must(t, rdb.Set(ctx, k, "tok-"+k, 0).Err())
	}
	clk := clockwork.NewFakeClockAt(time.Now())
	e, reg := newExporter(t, exporter.Options{
		Target: exporter.Target{Addrs: []string{srv.Addr}},
		Clock:  clk,
		Locks:  exporter.LockOptions{Holders: 2, Notifications: exporter.NotifyOff},
	})
	e.Sample(ctx)
	clk.Advance(30 * time.Second)
	must(t, rdb.Set(ctx, "lock:job:4", "tok-new", time.Minute).Err())
	e.Sample(ctx)
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_lock_holder_held_seconds{key_group="lock:job:*",service="opaque",host=""}`: 30,
	})
	n := 0
	for k := range got {
		if strings.HasPrefix(k, "cachewatch_exporter_lock_holder_held_seconds{") {
			n++
		}
		if strings.Contains(k, "tok-") || strings.Contains(k, `"lock:job:1"`) {
			t.Errorf("a token or raw key became a label: %s", k)
		}
	}
	if n != 1 {
		t.Errorf("%d holder series, want 1 (every value is opaque)", n)
	}
	snaps := e.Snapshots()
	hs := snaps[0].Pass.Groups["lock:job:*"].Holders
	if len(hs) != 2 || hs[0].Key != "lock:job:1" || hs[1].Key != "lock:job:2" || hs[0].TTL != -1 {
		t.Fatalf("holders: %+v, want lock:job:1 and lock:job:2 (the 2 longest-held, key order among equals)", hs)
	}
}

// Locks of three services, in lockholder's format: the 2 longest-held
// holders of the group are exported, held since the acquisition time their
// value tells; the third is not (the bound). A redislock value names its
// metadata as the service.
func TestLockHoldersNamed(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	now := time.UnixMilli(time.Now().UnixMilli())
	host, err := os.Hostname()
	must(t, err)
	for i, h := range []struct {
		service string
		ago     time.Duration
	}{{"billing", 120 * time.Second}, {"search", 60 * time.Second}, {"reports", 10 * time.Second}} {
		tok, err := lockholder.NewToken()
		must(t, err)
		v := lockholder.NewIdentity(h.service).Value(tok, now.Add(-h.ago))
		must(t, rdb.Set(ctx, fmt.Sprintf("lock:job:%d", i+1), v, time.Hour).Err())
	}
	must(t, rdb.Set(ctx, "lock:mail:1", "0123456789abcdefghijkLmailer-7", time.Hour).Err())
	clk := clockwork.NewFakeClockAt(now)
	e, reg := newExporter(t, exporter.Options{
		Target: exporter.Target{Addrs: []string{srv.Addr}},
		Clock:  clk,
		Locks:  exporter.LockOptions{Holders: 2, Notifications: exporter.NotifyOff},
	})
	e.Sample(ctx)
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_lock_holder_held_seconds{key_group="lock:job:*",service="billing",host="` + host + `"}`: 120,
		`cachewatch_exporter_lock_holder_held_seconds{key_group="lock:job:*",service="search",host="` + host + `"}`:  60,
		`cachewatch_exporter_lock_holder_held_seconds{key_group="lock:mail:*",service="mailer-7",host=""}`:           0,
	})
	for k := range got {
		if strings.Contains(k, `service="reports"`) {
			t.Errorf("the third holder of a group bounded to 2 was exported: %s", k)
		}
	}
	hs := e.Snapshots()[0].Pass.Groups["lock:job:*"].Holders
	if len(hs) != 2 || hs[0].Holder.PID != os.Getpid() || hs[0].Holder.Format != "cachewatch" || hs[0].Holder.Instance != lockholder.Instance() {
		t.Fatalf("holders: %+v", hs)
	}
}

// Live locks whose holder's liveness key is gone are counted per group as
// held by a dead holder, and the holders table says alive no; a live
// holder's lock, an unmarked value and an opaque token are not counted
// (yes, unknown, unknown).
func TestLocksDeadHolder(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	value := func(instance, mark string) string {
		return fmt.Sprintf("cw1|tok%s|reports|host-1|42|%s|%d%s", instance, instance, now, mark)
	}
	must(t, rdb.Set(ctx, lockholder.AliveKey("liveInst"), "1", time.Minute).Err())
	for k, v := range map[string]string{
		"lock:job:11": value("deadInst", "@"), "lock:job:12": value("deadInst", "@"),
		"lock:job:13": value("liveInst", "@"), "lock:job:14": value("otherInst", ""),
		"lock:job:15": "abcdefghijklmnopqrstuv",
	} {
		must(t, rdb.Set(ctx, k, v, time.Minute).Err())
	}
	e, reg := newExporter(t, exporter.Options{
		Target: exporter.Target{Addrs: []string{srv.Addr}},
		Locks:  exporter.LockOptions{Holders: 10, Notifications: exporter.NotifyOff},
	})
	e.Sample(ctx)
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_locks_dead_holder{key_group="lock:job:*"}`: 2,
		`cachewatch_exporter_locks_held{key_group="lock:job:*"}`:        5,
	})
	alive := map[string]string{}
	for _, h := range e.Snapshots()[0].Pass.Groups["lock:job:*"].Holders {
		alive[h.Key] = h.Alive
	}
	want := map[string]string{"lock:job:11": "no", "lock:job:12": "no", "lock:job:13": "yes",
		"lock:job:14": "unknown", "lock:job:15": "unknown"}
	for k, w := range want {
		if alive[k] != w {
			t.Errorf("%s: alive %q, want %q (all: %v)", k, alive[k], w, alive)
		}
	}
	must(t, rdb.Set(ctx, lockholder.AliveKey("deadInst"), "1", time.Minute).Err()) // the holder's process is back
	e.Sample(ctx)
	_, got = scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{`cachewatch_exporter_locks_dead_holder{key_group="lock:job:*"}`: 0})
}
