package burst_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cachewatch/cachewatch/internal/burst"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestBurstOncePerWindow(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	var fired []string
	d := burst.New(burst.Options{Window: time.Second, Threshold: 3, Now: clk.now, OnBurst: func(g string) { fired = append(fired, g) }})

	for i := 0; i < 10; i++ { // 10 misses in one window: one burst
		d.Group("a:*").Miss()
	}
	d.Group("b:*").Miss() // another group, below threshold
	clk.add(1500 * time.Millisecond)
	d.Group("a:*").Miss()
	d.Group("a:*").Miss() // new window, 2 < 3: no burst
	clk.add(2 * time.Second)
	for i := 0; i < 3; i++ {
		d.Group("a:*").Miss()
	}
	if d.Bursts() != 2 || len(fired) != 2 || fired[0] != "a:*" {
		t.Fatalf("bursts = %d, fired = %v; want 2 bursts of a:*", d.Bursts(), fired)
	}
}

func TestConcurrentExactlyOne(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	d := burst.New(burst.Options{Threshold: 100, Now: clk.now})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				d.Group("g").Miss()
			}
		}()
	}
	wg.Wait()
	if d.Bursts() != 1 {
		t.Fatalf("4000 misses in one window gave %d bursts, want 1", d.Bursts())
	}
}

func TestMissAllocs(t *testing.T) {
	d := burst.New(burst.Options{})
	g := "session:*"
	d.Group(g).Miss()
	if n := testing.AllocsPerRun(100, func() { d.Group(g).Miss() }); n != 0 {
		t.Fatalf("Miss allocates %v", n)
	}
}

// A Group resolved once counts in the same window as misses by name, and
// the burst names its group.
func TestGroupCountsWithItsDetector(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	var fired []string
	d := burst.New(burst.Options{Window: time.Second, Threshold: 3, Now: clk.now, OnBurst: func(g string) { fired = append(fired, g) }})
	g := d.Group("a:*")
	if d.Group("a:*") != g {
		t.Fatal("Group made a second counter for one group")
	}
	if g.Miss() || d.Group("a:*").Miss() {
		t.Fatal("a burst before the threshold")
	}
	if !g.Miss() {
		t.Fatal("the third miss (two through the Group, one by name) did not complete the burst")
	}
	if d.Bursts() != 1 || len(fired) != 1 || fired[0] != "a:*" {
		t.Fatalf("bursts %d, OnBurst called with %q; want 1 and [a:*]", d.Bursts(), fired)
	}
	if n := testing.AllocsPerRun(100, func() { g.Miss() }); n != 0 {
		t.Fatalf("Group.Miss allocates %v", n)
	}
}

// A window reset racing with misses of the new window: 9 misses, the window
// passes, then 2 concurrent misses. The new window holds 2 misses, so with
// a threshold of 10 no repetition may report a burst (a reset in two steps
// would let a miss land on the old count between the window's and the
// count's reset, completing a false burst).
func TestWindowResetRaceReportsNoFalseBurst(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	d := burst.New(burst.Options{Window: time.Second, Threshold: 10, Now: clk.now})
	const reps = 100_000
	var ready, done sync.WaitGroup
	for rep := 0; rep < reps; rep++ {
		for i := 0; i < 9; i++ {
			d.Group("g").Miss()
		}
		clk.add(time.Second)
		start := make(chan struct{})
		ready.Add(2)
		done.Add(2)
		for w := 0; w < 2; w++ {
			go func(start <-chan struct{}) {
				defer done.Done()
				ready.Done()
				<-start
				d.Group("g").Miss()
			}(start)
		}
		ready.Wait()
		close(start)
		done.Wait()
		clk.add(time.Second)
	}
	if got := d.Bursts(); got != 0 {
		t.Fatalf("%d repetitions of 9 misses, a window reset and 2 concurrent misses (threshold 10) gave %d bursts, want 0", reps, got)
	}
}

// A miss whose clock reading is older than the current window (its
// goroutine read the clock, then the window moved on) counts in the current
// window rather than resetting it.
func TestLateMissDoesNotResetNewerWindow(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Unix(1000, 0).UnixNano())
	d := burst.New(burst.Options{Window: time.Second, Threshold: 3, Now: func() time.Time { return time.Unix(0, now.Load()) }})
	now.Add(int64(time.Second))
	d.Group("g").Miss()
	d.Group("g").Miss()
	now.Add(-int64(time.Second)) // a reading from before the window moved
	if !d.Group("g").Miss() {
		t.Fatalf("third miss of the window (from a late clock reading) was not a burst; bursts = %d", d.Bursts())
	}
}

func BenchmarkMiss(b *testing.B) {
	d := burst.New(burst.Options{})
	b.ReportAllocs()
	for b.Loop() {
		d.Group("session:*").Miss()
	}
}

func BenchmarkMissParallel(b *testing.B) {
	d := burst.New(burst.Options{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d.Group("session:*").Miss()
		}
	})
}
