package instrument

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cachewatch/cachewatch/internal/redistest"
)

// TestFetchSpanEventsAndDebugLog: a miss then a hit produce one span each
// with the decision's events (the miss's write in a child span of its own,
// which may end after the Fetch's), and one debug line each naming key
// group, key and outcome.
func TestFetchSpanEventsAndDebugLog(t *testing.T) {
	srv := redistest.Start(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := New(srv.Client(t), Options{Registerer: prometheus.NewRegistry(), TracerProvider: tp, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ca := mustCache[string](t, c, CacheOptions{})
	defer ca.Close()
	load := func(context.Context) (string, error) { return "v", nil }
	for i := 0; i < 2; i++ {
		if _, err := ca.Fetch(context.Background(), "profile:12", load); err != nil {
			t.Fatal(err)
		}
	}
	var fetches []sdktrace.ReadOnlySpan
	var write sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "cachewatch.Fetch":
			fetches = append(fetches, s)
		case "cachewatch.Write":
			write = s
		}
	}
	if len(fetches) != 2 || write == nil || len(rec.Ended()) != 3 {
		t.Fatalf("%d spans ended (%d Fetch, write %v), want 2 Fetch and 1 Write", len(rec.Ended()), len(fetches), write != nil)
	}
	if write.Parent().SpanID() != fetches[0].SpanContext().SpanID() {
		t.Fatalf("the write's span is not a child of the loading Fetch's")
	}
	spans := []sdktrace.ReadOnlySpan{fetches[0], fetches[1], write}
	for i, want := range [][]string{{"cache miss", "claim acquired"}, {"cache hit"}, {"written"}} {
		var got []string
		for _, e := range spans[i].Events() {
			got = append(got, e.Name)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("span %d (%s) events %v, want %v", i, spans[i].Name(), got, want)
		}
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	group := c.group("profile:12")
	for i, outcome := range []string{"recompute", "hit"} {
		if i >= len(lines) || !strings.Contains(lines[i], "level=DEBUG") || !strings.Contains(lines[i], "key_group="+group) ||
			!strings.Contains(lines[i], "key=profile:12") || !strings.Contains(lines[i], "outcome="+outcome) {
			t.Fatalf("log lines %q: want line %d at debug level with key_group=%s, key and outcome=%s", lines, i, group, outcome)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("%d log lines for 2 decisions: %q", len(lines), lines)
	}
}

// TestFetchTTLJitter: the deadlines written are the configured TTLs less at
// most the Jitter fraction, and they differ between keys written together.
func TestFetchTTLJitter(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	clk := newFetchClock()
	ca := newFetchCache(t, rdb, prometheus.NewRegistry(), clk, CacheOptions{FreshTTL: time.Hour, HardTTL: 10 * time.Hour, Jitter: 0.5})
	now := clk.now().UnixMilli()
	seen := map[int64]bool{}
	for i := 0; i < 20; i++ {
		key := "jitter:" + strconv.Itoa(i)
		if _, err := ca.Fetch(context.Background(), key, func(context.Context) (string, error) { return "v", nil }); err != nil {
			t.Fatal(err)
		}
		written(ca, key)
		h, err := rdb.HMGet(context.Background(), keysFor(key).value, "f", "h").Result()
		if err != nil {
			t.Fatal(err)
		}
		f, _ := strconv.ParseInt(h[0].(string), 10, 64)
		hard, _ := strconv.ParseInt(h[1].(string), 10, 64)
		fresh, hardTTL := f-now, hard-now
		if fresh <= time.Hour.Milliseconds()/2 || fresh > time.Hour.Milliseconds() ||
			hardTTL <= 5*time.Hour.Milliseconds() || hardTTL > 10*time.Hour.Milliseconds() {
			t.Fatalf("%s: fresh %dms, hard %dms outside (TTL/2, TTL]", key, fresh, hardTTL)
		}
		seen[fresh] = true
	}
	if len(seen) < 10 {
		t.Fatalf("20 keys written together got only %d distinct fresh TTLs", len(seen))
	}
}
