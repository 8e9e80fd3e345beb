package exporter_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/internal/sampler"
	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// notifyArgs start a server that publishes the keyspace events the lock
// index needs.
var notifyArgs = []string{"--notify-keyspace-events", sampler.NotifyFlags}

// writeLocks writes cache keys and lock keys: locks lock:order:0…locks-1,
// the first noTTL of them without expiry.
func writeLocks(t *testing.T, rdb redis.UniversalClient, keys, locks, noTTL int) {
	t.Helper()
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := range keys {
		pipe.Set(ctx, fmt.Sprintf("cache:item:%d", i), "v", time.Hour)
	}
	for i := range locks {
		ttl := 10 * time.Minute
		if i < noTTL {
			ttl = 0
		}
		pipe.Set(ctx, fmt.Sprintf("lock:order:%d", i), fmt.Sprintf("tok-%d", i), ttl)
	}
	_, err := pipe.Exec(ctx)
	must(t, err)
}

// notifyOptions make a lock pass that cannot cover the keyspace within one
// sample once synced (a 200 ms budget per sample, a reconciling pass over
// an hour): what a later sample knows of the locks, it knows from the
// notifications.
func notifyOptions(addrs []string, clk clockwork.Clock) exporter.Options {
	return exporter.Options{
		Target: exporter.Target{Addrs: addrs, Mode: exporter.ModeStandalone},
		Clock:  clk,
		Sample: exporter.SampleOptions{MaxDuration: 200 * time.Millisecond, MaxKeys: 100},
		Locks:  exporter.LockOptions{Reconcile: time.Hour},
	}
}

// With keyspace notifications, the lock figures are exact at every sample
// (as of its start: their timestamp is the sample's) although no SCAN pass completes between the
// samples: deletions, new locks, PERSIST and a lock that expires by itself
// are all followed.
func TestLocksFollowNotifications(t *testing.T) {
	srv := redistest.Start(t, notifyArgs...)
	rdb := srv.Client(t)
	ctx := context.Background()
	writeLocks(t, rdb, 20_000, 300, 20)
	clk := clockwork.NewFakeClockAt(time.Now())
	e, reg := newExporter(t, notifyOptions([]string{srv.Addr}, clk))
	// The syncing pass runs at the rate the sampler's measured cost allows:
	// on a busy machine it may need more than one sample's 200 ms budget.
	s := e.Sample(ctx)[0]
	for i := 1; s.Pass == nil || !s.Pass.LocksNotified || s.Pass.LockPassEnded.IsZero(); i++ {
		if i == 100 {
			t.Fatalf("%d samples: no synced lock index: %+v errors %v", i, s.Pass, s.Errors)
		}
		s = e.Sample(ctx)[0]
	}
	passEnded := s.Pass.LockPassEnded
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_locks_held{key_group="lock:order:*"}`:                  300,
		`cachewatch_exporter_locks_without_ttl{key_group="lock:order:*"}`:           20,
		`cachewatch_exporter_lock_notifications`:                                    1,
		`cachewatch_exporter_data_timestamp_seconds{family="locks"}`:                unixSeconds(clk.Now()),
		`cachewatch_exporter_lock_index_repairs_total`:                              0,
		`cachewatch_exporter_locks_expiring{key_group="lock:order:*",within="inf"}`: 280,
	})

	for i := 100; i < 200; i++ { // 100 with a TTL deleted
		must(t, rdb.Unlink(ctx, fmt.Sprintf("lock:order:%d", i)).Err())
	}
	for i := 0; i < 50; i++ { // 50 new, 10 of them without TTL
		ttl := time.Minute
		if i < 10 {
			ttl = 0
		}
		must(t, rdb.Set(ctx, fmt.Sprintf("lock:job:%d", i), "t", ttl).Err())
	}
	for i := 20; i < 25; i++ { // 5 lose their TTL
		must(t, rdb.Persist(ctx, fmt.Sprintf("lock:order:%d", i)).Err())
	}
	must(t, rdb.Set(ctx, "lock:job:short", "t", 50*time.Millisecond).Err())
	waitGone(t, rdb, "lock:job:short") // expired by the server: an "expired" event

	clk.Advance(15 * time.Second)
	s = e.Sample(ctx)[0]
	if !s.Pass.LockPassEnded.Equal(passEnded) {
		t.Fatalf("a lock pass completed in the second sample: the test would not show the notifications at work")
	}
	_, got = scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_locks_held{key_group="lock:order:*"}`:        200,
		`cachewatch_exporter_locks_without_ttl{key_group="lock:order:*"}`: 25,
		`cachewatch_exporter_locks_held{key_group="lock:job:*"}`:          50,
		`cachewatch_exporter_locks_without_ttl{key_group="lock:job:*"}`:   10,
		`cachewatch_exporter_data_timestamp_seconds{family="locks"}`:      unixSeconds(clk.Now()),
		`cachewatch_exporter_lock_notifications`:                          1,
	})
}

// unixSeconds is t as the exporter exports a time.
func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func waitGone(t *testing.T, rdb *redis.Client, key string) {
	t.Helper()
	poll.Until(t, key+" to expire", func() bool { return rdb.Exists(context.Background(), key).Val() != 1 })
}

// A subscription that breaks loses events: the index is not trusted until a
// new subscription and a whole pass after it (a lock written while it was
// down is found), and the break is counted.
func TestLockIndexResyncsAfterLostSubscription(t *testing.T) {
	srv := redistest.Start(t, notifyArgs...)
	rdb := srv.Client(t)
	ctx := context.Background()
	writeLocks(t, rdb, 1000, 40, 0)
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}})
	if s := e.Sample(ctx)[0]; s.Pass == nil || !s.Pass.LocksNotified {
		t.Fatalf("not synced: %+v", s.Errors)
	}
	must(t, rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
	must(t, rdb.Set(ctx, "lock:lost:1", "t", 0).Err()) // its event is lost
	s := e.Sample(ctx)[0]
	if s.LockNotifications {
		t.Fatal("still synced after the subscription was killed")
	}
	// Resubscribed after its 1 s backoff; the next sample syncs again.
	err := poll.Check(ctx, poll.Bound, 200*time.Millisecond, func() error {
		if s = e.Sample(ctx)[0]; s.Pass == nil || !s.Pass.LocksNotified {
			return fmt.Errorf("not synced: %v", s.Errors)
		}
		return nil
	})
	must(t, err)
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_locks_held{key_group="lock:lost:*"}`:                           1,
		`cachewatch_exporter_locks_without_ttl{key_group="lock:lost:*"}`:                    1,
		`cachewatch_exporter_locks_held{key_group="lock:order:*"}`:                          40,
		`cachewatch_exporter_lock_notifications`:                                            1,
		`cachewatch_exporter_sample_errors_total{stage="notifications",class="connection"}`: 1,
	})
}

// Events missed while the server stopped publishing them (the setting
// turned off and on between two samples) are repaired by the reconciling
// SCAN pass, and counted.
func TestReconcilingPassRepairsLostEvents(t *testing.T) {
	srv := redistest.Start(t, notifyArgs...)
	rdb := srv.Client(t)
	ctx := context.Background()
	writeLocks(t, rdb, 1000, 40, 0)
	opts := exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}, Locks: exporter.LockOptions{Reconcile: time.Second}}
	e, reg := newExporter(t, opts)
	e.Sample(ctx)
	must(t, rdb.ConfigSet(ctx, "notify-keyspace-events", "").Err())
	for i := 0; i < 10; i++ {
		must(t, rdb.Del(ctx, fmt.Sprintf("lock:order:%d", i)).Err())
	}
	for i := 0; i < 5; i++ {
		must(t, rdb.Set(ctx, fmt.Sprintf("lock:job:%d", i), "t", time.Minute).Err())
	}
	must(t, rdb.ConfigSet(ctx, "notify-keyspace-events", sampler.NotifyFlags).Err())
	s := e.Sample(ctx)[0] // the reconciling pass (1,040 keys at ≥ 1,000 keys/s) completes
	if s.Pass == nil || !s.Pass.LocksNotified {
		t.Fatalf("not synced: %v", s.Errors)
	}
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_locks_held{key_group="lock:order:*"}`: 30,
		`cachewatch_exporter_locks_held{key_group="lock:job:*"}`:   5,
		`cachewatch_exporter_lock_index_repairs_total`:             15,
	})
}

// FLUSHALL removes keys without a keyspace event per key: the next sample
// starts the lock index over instead of serving the flushed locks.
func TestFlushResetsLockIndex(t *testing.T) {
	srv := redistest.Start(t, notifyArgs...)
	rdb := srv.Client(t)
	ctx := context.Background()
	writeLocks(t, rdb, 1000, 40, 5)
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}})
	e.Sample(ctx)
	must(t, rdb.FlushAll(ctx).Err())
	must(t, rdb.Set(ctx, "lock:job:1", "t", 0).Err())
	e.Sample(ctx)
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{`cachewatch_exporter_locks_held{key_group="lock:job:*"}`: 1})
	for k := range got {
		if strings.Contains(k, `key_group="lock:order:*"`) {
			t.Errorf("flushed locks still served: %s = %v", k, got[k])
		}
	}
}

// notifyConfig reads the server's notify-keyspace-events.
func notifyConfig(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	return rdb.ConfigGet(context.Background(), "notify-keyspace-events").Val()["notify-keyspace-events"]
}

// hasClasses reports whether the notify-keyspace-events value v holds every
// class of want.
func hasClasses(v, want string) bool {
	for _, c := range want {
		if !strings.ContainsRune(v, c) {
			return false
		}
	}
	return true
}

// By default (NotifyAuto) the exporter adds the classes the lock index needs
// to the operator's, follows the notifications, and puts the operator's
// value back on Close; NotifyExisting never writes the setting and falls
// back to SCAN passes; NotifyEnable adds the classes and leaves them on.
func TestNotificationModes(t *testing.T) {
	srv := redistest.Start(t, "--notify-keyspace-events", "E$")
	rdb := srv.Client(t)
	ctx := context.Background()
	writeLocks(t, rdb, 100, 10, 0)
	opts := exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}}

	opts.Locks.Notifications = exporter.NotifyExisting
	existing, _ := newExporter(t, opts)
	if s := existing.Sample(ctx)[0]; s.Pass == nil || s.Pass.LocksNotified || s.Pass.LocksAsOf.IsZero() || s.LockNotificationsRefused {
		t.Fatalf("existing mode on a server without keyspace events: %+v", s.Pass)
	}
	if got := notifyConfig(t, rdb); got != "$E" {
		t.Fatalf("existing mode changed notify-keyspace-events to %q", got)
	}

	opts.Locks.Notifications = exporter.NotifyAuto
	auto, reg := newExporter(t, opts)
	if s := auto.Sample(ctx)[0]; s.Pass == nil || !s.Pass.LocksNotified {
		t.Fatalf("auto mode: not synced: %v", s.Errors)
	}
	if got := notifyConfig(t, rdb); !hasClasses(got, sampler.NotifyFlags+"E") {
		t.Fatalf("auto mode: notify-keyspace-events = %q, want E$ kept and %s added", got, sampler.NotifyFlags)
	}
	_, m := scrape(t, reg)
	expect(t, m, srv.Addr, map[string]float64{`cachewatch_exporter_lock_notifications`: 1, `cachewatch_exporter_lock_notifications_refused`: 0})
	must(t, auto.Close())
	if got := notifyConfig(t, rdb); got != "$E" {
		t.Fatalf("auto mode: notify-keyspace-events = %q after Close, want the operator's $E back", got)
	}

	opts.Locks.Notifications = exporter.NotifyEnable
	on, _ := newExporter(t, opts)
	if s := on.Sample(ctx)[0]; s.Pass == nil || !s.Pass.LocksNotified {
		t.Fatalf("enable mode: not synced: %v", s.Errors)
	}
	must(t, on.Close())
	if got := notifyConfig(t, rdb); !hasClasses(got, sampler.NotifyFlags+"E") {
		t.Fatalf("enable mode: notify-keyspace-events = %q after Close, want %s left on", got, sampler.NotifyFlags)
	}
}

// A value the operator changed after the exporter set it is theirs: Close
// leaves it, and the exporter does not add the classes again while the
// server runs.
func TestNotificationsChangedSinceAreLeft(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	writeLocks(t, rdb, 100, 10, 0)
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}})
	e.Sample(ctx)
	must(t, rdb.ConfigSet(ctx, "notify-keyspace-events", "Ex").Err())
	s := e.Sample(ctx)[0]
	if s.LockNotifications || notifyConfig(t, rdb) != "xE" {
		t.Fatalf("after the operator's change: notifications %v, notify-keyspace-events %q", s.LockNotifications, notifyConfig(t, rdb))
	}
	_, m := scrape(t, reg)
	expect(t, m, srv.Addr, map[string]float64{`cachewatch_exporter_lock_notifications`: 0, `cachewatch_exporter_locks_held{key_group="lock:order:*"}`: 10})
	must(t, e.Close())
	if got := notifyConfig(t, rdb); got != "xE" {
		t.Fatalf("Close changed the operator's notify-keyspace-events to %q", got)
	}
}

// A server that refuses the exporter's CONFIG SET (ACL) or does not know
// CONFIG (renamed) gets SCAN passes: one clear log line per refused
// command, the refusal exported, no sample error counted (the operator's
// choice, not a failure), CONFIG sent again only after the ACL backoff, and
// exact lock figures all the same.
func TestRefusedNotificationsFallBackToScan(t *testing.T) {
	for _, c := range []struct {
		name, command string
		args          []string
		user          bool
	}{
		{"acl", "config|set", nil, true},
		{"renamed", "config|get", []string{"--rename-command", "CONFIG", ""}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t, c.args...)
			admin := srv.Client(t)
			ctx := context.Background()
			writeLocks(t, admin, 1000, 40, 4)
			target := exporter.Target{Addrs: []string{srv.Addr}}
			if c.user {
				must(t, admin.Do(ctx, "ACL", "SETUSER", "sampler", "reset", "on", ">pw", "~*", "allchannels", "+@all", "-config|set").Err())
				target.Username, target.Password = "sampler", "pw"
			}
			var logs bytes.Buffer
			clk := clockwork.NewFakeClockAt(time.Now())
			e, reg := newExporter(t, exporter.Options{Target: target, Clock: clk, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			for i := 0; i < 10; i++ {
				s := e.Sample(ctx)[0]
				if g := s.Pass.Groups["lock:order:*"]; s.Pass == nil || s.Pass.LocksNotified || g == nil || g.Locks != 40 || !s.LockNotificationsRefused {
					t.Fatalf("sample %d: lock figures %+v, refused %v, errors %v", i, s.Pass, s.LockNotificationsRefused, s.Errors)
				}
				clk.Advance(5 * time.Second)
			}
			_, got := scrape(t, reg)
			expect(t, got, srv.Addr, map[string]float64{
				`cachewatch_exporter_lock_notifications`:                          0,
				`cachewatch_exporter_lock_notifications_refused`:                  1,
				`cachewatch_exporter_locks_without_ttl{key_group="lock:order:*"}`: 4,
			})
			for k, v := range got {
				if strings.HasPrefix(k, "cachewatch_exporter_sample_errors_total") && v > 0 {
					t.Errorf("a refused CONFIG counted as a sample error: %s = %v", k, v)
				}
			}
			if n := strings.Count(logs.String(), "cannot turn on keyspace notifications"); n != 1 || !strings.Contains(logs.String(), "command="+c.command) {
				t.Errorf("want one log line naming %s, got %d:\n%s", c.command, n, logs.String())
			}
			if got := notifyConfig(t, admin); c.user && got != "" {
				t.Errorf("notify-keyspace-events = %q", got)
			}
			calls := commandCalls(t, admin, "config|"+map[bool]string{true: "set", false: "get"}[c.user])
			if c.user && (calls < 1 || calls > 3) { // at 0, 15 and 45 s (the ACL backoff: the interval, doubling)
				t.Errorf("CONFIG SET sent %d times over 50 s of samples", calls)
			}
		})
	}
}

// commandCalls reads the calls of one command the server received, run or
// rejected (INFO commandstats, cmdstat_<name>: calls and rejected_calls).
func commandCalls(t *testing.T, rdb *redis.Client, name string) int {
	t.Helper()
	raw := rdb.Info(context.Background(), "commandstats").Val()
	total := 0
	for _, line := range strings.Split(raw, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_"+name+":")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			if k == "calls" || k == "rejected_calls" {
				n, _ := strconv.Atoi(v)
				total += n
			}
		}
	}
	return total
}

// In a Cluster every master is subscribed: changes on each are followed
// without a completed pass.
func TestNotificationsOnEveryClusterMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	for _, n := range cl.Nodes {
		c := n.Client(t)
		must(t, c.ConfigSet(ctx, "notify-keyspace-events", sampler.NotifyFlags).Err())
	}
	rdb := cl.Client(t)
	writeLocks(t, rdb, 3000, 90, 0)
	clk := clockwork.NewFakeClockAt(time.Now())
	opts := notifyOptions(cl.Addrs()[:1], clk)
	opts.Target.Mode = exporter.ModeAuto
	e, reg := newExporter(t, opts)
	// Each master's syncing pass runs at the rate the sampler's measured
	// cost allows: on a busy machine it may need more than one sample's
	// 200 ms budget.
	for i := 1; !allNotified(e.Sample(ctx)); i++ {
		if i == 100 {
			t.Fatalf("%d samples: a master's lock index is not synced: %+v", i, e.Snapshots())
		}
	}
	for i := 0; i < 30; i++ {
		must(t, rdb.Del(ctx, fmt.Sprintf("lock:order:%d", i)).Err())
		must(t, rdb.Set(ctx, fmt.Sprintf("lock:job:%d", i), "t", 0).Err())
	}
	clk.Advance(15 * time.Second)
	snaps := e.Sample(ctx)
	if len(snaps) != 3 {
		t.Fatalf("%d nodes sampled", len(snaps))
	}
	_, got := scrape(t, reg)
	for _, series := range []struct {
		name string
		want float64
	}{
		{`cachewatch_exporter_locks_held{key_group="lock:order:*"}`, 60},
		{`cachewatch_exporter_locks_without_ttl{key_group="lock:job:*"}`, 30},
		{`cachewatch_exporter_lock_notifications{}`, 3},
	} {
		if sum, _ := sumNodes(got, series.name); sum != series.want {
			t.Errorf("%s summed over nodes = %v, want %v", series.name, sum, series.want)
		}
	}
}

// allNotified reports whether every node's lock index is synced and
// followed by notifications.
func allNotified(snaps []*snapshot.Node) bool {
	for _, s := range snaps {
		if s.Pass == nil || !s.Pass.LocksNotified {
			return false
		}
	}
	return len(snaps) > 0
}

// A user who may not subscribe to the lock patterns' channels still gets
// exact lock figures from SCAN passes; the refusal is counted and retried
// after the ACL backoff, not every sample.
func TestRefusedSubscriptionFallsBackToScan(t *testing.T) {
	srv := redistest.Start(t, notifyArgs...)
	admin := srv.Client(t)
	ctx := context.Background()
	writeLocks(t, admin, 1000, 40, 4)
	must(t, admin.Do(ctx, "ACL", "SETUSER", "sampler", "reset", "on", ">pw", "~*", "resetchannels", "+@all").Err())
	clk := clockwork.NewFakeClockAt(time.Now())
	e, reg := newExporter(t, exporter.Options{
		Target: exporter.Target{Addrs: []string{srv.Addr}, Username: "sampler", Password: "pw"},
		Clock:  clk,
		Sample: exporter.SampleOptions{Interval: 15 * time.Second},
	})
	const samples = 30
	for i := 0; i < samples; i++ {
		if s := e.Sample(ctx)[0]; s.Pass == nil || s.Pass.LocksNotified || s.Pass.Groups["lock:order:*"] == nil ||
			s.Pass.Groups["lock:order:*"].Locks != 40 {
			t.Fatalf("sample %d: lock figures %+v, errors %v", i, s.Pass, s.Errors)
		}
		clk.Advance(time.Second)
	}
	_, got := scrape(t, reg)
	refused := got[`cachewatch_exporter_sample_errors_total{class="noperm",node="`+srv.Addr+`",stage="notifications"}`]
	if refused < 1 || refused > 3 { // at 0 and 15 s (the ACL backoff: the interval, doubling)
		t.Errorf("refused subscriptions counted %v times in %d samples, want 1 to 3", refused, samples)
	}
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_locks_without_ttl{key_group="lock:order:*"}`: 4,
		`cachewatch_exporter_lock_notifications`:                          0,
	})
}

// Close ends the subscriptions' goroutines with the connections.
func TestCloseEndsSubscriptions(t *testing.T) {
	srv := redistest.Start(t, notifyArgs...)
	writeLocks(t, srv.Client(t), 10, 3, 0)
	before := runtime.NumGoroutine()
	e, err := exporter.New(exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}})
	must(t, err)
	if s := e.Sample(context.Background())[0]; s.Pass == nil || !s.Pass.LocksNotified {
		t.Fatalf("not subscribed: %v", s.Errors)
	}
	must(t, e.Close())
	poll.Until(t, fmt.Sprintf("the goroutines to end after Close (%d before New)", before), func() bool {
		return runtime.NumGoroutine() <= before
	})
	if n := patternSubscribers(t, srv.Client(t)); n != 0 {
		t.Errorf("%d subscribed connections left after Close", n)
	}
}

// patternSubscribers counts the server's connections subscribed to a
// pattern (CLIENT LIST psub).
func patternSubscribers(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	list, err := rdb.ClientList(context.Background()).Result()
	must(t, err)
	n := 0
	for _, field := range strings.Fields(list) {
		if strings.HasPrefix(field, "psub=") && field != "psub=0" {
			n++
		}
	}
	return n
}

// Stopping the exporter (its context cancelled, as on SIGTERM) in the
// middle of a sample is no failure: nothing is logged above info, no
// error is counted, and the notify-keyspace-events the exporter turned on
// is put back.
func TestStopMidSampleLogsNoFailure(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	writeLocks(t, rdb, 20_000, 40, 4)
	var logs bytes.Buffer
	e, reg := newExporter(t, exporter.Options{
		Target: exporter.Target{Addrs: []string{srv.Addr}},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Sample: exporter.SampleOptions{KeysPerSecond: 1000},
	})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- e.Run(ctx) }()
	// The whole-keyspace pass at 1,000 keys/s holds the first sample for
	// its 13 s: stop once it is under way.
	for deadline := time.Now().Add(30 * time.Second); e.Snapshots()[0].KeysScanned == 0 && commandCalls(t, rdb, "scan") < 10; {
		if time.Now().After(deadline) {
			t.Fatal("no sample under way")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-ran; err != context.Canceled {
		t.Fatalf("Run returned %v", err)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Errorf("logged on stopping: %s", line)
		}
	}
	_, got := scrape(t, reg)
	for k, v := range got {
		if strings.HasPrefix(k, "cachewatch_exporter_sample_errors_total") && v > 0 {
			t.Errorf("stopping counted an error: %s = %v", k, v)
		}
	}
	if v := notifyConfig(t, rdb); v != "" || !strings.Contains(logs.String(), "restored notify-keyspace-events") {
		t.Errorf("notify-keyspace-events = %q after stopping; logs:\n%s", v, logs.String())
	}
}
