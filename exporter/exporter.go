// Package exporter samples a live Redis (standalone or Cluster) for what
// client-side metrics cannot see: lock and keyspace state shared by every
// service, server stats, scripts and queues. An Exporter is a
// prometheus.Collector: a background loop (Run) samples every interval and
// scrapes only read the last sample, so a scrape never reaches Redis.
//
// The sampler never sends KEYS or a blocking command. The keyspace is walked
// with SCAN … COUNT and pipelined per-key reads (PTTL; GET on lock keys;
// OBJECT FREQ under an LFU policy when hot keys are asked for), at most
// MaxKeys keys and MaxDuration per node per sample; the cursor resumes on the
// next sample, so a large keyspace is covered over several intervals and the
// keyspace series describe the last complete pass.
//
// Redis counts the sampler's own key reads in keyspace_hits and
// keyspace_misses; the sampler counts them too and exports the server's
// figures less its own, so sampling never moves the hit ratio it reports.
package exporter

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/keygroup"
)

// Defaults for the zero values of Options.
const (
	DefaultInterval    = 15 * time.Second
	DefaultMaxKeys     = 20000
	DefaultMaxDuration = 2 * time.Second
	DefaultScanCount   = 100
	DefaultBatch       = 100
	DefaultLongHeld    = time.Minute
	// DefaultKeysPerSecond paces key reads per node: at this rate a 2-core
	// server's other clients kept their GET p99 within 1.25× of idle in
	// BenchmarkSample (docs/benchmarks.md).
	DefaultKeysPerSecond = 10000
	// DefaultLockPattern is the lock pattern used when Options.LockPatterns is empty.
	DefaultLockPattern = "lock:*"
	// maxTrackedLocks bounds the owner-token memory per node.
	maxTrackedLocks = 100000
	// maxStreamGroups bounds the consumer groups exported per stream.
	maxStreamGroups = 50
)

// Options configures an Exporter. Only Target.Addrs is required.
type Options struct {
	Target Target
	// LockPatterns are Redis-style globs of lock keys; default "lock:*".
	LockPatterns []string
	// KeyGroups classifies keys into bounded key groups; nil means the
	// default derivation (ID-like segments replaced by "*").
	KeyGroups *keygroup.Classifier
	// Queues are list, stream or sorted-set keys to report on.
	Queues []string

	// Interval between samples in Run; default 15s.
	Interval time.Duration
	// MaxKeys and MaxDuration bound one sample of one node's keyspace; the
	// SCAN cursor resumes on the next sample. Defaults 20000 and 2s.
	MaxKeys     int
	MaxDuration time.Duration
	// ScanCount is SCAN's COUNT hint and Batch the keys read per pipeline;
	// both default to 100.
	ScanCount, Batch int
	// KeysPerSecond paces the per-key reads of each node, so the sampler
	// takes a bounded share of a single-threaded server. 0 means
	// DefaultKeysPerSecond; a negative value turns pacing off.
	KeysPerSecond float64
	// LongHeld is how long an owner token must be seen unchanged for its
	// lock to count as long-held; default 1m.
	LongHeld time.Duration
	// HotKeys > 0 keeps the top HotKeys keys by OBJECT FREQ per pass when
	// the server's maxmemory-policy is an LFU one (for doctor; never labels).
	HotKeys int
	// MissBurst > 0 counts a miss burst for each sample in which the
	// server's keyspace misses (corrected) grew by at least MissBurst.
	MissBurst uint64

	// Now is the clock for ages, TTL deadlines and long-held times; default time.Now.
	Now func() time.Time
	// Logger receives sample failures; default slog.Default(). The Redis
	// password never appears in what is logged.
	Logger *slog.Logger
}

// ErrNoAddrs is returned by New when the target has no address.
var ErrNoAddrs = errors.New("exporter: no Redis address")

// Exporter samples Redis nodes and serves their last sample as metrics.
// It is safe for concurrent use.
type Exporter struct {
	opts   Options
	groups *keygroup.Classifier
	seed   maphash.Seed
	// sampleM makes samples (and Close) one at a time; it guards nodes,
	// mode and closed.
	sampleM sync.Mutex
	nodes   map[string]*node
	mode    Mode
	closed  bool

	mu    sync.RWMutex // guards snaps, read by scrapes
	snaps map[string]*NodeSnapshot
}

// New returns an Exporter for opts. It does not connect: the first Sample does.
func New(opts Options) (*Exporter, error) {
	if len(opts.Target.Addrs) == 0 {
		return nil, ErrNoAddrs
	}
	for _, a := range opts.Target.Addrs {
		if a == "" || !strings.Contains(a, ":") {
			return nil, fmt.Errorf("exporter: address %q is not host:port", a)
		}
	}
	if len(opts.LockPatterns) == 0 {
		opts.LockPatterns = []string{DefaultLockPattern}
	}
	setDefault(&opts.Interval, DefaultInterval)
	setDefault(&opts.MaxKeys, DefaultMaxKeys)
	setDefault(&opts.MaxDuration, DefaultMaxDuration)
	setDefault(&opts.ScanCount, DefaultScanCount)
	setDefault(&opts.Batch, DefaultBatch)
	setDefault(&opts.LongHeld, DefaultLongHeld)
	if opts.KeysPerSecond == 0 {
		opts.KeysPerSecond = DefaultKeysPerSecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	groups := opts.KeyGroups
	if groups == nil {
		var err error
		if groups, err = keygroup.New(keygroup.Options{}); err != nil {
			return nil, fmt.Errorf("exporter: key groups: %w", err)
		}
	}
	return &Exporter{
		opts: opts, groups: groups, seed: maphash.MakeSeed(), mode: opts.Target.Mode,
		nodes: map[string]*node{}, snaps: map[string]*NodeSnapshot{},
	}, nil
}

func setDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Run samples every Interval until ctx is done, then closes the connections.
// The first sample starts at once.
func (e *Exporter) Run(ctx context.Context) error {
	defer e.Close()
	t := time.NewTicker(e.opts.Interval)
	defer t.Stop()
	for {
		e.Sample(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Sample takes one sample of every node, concurrently, and publishes it for
// scrapes. It returns the nodes' snapshots, sorted by node; a node that
// could not be sampled has Up false and Err set.
func (e *Exporter) Sample(ctx context.Context) []*NodeSnapshot {
	e.sampleM.Lock()
	defer e.sampleM.Unlock()
	nodes := e.refreshNodes(ctx)
	out := make([]*NodeSnapshot, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { out[i] = e.sampleNode(ctx, n) })
	}
	wg.Wait()
	e.mu.Lock()
	for _, s := range out {
		e.snaps[s.Node] = s
	}
	e.mu.Unlock()
	for _, s := range out {
		if !s.Up {
			e.opts.Logger.Warn("redis sample failed", "node", s.Node, "err", s.Err)
		}
	}
	return out
}

// Snapshots returns the last published snapshot of every node, sorted by node.
func (e *Exporter) Snapshots() []*NodeSnapshot {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]*NodeSnapshot, 0, len(e.snaps))
	for _, s := range e.snaps {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// Close waits for a running sample to end and closes every connection.
// Snapshots stay readable.
func (e *Exporter) Close() error {
	e.sampleM.Lock()
	defer e.sampleM.Unlock()
	var errs []error
	for _, n := range e.nodes {
		errs = append(errs, n.rdb.Close())
	}
	e.nodes = map[string]*node{}
	e.closed = true
	return errors.Join(errs...)
}

// refreshNodes returns the nodes to sample: the configured addresses, or
// every master of the Cluster. A Cluster whose topology cannot be read keeps
// its last known masters (they then fail their samples and report up 0).
//
// It runs under sampleM, which guards nodes, mode and closed; e.mu is held
// only to drop the snapshots of masters that left, so scrapes never wait
// for the network.
func (e *Exporter) refreshNodes(ctx context.Context) []*node {
	if e.closed {
		return nil
	}
	addrs := e.opts.Target.Addrs
	if e.mode != Standalone {
		if masters, isCluster, err := e.discover(ctx); err == nil {
			if isCluster {
				e.mode = Cluster
				addrs = masters
			} else if e.mode == Auto {
				e.mode = Standalone
			}
		} else if e.mode == Cluster && len(e.nodes) > 0 {
			addrs = addrs[:0:0]
			for a := range e.nodes {
				addrs = append(addrs, a)
			}
		}
	}
	want := make(map[string]bool, len(addrs))
	out := make([]*node, 0, len(addrs))
	for _, a := range addrs {
		if want[a] {
			continue
		}
		want[a] = true
		n := e.nodes[a]
		if n == nil {
			n = newNode(a, redis.NewClient(e.opts.Target.clientOptions(a)))
			e.nodes[a] = n
		}
		out = append(out, n)
	}
	for a, n := range e.nodes { // masters gone from the topology
		if !want[a] {
			_ = n.rdb.Close()
			delete(e.nodes, a)
			e.mu.Lock()
			delete(e.snaps, a)
			e.mu.Unlock()
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out
}

// discover asks the known nodes, then the seeds, whether this is a Cluster
// and, if so, for its masters.
func (e *Exporter) discover(ctx context.Context) (masters []string, isCluster bool, err error) {
	candidates := make([]*redis.Client, 0, len(e.nodes)+len(e.opts.Target.Addrs))
	for _, n := range e.nodes {
		candidates = append(candidates, n.rdb)
	}
	for _, a := range e.opts.Target.Addrs {
		if n := e.nodes[a]; n == nil {
			c := redis.NewClient(e.opts.Target.clientOptions(a))
			defer c.Close()
			candidates = append(candidates, c)
		}
	}
	err = ErrNoAddrs
	for _, c := range candidates {
		var info string
		if info, err = c.Info(ctx, "cluster").Result(); err != nil {
			continue
		}
		if !strings.Contains(info, "cluster_enabled:1") {
			return nil, false, nil
		}
		var nodes string
		if nodes, err = c.ClusterNodes(ctx).Result(); err != nil {
			continue
		}
		if masters = parseClusterMasters(nodes); len(masters) > 0 {
			return masters, true, nil
		}
		err = fmt.Errorf("%w: CLUSTER NODES lists no master", ErrMalformed)
	}
	return nil, false, err
}

// parseClusterMasters returns the addresses of the masters in a CLUSTER
// NODES reply ("<id> <ip:port@cport[,host]> <flags> …"), failed ones
// included so that they report up 0.
func parseClusterMasters(s string) []string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.Contains(","+f[2]+",", ",master,") || strings.Contains(f[2], "noaddr") {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		if addr == "" || strings.HasPrefix(addr, ":") {
			continue
		}
		out = append(out, addr)
	}
	sort.Strings(out)
	return out
}

// isLock reports whether key matches a lock pattern.
func (e *Exporter) isLock(key string) bool {
	for _, p := range e.opts.LockPatterns {
		if matchGlob(p, key) {
			return true
		}
	}
	return false
}
