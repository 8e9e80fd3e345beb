// Package exporter samples a live Redis (standalone or Cluster) for what
// client-side metrics cannot see: lock and keyspace state shared by every
// service, server stats, scripts and queues. An Exporter is a
// prometheus.Collector: a background loop (Run) samples every interval and
// scrapes only read the last sample, so a scrape never reaches Redis. Every
// configured address reports up 0 from the start until a sample succeeds.
//
// The sampler never sends KEYS, a blocking command, a script or a write
// (except CONFIG SET notify-keyspace-events, see NotifyMode). Each sample of
// a node runs two passes side by side:
//
//   - the lock stage keeps an index of the lock keys (their expiry and a
//     hash of their owner token). A SCAN … MATCH pass over the keyspace
//     fills it, reading each lock's TTL (PEXPIRETIME) and the first
//     MaxTokenBytes of its value (GETRANGE, never GET), paced so that SCAN
//     takes at most LockScanBudget of the server's time. The node is
//     subscribed to the keyspace events of the lock patterns (by default
//     the exporter turns on the classes it needs, LockNotifications), and
//     every sample reads again the locks that changed: once a pass after
//     the subscription has completed, the lock figures shown are those of a
//     moment the index was exact at, found by every sample however large
//     the keyspace, and later passes only reconcile the index. Without
//     notifications they are a pass's reading, shown when it ends;
//   - the whole-keyspace pass walks it with SCAN … COUNT and pipelined TTL
//     reads (and OBJECT FREQ under an LFU policy when hot keys are asked
//     for, MEMORY USAGE of one key in MemorySample), paced at KeysPerSecond
//     and bounded by MaxKeys and MaxDuration per sample; the cursor resumes
//     on the next sample. Its figures (the TTL and expiry shape) are those
//     of the last complete pass, exported once one has completed; until
//     then only the coverage is.
//
// No figure of a pass in progress is ever exported. Every series family's
// figures carry the Unix time they describe (data_timestamp_seconds):
// their age.
//
// A node or stage that fails is retried after a backoff, however often
// Sample is called; a command refused by ACL is logged once per stage.
//
// Redis counts samplers' key reads in keyspace_hits and keyspace_misses; the
// exporter takes out its own lookups and, from INFO commandstats, those of
// other exporters and doctor runs, so samplers do not move the hit ratio it
// reports.
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

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/cachewatch/cachewatch/internal/emit"
	"github.com/cachewatch/cachewatch/keygroup"
	"github.com/cachewatch/cachewatch/signals"
)

// Defaults for the zero values of Options.
const (
	DefaultInterval = 15 * time.Second
	// DefaultMaxKeys and DefaultMaxDuration bound one sample's share of the
	// whole-keyspace pass; with DefaultKeysPerSecond the pacing is what
	// limits it (13 s × 10,000 keys/s): a 1,000,000-key node is covered in
	// under two minutes at the default interval.
	DefaultMaxKeys     = 200_000
	DefaultMaxDuration = 13 * time.Second
	DefaultScanCount   = 25
	DefaultBatch       = 25
	DefaultLongHeld    = time.Minute
	// DefaultKeysPerSecond paces the whole-keyspace pass per node: a
	// 1,000,000-key node is covered in under two minutes (BenchmarkSample,
	// with other clients' GET latency meanwhile: docs/benchmarks.md).
	DefaultKeysPerSecond = 10000
	// DefaultLockScanCount is the COUNT of the lock pass's SCAN … MATCH:
	// small, so that each call holds the server for a short time (COUNT
	// 100 raised other clients' GET p99 more than 25 in BenchmarkSample;
	// docs/benchmarks.md).
	DefaultLockScanCount = 25
	// DefaultLockPattern is the lock pattern used when Options.LockPatterns is empty.
	DefaultLockPattern = "lock:*"
	// MaxTokenBytes is the most of a lock value the sampler reads
	// (GETRANGE 0 MaxTokenBytes-1): owner tokens are short, and a huge
	// value must not become a huge read. Tokens that share their first
	// MaxTokenBytes bytes look the same to long-held tracking.
	MaxTokenBytes = 256
	// MaxStreamGroups bounds the consumer groups exported per stream; the
	// rest are counted in cachewatch_exporter_stream_groups_dropped.
	MaxStreamGroups = 50
	// minPaceSleep is the least a paced pass gets ahead of schedule before
	// it sleeps: a few SCAN calls of the lock pass between sleeps.
	minPaceSleep = 2 * time.Millisecond
	// DefaultLockScanBudget is the share of the server's time the lock
	// pass's SCAN may take (docs/exporter.md: the limit it sets).
	DefaultLockScanBudget = 0.2
	// DefaultLockReconcile is how long a reconciling lock pass may take
	// once keyspace notifications keep the lock index exact.
	DefaultLockReconcile = 10 * time.Minute
	// DefaultMaxLocks bounds the lock keys indexed per node (about 100
	// bytes each).
	DefaultMaxLocks = 1_000_000
	// memoryUsageSamples is the SAMPLES of MEMORY USAGE: the nested values
	// of an aggregate it reads to estimate its size (Redis's default).
	memoryUsageSamples = 5
	// DefaultMaxQueueReply is the largest reply of a queue read (a
	// stream's first entry, its group list, a sorted set's first member)
	// sent again next sample; a larger one is suspended with a backoff.
	DefaultMaxQueueReply = 64 << 10
)

// Options configures an Exporter. Only Target.Addrs is required.
type Options struct {
	Target Target
	// Name, when set, is the value of a "target" label on every series
	// collected by Prometheus (several exporters, one per target, on one
	// registry); with a MeterProvider, tell targets apart by its resource.
	Name string
	// LockPatterns are Redis globs of lock keys (*, ?, [abc], [^a], [a-z],
	// \ escapes; as SCAN … MATCH and PSUBSCRIBE read them); default
	// "lock:*".
	LockPatterns []string
	// KeyGroups classifies keys into bounded key groups; nil means a
	// classifier of keygroup's default options, learning the groups from
	// the keys the sampler walks. Its overflow is exported as
	// cachewatch_keygroup_overflow_total, unless it counts it itself: pass
	// keygroup.Shared(reg) to share the classifier of the hooks and clients
	// on reg, and register the Exporter on reg too.
	KeyGroups *keygroup.Classifier
	// LockGroups classifies lock keys, with a cap of its own so that many
	// ordinary key groups never fold the lock groups into "other"; nil
	// means KeyGroups.Apart() (the same rules and cap, groups counted
	// apart). Its overflow is added to cachewatch_keygroup_overflow_total.
	LockGroups *keygroup.Classifier
	// LockNotifications says whether the lock index follows keyspace
	// notifications (default NotifyAuto: turning on the classes it needs
	// when the server allows it, and back off on Close).
	LockNotifications NotifyMode
	// LockScanBudget is the share of the server's time (0 to 1) the lock
	// pass's SCAN may take over each interval, by the server's own
	// accounting of SCAN time per key; default DefaultLockScanBudget.
	LockScanBudget float64
	// LockReconcile is how long a reconciling pass over the keyspace may
	// take once notifications keep the lock index exact; default
	// DefaultLockReconcile.
	LockReconcile time.Duration
	// MaxLocks bounds the lock keys indexed per node; with more, the lock
	// series are left out. Default DefaultMaxLocks.
	MaxLocks int
	// MemorySample > 0 reads MEMORY USAGE of one key in MemorySample in
	// the whole-keyspace pass (paced with it) and exports the estimated
	// memory per key group. 0 (the default) reads none.
	MemorySample int
	// MaxQueueReply bounds, in bytes, the reply of a queue read whose size
	// the data decides; default DefaultMaxQueueReply. A larger reply is
	// refused before it is read, and that read is left out for a backoff.
	MaxQueueReply int
	// MaxInfoReply bounds, in bytes, an INFO reply, and MaxReply any other
	// reply but lock values (at most MaxTokenBytes) and queue reads
	// (MaxQueueReply): SCAN pages, TTLs, CONFIG GET, CLUSTER NODES, LATENCY
	// HISTOGRAM, keyspace events. A reply that declares more — or that is
	// not the Redis protocol — is refused before it is read
	// (ErrReplyTooLarge, ErrBadReply: class "malformed") and the node is
	// down until its backoff passes. Defaults DefaultMaxInfoReply and
	// DefaultMaxReply.
	MaxInfoReply, MaxReply int
	// Queues are list, stream or sorted-set keys to report on.
	Queues []string

	// Interval between samples in Run; default 15s.
	Interval time.Duration
	// MaxKeys and MaxDuration bound one sample's share of the
	// whole-keyspace pass of one node; the SCAN cursor resumes on the next
	// sample. Defaults 200,000 and 13s; MaxDuration is at most 90 % of
	// Interval.
	MaxKeys     int
	MaxDuration time.Duration
	// ScanCount is SCAN's COUNT hint and Batch the keys read per pipeline;
	// both default to 25 (smaller batches hold the server for less time at once:
	// other clients' GET p99 in docs/benchmarks.md).
	ScanCount, Batch int
	// LockScanCount is the COUNT of the lock pass; default 25.
	LockScanCount int
	// KeysPerSecond paces the whole-keyspace pass of each node, so the
	// sampler takes a bounded share of a single-threaded server. 0 means
	// DefaultKeysPerSecond; a negative value turns pacing off (the lock
	// pass too, which is otherwise spread over half the interval).
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

	// Clock is the clock for ages, TTL deadlines, long-held times, the
	// retry backoff of failed stages and Run's ticker; nil means the real
	// clock. Pacing and the per-sample time budget use real time: they
	// bound the load on Redis, not what is reported.
	Clock clockwork.Clock
	// Logger receives sample failures and ACL refusals; default
	// slog.Default(). The Redis password never appears in what is logged.
	Logger *slog.Logger
	// MeterProvider, when set, receives every sample as OpenTelemetry
	// observable instruments (names and kinds in docs/metrics.md), read
	// from the last sample at each collection, as scrapes read it: for a
	// program that embeds the exporter and pushes OTLP. The Exporter is a
	// prometheus.Collector all the same; register it too, or not.
	MeterProvider metric.MeterProvider
}

// ErrNoAddrs is returned by New when the target has no address.
var ErrNoAddrs = errors.New("exporter: no Redis address")

// ErrNotSampled is the error of a node that has not been sampled yet: it
// reports up 0 from the start, so that an up == 0 alert can fire before the
// first sample ends.
var ErrNotSampled = errors.New("exporter: not sampled yet")

// Exporter samples Redis nodes and serves their last sample as metrics.
// It is safe for concurrent use.
type Exporter struct {
	opts  Options
	clock clockwork.Clock
	// pacer is the clock of pacing and of the per-sample time budget: the
	// real clock (they bound the load on Redis); tests inject a fake one.
	pacer clockwork.Clock
	// descs are the catalog's descriptors with this exporter's target label.
	descs map[signals.ID]*prometheus.Desc
	// lockGroups classifies lock keys (Options.LockGroups).
	lockGroups *keygroup.Classifier
	// lockShare is the fraction of Interval the lock pass is spread over
	// (lockPassShare; benchmarks compare others).
	lockShare float64
	// minSleep is the least a pass gets ahead of its pace before it sleeps
	// (minPaceSleep; benchmarks compare others).
	minSleep time.Duration
	groups   *keygroup.Classifier
	seed     maphash.Seed
	// sampleM makes samples (and Close) one at a time; it guards nodes,
	// mode and closed.
	sampleM sync.Mutex
	nodes   map[string]*node
	mode    Mode
	closed  bool
	// discovery is the backoff of Cluster topology reads: at most one per
	// second, and after a failure 1 s doubling up to Interval.
	discovery retry

	mu    sync.RWMutex // guards snaps, read by scrapes
	snaps map[string]*NodeSnapshot
	// unobserve unregisters the MeterProvider callback (nil without one).
	unobserve func() error
}

// New returns an Exporter for opts. It does not connect: the first Sample
// does. Until then every configured address reports up 0.
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
	for _, p := range opts.LockPatterns {
		if p == "" {
			return nil, errors.New("exporter: empty lock pattern")
		}
	}
	setDefault(&opts.Interval, DefaultInterval)
	setDefault(&opts.MaxKeys, DefaultMaxKeys)
	setDefault(&opts.MaxDuration, DefaultMaxDuration)
	opts.MaxDuration = min(opts.MaxDuration, opts.Interval*9/10)
	setDefault(&opts.ScanCount, DefaultScanCount)
	setDefault(&opts.Batch, DefaultBatch)
	setDefault(&opts.LockScanCount, DefaultLockScanCount)
	setDefault(&opts.LongHeld, DefaultLongHeld)
	setDefault(&opts.LockReconcile, DefaultLockReconcile)
	setDefault(&opts.MaxLocks, DefaultMaxLocks)
	setDefault(&opts.MaxQueueReply, DefaultMaxQueueReply)
	setDefault(&opts.MaxInfoReply, DefaultMaxInfoReply)
	setDefault(&opts.MaxReply, DefaultMaxReply)
	if opts.LockScanBudget <= 0 || opts.LockScanBudget > 1 {
		opts.LockScanBudget = DefaultLockScanBudget
	}
	if opts.KeysPerSecond == 0 {
		opts.KeysPerSecond = DefaultKeysPerSecond
	}
	clock := opts.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	groups, err := orDefaultGroups(opts.KeyGroups)
	if err != nil {
		return nil, err
	}
	lockGroups := opts.LockGroups
	if lockGroups == nil {
		lockGroups = groups.Apart()
	}
	e := &Exporter{
		opts: opts, clock: clock, pacer: clockwork.NewRealClock(), lockShare: lockPassShare, minSleep: minPaceSleep,
		groups: groups, lockGroups: lockGroups, seed: maphash.MakeSeed(), mode: opts.Target.Mode,
		nodes: map[string]*node{}, snaps: map[string]*NodeSnapshot{}, descs: newDescs(opts.Name, !groups.CountsOverflow()),
	}
	for _, a := range opts.Target.Addrs {
		e.snaps[a] = &NodeSnapshot{Node: a, Err: ErrNotSampled}
	}
	if opts.MeterProvider != nil {
		var err error
		if e.unobserve, err = e.observe(emit.Meter(opts.MeterProvider)); err != nil {
			return nil, fmt.Errorf("exporter: %w", err)
		}
	}
	return e, nil
}

func orDefaultGroups(c *keygroup.Classifier) (*keygroup.Classifier, error) {
	if c != nil {
		return c, nil
	}
	c, err := keygroup.New(keygroup.Options{})
	if err != nil {
		return nil, fmt.Errorf("exporter: key groups: %w", err)
	}
	return c, nil
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
	t := e.clock.NewTicker(e.opts.Interval)
	defer t.Stop()
	for {
		e.Sample(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.Chan():
		}
	}
}

// Sample takes one sample of every node, concurrently, and publishes it for
// scrapes. It returns the nodes' snapshots, sorted by node; a node that
// could not be sampled has Up false and Err set. A node or stage that
// failed is not tried again before its backoff has passed (at most
// Interval, or 8 × Interval for a command refused by ACL), however often
// Sample is called: its last result is reported meanwhile.
func (e *Exporter) Sample(ctx context.Context) []*NodeSnapshot {
	e.sampleM.Lock()
	defer e.sampleM.Unlock()
	nodes := e.refreshNodes(ctx)
	out := make([]*NodeSnapshot, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { out[i] = e.sampleNodeSafely(ctx, n) })
	}
	wg.Wait()
	if !e.closed && !errors.Is(ctx.Err(), context.Canceled) {
		snaps := make(map[string]*NodeSnapshot, len(out))
		for _, s := range out {
			snaps[s.Node] = s
		}
		e.mu.Lock()
		e.snaps = snaps
		e.mu.Unlock()
	}
	return out
}

// publish shows one node's snapshot to scrapes before the sample of every
// node has ended (the first part of a long sample).
func (e *Exporter) publish(s *NodeSnapshot) {
	e.mu.Lock()
	e.snaps[s.Node] = s
	e.mu.Unlock()
}

// Snapshots returns the last published snapshot of every node, sorted by
// node. Before the first sample each configured address has one with Up
// false and Err ErrNotSampled.
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
// Snapshots stay readable. Close on a nil *Exporter (what New returns
// with an error) does nothing and returns nil.
func (e *Exporter) Close() error {
	if e == nil {
		return nil
	}
	e.sampleM.Lock()
	defer e.sampleM.Unlock()
	errs := make([]error, 0, len(e.nodes)+1)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range e.nodes {
		wg.Go(func() {
			err := e.closeNode(n)
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		})
	}
	wg.Wait()
	e.nodes = map[string]*node{}
	e.closed = true
	if e.unobserve != nil {
		errs = append(errs, e.unobserve())
		e.unobserve = nil
	}
	return errors.Join(errs...)
}

// refreshNodes returns the nodes to sample: the configured addresses, or
// every master of the Cluster. A Cluster whose topology cannot be read keeps
// its last known masters (they then fail their samples and report up 0).
//
// It runs under sampleM, which guards nodes, mode and closed; scrapes never
// wait for the network.
func (e *Exporter) refreshNodes(ctx context.Context) []*node {
	if e.closed {
		return nil
	}
	addrs := e.opts.Target.Addrs
	if e.mode != ModeStandalone && e.clock.Now().Before(e.discovery.until) {
		if e.mode == ModeCluster && len(e.nodes) > 0 {
			addrs = e.knownNodes()
		}
	} else if e.mode != ModeStandalone {
		masters, isCluster, err := e.discover(ctx)
		e.discovered(err)
		if err == nil {
			if isCluster {
				e.mode = ModeCluster
				addrs = masters
			} else if e.mode == ModeAuto {
				e.mode = ModeStandalone
			}
		} else if e.mode == ModeCluster && len(e.nodes) > 0 {
			addrs = e.knownNodes()
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
			n = newNode(a, redis.NewClient(e.clientOptions(a)), e.opts.LockPatterns)
			e.nodes[a] = n
		}
		out = append(out, n)
	}
	for a, n := range e.nodes { // masters gone from the topology
		if !want[a] {
			_ = e.closeNode(n)
			delete(e.nodes, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out
}

func (e *Exporter) knownNodes() []string {
	out := make([]string, 0, len(e.nodes))
	for a := range e.nodes {
		out = append(out, a)
	}
	return out
}

// discovered schedules the next topology read: after a failure 1 s
// doubling up to the interval, and for a refused INFO (ACL) the interval
// doubling up to 8 × the interval, as a refused stage.
func (e *Exporter) discovered(err error) {
	wait, ceiling := time.Second, e.opts.Interval
	if err != nil && classify(err) == ClassNoPerm {
		wait, ceiling = e.opts.Interval, 8*e.opts.Interval
	}
	if err != nil && e.discovery.wait > 0 {
		wait = min(max(2*e.discovery.wait, wait), ceiling)
	}
	if err == nil {
		e.discovery.wait = 0
	} else {
		e.discovery.wait = wait
	}
	e.discovery.until = e.clock.Now().Add(wait)
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
			c := redis.NewClient(e.clientOptions(a))
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
