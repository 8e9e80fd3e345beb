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
// per-caller allocations and the boxing of the outcome, and with a cheaper
// wait for callers that share a context (see wait). In a stampede
// (hundreds of callers per process on one key, on a few shared cores) the
// last callers served wait for every other caller's share of that work, so
// that share is kept small — and free of locks where it can be: a caller
// that finds a lock taken with other goroutines runnable parks, and is
// woken only after all of them have run.
type flights[T any] struct {
	mu sync.Mutex // serialises creating, landing and the rare waiter bookkeeping
	m  sync.Map   // key → *flight[T]; read without mu
}

// flight is one lookup in progress, run for every caller who joins it by
// the caller who started it (the leader); o and err are what it found, set
// before done closes.
type flight[T any] struct {
	done chan struct{}
	o    outcome[T]
	err  error
	// The waiters sharing the leader's context wait on leaderWake, which
	// the leader (their watcher) closes once the flight lands or the
	// context ends; both are set before the flight is published and never
	// change, so joiners read them without a lock.
	leaderDone <-chan struct{}
	leaderWake chan struct{}
	// wakes does the same, under flights.mu, for every other context.
	wakes map[<-chan struct{}]chan struct{}
}

// waiter is one caller's place in a flight.
type waiter struct {
	ctx     context.Context
	wake    chan struct{} // nil when ctx cannot end
	watcher bool          // this caller watches ctx for the others sharing it
	leader  bool          // this caller started the flight: it runs and lands it
}

// join returns key's flight in progress, or a new one when there is none
// (the caller is then its leader), and the caller's place among its
// waiters.
func (fs *flights[T]) join(ctx context.Context, key string) (f *flight[T], w waiter) {
	w.ctx = ctx
	done := ctx.Done()
	if v, ok := fs.m.Load(key); ok { // the stampede's path: no lock
		f = v.(*flight[T])
		if done == nil {
			return f, w
		}
		if done == f.leaderDone {
			w.wake = f.leaderWake
			return f, w
		}
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if v, ok := fs.m.Load(key); ok {
		f = v.(*flight[T])
	} else {
		f = &flight[T]{done: make(chan struct{})}
		if done != nil {
			f.leaderDone, f.leaderWake = done, make(chan struct{})
		}
		fs.m.Store(key, f)
		w.wake, w.watcher, w.leader = f.leaderWake, done != nil, true
		return f, w
	}
	if done != nil {
		w.wake, w.watcher = f.wakeFor(done)
	}
	return f, w
}

// wakeFor returns the wake channel of the waiters whose context ends with
// done, and whether the caller is the first of them (their watcher).
// flights.mu must be held.
func (f *flight[T]) wakeFor(done <-chan struct{}) (wake chan struct{}, first bool) {
	if done == f.leaderDone {
		return f.leaderWake, false
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
	fs.m.CompareAndDelete(key, f)
	fs.mu.Unlock()
	f.o, f.err = o, err
	close(f.done)
}
