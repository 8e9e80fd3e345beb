package instrument

import (
	"context"
	"sync"
)

// flights coalesces the concurrent lookups of a key within one process: the
// first caller starts a flight (one read script call and whatever it
// decides: serve, refresh, load or wait), the callers that arrive while it
// is in flight wait for its outcome instead of making their own round trip.
//
// It does what golang.org/x/sync/singleflight's DoChan does, minus the
// per-caller allocations (5 fewer per waiter, measured) and the boxing of
// the outcome, and with a cheaper wait for callers that share a context
// (see wait). In a stampede (hundreds of callers per process on one key,
// on a few shared cores) the last callers served wait for every other
// caller's share of that work, so that share is kept small.
type flights[T any] struct {
	mu sync.Mutex
	m  map[string]*flight[T]
}

// flight is one lookup in progress; o and err are set before done closes.
type flight[T any] struct {
	done chan struct{}
	o    outcome[T]
	err  error
	// wakes holds, per Done channel of the waiters' contexts, the channel
	// that the first waiter with that context (its watcher) closes once
	// the flight lands or the context ends; guarded by flights.mu. The
	// first context's pair is kept apart, so the common case — every
	// waiter on one context, or one waiter — needs no map.
	firstDone <-chan struct{}
	firstWake chan struct{}
	wakes     map[<-chan struct{}]chan struct{}
}

// wakeFor returns the wake channel of the waiters whose context ends with
// done, and whether the caller is the first of them (their watcher).
// flights.mu must be held.
func (f *flight[T]) wakeFor(done <-chan struct{}) (wake chan struct{}, first bool) {
	switch {
	case f.firstWake == nil:
		f.firstDone, f.firstWake = done, make(chan struct{})
		return f.firstWake, true
	case f.firstDone == done:
		return f.firstWake, false
	}
	if wake = f.wakes[done]; wake != nil {
		return wake, false
	}
	if f.wakes == nil {
		f.wakes = map[<-chan struct{}]chan struct{}{}
	}
	wake = make(chan struct{})
	f.wakes[done] = wake
	return wake, true
}

// waiter is one caller's place in a flight.
type waiter struct {
	ctx     context.Context
	wake    chan struct{} // nil when ctx cannot end
	watcher bool          // this caller watches ctx for the others sharing it
}

// join returns key's flight in progress, or a new one when there is none
// (leader reports that the caller created it and must run it and land
// it), and the caller's place among its waiters.
func (fs *flights[T]) join(ctx context.Context, key string) (f *flight[T], leader bool, w waiter) {
	done := ctx.Done()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f = fs.m[key]; f == nil {
		if fs.m == nil {
			fs.m = map[string]*flight[T]{}
		}
		f = &flight[T]{done: make(chan struct{})}
		fs.m[key] = f
		leader = true
	}
	w.ctx = ctx
	if done == nil {
		return f, leader, w
	}
	w.wake, w.watcher = f.wakeFor(done)
	return f, leader, w
}

// wait blocks until f lands or w's context ends, and reports whether f
// landed. Waiting on both at once takes a select over two channels, whose
// locks every waiter takes twice; when hundreds of callers share one
// context (a worker pool's, a batch's) they all contend on its Done
// channel. So only the first waiter of each context selects, and the
// others sharing that context block on its wake channel alone: landing or
// the context's end reaches all of them through one close.
func (f *flight[T]) wait(w waiter) bool {
	switch {
	case w.wake == nil: // the context cannot end
		<-f.done
		return true
	case w.watcher:
		select {
		case <-f.done:
		case <-w.ctx.Done():
		}
		close(w.wake)
	default:
		<-w.wake
	}
	select {
	case <-f.done:
		return true
	default: // woken by the end of the context all of them share
		return false
	}
}

// land publishes a flight's outcome to its waiters. Callers that arrive
// from now on start a new flight (a new read), so nobody is served a read
// that finished before they asked.
func (fs *flights[T]) land(key string, f *flight[T], o outcome[T], err error) {
	fs.mu.Lock()
	if fs.m[key] == f {
		delete(fs.m, key)
	}
	fs.mu.Unlock()
	f.o, f.err = o, err
	close(f.done)
}
