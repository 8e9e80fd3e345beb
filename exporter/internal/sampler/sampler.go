package sampler

import (
	"context"
	"errors"
	"sort"
	"sync"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
)

// Sampler samples the nodes of one target: the configured addresses, or
// every master of a Cluster. Scrapes read what it published last
// (Snapshots) and never wait for the network. It is safe for concurrent
// use.
//
// A Sampler can be started when it is first needed and stopped when it is
// no longer read: New connects to nothing, Run samples until its context is
// done, and Close ends the connections (putting back what the lock index
// changed in the servers' configuration).
type Sampler struct {
	cfg   Config
	board board
	// sampleM makes samples (and Close) one at a time; it guards nodes,
	// topology and closed.
	sampleM  sync.Mutex
	nodes    map[string]*node
	topology topology
	closed   bool
}

// New returns a Sampler of cfg. Until its first sample every configured
// address has a snapshot with Up false and Err ErrNotSampled.
func New(cfg Config) *Sampler {
	s := &Sampler{cfg: cfg, nodes: map[string]*node{}, topology: topology{mode: cfg.Conn.Mode}}
	s.board.snaps = map[string]*snapshot.Node{}
	for _, a := range cfg.Conn.Addrs {
		s.board.snaps[a] = &snapshot.Node{Node: a, Err: ErrNotSampled}
	}
	return s
}

// Run samples every Interval until ctx is done, then closes the
// connections. The first sample starts at once.
func (s *Sampler) Run(ctx context.Context) error {
	defer s.Close()
	t := s.cfg.Clock.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.Sample(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.Chan():
		}
	}
}

// Sample takes one sample of every node, concurrently, and publishes it. It
// returns the nodes' snapshots, sorted by node; a node that could not be
// sampled has Up false and Err set. A node or stage that failed is not
// tried again before its backoff has passed (at most Interval, or 8 ×
// Interval for a command refused by ACL), however often Sample is called:
// its last result is reported meanwhile.
func (s *Sampler) Sample(ctx context.Context) []*snapshot.Node {
	s.sampleM.Lock()
	defer s.sampleM.Unlock()
	nodes := s.refreshNodes(ctx)
	out := make([]*snapshot.Node, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { out[i] = n.sampleSafely(ctx) })
	}
	wg.Wait()
	if !s.closed && !errors.Is(ctx.Err(), context.Canceled) {
		s.board.replace(out)
	}
	return out
}

// Snapshots returns the last published snapshot of every node, sorted by
// node. Before the first sample each configured address has one with Up
// false and Err ErrNotSampled.
func (s *Sampler) Snapshots() []*snapshot.Node { return s.board.all() }

// Close waits for a running sample to end and closes every connection,
// putting back the operator's notify-keyspace-events where the sampler
// changed it. Snapshots stay readable.
func (s *Sampler) Close() error {
	s.sampleM.Lock()
	defer s.sampleM.Unlock()
	nodes := make([]*node, 0, len(s.nodes))
	for _, n := range s.nodes {
		nodes = append(nodes, n)
	}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { errs[i] = n.close() })
	}
	wg.Wait()
	s.nodes = map[string]*node{}
	s.closed = true
	return errors.Join(errs...)
}

// board holds the snapshots published for scrapes: each node's part of a
// sample as soon as it has it, and every node's at the sample's end.
type board struct {
	mu    sync.RWMutex
	snaps map[string]*snapshot.Node
}

// publish shows one node's snapshot before the sample of every node has
// ended (the first part of a long sample).
func (b *board) publish(s *snapshot.Node) {
	b.mu.Lock()
	b.snaps[s.Node] = s
	b.mu.Unlock()
}

// replace publishes a whole sample: nodes it does not hold are gone.
func (b *board) replace(out []*snapshot.Node) {
	snaps := make(map[string]*snapshot.Node, len(out))
	for _, s := range out {
		snaps[s.Node] = s
	}
	b.mu.Lock()
	b.snaps = snaps
	b.mu.Unlock()
}

// all returns every published snapshot, sorted by node.
func (b *board) all() []*snapshot.Node {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]*snapshot.Node, 0, len(b.snaps))
	for _, s := range b.snaps {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}
