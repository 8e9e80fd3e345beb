// Package snapshot holds what a sample of one Redis node found: the values
// the exporter's sampler publishes, the exporter's collector turns into
// metrics and the doctor judges. Nothing in it talks to Redis.
package snapshot

import (
	"time"

	"github.com/cachewatch/cachewatch/signals"
)

// Node is the published result of one node's last sample.
type Node struct {
	Node string
	// Up is false when the node could not be reached or refused the
	// sampler (and before its first sample); then only the self-metrics
	// below are set, never an older value presented as fresh.
	Up  bool
	Err error
	// Errors lists the stages that failed in this sample, or that were
	// skipped because they failed recently and their backoff has not
	// passed (the other stages were sampled).
	Errors []*StageError

	Time, LastSuccess time.Time
	Duration          time.Duration

	// Server is nil when INFO could not be read.
	Server *ServerStats
	// Hits and Misses are the server's keyspace hits and misses less the
	// lookups of samplers (this one's, other exporters' and doctor runs')
	// since the server started.
	Hits, Misses uint64
	// Pass is the keyspace view of the sample: the last complete
	// whole-keyspace pass or, before one completes, the pass in progress
	// (Pass.Complete false: its key figures are not exported, only its
	// coverage), with the lock figures shown (Pass.LocksAsOf). Nil when
	// there is nothing to show.
	Pass *Pass
	// Coverage is the fraction (0 to 1) of the node's keyspace that Pass's
	// key figures cover: 1 for a complete pass.
	Coverage float64
	Queues   []QueueStats
	// NotQueues maps each configured queue this node holds under a type
	// that is not a queue ("string", "hash", …) or not at all ("none") to
	// that type. Keys another Cluster master owns are not listed.
	NotQueues map[string]string

	// Cumulative self-accounting counters.
	KeysScanned, ScanCycles, Truncated, MissBursts uint64
	ErrorCounts                                    map[ErrorKey]uint64
	// OwnHits and OwnMisses are this sampler's own key lookups since the
	// server (run_id) started.
	OwnHits, OwnMisses uint64

	// LocksAsOf, KeysAsOf, ServerAsOf and QueuesAsOf are when the figures
	// of each series family were taken (the oldest observation they are
	// built from); zero when there are none yet. They are kept while a
	// failing stage's series are left out, so the age keeps growing.
	LocksAsOf, KeysAsOf, ServerAsOf, QueuesAsOf time.Time
	// LockNotifications is true when keyspace notifications keep the lock
	// figures exact; LockRepairs counts the lock keys a reconciling pass
	// found the notification-fed index wrong about.
	LockNotifications bool
	LockRepairs       uint64
	// LockNotificationsRefused is true when the server publishes no
	// keyspace events for the lock index and refused the exporter's CONFIG
	// GET or SET of notify-keyspace-events (ACL, a renamed or missing
	// CONFIG): the lock figures come from SCAN passes.
	LockNotificationsRefused bool
	// QueueReadsSkipped counts, per queue and read, the samples that left
	// out a read whose last reply exceeded the queue reply limit.
	QueueReadsSkipped map[QueueRead]uint64
}

// ErrorKey identifies a counter of sample_errors_total.
type ErrorKey struct {
	Stage Stage
	Class Class
}

// Stage is a step of a node's sample; it is the "stage" label of
// cachewatch_exporter_sample_errors_total.
type Stage string

// Stages of a sample.
const (
	StageConnect Stage = "connect" // PING: the node is reachable and accepts the credentials
	StageInfo    Stage = "info"    // INFO
	StageLatency Stage = "latency" // LATENCY HISTOGRAM (Redis 7+)
	StageScan    Stage = "scan"    // SCAN of the whole-keyspace pass
	StageKeys    Stage = "keys"    // per-key TTL reads of the whole-keyspace pass
	StageLocks   Stage = "locks"   // the lock pass: SCAN … MATCH, lock TTLs and owner tokens
	StageQueues  Stage = "queues"  // the configured queue keys
	// StageNotifications follows lock keys through keyspace notifications
	// (CONFIG GET/SET notify-keyspace-events, the subscription).
	StageNotifications Stage = "notifications"
)

// Class says why a stage failed; it is the "class" label of
// cachewatch_exporter_sample_errors_total.
type Class string

// Error classes.
const (
	ClassNoPerm      Class = "noperm"      // refused by ACL
	ClassAuth        Class = "auth"        // wrong user or password
	ClassTimeout     Class = "timeout"     // no answer in time
	ClassConnection  Class = "connection"  // refused, reset, closed, TLS failure, LOADING/BUSY/MASTERDOWN
	ClassClusterDown Class = "clusterdown" // CLUSTERDOWN: the node answers, the Cluster refuses key commands
	ClassMalformed   Class = "malformed"   // a reply that is not Redis's, that could not be parsed, or too large: the node is down
	ClassOther       Class = "other"
)

// StageError is one failed stage of a node's sample.
type StageError struct {
	Stage Stage
	Class Class
	Err   error
}

// Error names the stage and class, then the cause.
func (e *StageError) Error() string {
	return "exporter: " + string(e.Stage) + " (" + string(e.Class) + "): " + e.Err.Error()
}

// Unwrap returns the underlying error.
func (e *StageError) Unwrap() error { return e.Err }

// Fatal reports whether the node itself is unusable (it cannot be reached,
// refuses the sampler, or answers what is not a Redis reply), as opposed to
// one command being refused: nothing a node that sends garbage says is
// trusted.
func (e *StageError) Fatal() bool {
	return e.Class == ClassAuth || e.Class == ClassTimeout || e.Class == ClassConnection || e.Class == ClassMalformed
}

// ServerStats is what one INFO reply says about a node.
type ServerStats struct {
	RunID   string
	Version string
	// Cluster is true when INFO cluster says cluster_enabled:1.
	Cluster bool

	// KeyspaceHits and KeyspaceMisses are the raw INFO stats figures; the
	// exported ones are corrected by the sampler's own lookups.
	KeyspaceHits, KeyspaceMisses uint64
	ExpiredKeys, EvictedKeys     uint64

	ConnectedClients, BlockedClients uint64
	MemoryUsed, MemoryMax            uint64
	MaxmemoryPolicy                  string

	// Commands holds commandstats for the commands cachewatch reports, by
	// lower-case name (subcommands folded: "script|load" counts as "script").
	Commands map[string]CommandStat
	// Latency holds latencystats percentiles in seconds, by command and
	// percentile ("p50", "p99", "p99.9"). Empty before Redis 7.
	Latency map[string]map[string]float64

	// Role is "master" or "slave" (INFO replication).
	Role string
	// Histograms holds LATENCY HISTOGRAM per reported command (folded as
	// Commands); nil when it was not read (before Redis 7, or refused).
	Histograms map[string]*CommandHistogram
}

// CommandStat is one command's INFO commandstats line.
type CommandStat struct {
	Calls   uint64
	Seconds float64
	Failed  uint64 // failed_calls + rejected_calls
}

// CommandHistogram is the server-side latency distribution of one command
// (or of the commands folded into "other"), from LATENCY HISTOGRAM.
type CommandHistogram struct {
	Count uint64
	// Buckets maps each upper bound in seconds (the catalog's buckets of
	// signals.ServerCommandDuration) to the cumulative count of calls.
	Buckets map[float64]uint64
}

// LatencyBuckets are the buckets of signals.ServerCommandDuration: Redis's
// own, powers of two microseconds.
var LatencyBuckets = signals.ServerCommandDuration.Metric().Buckets

// Cumulative returns the counts in the order of LatencyBuckets.
func (h *CommandHistogram) Cumulative() []uint64 {
	out := make([]uint64, len(LatencyBuckets))
	for i, ub := range LatencyBuckets {
		out[i] = h.Buckets[ub]
	}
	return out
}
