package exporter_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/doctor"
	"github.com/cachewatch/cachewatch/exporter/internal/seedtest"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/keygroup"
)

const (
	stuckLocks   = seedtest.StuckLocks
	ttlLocks     = seedtest.TTLLocks
	syncKeys     = seedtest.SyncKeys
	jitterKeys   = seedtest.JitterKeys
	plainKeys    = seedtest.PlainKeys
	streamLen    = seedtest.StreamLen
	pendingMsgs  = seedtest.PendingMsgs
	scriptCalls  = seedtest.ScriptCalls
	listLen      = seedtest.ListLen
	delayedJobs  = seedtest.DelayedJobs
	pendingAgeMs = seedtest.PendingAgeMs
	dueAgo       = seedtest.DueAgo
)

var (
	queues = seedtest.Queues
	seed   = seedtest.Seed
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// scrape serves reg through an httptest server and returns the /metrics
// body and its samples keyed by `name{label="value",…}` (labels sorted).
func scrape(t *testing.T, reg *prometheus.Registry) (string, map[string]float64) {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	must(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must(t, err)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	must(t, err)
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			addSample(out, name, f.GetType(), m)
		}
	}
	return string(body), out
}

func addSample(out map[string]float64, name string, typ dto.MetricType, m *dto.Metric) {
	labels := make([]string, 0, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	key := func(suffix string, extra ...string) string {
		ls := append(append([]string{}, labels...), extra...)
		sort.Strings(ls)
		return name + suffix + "{" + strings.Join(ls, ",") + "}"
	}
	switch typ {
	case dto.MetricType_COUNTER:
		out[key("")] = m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		out[key("")] = m.GetGauge().GetValue()
	case dto.MetricType_HISTOGRAM:
		h := m.GetHistogram()
		out[key("_count")] = float64(h.GetSampleCount())
		out[key("_sum")] = h.GetSampleSum()
		for _, b := range h.GetBucket() {
			out[key("_bucket", fmt.Sprintf("le=%q", fmt.Sprint(b.GetUpperBound())))] = float64(b.GetCumulativeCount())
		}
	}
}

// expect checks exact values; name is `metric{labels}` with labels in any
// order (node is added).
func expect(t *testing.T, got map[string]float64, node string, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		name, rest, _ := strings.Cut(strings.TrimSuffix(k, "}"), "{")
		ls := []string{fmt.Sprintf("node=%q", node)}
		if rest != "" {
			ls = append(ls, strings.Split(rest, ",")...)
		}
		sort.Strings(ls)
		full := name + "{" + strings.Join(ls, ",") + "}"
		g, ok := got[full]
		if !ok {
			t.Errorf("%s: missing", full)
			continue
		}
		if g != v {
			t.Errorf("%s = %v, want %v", full, g, v)
		}
	}
}

// newExporter returns an Exporter registered on a new registry. Unless the
// test brings its own, its key groups keep every name at once (MinKeys 1):
// the seeded keyspaces hold fewer keys per group than learning needs.
func newExporter(t *testing.T, opts exporter.Options) (*exporter.Exporter, *prometheus.Registry) {
	t.Helper()
	if opts.KeyGroups == nil {
		opts.KeyGroups = mustClassifier(t, keygroup.Options{MinKeys: 1})
	}
	e, err := exporter.New(opts)
	must(t, err)
	t.Cleanup(func() { _ = e.Close() })
	reg := prometheus.NewRegistry()
	must(t, reg.Register(e))
	return e, reg
}

func seededWant(streamBase int64, due time.Time, now time.Time) map[string]float64 {
	return map[string]float64{
		`cachewatch_exporter_up`:                                                                      1,
		`cachewatch_exporter_locks_held{key_group="lock:stuck:*"}`:                                    stuckLocks,
		`cachewatch_exporter_locks_without_ttl{key_group="lock:stuck:*"}`:                             stuckLocks,
		`cachewatch_exporter_locks_held{key_group="lock:order:*"}`:                                    ttlLocks,
		`cachewatch_exporter_locks_without_ttl{key_group="lock:order:*"}`:                             0,
		`cachewatch_exporter_locks_expiring{key_group="lock:order:*",within="inf"}`:                   ttlLocks,
		`cachewatch_exporter_locks_expiring{key_group="lock:order:*",within="1m"}`:                    ttlLocks,
		`cachewatch_exporter_locks_expiring{key_group="lock:order:*",within="10s"}`:                   0,
		`cachewatch_exporter_keys_sampled{key_group="sync:item:*"}`:                                   syncKeys,
		`cachewatch_exporter_expiry_synchronisation{key_group="sync:item:*"}`:                         syncKeys,
		`cachewatch_exporter_keys_expiring{key_group="sync:item:*",within="1m"}`:                      0,
		`cachewatch_exporter_keys_expiring{key_group="sync:item:*",within="10m"}`:                     syncKeys,
		`cachewatch_exporter_keys_expiring{key_group="sync:item:*",within="inf"}`:                     syncKeys,
		`cachewatch_exporter_keys_sampled{key_group="jit:item:*"}`:                                    jitterKeys,
		`cachewatch_exporter_expiry_synchronisation{key_group="jit:item:*"}`:                          1,
		`cachewatch_exporter_keys_without_ttl{key_group="plain:user:*"}`:                              plainKeys,
		`cachewatch_exporter_keys_without_ttl{key_group="lock:stuck:*"}`:                              stuckLocks,
		`cachewatch_exporter_keys_without_ttl{key_group="jit:item:*"}`:                                0,
		`cachewatch_exporter_server_command_calls_total{command="evalsha"}`:                           scriptCalls,
		`cachewatch_exporter_server_command_duration_seconds_count{command="evalsha"}`:                scriptCalls,
		`cachewatch_exporter_server_command_duration_seconds_bucket{command="evalsha",le="+Inf"}`:     scriptCalls,
		`cachewatch_exporter_server_command_duration_seconds_bucket{command="evalsha",le="1e-06"}`:    0,
		`cachewatch_exporter_queue_length{queue="orders",type="stream"}`:                              streamLen,
		`cachewatch_exporter_queue_length{queue="jobs:list",type="list"}`:                             listLen,
		`cachewatch_exporter_queue_length{queue="jobs:delayed",type="zset"}`:                          delayedJobs,
		`cachewatch_exporter_queue_oldest_age_seconds{queue="jobs:delayed"}`:                          now.Sub(due).Seconds(),
		`cachewatch_exporter_queue_oldest_age_seconds{queue="orders"}`:                                now.Sub(time.UnixMilli(streamBase)).Seconds(),
		`cachewatch_exporter_stream_group_pending{group="workers",queue="orders"}`:                    pendingMsgs,
		`cachewatch_exporter_stream_group_lag{group="workers",queue="orders"}`:                        streamLen - pendingMsgs,
		`cachewatch_exporter_stream_group_pending{group="idle",queue="orders"}`:                       0,
		`cachewatch_exporter_stream_group_oldest_pending_age_seconds{group="workers",queue="orders"}`: now.Sub(time.UnixMilli(streamBase)).Seconds(),
		`cachewatch_exporter_scan_cycles_total`:                                                       1,
	}
}

func TestExporterSeededStandalone(t *testing.T) {
	srv := redistest.Start(t)
	streamBase, due := seed(t, srv.Client(t))
	clk := clockwork.NewFakeClockAt(time.Now())
	e, reg := newExporter(t, exporter.Options{
		Target: exporter.Target{Addrs: []string{srv.Addr}},
		Queues: queues,
		Clock:  clk,
		Locks:  exporter.LockOptions{LongHeld: 10 * time.Second},
	})
	snaps := e.Sample(context.Background())
	if len(snaps) != 1 || !snaps[0].Up {
		t.Fatalf("sample: %+v", snaps[0])
	}
	body, got := scrape(t, reg)
	want := seededWant(streamBase, due, clk.Now())
	want[`cachewatch_exporter_locks_long_held{key_group="lock:stuck:*"}`] = 0
	expect(t, got, srv.Addr, want)
	metrictest.PromtoolCheck(t, body)

	// Tokens unchanged 11s later: every lock is long-held.
	clk.Advance(11 * time.Second)
	e.Sample(context.Background())
	_, got = scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_locks_long_held{key_group="lock:stuck:*"}`: stuckLocks,
		`cachewatch_exporter_locks_long_held{key_group="lock:order:*"}`: ttlLocks,
		`cachewatch_exporter_scan_cycles_total`:                         2,
	})
	// A new owner token restarts the clock for that lock.
	must(t, srv.Client(t).Set(context.Background(), "lock:order:1", "new-owner", 30*time.Second).Err())
	clk.Advance(time.Second)
	e.Sample(context.Background())
	_, got = scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_locks_long_held{key_group="lock:order:*"}`: ttlLocks - 1,
	})
	for k := range got {
		if strings.Contains(k, "tok-") || strings.Contains(k, "new-owner") || strings.Contains(k, `"lock:order:1"`) {
			t.Errorf("a token or raw key became a label: %s", k)
		}
	}
}

// Samplers must not move the hit ratio the exporter reports: neither its
// own lookups nor another exporter's on the same Redis, nor earlier and
// concurrent doctor runs (hot keys: OBJECT FREQ). Other clients' lookups
// move it exactly.
func TestSelfAccounting(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lfu") // OBJECT FREQ reads count too
	seed(t, srv.Client(t))
	rdb := srv.Client(t)
	ctx := context.Background()
	applicationLookups(t, rdb)
	trueHits, trueMisses := keyspaceStats(t, rdb)
	truth := trueHits / (trueHits + trueMisses)

	// A key that expires between samples exercises the miss side.
	must(t, rdb.Set(ctx, "short:1", "v", 50*time.Millisecond).Err())
	a, b := samplersBesideDoctor(t, srv.Addr)
	rawHits, rawMisses := keyspaceStats(t, rdb)
	t.Logf("truth %.0f hits %.0f misses (%.4f); raw INFO after sampling %.0f / %.0f (%.4f)",
		trueHits, trueMisses, truth, rawHits, rawMisses, rawHits/(rawHits+rawMisses))
	if rawHits < trueHits+1000 {
		t.Fatalf("the samplers made too few lookups (%v) for this test to mean anything", rawHits-trueHits)
	}
	a.e.Sample(ctx)
	b.e.Sample(ctx)
	for name, reg := range map[string]*prometheus.Registry{"a": a.reg, "b": b.reg} {
		_, got := scrape(t, reg)
		h := got[fmt.Sprintf("cachewatch_exporter_server_keyspace_hits_total{node=%q}", srv.Addr)]
		m := got[fmt.Sprintf("cachewatch_exporter_server_keyspace_misses_total{node=%q}", srv.Addr)]
		if ratio := h / (h + m); ratio < truth-0.005 || ratio > truth+0.005 {
			t.Errorf("exporter %s reports a hit ratio of %.4f (%v hits, %v misses), the truth is %.4f", name, ratio, h, m, truth)
		}
	}
	if s := a.e.Snapshots()[0]; s.OwnHits == 0 {
		t.Fatalf("the sampler counted no own lookups: %+v", s)
	}
	otherClientCountedExactly(t, rdb, a.e, a.reg, srv.Addr)
}

// applicationLookups makes the truth of TestSelfAccounting: 700 hits and
// 300 misses by an application.
func applicationLookups(t *testing.T, rdb *redis.Client) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		key := fmt.Sprintf("plain:user:%d", 1+i%plainKeys)
		if i%10 >= 7 {
			key = "no-such-key"
		}
		if err := rdb.Get(context.Background(), key).Err(); err != nil && err != redis.Nil {
			t.Fatal(err)
		}
	}
}

// keyspaceStats reads the server's own hit and miss counts (INFO stats).
func keyspaceStats(t *testing.T, rdb *redis.Client) (hits, misses float64) {
	t.Helper()
	raw, err := rdb.Info(context.Background(), "stats").Result()
	must(t, err)
	f := map[string]float64{}
	for _, l := range strings.Split(raw, "\r\n") {
		k, v, _ := strings.Cut(l, ":")
		var x float64
		fmt.Sscan(v, &x)
		f[k] = x
	}
	return f["keyspace_hits"], f["keyspace_misses"]
}

// registeredExporter is an exporter and the registry it is registered on.
type registeredExporter struct {
	e   *exporter.Exporter
	reg *prometheus.Registry
}

// samplersBesideDoctor samples addr with two exporters, one with hot keys,
// four times, with a doctor run before them and one in between.
func samplersBesideDoctor(t *testing.T, addr string) (a, b registeredExporter) {
	t.Helper()
	ctx := context.Background()
	// The samplers watch the same queues (their other samplers' queue reads
	// are estimated from their own), one of them absent.
	target, watched := exporter.Target{Addrs: []string{addr}}, append(queues, "absent:queue")
	doctorRun := func() {
		_, err := doctor.Run(ctx, doctor.Options{Exporter: exporter.Options{Target: target, Queues: watched}, Interval: 10 * time.Millisecond})
		must(t, err)
	}
	doctorRun() // an earlier doctor run
	a.e, a.reg = newExporter(t, exporter.Options{Target: target, Queues: watched, HotKeys: 5})
	b.e, b.reg = newExporter(t, exporter.Options{Target: target, Queues: watched})
	for i := 0; i < 4; i++ {
		a.e.Sample(ctx)
		b.e.Sample(ctx)
		if i == 1 {
			doctorRun()
		}
	}
	return a, b
}

// otherClientCountedExactly checks that 7 hits and 2 misses by another
// client show up exactly in what e reports.
func otherClientCountedExactly(t *testing.T, rdb *redis.Client, e *exporter.Exporter, reg *prometheus.Registry, addr string) {
	t.Helper()
	ctx := context.Background()
	_, got := scrape(t, reg)
	hits0 := got[fmt.Sprintf("cachewatch_exporter_server_keyspace_hits_total{node=%q}", addr)]
	misses0 := got[fmt.Sprintf("cachewatch_exporter_server_keyspace_misses_total{node=%q}", addr)]
	for i := 1; i <= 7; i++ {
		must(t, rdb.Get(ctx, fmt.Sprintf("plain:user:%d", i)).Err())
	}
	for i := 0; i < 2; i++ {
		if err := rdb.Get(ctx, "no-such-key").Err(); err != redis.Nil {
			t.Fatal(err)
		}
	}
	e.Sample(ctx)
	_, got = scrape(t, reg)
	expect(t, got, addr, map[string]float64{
		"cachewatch_exporter_server_keyspace_hits_total":   hits0 + 7,
		"cachewatch_exporter_server_keyspace_misses_total": misses0 + 2,
	})
}

// A keyspace larger than the per-sample budget is covered over several
// samples; truncation is counted and the series appear only for a complete pass.
func TestScanResumesAcrossSamples(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := 0; i < 1000; i++ {
		pipe.Set(ctx, fmt.Sprintf("item:%d", i), "v", time.Hour)
	}
	_, err := pipe.Exec(ctx)
	must(t, err)
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}, Sample: exporter.SampleOptions{MaxKeys: 150, ScanCount: 50, Batch: 20}})
	samples := 0
	for ; samples < 20; samples++ {
		s := e.Sample(ctx)[0]
		if s.ScanCycles == 1 {
			break
		}
		// Until the first pass completes, the snapshot holds the pass in
		// progress, marked partial, with its coverage; only the coverage
		// is exported: no key series of a partial pass.
		if s.Pass == nil || s.Pass.Complete || s.Coverage != float64(s.Pass.Keys)/1000 || s.Coverage >= 1 {
			t.Fatalf("sample %d: pass %+v coverage %v", samples, s.Pass, s.Coverage)
		}
		_, got := scrape(t, reg)
		expect(t, got, srv.Addr, map[string]float64{`cachewatch_exporter_keyspace_coverage_ratio`: s.Coverage})
		for k := range got {
			if strings.HasPrefix(k, "cachewatch_exporter_keys_") && !strings.HasPrefix(k, "cachewatch_exporter_keys_scanned_total") {
				t.Fatalf("sample %d: a partial pass exported %s", samples, k)
			}
		}
	}
	if samples < 5 { // 1000 keys at ≤ ~150+50 per sample
		t.Fatalf("covered 1000 keys in %d samples with a 150-key budget", samples+1)
	}
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_keys_sampled{key_group="item:*"}`: 1000,
		`cachewatch_exporter_keyspace_coverage_ratio`:          1,
		`cachewatch_exporter_sample_truncated_total`:           float64(samples),
		`cachewatch_exporter_keys_scanned_total`:               1000,
	})
}

func TestCollectorLint(t *testing.T) {
	srv := redistest.Start(t)
	seed(t, srv.Client(t))
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}, Queues: queues})
	e.Sample(context.Background())
	problems, err := testutil.GatherAndLint(reg)
	must(t, err)
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
}

// sumNodes adds a series over every node: `name{labels}` without node.
func sumNodes(got map[string]float64, series string) (sum float64, nodes int) {
	name, rest, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
	var want []string
	if rest != "" {
		want = strings.Split(rest, ",")
	}
	for k, v := range got {
		kn, kl, _ := strings.Cut(strings.TrimSuffix(k, "}"), "{")
		if kn != name {
			continue
		}
		var ls []string
		for _, l := range strings.Split(kl, ",") {
			if !strings.HasPrefix(l, "node=") {
				ls = append(ls, l)
			}
		}
		sort.Strings(ls)
		w := append([]string{}, want...)
		sort.Strings(w)
		if strings.Join(ls, ",") == strings.Join(w, ",") {
			sum += v
			nodes++
		}
	}
	return sum, nodes
}

func TestExporterSeededCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	streamBase, due := seed(t, cl.Client(t))
	clk := clockwork.NewFakeClockAt(time.Now())
	// One seed address is enough: the masters are discovered.
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: cl.Addrs()[:1]}, Queues: queues, Clock: clk})
	snaps := e.Sample(context.Background())
	if len(snaps) != 3 {
		t.Fatalf("sampled %d nodes, want 3 masters", len(snaps))
	}
	for _, s := range snaps {
		if !s.Up || s.Server == nil || !s.Server.Cluster {
			t.Fatalf("node %s: up=%v err=%v", s.Node, s.Up, s.Err)
		}
	}
	body, got := scrape(t, reg)
	metrictest.PromtoolCheck(t, body)
	want := seededWant(streamBase, due, clk.Now())
	want[`cachewatch_exporter_up`] = 3
	want[`cachewatch_exporter_scan_cycles_total`] = 3
	// Each master holds part of each group: the synchronised group scores
	// its share on each (shares add up to K), the jittered one 1 on each.
	want[`cachewatch_exporter_expiry_synchronisation{key_group="jit:item:*"}`] = 3
	for series, v := range want {
		sum, nodes := sumNodes(got, series)
		if nodes == 0 {
			t.Errorf("%s: missing on every node", series)
		} else if sum != v {
			t.Errorf("%s: sum over %d nodes = %v, want %v", series, nodes, sum, v)
		}
	}
	// Each queue is reported once, by the master that owns its slot.
	if _, nodes := sumNodes(got, `cachewatch_exporter_queue_length{queue="orders",type="stream"}`); nodes != 1 {
		t.Errorf("orders reported by %d nodes", nodes)
	}
	for _, a := range cl.Addrs() {
		if got[fmt.Sprintf("cachewatch_exporter_up{node=%q}", a)] != 1 {
			t.Errorf("master %s not sampled", a)
		}
	}

	// A killed master reports up 0 and nothing else; the others go on.
	dead := cl.Nodes[2]
	dead.Kill()
	snaps = e.Sample(context.Background())
	if len(snaps) != 3 {
		t.Fatalf("after a kill: %d nodes sampled", len(snaps))
	}
	_, got = scrape(t, reg)
	onlySelfMetrics(t, got, dead.Addr)
	for _, s := range snaps {
		if s.Up != (s.Node != dead.Addr) {
			t.Errorf("node %s: up=%v err=%v", s.Node, s.Up, s.Err)
		}
	}
}

// A sample in which other clients' misses grew by at least MissBurst counts
// one miss burst; the sampler's own misses never do.
func TestMissBursts(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}, MissBurst: 5})
	miss := func(n int) {
		for i := 0; i < n; i++ {
			if err := rdb.Get(ctx, "absent").Err(); err != redis.Nil {
				t.Fatal(err)
			}
		}
	}
	e.Sample(ctx)
	miss(6)
	e.Sample(ctx)
	miss(2)
	e.Sample(ctx)
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{"cachewatch_exporter_server_miss_bursts_total": 1})
}
