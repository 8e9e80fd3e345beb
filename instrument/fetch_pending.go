package instrument

import (
	"context"
	"sync"
	"sync/atomic"
)

// pendingWrites are a Client's writes of loaded values still on their way
// to Redis, by stored name. A flight that loaded answers its callers as
// soon as the loader returns, then writes, which stores the value and
// wakes the other processes' callers: in a crowd over many keys the
// loading process's callers otherwise waited for the write's reply, which
// a process busy with its crowd reads late (BenchmarkFetchMiss). So that
// the process's own
// calls keep their order, its next lookup of the key (Fetch, Get), Set and
// invalidations wait for the write first: each sees what a Fetch that
// returned before it loaded.
type pendingWrites struct {
	n  atomic.Int64 // writes pending: lookups check it without the lock
	mu sync.Mutex
	// count holds each stored name's writes pending; done, a channel for
	// the names someone waits on, closed when their last write ends (made
	// by the first wait: a load allocates no more than its entry).
	count map[string]int
	done  map[string]chan struct{}
}

// add records a write of name as pending, until finish.
func (p *pendingWrites) add(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.count == nil {
		p.count, p.done = map[string]int{}, map[string]chan struct{}{}
	}
	p.count[name]++
	p.n.Add(1)
}

// finish ends a write of name that add recorded.
func (p *pendingWrites) finish(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n.Add(-1)
	if p.count[name]--; p.count[name] > 0 {
		return
	}
	delete(p.count, name)
	if done, ok := p.done[name]; ok {
		delete(p.done, name)
		close(done)
	}
}

// wait returns once no write of name is pending, or when ctx ends. Each
// write is bounded (RedisTimeout, see store), so a wait on a context that
// cannot end still ends.
func (p *pendingWrites) wait(ctx context.Context, name string) {
	if p.n.Load() == 0 {
		return
	}
	p.mu.Lock()
	done := p.doneLocked(name)
	p.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
}

// waitAll returns once the writes pending now have landed, or when ctx
// ends.
func (p *pendingWrites) waitAll(ctx context.Context) {
	if p.n.Load() == 0 {
		return
	}
	p.mu.Lock()
	dones := make([]chan struct{}, 0, len(p.count))
	for name := range p.count {
		dones = append(dones, p.doneLocked(name))
	}
	p.mu.Unlock()
	for _, done := range dones {
		select {
		case <-done:
		case <-ctx.Done():
			return
		}
	}
}

// doneLocked returns the channel that closes when name's last pending
// write ends, nil if none is pending. p.mu is held.
func (p *pendingWrites) doneLocked(name string) chan struct{} {
	if p.count[name] == 0 {
		return nil
	}
	done, ok := p.done[name]
	if !ok {
		done = make(chan struct{})
		p.done[name] = done
	}
	return done
}
