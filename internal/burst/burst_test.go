package burst_test

import (
	"sync"
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
		d.Miss("a:*")
	}
	d.Miss("b:*") // another group, below threshold
	clk.add(1500 * time.Millisecond)
	d.Miss("a:*")
	d.Miss("a:*") // new window, 2 < 3: no burst
	clk.add(2 * time.Second)
	for i := 0; i < 3; i++ {
		d.Miss("a:*")
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
				d.Miss("g")
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
	d.Miss(g)
	if n := testing.AllocsPerRun(100, func() { d.Miss(g) }); n != 0 {
		t.Fatalf("Miss allocates %v", n)
	}
}
