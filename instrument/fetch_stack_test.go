//go:build !race

// The race detector makes every frame larger, so this file's stack budget
// holds only without it: scripts/test.sh runs it in a pass of its own.

package instrument

import (
	"context"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/internal/keygrouptest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// callerFrames stands for the frames a fanned-out caller has above Fetch,
// beyond this test's own goroutine and closures (about 250 bytes): with
// it, about 350, more than BenchmarkStampede's caller goroutine and fetch
// function take (264 bytes).
const callerFrames = 96

// TestCrowdCallersKeepTheirFirstStack: the callers of a cold stampede —
// fresh goroutines, as an errgroup fanning out over keys starts them — are
// served without growing their stacks, both those coalesced behind their
// own process's load and those woken by another process's write. A stack
// that outgrows its first 2 KiB is copied whole: in BenchmarkStampede
// (p4-k100) that copy, made by every caller as its flight landed, was 17 %
// of cachewatch's CPU time, spent at the moment the last callers wait for.
//
// Go sizes first stacks by the average it saw at the last collection, so
// the check runs in a copy of this test binary that starts every goroutine
// at 2 KiB (GODEBUG=adaptivestackstart=0).
func TestCrowdCallersKeepTheirFirstStack(t *testing.T) {
	if os.Getenv("GODEBUG") != "adaptivestackstart=0" {
		runWithFirstStacks(t)
		return
	}
	r := newCrowdRig(t)
	defer func() { testHookWaiting, testHookJoined = nil, nil }()

	// The first crowd finds the processes cold (no metric handles yet, no
	// parked-goroutine records to reuse): a service meets that once.
	r.coldCrowd("warm:")
	// A collection under way sends allocations down its assist path, deep
	// in the runtime, wherever they happen: keep it out of the measure.
	// (Not by collecting first: a collection empties the caches of parked
	// goroutines' records, and every caller would allocate one again.)
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	// The leaders (one per key per process) start the flights, and some
	// callers take a slow path (a fresh record for a parked goroutine, a
	// memory refill; 21 to 98 of the 400 in 40 runs): paid once per key or
	// now and then, not by every caller as before (400 of 400).
	n, most := r.coldCrowd("stack:"), int64(crowdKeys*crowdPerKey)
	t.Logf("%d of %d callers grew their stacks", n, 2*crowdKeys*crowdPerKey)
	if n > most {
		t.Errorf("%d of %d callers grew their stacks; want at most %d, half (the leaders and the slow paths)", n, 2*crowdKeys*crowdPerKey, most)
	}
	if got := lookups(r.waiter, r.waiter.c.group("stack:0"), resultCoalesced); got != crowdKeys*crowdPerKey {
		t.Errorf("waiting process counted %v coalesced lookups, want %d", got, crowdKeys*crowdPerKey)
	}

	// The same crowd once the values are stale: served from the
	// processes' copies, each caller at once.
	r.clock.Advance(2 * time.Minute)
	grown := r.staleCrowd()
	t.Logf("stale crowd: %d of %d callers grew their stacks", grown, 2*crowdKeys*crowdPerKey)
	if n, most := grown, int64(crowdKeys*crowdPerKey); n > most {
		t.Errorf("stale crowd: %d of %d callers grew their stacks; want at most %d, half", n, 2*crowdKeys*crowdPerKey, most)
	}
	if got := lookups(r.waiter, r.waiter.c.group("stack:0"), resultStale); got != crowdKeys*crowdPerKey {
		t.Errorf("waiting process counted %v stale lookups, want %d (served from its copies)", got, crowdKeys*crowdPerKey)
	}
	r.loader.bg.wait()
	r.waiter.bg.wait()
}

// A crowd is crowdPerKey callers of each of crowdKeys keys, in each of the
// two processes.
const crowdKeys, crowdPerKey = 10, 20

// crowdRig is two processes on one Redis and one fake clock, loader and
// waiter, with the flights they wait on and join counted through the
// test hooks (which the caller resets).
type crowdRig struct {
	t               *testing.T
	clock           *clockwork.FakeClock
	loader, waiter  *Cache[string]
	waiting, joined atomic.Int64
}

func newCrowdRig(t *testing.T) *crowdRig {
	r := &crowdRig{t: t, clock: clockwork.NewFakeClockAt(time.Now())}
	srv := redistest.Start(t)
	process := func() *Cache[string] {
		c, err := New(srv.Client(t), Options{Registerer: prometheus.NewRegistry(), Clock: r.clock, KeyGroups: keygrouptest.Named(t)})
		if err != nil {
			t.Fatal(err)
		}
		return mustCache[string](t, c, CacheOptions{FreshTTL: time.Minute})
	}
	r.loader, r.waiter = process(), process()
	waitSubscribed(t, r.loader, r.waiter)
	testHookWaiting = func(string) { r.waiting.Add(1) }
	testHookJoined = func(string) { r.joined.Add(1) }
	return r
}

// coldCrowd runs one cold crowd on prefix's keys and returns how many
// of its callers grew their stacks. It stages the crowd as
// BenchmarkColdCrowdEnd does, but not through a shared helper: the
// callers' goroutines and closures are part of the stack measured, and
// one more frame (a callback per caller) made 400 of 400 grow.
func (r *crowdRig) coldCrowd(prefix string) (grew int64) {
	t := r.t
	r.waiting.Store(0)
	r.joined.Store(0)
	release := make(chan struct{})
	var loading sync.WaitGroup
	loading.Add(crowdKeys)
	load := func(context.Context) (string, error) { loading.Done(); <-release; return "value", nil }
	var done sync.WaitGroup
	var grown, failed atomic.Int64
	crowd := func(ca *Cache[string]) {
		for k := range crowdKeys * crowdPerKey {
			done.Add(1)
			go func() {
				defer done.Done()
				var err error
				if withFrames(func() { _, err = ca.Fetch(context.Background(), prefix+strconv.Itoa(k%crowdKeys), load) }) {
					grown.Add(1)
				}
				if err != nil {
					failed.Add(1)
				}
			}()
		}
	}
	crowd(r.loader)
	loading.Wait()
	crowd(r.waiter)
	poll.Until(t, "the waiting process's flights", func() bool { return r.waiting.Load() >= crowdKeys })
	poll.Until(t, "every other caller to join a flight", func() bool { return r.joined.Load() == 2*crowdKeys*(crowdPerKey-1) })
	close(release)
	done.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d callers failed", failed.Load())
	}
	return grown.Load()
}

// staleCrowd runs the crowd on the "stack:" keys again, once their values are
// stale, and returns how many of its callers grew their stacks. The
// revalidations' source answers only after the crowd: a refresh landing
// during it would let a process's revalidating read replace its stale
// copy with the fresh value, and its later callers would read Redis for a
// hit (181 of 200 stale in 1 of 10 runs before).
func (r *crowdRig) staleCrowd() int64 {
	crowdServed := make(chan struct{})
	readAgain := func(context.Context) (string, error) { <-crowdServed; return "value", nil }
	var done sync.WaitGroup
	var grown atomic.Int64
	for _, ca := range []*Cache[string]{r.loader, r.waiter} {
		for k := range crowdKeys * crowdPerKey {
			done.Add(1)
			go func() {
				defer done.Done()
				if withFrames(func() { _, _ = ca.Fetch(context.Background(), "stack:"+strconv.Itoa(k%crowdKeys), readAgain) }) {
					grown.Add(1)
				}
			}()
		}
	}
	done.Wait()
	close(crowdServed)
	return grown.Load()
}

// withFrames runs fn below callerFrames bytes of frame and reports whether
// the goroutine's stack was moved meanwhile (grown: Go copies a stack to
// grow it, so the address of a local changes).
//
//go:noinline
func withFrames(fn func()) (grew bool) {
	var frame [callerFrames]byte
	before := uintptr(unsafe.Pointer(&frame[0]))
	fn()
	return uintptr(unsafe.Pointer(&frame[0])) != before
}

// runWithFirstStacks runs the calling test again in a copy of this test
// binary whose goroutines all start at 2 KiB, and fails as it fails.
func runWithFirstStacks(t *testing.T) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "GODEBUG=adaptivestackstart=0")
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil:
		t.Fatalf("with GODEBUG=adaptivestackstart=0: %v\n%s", err, out)
	case strings.Contains(string(out), "--- SKIP"):
		t.Skipf("with GODEBUG=adaptivestackstart=0:\n%s", out)
	case !strings.Contains(string(out), "--- PASS: "+t.Name()):
		t.Fatalf("with GODEBUG=adaptivestackstart=0, the test did not run:\n%s", out)
	}
}
