package instrument

import (
	"context"
	"sync"
	"sync/atomic"
)

// pendingWrites are a Client's writes of loaded values still on their way
// to Redis, by stored name. A Fetch that loaded answers its callers as soon
// as the loader returns, and its write, which stores the value and wakes
// the other processes' callers, goes on in the background: in a crowd over
// many keys the loading process's callers otherwise waited for the write's
// reply, which a process busy with its crowd reads late
// (docs/benchmarks.md, session 15). So that the process's own calls keep
// their order, its next lookup of the key (Fetch, Get), Set and
// invalidations wait for the write first: each sees what a Fetch that
// returned before it loaded.
type pendingWrites struct {
	n  atomic.Int64 // writes pending: lookups check it without the lock
	mu sync.Mutex
	m  map[string]*pendingWrite
}

// pendingWrite is a key's writes in flight; done closes when the last ends.
type pendingWrite struct {
	n    int
	done chan struct{}
}

// add records a write of key as pending, until finish.
func (p *pendingWrites) add(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]*pendingWrite{}
	}
	w := p.m[key]
	if w == nil {
		w = &pendingWrite{done: make(chan struct{})}
		p.m[key] = w
	}
	w.n++
	p.n.Add(1)
}

// finish ends a write of key that add recorded.
func (p *pendingWrites) finish(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n.Add(-1)
	w := p.m[key]
	if w.n--; w.n == 0 {
		delete(p.m, key)
		close(w.done)
	}
}

// wait returns once no write of key is pending, or when ctx ends. Each
// write is bounded (RedisTimeout, see store), so a wait on a context that
// cannot end still ends.
func (p *pendingWrites) wait(ctx context.Context, key string) {
	if p.n.Load() == 0 {
		return
	}
	p.mu.Lock()
	w := p.m[key]
	p.mu.Unlock()
	if w == nil {
		return
	}
	select {
	case <-w.done:
	case <-ctx.Done():
	}
}

// waitAll returns once the writes pending now have landed, or when ctx
// ends.
func (p *pendingWrites) waitAll(ctx context.Context) {
	if p.n.Load() == 0 {
		return
	}
	p.mu.Lock()
	ws := make([]*pendingWrite, 0, len(p.m))
	for _, w := range p.m {
		ws = append(ws, w)
	}
	p.mu.Unlock()
	for _, w := range ws {
		select {
		case <-w.done:
		case <-ctx.Done():
			return
		}
	}
}
