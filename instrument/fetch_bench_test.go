package instrument

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/internal/crowd"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// BenchmarkFetchHit: one caller, fresh value, one Redis round trip each.
func BenchmarkFetchHit(b *testing.B) {
	ca, ctx, load := benchCache(b), context.Background(), loadAtOnce
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

// benchCache returns a Cache on a fresh server, values fresh for an hour.
func benchCache(b *testing.B) *Cache[string] {
	srv := redistest.Start(b)
	c, err := New(srv.Client(b), Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	return mustCache[string](b, c, CacheOptions{FreshTTL: time.Hour})
}

// loadAtOnce is a loader that returns at once.
func loadAtOnce(context.Context) (string, error) { return "value", nil }

// BenchmarkFetchMiss: the latency of a Fetch that loads (one caller, a new
// key each iteration, a loader that returns at once): its read, the load
// and whatever else its caller waits for. Its write lands outside the timed
// part, so that it does not share a round trip with the next read.
//
//	go test -run '^$' -bench BenchmarkFetchMiss ./instrument/
func BenchmarkFetchMiss(b *testing.B) {
	ca, ctx, load := benchCache(b), context.Background(), loadAtOnce
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = "miss:" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for _, key := range keys {
		if _, err := ca.Fetch(ctx, key, load); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		ca.bg.wait() // the flight, and with it the write, has ended
		b.StartTimer()
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
	written(ca, "copy:1") // the write keeps the process's copy
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

// BenchmarkColdCrowdEnd: the end of a cold stampede on many keys, in two
// simulated processes of one Go process: the loading process holds the
// claims of 100 keys, callers on each wait in both processes (1 per key per
// process: "callers=1", the flights' own cost; 10: "callers=10"), and the
// timed part runs from the loads' return to the last caller's answer — the
// writes, their wake-ups and every caller's answer. Reports that part's
// CPU time too: in BenchmarkStampede the processes and Redis share two
// cores, so the CPU this takes is latency for the last callers.
//
//	go test -run '^$' -bench BenchmarkColdCrowdEnd -benchmem ./instrument/
func BenchmarkColdCrowdEnd(b *testing.B) {
	for _, perKey := range []int{1, 10} {
		b.Run(fmt.Sprint("callers=", perKey), func(b *testing.B) { benchColdCrowdEnd(b, perKey, nil) })
	}
}

// BenchmarkColdFlight: what one cold key's flights allocate, whole: the
// same two processes and 100 keys as BenchmarkColdCrowdEnd with one caller
// per key in each, from the first read to the last answer (the loading
// process's flights read, load and write; the other's read, wait, are
// woken and answer). Reports the bytes and allocations per flight, the
// harness's goroutine and key per caller included (its ns/op, B/op and
// cpu-µs/op are BenchmarkColdCrowdEnd's: the end of the crowd only). A
// service pays them in how often it collects garbage, and in a crowd every
// process allocates them at once.
//
//	go test -run '^$' -bench BenchmarkColdFlight ./instrument/
func BenchmarkColdFlight(b *testing.B) {
	var m flightAllocs
	benchColdCrowdEnd(b, 1, &m)
	b.ReportMetric(float64(m.bytes)/float64(m.flights), "B/flight")
	b.ReportMetric(float64(m.allocs)/float64(m.flights), "allocs/flight")
}

// flightAllocs adds up what the flights of BenchmarkColdFlight allocated.
type flightAllocs struct{ bytes, allocs, flights uint64 }

func (m *flightAllocs) add(before, after *runtime.MemStats, flights int) {
	m.bytes += after.TotalAlloc - before.TotalAlloc
	m.allocs += after.Mallocs - before.Mallocs
	m.flights += uint64(flights)
}

// benchColdCrowdEnd runs BenchmarkColdCrowdEnd, or BenchmarkColdFlight when
// whole is set.
func benchColdCrowdEnd(b *testing.B, perKey int, whole *flightAllocs) {
	srv := redistest.Start(b)
	newProcess := func() *Cache[string] {
		// The defaults' poll interval and Redis timeout.
		ca := newWakeProcess(b, srv.Client(b), 250*time.Millisecond, 250*time.Millisecond)
		poll.Until(b, "the wake channel", ca.c.hub.subscribed.Load)
		return ca
	}
	loader, waiter := newProcess(), newProcess()
	const nkeys = 100
	var waiting, joined atomic.Int64
	testHookWaiting = func(string) { waiting.Add(1) }
	testHookJoined = func(string) { joined.Add(1) }
	defer func() { testHookWaiting, testHookJoined = nil, nil }()
	var cpu time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		prefix := "cold" + strconv.Itoa(i) + ":"
		release := make(chan struct{})
		var loading sync.WaitGroup
		loading.Add(nkeys)
		load := func(context.Context) (string, error) { loading.Done(); <-release; return "value", nil }
		var done sync.WaitGroup
		crowd := func(ca *Cache[string]) { startCrowd(b, ca, &done, nkeys, perKey, prefix, load) }
		waiting.Store(0)
		joined.Store(0)
		var before, after runtime.MemStats
		if whole != nil {
			runtime.ReadMemStats(&before)
		}
		crowd(loader)
		loading.Wait()
		crowd(waiter)
		// A flight whose wait outlasts a poll interval blocks again: at least.
		poll.Until(b, "the waiting process's flights", func() bool { return waiting.Load() >= nkeys })
		poll.Until(b, "every other caller to join a flight", func() bool { return joined.Load() == 2*nkeys*int64(perKey-1) })
		c0 := cpuTime()
		b.StartTimer()
		close(release)
		done.Wait()
		b.StopTimer()
		cpu += cpuTime() - c0
		loader.bg.wait()
		waiter.bg.wait()
		if whole != nil {
			runtime.ReadMemStats(&after)
			whole.add(&before, &after, 2*nkeys)
		}
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
}

// startCrowd starts perKey Fetches of each of nkeys keys (prefix and the
// key's number) on ca, counted in done.
func startCrowd(b *testing.B, ca *Cache[string], done *sync.WaitGroup, nkeys, perKey int, prefix string, load func(context.Context) (string, error)) {
	for k := 0; k < nkeys*perKey; k++ {
		done.Add(1)
		go func() {
			defer done.Done()
			if _, err := ca.Fetch(context.Background(), prefix+strconv.Itoa(k%nkeys), load); err != nil {
				b.Error(err)
			}
		}()
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
