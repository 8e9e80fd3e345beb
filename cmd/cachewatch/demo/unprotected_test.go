package demo

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/keygroup"
)

// TestAttemptsReadAsTheHook: a waiting caller's lock attempts, counted by
// the demo's attempts, agree with a hook's metrics on a real redis-server,
// also when the caller stalls past the hook's retry horizon between a busy
// attempt and its retry. The hook then sees a try-once caller and a new
// acquisition, and so must the demo.
func TestAttemptsReadAsTheHook(t *testing.T) {
	const horizon = time.Second
	srv := redistest.Start(t)
	groups, err := keygroup.New(keygroup.Options{MinKeys: 1})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	rdb := srv.Client(t)
	h, err := hooks.New(hooks.Options{Registerer: reg, Name: "caller", KeyGroups: groups, RetryHorizon: horizon})
	if err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(h)
	holder := srv.Client(t) // unhooked: its attempts are not the caller's
	ctx := context.Background()
	const lock = keyPrefix + "lock:product:{1}"
	if err := holder.Set(ctx, lock, "holder", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	u := &unprotected{rdb: rdb}
	tr := &truth{}
	seen := attempts{t: tr, horizon: horizon}
	token := newToken()
	try := func(want bool) {
		t.Helper()
		acquired, err := u.tryLock(ctx, lock, token, time.Minute)
		if err != nil || acquired != want {
			t.Fatalf("SET NX: acquired %v, %v; want %v", acquired, err, want)
		}
		seen.answered(acquired)
	}
	try(false)
	time.Sleep(2 * horizon) // a stalled caller: its retry begins anew
	try(false)
	try(false) // a retry: the caller waits (unless this machine stalled it too)
	if err := holder.Del(ctx, lock).Err(); err != nil {
		t.Fatal(err)
	}
	try(true)
	seen.end()

	snap, err := gather(reg) // a scrape settles the busy first attempts
	if err != nil {
		t.Fatal(err)
	}
	s := readSignals(snap, "")
	if tr.skippedBusy.Load() == 0 || tr.firstAttempts.Load() < 2 {
		t.Errorf("demo counted %d first attempts, %d skipped busy: want the stalled one counted try-once and anew",
			tr.firstAttempts.Load(), tr.skippedBusy.Load())
	}
	for _, c := range []struct {
		what        string
		metric, own float64
	}{
		{"first attempts", s.FirstAttempts, float64(tr.firstAttempts.Load())},
		{"try-once busy first attempts", s.TryOnceBusy, float64(tr.skippedBusy.Load())},
		{"waiting callers' busy first attempts", s.FirstBusy - s.TryOnceBusy, float64(tr.firstBusy.Load())},
	} {
		if c.metric != c.own {
			t.Errorf("%s: metrics say %v, the demo counted %v", c.what, c.metric, c.own)
		}
	}
}
