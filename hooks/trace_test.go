package hooks_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cachewatch/cachewatch/hooks"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

func TestSpans(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	rdb := redistest.NewClient(t, quiet(&redis.Options{Addr: srv.Addr}))
	h, err := hooks.New(hooks.Options{Registerer: prometheus.NewRegistry(), TracerProvider: tp, ServerAddress: srv.Addr,
		Scripts: []hooks.Script{{Name: "bump", Src: `return redis.call("INCR", KEYS[1])`}}})
	if err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(h)
	rdb.Set(ctx, "session:secret-token", "secret-value", 0)
	rdb.Get(ctx, "session:missing")
	rdb.Do(ctx, "NOSUCHCOMMAND", "secret-arg")
	redis.NewScript(`return redis.call("INCR", KEYS[1])`).Run(ctx, rdb, []string{"n"})
	rdb.Pipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, "a"); p.Get(ctx, "b"); return nil })

	spans := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = append(spans[s.Name()], s)
		for _, kv := range s.Attributes() {
			if v := kv.Value.Emit(); strings.Contains(v, "secret") {
				t.Errorf("span %s attribute %s carries a key or value: %q", s.Name(), kv.Key, v)
			}
		}
		if strings.Contains(s.Status().Description, "secret") {
			t.Errorf("span %s status carries an argument: %q", s.Name(), s.Status().Description)
		}
	}
	attrs := func(name string, i int) map[attribute.Key]string {
		t.Helper()
		if len(spans[name]) <= i {
			t.Fatalf("no span %q #%d; spans: %v", name, i, keys(spans))
		}
		m := map[attribute.Key]string{}
		for _, kv := range spans[name][i].Attributes() {
			m[kv.Key] = kv.Value.Emit()
		}
		return m
	}
	set := attrs("SET", 0)
	if set["db.system.name"] != "redis" || set["db.operation.name"] != "SET" || set["server.address"] != "127.0.0.1" || set["server.port"] == "" {
		t.Errorf("SET span attributes: %v", set)
	}
	if get := spans["GET"][0]; get.Status().Code != codes.Unset { // a nil reply is not an error
		t.Errorf("GET miss span status: %v", get.Status())
	}
	if other := spans["redis"]; len(other) != 1 || other[0].Status().Code != codes.Error || attrs("redis", 0)["error.type"] != "other" {
		t.Errorf("unknown command span: %v", other)
	}
	if a := attrs("EVALSHA", 0); a["db.stored_procedure.name"] != "bump" {
		t.Errorf("EVALSHA span attributes: %v", a)
	}
	if a := attrs("BATCH", 0); a["db.operation.batch.size"] != "2" {
		t.Errorf("pipeline span attributes: %v", a)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Given otel's global provider the hook follows it: no spans while none is
// installed, spans once a program installs an SDK, even after the hook was
// built. A hook with no TracerProvider starts none, SDK or not. (This
// installs a global SDK for the rest of the package's tests; they do not
// read it.)
func TestSpansFollowTheGlobalProvider(t *testing.T) {
	rdb, _ := hooked(t, hooks.Options{TracerProvider: otel.GetTracerProvider()})
	none, _ := hooked(t, hooks.Options{})
	ctx := context.Background()
	rdb.Get(ctx, "session:1")
	rec := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	rdb.Get(ctx, "session:2")
	none.Get(ctx, "session:3")
	ended := rec.Ended()
	if len(ended) != 1 || ended[0].Name() != "GET" {
		names := make([]string, len(ended))
		for i, s := range ended {
			names[i] = s.Name()
		}
		t.Fatalf("spans after installing a global SDK: %v, want one GET (none from the hook without a TracerProvider)", names)
	}
}
