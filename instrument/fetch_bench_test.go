package instrument

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/internal/crowd"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// BenchmarkFetchHit: one caller, fresh value, one Redis round trip each.
func BenchmarkFetchHit(b *testing.B) {
	srv := redistest.Start(b)
	c, err := New(srv.Client(b), Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	ca := mustCache[string](b, c, CacheOptions{FreshTTL: time.Hour})
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

// BenchmarkFetchStaleCrowd: per iteration, 250 goroutines sharing one
// context (as a worker pool's do) are released at once on a key that has
// just gone stale — one process's share of BenchmarkStampede in bench/,
// without the other processes. Reports the callers' p50 and p99; with
// process copies (the default) and without.
//
//	go test -run '^$' -bench BenchmarkFetchStaleCrowd ./instrument/
func BenchmarkFetchStaleCrowd(b *testing.B) {
	for _, v := range []struct {
		name   string
		copies int
	}{{"copies", 0}, {"nocopies", -1}} {
		b.Run(v.name, func(b *testing.B) {
			srv := redistest.Start(b)
			clock := newFetchClock()
			c, err := New(srv.Client(b), Options{Registerer: prometheus.NewRegistry(), Clock: clock})
			if err != nil {
				b.Fatal(err)
			}
			ca := mustCache[string](b, c, CacheOptions{FreshTTL: time.Minute, HardTTL: 1000 * time.Hour, LocalCopies: v.copies})
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			load := func(context.Context) (string, error) { return "value", nil }
			if _, err := ca.Fetch(ctx, "crowd:1", load); err != nil {
				b.Fatal(err)
			}
			const callers = 250
			var lat []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				clock.add(2 * time.Minute) // stale again (the last refresh made it fresh)
				ca.bg.wait()
				b.StartTimer()
				l, _ := crowd.Run(callers, func() error { _, err := ca.Fetch(ctx, "crowd:1", load); return err })
				lat = append(lat, l...)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
			b.ReportMetric(float64(lat[(len(lat)*99-1)/100])/1e6, "p99-ms")
		})
	}
}

// BenchmarkFetchStaleCopy: the path of a crowd's callers on a stale key
// with process copies, alone: every caller is answered from the process's
// copy while a revalidation is (marked) in flight. "parallel" runs it on
// every P at once, where a lock or a write that every caller makes to a
// shared cache line shows as contention.
//
//	go test -run '^$' -bench BenchmarkFetchStaleCopy -benchmem ./instrument/
func BenchmarkFetchStaleCopy(b *testing.B) {
	srv := redistest.Start(b)
	clock := newFetchClock()
	c, err := New(srv.Client(b), Options{Registerer: prometheus.NewRegistry(), Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	ca := mustCache[string](b, c, CacheOptions{FreshTTL: time.Minute, HardTTL: 1000 * time.Hour})
	ctx := context.Background()
	load := func(context.Context) (string, error) { return "value", nil }
	if _, err := ca.Fetch(ctx, "copy:1", load); err != nil {
		b.Fatal(err)
	}
	clock.add(2 * time.Minute)
	ca.local.get("copy:1").revalidating.Store(true) // one revalidation in flight, as in a crowd
	fetch := func() {
		if _, err := ca.Fetch(ctx, "copy:1", load); err != nil {
			b.Error(err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			fetch()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				fetch()
			}
		})
	})
	if n := lookups(ca, ca.c.group("copy:1"), resultStale); n < 2 {
		b.Fatalf("stale lookups = %v: the callers were not served from the copy", n)
	}
}
