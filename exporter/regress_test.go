package exporter_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/keygroup"
)

// While a sample is in progress, scrapes see the duration of the last whole
// sample, never 0.
func TestSampleDurationDuringSample(t *testing.T) {
	srv := redistest.Start(t)
	writeLocks(t, srv.Client(t), 5000, 10, 0)
	e, reg := newExporter(t, exporter.Options{
		Target: exporter.Target{Addrs: []string{srv.Addr}},
		Sample: exporter.SampleOptions{KeysPerSecond: 1000, MaxDuration: 2 * time.Second, MaxKeys: 1000},
	})
	ctx := context.Background()
	first := e.Sample(ctx)[0]
	if first.Duration <= 0 {
		t.Fatalf("first sample: duration %v", first.Duration)
	}
	done := make(chan struct{})
	go func() { defer close(done); e.Sample(ctx) }()
	poll.Until(t, "the second sample to publish its server figures", func() bool {
		return !e.Snapshots()[0].Time.Equal(first.Time)
	})
	_, got := scrape(t, reg)
	select {
	case <-done:
		t.Fatal("the second sample ended before the scrape: the keyspace pass was not paced")
	default:
	}
	expect(t, got, srv.Addr, map[string]float64{`cachewatch_exporter_sample_duration_seconds`: first.Duration.Seconds()})
	<-done
}

// Under CLUSTERDOWN the lock stage fails on a healthy master: its lock
// series are left out rather than served from before, and the age of the
// lock figures keeps growing.
func TestClusterDownDropsLockSeries(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	seed(t, cl.Client(t))
	ctx := context.Background()
	healthy := cl.Nodes[0]
	rdb := healthy.Client(t)
	clk := clockwork.NewFakeClockAt(time.Now())
	e, reg := newExporter(t, exporter.Options{
		Target: exporter.Target{Addrs: []string{healthy.Addr}, Mode: exporter.ModeStandalone},
		Clock:  clk,
		Sample: exporter.SampleOptions{Interval: 15 * time.Second},
	})
	e.Sample(ctx)
	_, got := scrape(t, reg)
	held, _ := sumNodes(got, `cachewatch_exporter_locks_held{key_group="lock:stuck:*"}`)
	if held == 0 {
		t.Fatalf("no lock series before the Cluster went down: %v", got)
	}
	failCluster(t, cl, rdb)
	for i := 0; i < 3; i++ {
		clk.Advance(15 * time.Second)
		e.Sample(ctx)
	}
	_, got = scrape(t, reg)
	for k := range got {
		if strings.HasPrefix(k, "cachewatch_exporter_locks_") {
			t.Errorf("lock series served under CLUSTERDOWN: %s", k)
		}
	}
	if age := unixSeconds(clk.Now()) - got[fmt.Sprintf(`cachewatch_exporter_data_timestamp_seconds{family="locks",node=%q}`, healthy.Addr)]; age < 45 {
		t.Errorf("age of the lock figures = %v s, want at least the 45 s since they were exact", age)
	}
	if got[fmt.Sprintf(`cachewatch_exporter_sample_errors_total{class="clusterdown",node=%q,stage="locks"}`, healthy.Addr)] == 0 {
		t.Error("the lock stage's CLUSTERDOWN is not counted")
	}
}

// A refused INFO is not sent again and again: over 30 virtual seconds of
// samples one second apart, the node receives at most a few, topology
// reads (INFO cluster) included.
func TestRefusedInfoIsRateBounded(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	must(t, admin.Do(ctx, "ACL", "SETUSER", "sampler", "on", ">pw", "~*", "+@all", "-info").Err())
	must(t, admin.ConfigResetStat(ctx).Err())
	clk := clockwork.NewFakeClockAt(time.Now())
	e, _ := newExporter(t, exporter.Options{
		Target: exporter.Target{Addrs: []string{srv.Addr}, Username: "sampler", Password: "pw"},
		Clock:  clk,
		Sample: exporter.SampleOptions{Interval: 15 * time.Second},
	})
	for i := 0; i < 30; i++ {
		e.Sample(ctx)
		clk.Advance(time.Second)
	}
	// The INFO stage at 0 and 15 s, the topology read at 0 and 15 s.
	if got := infoFields(t, admin, "commandstats")["cmdstat_info.rejected"]; got > 4 {
		t.Errorf("refused INFO sent %d times in 30 s", got)
	}
}

// resetOnce forwards connections to a real Redis, except the first, which
// it closes at once: a plain connection reset, not a TLS port.
func resetOnce(t *testing.T, target string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { l.Close() })
	var once sync.Once
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			reset := false
			once.Do(func() { reset = true })
			if reset {
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
				continue
			}
			go forward(c, target)
		}
	}()
	return l.Addr().String()
}

func forward(c net.Conn, target string) {
	defer c.Close()
	u, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer u.Close()
	go func() { _, _ = io.Copy(u, c) }()
	_, _ = io.Copy(c, u)
}

// A connection reset by a plain Redis (it answers a plaintext PING on a new
// connection) is logged as what it is, without a hint about TLS.
func TestConnectionResetHasNoTLSHint(t *testing.T) {
	srv := redistest.Start(t)
	addr := resetOnce(t, srv.Addr)
	var logs bytes.Buffer
	e, _ := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{addr}, Mode: exporter.ModeStandalone},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s := e.Sample(context.Background())[0]
	if s.Up || s.Err == nil {
		t.Fatalf("the reset connection did not fail the sample: %+v", s)
	}
	if strings.Contains(s.Err.Error(), "TLS") || strings.Contains(logs.String(), "TLS") {
		t.Errorf("a plain connection reset is reported with a TLS hint: %v\n%s", s.Err, logs.String())
	}
}

// A word followed by a number is one key group whatever the number's
// digits: nt0…nt9 and nt10…nt15 are all lock:order:nt*.
func TestWordNumberLockGroup(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for i := 0; i < 16; i++ {
		must(t, rdb.Set(ctx, fmt.Sprintf("lock:order:nt%d", i), "tok", time.Minute).Err())
	}
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}})
	e.Sample(ctx)
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{`cachewatch_exporter_locks_held{key_group="lock:order:nt*"}`: 16})
	if sum, groups := sumLabelled(got, "cachewatch_exporter_locks_held"); sum != 16 || groups != 1 {
		t.Errorf("%v locks in %d groups, want 16 in 1", sum, groups)
	}
}

func sumLabelled(got map[string]float64, name string) (sum float64, series int) {
	for k, v := range got {
		if strings.HasPrefix(k, name+"{") {
			sum += v
			series++
		}
	}
	return sum, series
}

// Lock groups have a cap of their own: ordinary key groups that filled the
// key-group cap never fold the lock groups into "other".
func TestLockGroupsHaveTheirOwnCap(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	groups := mustClassifier(t, keygroup.Options{MaxGroups: 10, MinKeys: 1})
	for i := 0; i < 50; i++ { // the applications' keys came first
		groups.Classify(fmt.Sprintf("prefix%c%c:1", 'a'+i/26, 'a'+i%26))
	}
	must(t, rdb.Set(ctx, "lock:order:1", "tok", time.Minute).Err())
	must(t, rdb.Set(ctx, "lock:job:1", "tok", 0).Err())
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}, KeyGroups: groups})
	e.Sample(ctx)
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_locks_held{key_group="lock:order:*"}`:      1,
		`cachewatch_exporter_locks_without_ttl{key_group="lock:job:*"}`: 1,
	})
}

// A stream whose first entry is huge, or which has thousands of consumer
// groups, costs one such reply per backoff, not one per sample: the read
// is left out (counted) while its backoff runs, and the cheap reads go on.
func TestQueueReadsCappedByReplySize(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	must(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "big", Values: []any{"blob", strings.Repeat("x", 4<<20)}}).Err())
	must(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "big", Values: []any{"n", 1}}).Err())
	must(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "fan", Values: []any{"n", 1}}).Err())
	pipe := rdb.Pipeline()
	for i := 0; i < 3000; i++ {
		pipe.XGroupCreate(ctx, "fan", fmt.Sprintf("consumer-group-%d", i), "0")
	}
	_, err := pipe.Exec(ctx)
	must(t, err)
	must(t, rdb.ConfigResetStat(ctx).Err())
	clk := clockwork.NewFakeClockAt(time.Now())
	e, reg := newExporter(t, exporter.Options{
		Target: exporter.Target{Addrs: []string{srv.Addr}},
		Queues: []string{"big", "fan"},
		Clock:  clk,
		Sample: exporter.SampleOptions{Interval: 15 * time.Second},
	})
	const samples = 10
	for i := 0; i < samples; i++ {
		e.Sample(ctx)
		clk.Advance(time.Second)
	}
	// big's first entry once (refused unread: its length says 4 MiB), fan's
	// every sample; big's (empty) group list every sample and once more
	// in the first (its pipeline, cut by the refusal, is sent again without
	// the first entry), fan's once.
	stats := infoFields(t, rdb, "commandstats")
	if got, want := stats["cmdstat_xrange"], int64(1+samples); got != want {
		t.Errorf("XRANGE sent %d times in %d samples, want %d", got, samples, want)
	}
	if got, want := stats["cmdstat_xinfo|groups"], int64(samples+2); got != want {
		t.Errorf("XINFO GROUPS sent %d times in %d samples, want %d", got, samples, want)
	}
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{
		`cachewatch_exporter_queue_reads_skipped_total{queue="big",read="first_entry"}`: samples, // refused in the first, then left out
		`cachewatch_exporter_queue_reads_skipped_total{queue="fan",read="groups"}`:      samples - 1,
		`cachewatch_exporter_queue_length{queue="big",type="stream"}`:                   2,
		`cachewatch_exporter_stream_groups_dropped{queue="fan"}`:                        3000 - snapshot.MaxStreamGroups,
	})
	if _, ok := got[fmt.Sprintf(`cachewatch_exporter_queue_oldest_age_seconds{node=%q,queue="big"}`, srv.Addr)]; ok {
		t.Error("the age of a first entry not read is still served")
	}
}

// With MemorySample, the keyspace pass reads MEMORY USAGE of one key in N
// and exports each group's estimated memory: with every key sampled, the
// server's own figures summed.
func TestMemoryPerKeyGroup(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	var want float64
	for i := 0; i < 20; i++ {
		key := fmt.Sprintf("blob:item:%d", i)
		must(t, rdb.Set(ctx, key, strings.Repeat("v", 1000*(i+1)), 0).Err())
	}
	for i := 0; i < 20; i++ {
		want += float64(rdb.MemoryUsage(ctx, fmt.Sprintf("blob:item:%d", i), 5).Val())
	}
	e, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}, MemorySample: 1})
	e.Sample(ctx)
	_, got := scrape(t, reg)
	expect(t, got, srv.Addr, map[string]float64{`cachewatch_exporter_keys_memory_bytes{key_group="blob:item:*"}`: want})

	// Off by default: no MEMORY USAGE sent, no series.
	must(t, rdb.ConfigResetStat(ctx).Err())
	off, reg := newExporter(t, exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}})
	off.Sample(ctx)
	if n := infoFields(t, rdb, "commandstats")["cmdstat_memory|usage"]; n != 0 {
		t.Errorf("MEMORY USAGE sent %d times with the option off", n)
	}
	if _, got = scrape(t, reg); len(got) > 0 {
		for k := range got {
			if strings.HasPrefix(k, "cachewatch_exporter_keys_memory_bytes") {
				t.Errorf("memory series without the option: %s", k)
			}
		}
	}
}
