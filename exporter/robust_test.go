package exporter_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/internal/sampler"
	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/keygroup"
)

// up 0 is exported from the start, before the first sample ends, so an
// up == 0 alert can fire while Redis is unreachable.
func TestUpZeroBeforeFirstSample(t *testing.T) {
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}})
	_, got := scrape(t, reg)
	for _, a := range []string{"127.0.0.1:1", "127.0.0.1:2"} {
		if v, ok := got[fmt.Sprintf("cachewatch_exporter_up{node=%q}", a)]; !ok || v != 0 {
			t.Errorf("before the first sample: up{node=%q} = %v (present %v), want 0", a, v, ok)
		}
	}
	if s := e.Snapshots(); len(s) != 2 || !errors.Is(s[0].Err, sampler.ErrNotSampled) {
		t.Fatalf("snapshots before the first sample: %+v", s)
	}
}

// rediss:// pointed at a plaintext port fails fast, saying why.
func TestTLSToPlaintextPort(t *testing.T) {
	srv := redistest.Start(t)
	tg, err := exporter.ParseURL("rediss://" + srv.Addr)
	must(t, err)
	e, _ := newExporter(t, exporter.Options{Target: tg})
	s := e.Sample(context.Background())[0]
	if s.Up || !errors.Is(s.Err, sampler.ErrTLSMismatch) || !strings.Contains(s.Err.Error(), "redis://") {
		t.Fatalf("TLS to a plaintext port: up=%v err=%v", s.Up, s.Err)
	}
	var se *snapshot.StageError
	if !errors.As(s.Err, &se) || se.Stage != snapshot.StageConnect || se.Class != snapshot.ClassConnection {
		t.Fatalf("stage error: %+v", se)
	}
}

// Against a real TLS-only redis-server (throwaway CA): redis:// (plaintext)
// at its port fails naming the TLS mismatch and exports up 0; rediss://
// trusting the CA samples (up 1, exact lock figures); and rediss:// at a
// plaintext port says the port does not speak TLS.
func TestTLSMismatchRealServer(t *testing.T) {
	srv := redistest.StartTLS(t)
	ctx := context.Background()
	must(t, srv.Client(t).Set(ctx, "lock:tls:1", "tok", time.Minute).Err())

	plain, err := exporter.ParseURL("redis://" + srv.Addr)
	must(t, err)
	e, reg := newExporter(t, exporter.Options{Target: plain})
	s := e.Sample(ctx)[0]
	if s.Up || !errors.Is(s.Err, sampler.ErrTLSMismatch) || !strings.Contains(s.Err.Error(), "TLS mismatch") ||
		!strings.Contains(s.Err.Error(), "rediss://") {
		t.Fatalf("redis:// to a TLS port: up=%v err=%v", s.Up, s.Err)
	}
	var se *snapshot.StageError
	if !errors.As(s.Err, &se) || se.Stage != snapshot.StageConnect || se.Class != snapshot.ClassConnection {
		t.Fatalf("stage error: %+v", se)
	}
	up := metrictest.Sum(t, reg, "cachewatch_exporter_up", "node", srv.Addr)
	errs := metrictest.Sum(t, reg, "cachewatch_exporter_sample_errors_total", "stage", "connect", "class", "connection")
	if up != 0 || errs != 1 {
		t.Fatalf("redis:// to a TLS port: up %v, connect errors %v", up, errs)
	}

	secure, err := exporter.ParseURL("rediss://" + srv.Addr)
	must(t, err)
	secure.TLS = srv.ClientTLS()
	e, reg = newExporter(t, exporter.Options{Target: secure})
	if s := e.Sample(ctx)[0]; !s.Up || len(s.Errors) > 0 {
		t.Fatalf("rediss:// with the CA: up=%v err=%v errors=%v", s.Up, s.Err, s.Errors)
	}
	if up, locks := metrictest.Sum(t, reg, "cachewatch_exporter_up", "node", srv.Addr),
		metrictest.Sum(t, reg, "cachewatch_exporter_locks_held"); up != 1 || locks != 1 {
		t.Fatalf("rediss:// with the CA: up %v, locks_held %v", up, locks)
	}

	plainSrv := redistest.Start(t)
	wrong, err := exporter.ParseURL("rediss://" + plainSrv.Addr)
	must(t, err)
	wrong.TLS = srv.ClientTLS()
	e, reg = newExporter(t, exporter.Options{Target: wrong})
	s = e.Sample(ctx)[0]
	if s.Up || !errors.Is(s.Err, sampler.ErrTLSMismatch) || !strings.Contains(s.Err.Error(), "does not speak TLS") {
		t.Fatalf("rediss:// to a plaintext port: up=%v err=%v", s.Up, s.Err)
	}
	if up := metrictest.Sum(t, reg, "cachewatch_exporter_up", "node", plainSrv.Addr); up != 0 {
		t.Fatalf("rediss:// to a plaintext port: up %v", up)
	}
}

// A consumer group name that is not valid UTF-8 (any client can create one)
// and a key whose group is not valid UTF-8 never fail a scrape: the label
// values are sanitised and every series, up included, is served.
func TestNonUTF8LabelsFromRedis(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	must(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []any{"n", 1}}).Err())
	bad := "grp-\xff\xfe"
	must(t, rdb.XGroupCreate(ctx, "orders", bad, "0").Err())
	must(t, rdb.Set(ctx, "lock:\xc3\x28:1", "tok", time.Minute).Err())
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}, Queues: []string{"orders"}})
	if s := e.Sample(ctx)[0]; !s.Up {
		t.Fatal(s.Err)
	}
	hs := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer hs.Close()
	resp, err := http.Get(hs.URL)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape answered %d", resp.StatusCode)
	}
	body, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_up`: 1,
		"cachewatch_exporter_stream_group_pending{queue=\"orders\",group=\"grp-\uFFFD\"}": 0,
		"cachewatch_exporter_locks_held{key_group=\"lock:*:*\"}":                          1,
	})
	metrictest.PromtoolCheck(t, body)
}

func mustClassifier(t *testing.T, o keygroup.Options) *keygroup.Classifier {
	t.Helper()
	c, err := keygroup.New(o)
	must(t, err)
	return c
}

// A huge lock value is never read whole: the sampler reads at most
// MaxTokenBytes of it (GETRANGE), never GET, and still tracks its owner.
func TestLockValueReadIsBounded(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const size = 32 << 20
	must(t, rdb.Set(ctx, "lock:huge", strings.Repeat("x", size), time.Hour).Err())
	must(t, rdb.ConfigResetStat(ctx).Err())
	clk := clockwork.NewFakeClockAt(time.Now())
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}, Clock: clk, Locks: exporter.LockOptions{LongHeld: 10 * time.Second}})
	e.Sample(ctx)
	clk.Advance(11 * time.Second)
	e.Sample(ctx)
	stats := infoFields(t, rdb, "stats", "commandstats")
	if out := stats["total_net_output_bytes"]; out > 1<<20 {
		t.Errorf("the server sent %d bytes to the sampler for a %d-byte lock value", out, size)
	}
	if stats["cmdstat_get"] != 0 || stats["cmdstat_getrange"] != 2 {
		t.Errorf("reads of the lock value: GET %d, GETRANGE %d; want 0 and 2", stats["cmdstat_get"], stats["cmdstat_getrange"])
	}
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{`cachewatch_exporter_locks_long_held{key_group="lock:huge"}`: 1})
}

// infoFields reads INFO sections as numbers: plain fields, and the calls of
// each cmdstat_ line under the command's name.
func infoFields(t *testing.T, rdb *redis.Client, sections ...string) map[string]int64 {
	t.Helper()
	raw, err := rdb.Info(context.Background(), sections...).Result()
	must(t, err)
	out := map[string]int64{}
	for _, l := range strings.Split(raw, "\r\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		if strings.HasPrefix(k, "cmdstat_") {
			for _, kv := range strings.Split(v, ",") {
				name, n, _ := strings.Cut(kv, "=")
				x, _ := strconv.ParseInt(n, 10, 64)
				switch name {
				case "calls":
					out[k] = x
				case "rejected_calls":
					out[k+".rejected"] = x
				}
			}
			continue
		}
		x, err := strconv.ParseInt(v, 10, 64)
		if err == nil {
			out[k] = x
		}
	}
	return out
}

// A stage refused by ACL does not loop hot however often Sample is called:
// over 120 samples one virtual second apart, the refused SCANs follow the
// backoff (Interval, doubling), counted by the server itself.
func TestRefusedStageIsRateBounded(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	seed(t, admin)
	ctx := context.Background()
	must(t, admin.Do(ctx, "ACL", "SETUSER", "sampler", "on", ">pw", "~*", "+@all", "-scan").Err())
	must(t, admin.ConfigResetStat(ctx).Err())
	clk := clockwork.NewFakeClockAt(time.Now())
	e, reg := newExporter(t, exporter.Options{
		Target: exporter.Target{Addrs: []string{srv.Addr}, Username: "sampler", Password: "pw"},
		Clock:  clk,
		Sample: exporter.SampleOptions{Interval: 15 * time.Second},
	})
	const samples = 120
	for i := 0; i < samples; i++ {
		s := e.Sample(ctx)[0]
		if !s.Up || len(s.Errors) == 0 {
			t.Fatalf("sample %d: up=%v errors=%v", i, s.Up, s.Errors)
		}
		clk.Advance(time.Second)
	}
	// Attempts at 0, 15, 45 and 105 s (waits 15, 30, 60, 120 s), for each of
	// the two stages that SCAN: the whole-keyspace pass and the lock pass.
	const attempts = 4
	stats := infoFields(t, admin, "commandstats")
	if got := stats["cmdstat_scan.rejected"]; got != 2*attempts {
		t.Errorf("refused SCANs: %d over %d samples, want %d", got, samples, 2*attempts)
	}
	if got := stats["cmdstat_info"]; got > samples+1 {
		t.Errorf("INFO calls: %d over %d samples", got, samples)
	}
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_sample_errors_total{stage="scan",class="noperm"}`:  attempts,
		`cachewatch_exporter_sample_errors_total{stage="locks",class="noperm"}`: attempts,
		`cachewatch_exporter_up`: 1,
	})
}

// CLUSTERDOWN on a healthy master of a failed Cluster has its own class and
// is retried with a backoff, not in a hot loop.
func TestClusterDownIsRateBounded(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	seed(t, cl.Client(t))
	ctx := context.Background()
	healthy := cl.Nodes[0]
	rdb := healthy.Client(t)
	failCluster(t, cl, rdb)
	must(t, rdb.ConfigResetStat(ctx).Err())
	clk := clockwork.NewFakeClockAt(time.Now())
	e, reg := newExporter(t, exporter.Options{
		Target: exporter.Target{Addrs: []string{healthy.Addr}, Mode: exporter.ModeStandalone},
		Clock:  clk,
		Sample: exporter.SampleOptions{Interval: 15 * time.Second},
	})
	const samples = 60
	for i := 0; i < samples; i++ {
		e.Sample(ctx)
		clk.Advance(time.Second)
	}
	// Keys stage attempts at 0, 1, 3, 7, 15, 30, 45 s (waits 1, 2, 4, 8, 15, 15, 15 s).
	const attempts = 7
	_, got := scrape(t, reg)
	expect(t, got, healthy.Addr, map[string]float64{
		`cachewatch_exporter_sample_errors_total{stage="keys",class="clusterdown"}`: attempts,
		`cachewatch_exporter_up`: 1,
	})
	stats := infoFields(t, rdb, "commandstats")
	if got := stats["cmdstat_pexpiretime.rejected"]; got == 0 || got > attempts*2*sampler.DefaultBatch {
		t.Errorf("refused PEXPIRETIMEs: %d over %d samples", got, samples)
	}
}

// failCluster kills the last master and waits until rdb's node reports the
// Cluster failed.
func failCluster(t *testing.T, cl *redistest.Cluster, rdb *redis.Client) {
	t.Helper()
	cl.Nodes[len(cl.Nodes)-1].Kill()
	poll.Until(t, "the Cluster to go down", func() bool {
		return strings.Contains(rdb.ClusterInfo(context.Background()).Val(), "cluster_state:fail")
	})
}

// Lock patterns are Redis globs in full: character classes, ranges,
// negation and escapes, as SCAN … MATCH reads them.
func TestLockPatternGlobSyntax(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for _, k := range []string{"lock:inv:1", "lock:inv:2", "lock:xnv:1", "lk*1", "lkx1", "mutex-a", "mutex-b", "mutex-z"} {
		must(t, rdb.Set(ctx, k, "tok", time.Minute).Err())
	}
	rules := []keygroup.Rule{keygroup.Glob("lock:*", "L"), keygroup.Glob("lk?1", "K"), keygroup.Glob("mutex-*", "M")}
	e, reg := newExporter(t, exporter.Options{
		Target:    exporter.Target{Addrs: []string{srv.Addr}},
		KeyGroups: mustClassifier(t, keygroup.Options{Rules: rules}),
		Locks:     exporter.LockOptions{Patterns: []string{`lock:[i]nv:*`, `lk\*1`, `mutex-[^z]`, `mutex-[a-b]`}},
	})
	e.Sample(ctx)
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_locks_held{key_group="L"}`: 2, // not lock:xnv:1
		`cachewatch_exporter_locks_held{key_group="K"}`: 1, // lk*1, not lkx1
		`cachewatch_exporter_locks_held{key_group="M"}`: 2, // a and b once each, though both match two patterns
	})
}

// A stream with more consumer groups than the cap exports how many were
// left out; the key-group overflow counter is exported too.
func TestStreamGroupsDroppedAndOverflow(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	must(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []any{"n", 1}}).Err())
	for i := 0; i < snapshot.MaxStreamGroups+7; i++ {
		must(t, rdb.XGroupCreate(ctx, "orders", fmt.Sprintf("g%d", i), "0").Err())
	}
	for i := 0; i < 5; i++ {
		must(t, rdb.Set(ctx, fmt.Sprintf("k%d:x", i), "v", 0).Err())
	}
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}, Queues: []string{"orders"},
		KeyGroups: mustClassifier(t, keygroup.Options{MaxGroups: 3, MinKeys: 1})})
	e.Sample(ctx)
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_stream_groups_dropped{queue="orders"}`: 7,
	})
	// 6 keys (5 + the stream), cap 3 (Other included): 2 derived groups, 4 folded.
	if v := got["cachewatch_keygroup_overflow_total{}"]; v != 4 {
		t.Errorf("cachewatch_keygroup_overflow_total = %v, want 4", v)
	}
}

// Lock figures are exact after the first sample however little of the
// keyspace the whole-keyspace pass has covered: the lock pass walks the
// keyspace with SCAN … MATCH every sample, and follows changes at once.
func TestLocksExactBeforeKeyspaceCovered(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := 0; i < 5000; i++ {
		pipe.Set(ctx, fmt.Sprintf("cache:item:%d", i), "v", time.Hour)
	}
	for i := 0; i < 300; i++ {
		ttl := time.Minute
		if i < 20 {
			ttl = 0
		}
		pipe.Set(ctx, fmt.Sprintf("lock:order:%d", i), "tok", ttl)
	}
	_, err := pipe.Exec(ctx)
	must(t, err)
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}, Sample: exporter.SampleOptions{MaxKeys: 500, ScanCount: 100}, Locks: exporter.LockOptions{ScanCount: 50}})
	s := e.Sample(ctx)[0]
	if s.Pass == nil || s.Pass.Complete || s.Coverage <= 0 || s.Coverage > 0.2 {
		t.Fatalf("after one sample: pass %+v, coverage %v", s.Pass, s.Coverage)
	}
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_locks_held{key_group="lock:order:*"}`:                  300,
		`cachewatch_exporter_locks_without_ttl{key_group="lock:order:*"}`:           20,
		`cachewatch_exporter_locks_expiring{key_group="lock:order:*",within="inf"}`: 280,
		`cachewatch_exporter_keyspace_coverage_ratio`:                               s.Coverage,
	})
	for i := 0; i < 100; i++ {
		must(t, rdb.Del(ctx, fmt.Sprintf("lock:order:%d", i)).Err())
	}
	e.Sample(ctx)
	_, got = scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_locks_held{key_group="lock:order:*"}`:        200,
		`cachewatch_exporter_locks_without_ttl{key_group="lock:order:*"}`: 0,
	})
}

// A node that accepts connections and drops them at once is not dialled in
// a hot loop however often Sample is called: the connections it receives
// follow the backoff (1 s doubling), topology reads included.
func TestFailedNodeIsRateBounded(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	clk := clockwork.NewFakeClockAt(time.Now())
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{l.Addr().String()}}, Clock: clk, Sample: exporter.SampleOptions{Interval: 15 * time.Second}})
	const samples = 100
	for i := 0; i < samples; i++ {
		s := e.Sample(context.Background())[0]
		if s.Up {
			t.Fatal("a node that drops every connection is up")
		}
		// What a TLS-only port does to a plaintext client: the error says so.
		if !strings.Contains(s.Err.Error(), "if it expects TLS, use rediss://") {
			t.Fatalf("no TLS hint in %v", s.Err)
		}
		clk.Advance(100 * time.Millisecond)
	}
	// 10 virtual seconds: samples at 0, 1, 3 and 7 s, topology reads at the
	// same times; one connection each, and two probes per failed sample
	// (does the port speak TLS? does it answer a plaintext PING?).
	if got := accepted.Load(); got > 16 {
		t.Errorf("%d connections over %d samples", got, samples)
	}
	_, got := scrape(t, reg)
	expect(t, got, l.Addr().String(), map[string]float64{`cachewatch_exporter_sample_errors_total{stage="connect",class="connection"}`: 4})
}
