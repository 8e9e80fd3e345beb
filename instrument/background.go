package instrument

import (
	"sync"
	"sync/atomic"
	"time"
)

// background tracks the goroutines a Cache starts (flights, refreshes,
// revalidations, orphan-lease releases), so that Close can refuse new ones
// and wait for those running. Close may run at any time, concurrently with
// any call: a WaitGroup alone cannot be added to while it is waited on.
//
// The goroutines are kept a while once their work is done, and given the
// next: a flight's goroutine goes deep into go-redis, so a new one grows
// (copies) its stack more than once. In BenchmarkColdCrowdEnd the copies
// were 12% of the CPU, and reusing the goroutines cut it by 4–14%
// (docs/benchmarks.md).
type background struct {
	mu     sync.Mutex
	closed atomic.Bool    // set under mu; read without it by isClosed
	wg     sync.WaitGroup // the goroutines, busy or idle
	busy   sync.WaitGroup // the work started and not yet done
	stop   chan struct{}  // closed by close: waits in background work end early
	work   chan func()    // hands work to an idle goroutine
}

// idleFor is how long a background goroutine waits for more work.
const idleFor = 5 * time.Second

func newBackground() *background {
	return &background{stop: make(chan struct{}), work: make(chan func())}
}

// start runs fn in a goroutine, unless close has begun: then it reports
// false and the caller does without.
func (b *background) start(fn func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return false
	}
	b.busy.Add(1)
	select {
	case b.work <- fn: // an idle goroutine takes it
	default:
		b.wg.Add(1)
		go b.worker(fn)
	}
	return true
}

// worker runs fn, then the work handed to it, until it has been idle for
// idleFor or close begins.
func (b *background) worker(fn func()) {
	defer b.wg.Done()
	idle := time.NewTimer(idleFor)
	defer idle.Stop()
	for {
		fn()
		fn = nil // nothing of the work done stays reachable while idle
		b.busy.Done()
		idle.Reset(idleFor)
		select {
		case fn = <-b.work:
		case <-idle.C:
			return
		case <-b.stop:
			return
		}
	}
}

// close refuses new goroutines, signals stop and waits for the running
// ones. Concurrent and repeated calls all wait.
func (b *background) close() {
	b.mu.Lock()
	if !b.closed.Load() {
		b.closed.Store(true)
		close(b.stop)
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// isClosed reports whether close has begun. It takes no lock: every flight
// asks, and in a stampede a flight that found the lock taken would park
// behind the whole crowd of runnable callers (which take it to start
// revalidations).
func (b *background) isClosed() bool { return b.closed.Load() }
