package instrument

import "sync"

// flights coalesces the concurrent lookups of a key within one process: the
// first caller starts a flight (one read script call and whatever it
// decides: serve, refresh, load or wait), the callers that arrive while it
// is in flight wait for its outcome instead of making their own round trip.
//
// It does what golang.org/x/sync/singleflight's DoChan does, minus the
// per-caller allocations (5 fewer per waiter, measured) and the boxing of
// the outcome: a waiter costs one map lookup under a mutex and a select on
// the flight's done channel, and landing wakes every waiter with one close
// instead of one channel send each. In a stampede (hundreds of callers per
// process on one key, on a few shared cores) the last callers served wait
// for every other caller's share of that work.
type flights[T any] struct {
	mu sync.Mutex
	m  map[string]*flight[T]
}

// flight is one lookup in progress; o and err are set before done closes.
type flight[T any] struct {
	done chan struct{}
	o    outcome[T]
	err  error
}

// join returns key's flight in progress, or a new one when there is none;
// leader reports that the caller created it and must run it (and land it).
func (fs *flights[T]) join(key string) (f *flight[T], leader bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f = fs.m[key]; f != nil {
		return f, false
	}
	if fs.m == nil {
		fs.m = map[string]*flight[T]{}
	}
	f = &flight[T]{done: make(chan struct{})}
	fs.m[key] = f
	return f, true
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
