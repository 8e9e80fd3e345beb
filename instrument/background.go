package instrument

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// background tracks the goroutines a Cache starts (flights, refreshes,
// revalidations, orphan-claim releases), so that Close can refuse new ones
// and wait for those running. Close may run at any time, concurrently with
// any call: a WaitGroup alone cannot be added to while it is waited on.
type background struct {
	mu     sync.Mutex
	closed atomic.Bool // set under mu; read without it by isClosed
	wg     sync.WaitGroup
	stop   chan struct{} // closed by close: waits in background work end early
	// ctx ends when close begins: Redis calls in background work end early.
	ctx    context.Context
	cancel context.CancelFunc
}

func newBackground() *background {
	ctx, cancel := context.WithCancel(context.Background())
	return &background{stop: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// bound returns a context that ends after d or when close begins.
func (b *background) bound(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(b.ctx, d)
}

// start runs fn in a goroutine, unless close has begun: then it reports
// false and the caller does without.
func (b *background) start(fn func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return false
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		fn()
	}()
	return true
}

// close refuses new goroutines, signals stop and waits for the running
// ones. Concurrent and repeated calls all wait.
func (b *background) close() {
	b.mu.Lock()
	if !b.closed.Load() {
		b.closed.Store(true)
		close(b.stop)
		b.cancel()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// isClosed reports whether close has begun. It takes no lock: every flight
// asks, and in a stampede a flight that found the lock taken would park
// behind the whole crowd of runnable callers (which take it to start
// revalidations).
func (b *background) isClosed() bool { return b.closed.Load() }
