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
//     fills it, reading each lock's TTL (PEXPIRETIME) and a bounded prefix of
//     its value (GETRANGE, never GET), paced so that SCAN
//     takes at most Locks.ScanBudget of the server's time. The node is
//     subscribed to the keyspace events of the lock patterns (by default
//     the exporter turns on the classes it needs, Locks.Notifications), and
//     every sample reads again the locks that changed: once a pass after
//     the subscription has completed, the lock figures shown are those of a
//     moment the index was exact at, found by every sample however large
//     the keyspace, and later passes only reconcile the index. Without
//     notifications they are a pass's reading, shown when it ends;
//   - the whole-keyspace pass walks it with SCAN … COUNT and pipelined TTL
//     reads (and OBJECT FREQ under an LFU policy when hot keys are asked
//     for, MEMORY USAGE of one key in MemorySample), paced at Sample.KeysPerSecond
//     and bounded by Sample.MaxKeys and MaxDuration per sample; the cursor resumes
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
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/metric"

	"github.com/cachewatch/cachewatch/exporter/internal/sampler"
	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
	"github.com/cachewatch/cachewatch/internal/emit"
	"github.com/cachewatch/cachewatch/keygroup"
	"github.com/cachewatch/cachewatch/signals"
)

// DefaultOptions returns the Options whose zero values New replaces by
// defaults with those defaults filled in (Target and the classifiers stay
// unset): what a command line shows as its flags' defaults. New(o) with o
// taken from DefaultOptions samples as New with those fields left zero.
func DefaultOptions() Options {
	return Options{
		Sample: SampleOptions{
			Interval: sampler.DefaultInterval, MaxKeys: sampler.DefaultMaxKeys, MaxDuration: sampler.DefaultMaxDuration,
			ScanCount: sampler.DefaultScanCount, Batch: sampler.DefaultBatch, KeysPerSecond: sampler.DefaultKeysPerSecond,
			MaxReplyBytes: sampler.DefaultMaxReply,
		},
		Locks: LockOptions{
			Patterns: []string{sampler.DefaultLockPattern}, Notifications: NotifyAuto, ScanBudget: sampler.DefaultLockScanBudget,
			Reconcile: sampler.DefaultLockReconcile, MaxTracked: sampler.DefaultMaxLocks, Holders: sampler.DefaultLockHolders,
			LongHeld: sampler.DefaultLongHeld, ScanCount: sampler.DefaultLockScanCount,
		},
		MaxQueueReply: sampler.DefaultMaxQueueReply, MaxInfoReply: sampler.DefaultMaxInfoReply,
	}
}

// Options configures an Exporter. Only Target.Addrs is required; a zero
// field takes its default (DefaultOptions). Sample and Locks are the
// command's --sample.* and --locks.* flags.
type Options struct {
	Target Target
	// Name, when set, is the value of a "target" label on every series
	// collected by Prometheus (several exporters, one per target, on one
	// registry); with a MeterProvider, tell targets apart by its resource.
	Name string
	// Sample paces and bounds each sample (--sample.*).
	Sample SampleOptions
	// Locks configures the lock stage (--locks.*).
	Locks LockOptions
	// KeyGroups classifies keys into bounded key groups; nil means a
	// classifier of keygroup's default options, learning the groups from
	// the keys the sampler walks. Its overflow is exported as
	// cachewatch_keygroup_overflow_total, unless it counts it itself: pass
	// keygroup.Shared(reg) to share the classifier of the hooks and clients
	// on reg, and register the Exporter on reg too.
	KeyGroups *keygroup.Classifier
	// MemorySample > 0 reads MEMORY USAGE of one key in MemorySample in
	// the whole-keyspace pass (paced with it) and exports the estimated
	// memory per key group (--keys.memory-sample). 0 (the default) reads
	// none.
	MemorySample int
	// Queues are list, stream or sorted-set keys to report on (--queue).
	Queues []string
	// MaxQueueReply bounds, in bytes, the reply of a queue read whose size
	// the data decides (--queue.max-reply-bytes). A larger reply is refused
	// before it is read, and that read is left out for a backoff.
	MaxQueueReply int
	// MaxInfoReply bounds, in bytes, an INFO reply (--server.max-info-bytes);
	// a larger one is refused unread and the node is down until its backoff
	// passes.
	MaxInfoReply int
	// HotKeys > 0 keeps the top HotKeys keys by OBJECT FREQ per pass when
	// the server's maxmemory-policy is an LFU one (for doctor; never labels).
	HotKeys int
	// MissBurst > 0 counts a miss burst for each sample in which the
	// server's keyspace misses (corrected) grew by at least MissBurst
	// (--server.miss-burst).
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

// SampleOptions pace and bound each sample: the --sample.* flags. A zero
// field takes its default (DefaultOptions().Sample).
type SampleOptions struct {
	// Interval is the time between samples in Run; default 15s.
	Interval time.Duration
	// MaxKeys and MaxDuration bound one sample's share of the
	// whole-keyspace pass of one node; the SCAN cursor resumes on the next
	// sample. Defaults 200,000 and 13s; MaxDuration is at most 90 % of
	// Interval.
	MaxKeys     int
	MaxDuration time.Duration
	// ScanCount is SCAN's COUNT hint (of the whole-keyspace pass and of a
	// reconciling lock pass) and Batch the keys read per pipeline; both
	// default to 100 (a quarter of the round trips of 25; other
	// clients' GET p99 at both in docs/benchmarks.md).
	ScanCount, Batch int
	// KeysPerSecond paces the whole-keyspace pass of each node, so the
	// sampler takes a bounded share of a single-threaded server: 0 is the
	// default (1,000), a negative value turns pacing off (the lock pass's
	// too, which is otherwise spread over half the interval). The flag
	// reads the same.
	KeysPerSecond float64
	// MaxReplyBytes bounds any reply but INFO (Options.MaxInfoReply), lock
	// values (a bounded prefix) and queue reads (Options.MaxQueueReply):
	// SCAN pages, TTLs, CONFIG GET, CLUSTER NODES, LATENCY HISTOGRAM,
	// keyspace events. A reply that declares more — or that is not the
	// Redis protocol — is refused before it is read (class "malformed") and
	// the node is down until its backoff passes. Default 1 MiB.
	MaxReplyBytes int
}

// LockOptions configure the lock stage: the --locks.* flags. A zero field
// takes its default (DefaultOptions().Locks).
type LockOptions struct {
	// Patterns are Redis globs of lock keys (*, ?, [abc], [^a], [a-z],
	// \ escapes; as SCAN … MATCH and PSUBSCRIBE read them); default
	// "lock:*".
	Patterns []string
	// Groups classifies lock keys, with a cap of its own (--locks.max-groups)
	// so that many ordinary key groups never fold the lock groups into
	// "other"; nil means Options.KeyGroups.Apart() (the same rules and cap,
	// groups counted apart). Its overflow is added to
	// cachewatch_keygroup_overflow_total.
	Groups *keygroup.Classifier
	// Notifications says whether the lock index follows keyspace
	// notifications (default NotifyAuto: turning on the classes it needs
	// when the server allows it, and back off on Close).
	Notifications NotifyMode
	// ScanBudget is the share of the server's time (0 to 1) the lock
	// pass's SCAN may take over each interval, by the server's own
	// accounting of SCAN time per key; default 0.2.
	ScanBudget float64
	// Reconcile is how long a reconciling pass over the keyspace may take
	// once notifications keep the lock index exact; default 4h.
	Reconcile time.Duration
	// MaxTracked bounds the lock keys indexed per node; with more, the lock
	// series are left out. Default 1,000,000.
	MaxTracked int
	// Holders is how many of each lock group's longest-held locks have
	// their holder (service and host, as the lock's value names them)
	// exported, as lock_holder_held_seconds: at most Holders series per
	// node and lock group, whatever the number of services. 0 is the
	// default (5), a negative value exports none. The flag reads the same.
	Holders int
	// LongHeld is how long an owner token must be seen unchanged for its
	// lock to count as long-held; default 1m.
	LongHeld time.Duration
	// ScanCount is the COUNT of the lock pass; default 25 (each call holds
	// the server for the keys it visits, matching or not). Once keyspace
	// notifications keep the lock index exact, the reconciling passes use
	// Sample.ScanCount when it is larger.
	ScanCount int
}

// Exporter samples Redis nodes and serves their last sample as metrics.
// It is safe for concurrent use.
type Exporter struct {
	sampler *sampler.Sampler
	// interval is exported beside each node's samples.
	interval time.Duration
	// descs are the catalog's descriptors with this exporter's target label.
	descs map[signals.ID]*prometheus.Desc
	// groups and lockGroups classify keys and lock keys.
	groups, lockGroups *keygroup.Classifier
	// closeM guards unobserve, which unregisters the MeterProvider
	// callback (nil without one, and once closed).
	closeM    sync.Mutex
	unobserve func() error
}

// New returns an Exporter for opts. It does not connect: the first Sample
// does. Until then every configured address reports up 0.
func New(opts Options) (*Exporter, error) {
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	e := &Exporter{sampler: sampler.New(cfg), interval: cfg.Interval, descs: newDescs(opts.Name, !cfg.KeyGroups.CountsOverflow()),
		groups: cfg.KeyGroups, lockGroups: cfg.LockGroups}
	if opts.MeterProvider != nil {
		if e.unobserve, err = e.observe(emit.Meter(opts.MeterProvider)); err != nil {
			return nil, fmt.Errorf("exporter: %w", err)
		}
	}
	return e, nil
}

// config checks opts and returns the sampler's configuration, the defaults
// applied.
func (opts Options) config() (sampler.Config, error) {
	if len(opts.Target.Addrs) == 0 {
		return sampler.Config{}, errors.New("exporter: no Redis address")
	}
	for _, a := range opts.Target.Addrs {
		if a == "" || !strings.Contains(a, ":") {
			return sampler.Config{}, fmt.Errorf("exporter: address %q is not host:port", a)
		}
	}
	for _, p := range opts.Locks.Patterns {
		if p == "" {
			return sampler.Config{}, errors.New("exporter: empty lock pattern")
		}
	}
	notify, err := opts.Locks.Notifications.notify()
	if err != nil {
		return sampler.Config{}, err
	}
	t, smp, l := opts.Target, opts.Sample, opts.Locks
	return sampler.Config{
		Conn: sampler.Conn{Addrs: t.Addrs, Username: t.Username, Password: t.Password, DB: t.DB, TLS: t.TLS,
			Mode: t.Mode.mode(), DialTimeout: t.DialTimeout, ReadTimeout: t.ReadTimeout},
		MaxInfoReply: opts.MaxInfoReply, MaxQueueReply: opts.MaxQueueReply, MaxReply: smp.MaxReplyBytes,
		Interval: smp.Interval, MaxDuration: smp.MaxDuration, MaxKeys: smp.MaxKeys, ScanCount: smp.ScanCount,
		Batch: smp.Batch, KeysPerSecond: smp.KeysPerSecond, Unpaced: smp.KeysPerSecond < 0,
		KeyGroups: opts.KeyGroups, MemorySample: opts.MemorySample, HotKeys: opts.HotKeys,
		LockPatterns: l.Patterns, LockGroups: l.Groups, Notify: notify,
		LockScanBudget: l.ScanBudget, LockReconcile: l.Reconcile, LockScanCount: l.ScanCount,
		MaxLocks: l.MaxTracked, LockHolders: lockHolders(l.Holders), LongHeld: l.LongHeld, Queues: opts.Queues, MissBurst: opts.MissBurst,
		Clock: opts.Clock, Logger: opts.Logger,
	}.WithDefaults()
}

// Run samples every Interval until ctx is done, then closes the connections.
// The first sample starts at once.
func (e *Exporter) Run(ctx context.Context) error {
	defer e.Close()
	return e.sampler.Run(ctx)
}

// Sample takes one sample of every node, concurrently, and publishes it for
// scrapes. It returns the nodes' snapshots, sorted by node; a node that
// could not be sampled has Up false and Err set. A node or stage that
// failed is not tried again before its backoff has passed (at most
// Interval, or 8 × Interval for a command refused by ACL), however often
// Sample is called: its last result is reported meanwhile.
func (e *Exporter) Sample(ctx context.Context) []*snapshot.Node { return e.sampler.Sample(ctx) }

// Snapshots returns the last published snapshot of every node, sorted by
// node. Before the first sample each configured address has one with Up
// false and an Err saying so.
func (e *Exporter) Snapshots() []*snapshot.Node { return e.sampler.Snapshots() }

// Close waits for a running sample to end and closes every connection.
// Snapshots stay readable. Close on a nil *Exporter (what New returns
// with an error) does nothing and returns nil.
func (e *Exporter) Close() error {
	if e == nil {
		return nil
	}
	errs := []error{e.sampler.Close()}
	e.closeM.Lock()
	defer e.closeM.Unlock()
	if e.unobserve != nil {
		errs = append(errs, e.unobserve())
		e.unobserve = nil
	}
	return errors.Join(errs...)
}

// lockHolders is the sampler's count of holders per lock group: n, the
// default for 0, none for a negative n.
func lockHolders(n int) int {
	switch {
	case n == 0:
		return sampler.DefaultLockHolders
	case n < 0:
		return 0
	}
	return n
}
