package doctor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/doctor"
	"github.com/cachewatch/cachewatch/exporter/internal/seedtest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// brief is what a test asserts of a finding: all but the prose and nodes.
type brief struct {
	Check, Severity, Subject string
	Count, Total             uint64
}

func briefs(t *testing.T, r *doctor.Report) []brief {
	t.Helper()
	// Go through JSON, as a deploy gate would read it.
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var decoded doctor.Report
	if err := json.Unmarshal(buf.Bytes(), &decoded); err != nil {
		t.Fatalf("JSON output does not decode: %v\n%s", err, buf.String())
	}
	out := []brief{}
	for _, f := range decoded.Findings {
		if f.Evidence == "" || f.Fix == "" || len(f.Nodes) == 0 {
			t.Errorf("finding without evidence, fix or nodes: %+v", f)
		}
		var parts []string
		for _, p := range []string{f.KeyGroup, f.Queue, f.ConsumerGroup, f.Command} {
			if p != "" {
				parts = append(parts, p)
			}
		}
		subject := strings.Join(parts, " ")
		out = append(out, brief{f.Check, string(f.Severity), subject, f.Count, f.Total})
	}
	return out
}

func seededFindings() []brief {
	return []brief{
		{doctor.CheckLocksWithoutTTL, "critical", "lock:stuck:*", seedtest.StuckLocks, seedtest.StuckLocks},
		// lock:order:* (30s TTL, same owner over both samples) is healthy: no long-held finding.
		{doctor.CheckQueueBacklog, "warning", "orders workers", seedtest.PendingMsgs, seedtest.StreamLen},
		{doctor.CheckSlowScripts, "warning", "evalsha", seedtest.ScriptCalls, 0},
		{doctor.CheckSyncExpiry, "warning", "sync:item:*", seedtest.SyncKeys, seedtest.SyncKeys},
	}
}

func equal(t *testing.T, got, want []brief) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("findings:\n got %v\nwant %v", got, want)
	}
}

func TestDoctorSeeded(t *testing.T) {
	srv := redistest.Start(t)
	seedtest.Seed(t, srv.Client(t))
	r, err := doctor.Run(context.Background(), doctor.Options{
		Exporter: exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}, Queues: seedtest.Queues},
		Interval: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, briefs(t, r), seededFindings())
	if !r.Critical() {
		t.Fatal("a lock without TTL must make the report critical")
	}
	for _, f := range r.Findings {
		if f.Check == doctor.CheckSlowScripts && f.Value < 0.001 {
			t.Errorf("slow script at %v s per call", f.Value)
		}
		if f.Check == doctor.CheckQueueBacklog && f.Value < float64(seedtest.PendingAgeMs)/1000 {
			t.Errorf("oldest pending %v s, seeded %d ms ago", f.Value, seedtest.PendingAgeMs)
		}
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"CRITICAL  locks_without_ttl  lock:stuck:*", "3 of 3 lock keys in lock:stuck:* have no expiry", "fix:"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("text report lacks %q:\n%s", s, text.String())
		}
	}
}

func TestDoctorCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	seedtest.Seed(t, cl.Client(t))
	r, err := doctor.Run(context.Background(), doctor.Options{
		Exporter: exporter.Options{Target: exporter.Target{Addrs: cl.Addrs()[:1]}, Queues: seedtest.Queues},
		Interval: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Nodes) != 3 {
		t.Fatalf("doctor sampled %d nodes", len(r.Nodes))
	}
	equal(t, briefs(t, r), seededFindings())
}

// Hot keys without TTL under an LFU policy, and a high miss ratio.
func TestDoctorHotKeysAndMisses(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lfu", "--lfu-log-factor", "0")
	rdb := srv.Client(t)
	ctx := context.Background()
	must(t, rdb.Set(ctx, "config:1", "v", 0).Err())
	must(t, rdb.Set(ctx, "page:1", "v", time.Hour).Err())
	for i := 0; i < 60; i++ { // config:1 is the hottest key
		must(t, rdb.Get(ctx, "config:1").Err())
		if i < 40 {
			must(t, rdb.Get(ctx, "page:1").Err())
		}
	}
	pipe := rdb.Pipeline()
	for i := 0; i < 1500; i++ {
		pipe.Get(ctx, fmt.Sprintf("page:%d", i+2))
	}
	if _, err := pipe.Exec(ctx); !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	r, err := doctor.Run(ctx, doctor.Options{Exporter: exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}},
		Interval: 50 * time.Millisecond, HotKeys: 1})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, briefs(t, r), []brief{
		{doctor.CheckHighMissRatio, "warning", "", 1500, 1600},
		{doctor.CheckHotKeysNoTTL, "warning", "config:*", 1, 1},
	})
	if r.Critical() || len(r.HotKeys) != 1 || r.HotKeys[0].Key != "config:1" {
		t.Fatalf("critical=%v hot=%+v", r.Critical(), r.HotKeys)
	}
}

func TestDoctorUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	l.Close()
	_, err = doctor.Run(context.Background(), doctor.Options{
		Exporter: exporter.Options{Target: exporter.Target{Addrs: []string{addr}, DialTimeout: 100 * time.Millisecond}}})
	if !errors.Is(err, doctor.ErrNoNode) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("err = %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A keyspace larger than one sample's budget is covered over several
// samples before doctor analyses it.
func TestDoctorCoversLargeKeyspace(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := 0; i < 1000; i++ {
		pipe.Set(ctx, fmt.Sprintf("lock:big:%d", i), "tok", 0)
	}
	_, err := pipe.Exec(ctx)
	must(t, err)
	r, err := doctor.Run(ctx, doctor.Options{
		Exporter: exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}}, Sample: exporter.SampleOptions{MaxKeys: 100, ScanCount: 50}},
		Interval: 10 * time.Millisecond, MaxDuration: time.Hour,
	})
	must(t, err)
	if len(r.Nodes) != 1 || !r.Nodes[0].Complete || r.Nodes[0].Keys != 1000 {
		t.Fatalf("nodes %+v", r.Nodes)
	}
	equal(t, briefs(t, r), []brief{{doctor.CheckLocksWithoutTTL, "critical", "lock:big:*", 1000, 1000}})
}
