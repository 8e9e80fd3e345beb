package instrument

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/cachewatch/cachewatch/internal/otelglobal"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Only otel's default global provider is taken for one that records
// nothing; any other provider, even a no-op one, is used as given.
func TestIsOtelDefault(t *testing.T) {
	if !otelglobal.IsDefault(otel.GetTracerProvider()) && !globalSDKInstalled {
		t.Error("otel's default global provider not recognised: every Fetch caller would start a span that records nothing")
	}
	if otelglobal.IsDefault(sdktrace.NewTracerProvider()) {
		t.Error("an SDK provider taken for otel's default")
	}
	if otelglobal.IsDefault(noop.NewTracerProvider()) {
		t.Error("a no-op provider given explicitly taken for otel's default")
	}
}

// globalSDKInstalled is set in the child process of
// TestFetchSpansFollowGlobalProvider once it has installed an SDK.
var globalSDKInstalled bool

// globalProviderChild names the Redis address for the child process.
const globalProviderChild = "CACHEWATCH_GLOBAL_PROVIDER_CHILD"

// Given otel's global provider (otel.GetTracerProvider()) a client follows
// it, and with no TracerProvider in Options it starts no span. Before a program installs an SDK, Fetch starts no span (none
// would record anything) and adds none of its events to the caller's own
// span; once one is installed — after New, as programs often do — every
// caller's Fetch and every Lock records its span. It runs in a child
// process because a global provider, once installed, cannot be removed.
func TestFetchSpansFollowGlobalProvider(t *testing.T) {
	if addr := os.Getenv(globalProviderChild); addr != "" {
		globalProviderScenario(t, addr)
		return
	}
	srv := redistest.Start(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestFetchSpansFollowGlobalProvider$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), globalProviderChild+"="+srv.Addr)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestFetchSpansFollowGlobalProvider")) {
		t.Fatalf("child process: %v\n%s", err, out)
	}
}

func globalProviderScenario(t *testing.T, addr string) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if !otelglobal.IsDefault(otel.GetTracerProvider()) {
		t.Fatal("a fresh process's global tracer provider is not otel's default")
	}
	c, err := New(rdb, Options{Registerer: prometheus.NewRegistry(), TracerProvider: otel.GetTracerProvider()})
	if err != nil {
		t.Fatal(err)
	}
	untraced, err := New(rdb, Options{Registerer: prometheus.NewRegistry(), Name: "untraced"})
	if err != nil {
		t.Fatal(err)
	}
	ca := mustCache[string](t, c, CacheOptions{})
	defer ca.Close()
	load := func(context.Context) (string, error) { return "v", nil }
	// No SDK yet: nothing is recorded, and the caller's own span (from a
	// provider the program did not install globally) gets no events.
	if c.spans.recording() {
		t.Fatal("spans would be started with no SDK installed")
	}
	own := tracetest.NewSpanRecorder()
	ctx, span := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(own)).Tracer("app").Start(context.Background(), "request")
	if _, err := ca.Fetch(ctx, "page:{1}", load); err != nil {
		t.Fatal(err)
	}
	span.End()
	if ev := own.Ended()[0].Events(); len(ev) != 0 {
		t.Fatalf("the caller's span got Fetch's events %v", ev)
	}

	rec := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	globalSDKInstalled = true
	if !c.spans.recording() {
		t.Fatal("no spans once an SDK is installed globally")
	}
	if untraced.spans.recording() {
		t.Fatal("a client without a TracerProvider would start spans once an SDK is installed globally")
	}
	const n = 20
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ca.Fetch(context.Background(), "page:{1}", load); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	l, err := c.Lock(context.Background(), "job:{1}", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	ul, err := untraced.Lock(context.Background(), "job:{2}", LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ul.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	fetches, locks := countHitAndLockSpans(t, rec)
	hits := lookups(ca, c.group("page:{1}"), resultHit)
	if fetches != n || hits != n || locks != 1 {
		t.Fatalf("%d Fetch spans and %v hits counted for %d callers, %d lock spans; want %d, %d and 1",
			fetches, hits, n, locks, n, n)
	}
}

// countHitAndLockSpans counts the ended Fetch spans, each of which must
// report a hit, and lock spans.
func countHitAndLockSpans(t *testing.T, rec *tracetest.SpanRecorder) (fetches, locks int) {
	t.Helper()
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "cachewatch.Fetch":
			fetches++
			if !hasAttr(s.Attributes(), attribute.String("cachewatch.result", resultHit)) {
				t.Errorf("Fetch span attributes %v, want result hit", s.Attributes())
			}
		case "cachewatch.lock":
			locks++
		}
	}
	return fetches, locks
}

func hasAttr(attrs []attribute.KeyValue, want attribute.KeyValue) bool {
	for _, a := range attrs {
		if a == want {
			return true
		}
	}
	return false
}
