package instrument

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/internal/redistest"
)

// BenchmarkFetchHit: one caller, fresh value, one Redis round trip each.
func BenchmarkFetchHit(b *testing.B) {
	srv := redistest.Start(b)
	c, err := New(srv.Client(b), Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	ca := NewCache[string](c, CacheOptions{FreshTTL: time.Hour})
	defer ca.Close()
	ctx := context.Background()
	load := func(context.Context) (string, error) { return "value", nil }
	if _, err := ca.Fetch(ctx, "bench:1", load); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ca.Fetch(ctx, "bench:1", load); err != nil {
			b.Fatal(err)
		}
	}
}
