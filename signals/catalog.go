package signals

// Bucket layouts shared by several histograms. Loopback Redis answers in tens
// of microseconds, so command buckets reach well below a millisecond.
var (
	// CommandBuckets spans 25µs to 2.5s: single Redis commands and scripts.
	CommandBuckets = []float64{0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
	// WaitBuckets spans 0.5ms to 10s: lock acquisition and backoff waits.
	// The 0.05 bucket is the DESIGN's "p99 > 50 ms is bad" line.
	WaitBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	// WorkBuckets spans 1ms to 5 minutes: lock hold times and recomputes.
	WorkBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	// AgeBuckets spans 100ms to 1 day: the age of served stale data and
	// remaining lock TTLs.
	AgeBuckets = []float64{0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400}
)

// Label definitions reused across metrics.
var (
	keyGroup = Label{Name: "key_group", Doc: "bounded key group from the classifier (user rules, ID segments stripped, overflow to `other`)"}
	node     = Label{Name: "node", Doc: "Redis node address as configured or announced by the cluster"}
	client   = Label{Name: "client", Doc: "client name given to the hook (option), default `default`"}
	name     = Label{Name: "name", Doc: "name of the breaker or limiter, from configuration"}
	queue    = Label{Name: "queue", Doc: "queue key, from the exporter's configuration (never discovered)"}
	command  = Label{Name: "command", Doc: "lower-case Redis command name; commands outside the known set fold into `other`"}
)

// Instrumented client and hook signals (DESIGN §3).
var (
	LockAcquireDuration = &Metric{
		Name: "cachewatch_lock_acquire_duration_seconds", Kind: Histogram, Unit: "seconds",
		Help:    "Time from the first acquire attempt to the outcome, including retries and backoff.",
		Labels:  []Label{keyGroup, {Name: "outcome", Values: []string{"acquired", "gave_up", "error"}}},
		Buckets: WaitBuckets, Sources: []Source{Instrument, Hooks},
	}
	LockAttempts = &Metric{
		Name: "cachewatch_lock_attempts_total", Kind: Counter,
		Help: "Single lock acquire attempts (one SET NX each) by result; busy on the first try is contention.",
		Labels: []Label{keyGroup,
			{Name: "result", Values: []string{"acquired", "busy", "error"}},
			{Name: "attempt", Values: []string{"first", "retry"},
				Doc: "retry: a later attempt of the same acquisition; the hook tells it by key and owner token, as lock libraries keep their token across retries"}},
		Sources: []Source{Instrument, Hooks},
	}
	LockHoldDuration = &Metric{
		Name: "cachewatch_lock_hold_duration_seconds", Kind: Histogram, Unit: "seconds",
		Help:    "Time a lock was held, from acquisition to release or loss.",
		Labels:  []Label{keyGroup},
		Buckets: WorkBuckets, Sources: []Source{Instrument},
	}
	LocksLost = &Metric{
		Name: "cachewatch_locks_lost_total", Kind: Counter,
		Help: "Locks lost before their holder released them: expired, renewal failed, or owned by someone else at release.",
		Labels: []Label{keyGroup,
			{Name: "reason", Values: []string{"expired", "renew_failed", "not_owner", "expired_or_not_owner"},
				Doc: "expired_or_not_owner: an owner-checked release answered 0 and the wire cannot tell an expiry from another owner (third-party release scripts)"}},
		Sources: []Source{Instrument, Hooks},
	}
	LockRenewals = &Metric{
		Name: "cachewatch_lock_renewals_total", Kind: Counter,
		Help:    "Lease renewals (heartbeats) of held locks by result.",
		Labels:  []Label{keyGroup, {Name: "result", Values: []string{"renewed", "lost", "error"}}},
		Sources: []Source{Instrument},
	}
	CacheLookups = &Metric{
		Name: "cachewatch_cache_lookups_total", Kind: Counter,
		Help: "Cache lookups by result: hit, stale (served while refreshing), miss, coalesced (waited for another caller's load), fallback (Redis unavailable, loaded directly), error.",
		Labels: []Label{keyGroup,
			{Name: "result", Values: []string{"hit", "stale", "miss", "coalesced", "fallback", "error"}}},
		Sources: []Source{Instrument, Hooks},
	}
	StaleAge = &Metric{
		Name: "cachewatch_cache_stale_age_seconds", Kind: Histogram, Unit: "seconds",
		Help:    "How far past its fresh TTL a served stale value was.",
		Labels:  []Label{keyGroup},
		Buckets: AgeBuckets, Sources: []Source{Instrument},
	}
	RefreshFailures = &Metric{
		Name: "cachewatch_cache_refresh_failures_total", Kind: Counter,
		Help:    "Background refreshes of stale values whose loader failed.",
		Labels:  []Label{keyGroup},
		Sources: []Source{Instrument},
	}
	RefreshConsecutiveFailures = &Metric{
		Name: "cachewatch_cache_refresh_consecutive_failures", Kind: Gauge,
		Help:    "Longest current run of consecutive failed refreshes among the group's keys; a key leaves it on a success or when its value expires. Growth means stale-forever.",
		Labels:  []Label{keyGroup},
		Sources: []Source{Instrument},
	}
	HardTTLExpired = &Metric{
		Name: "cachewatch_cache_hard_ttl_expired_total", Kind: Counter,
		Help:    "Lookups that found only data past its hard TTL and refused to serve it.",
		Labels:  []Label{keyGroup},
		Sources: []Source{Instrument},
	}
	InvalidatedKeys = &Metric{
		Name: "cachewatch_cache_invalidated_keys_total", Kind: Counter,
		Help:    "Keys removed by invalidation (UNLINK), by how they were named: keys, or a pattern found by SCAN.",
		Labels:  []Label{keyGroup, {Name: "by", Values: []string{"keys", "pattern"}}},
		Sources: []Source{Instrument},
	}
	RecomputeDuration = &Metric{
		Name: "cachewatch_recompute_duration_seconds", Kind: Histogram, Unit: "seconds",
		Help:    "Loader (source) call duration by result.",
		Labels:  []Label{keyGroup, {Name: "result", Values: []string{"success", "error"}}},
		Buckets: WorkBuckets, Sources: []Source{Instrument},
	}
	SourceCalls = &Metric{
		Name: "cachewatch_source_calls_total", Kind: Counter,
		Help:    "Calls that reached the source (loader) by result; per refresh this should be 1.",
		Labels:  []Label{keyGroup, {Name: "result", Values: []string{"success", "error", "rejected"}}},
		Sources: []Source{Instrument},
	}
	WriteSkew = &Metric{
		Name: "cachewatch_write_skew_total", Kind: Counter,
		Help:    "Versioned writes rejected because a newer version was already stored (older-over-newer prevented).",
		Labels:  []Label{keyGroup},
		Sources: []Source{Instrument},
	}
	StaleWritesRefused = &Metric{
		Name: "cachewatch_cache_stale_writes_refused_total", Kind: Counter,
		Help:    "Loaded values not stored because the key was invalidated, or its lease passed to another loader, while the load ran (a stale write prevented).",
		Labels:  []Label{keyGroup},
		Sources: []Source{Instrument},
	}
	DuplicateRecompute = &Metric{
		Name: "cachewatch_duplicate_recompute_total", Kind: Counter,
		Help:    "Versioned writes of a version already stored: the same work was done twice.",
		Labels:  []Label{keyGroup},
		Sources: []Source{Instrument},
	}
	IdempotencyChecks = &Metric{
		Name: "cachewatch_idempotency_checks_total", Kind: Counter,
		Help:    "Idempotency-key checks by result: first (work proceeds) or duplicate (work skipped).",
		Labels:  []Label{keyGroup, {Name: "result", Values: []string{"first", "duplicate", "error"}}},
		Sources: []Source{Instrument},
	}
	MissBursts = &Metric{
		Name: "cachewatch_cache_miss_bursts_total", Kind: Counter,
		Help:    "Windows in which a key group's misses reached the burst threshold: a stampede in progress.",
		Labels:  []Label{keyGroup},
		Sources: []Source{Instrument, Hooks},
	}
	Retries = &Metric{
		Name: "cachewatch_retries_total", Kind: Counter,
		Help:    "Retries after a busy lock or lease, each preceded by a full-jitter backoff.",
		Labels:  []Label{keyGroup},
		Sources: []Source{Instrument},
	}
	BackoffDelay = &Metric{
		Name: "cachewatch_backoff_delay_seconds", Kind: Histogram, Unit: "seconds",
		Help:    "Backoff delays chosen before retries.",
		Labels:  []Label{keyGroup},
		Buckets: WaitBuckets, Sources: []Source{Instrument},
	}
	CircuitBreakerState = &Metric{
		Name: "cachewatch_circuit_breaker_state", Kind: Gauge,
		Help:    "State of the circuit breaker guarding Redis: 0 closed, 1 half-open, 2 open.",
		Labels:  []Label{name},
		Sources: []Source{Instrument},
	}
	SourceInFlight = &Metric{
		Name: "cachewatch_source_in_flight", Kind: Gauge,
		Help:    "Direct-to-source fallback calls in flight (bounded by the concurrency limit).",
		Labels:  []Label{name},
		Sources: []Source{Instrument},
	}
	KeyGroupOverflow = &Metric{
		Name: "cachewatch_keygroup_overflow_total", Kind: Counter,
		Help:    "Classifications folded into the `other` key group because the cap on distinct groups was reached.",
		Sources: []Source{Instrument, Hooks, Exporter},
	}
)

// Hook signals: what any go-redis client does on the wire.
var (
	CommandDuration = &Metric{
		Name: "cachewatch_redis_command_duration_seconds", Kind: Histogram, Unit: "seconds",
		Help:    "Redis command latency seen by the client, per command; a pipelined command gets an equal share of its pipeline's duration.",
		Labels:  []Label{client, command},
		Buckets: CommandBuckets, Sources: []Source{Hooks},
	}
	CommandErrors = &Metric{
		Name: "cachewatch_redis_command_errors_total", Kind: Counter,
		Help: "Redis command errors by class; a nil reply is not an error.",
		Labels: []Label{client, command, {Name: "error_class",
			Values: []string{"timeout", "connection", "moved", "ask", "noscript", "oom", "busy", "noperm", "other"}}},
		Sources: []Source{Hooks},
	}
	PipelineDuration = &Metric{
		Name: "cachewatch_redis_pipeline_duration_seconds", Kind: Histogram, Unit: "seconds",
		Help:    "Duration of whole pipelines and transactions.",
		Labels:  []Label{client, {Name: "kind", Values: []string{"pipeline", "tx"}}},
		Buckets: CommandBuckets, Sources: []Source{Hooks},
	}
	ScriptDuration = &Metric{
		Name: "cachewatch_redis_script_duration_seconds", Kind: Histogram, Unit: "seconds",
		Help: "EVAL/EVALSHA/FCALL latency per script name (registered, recognised, or `unknown`).",
		Labels: []Label{client, {Name: "script", Doc: "registered or recognised script name, `unknown` otherwise; never a SHA"},
			{Name: "command", Values: []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}}},
		Buckets: CommandBuckets, Sources: []Source{Hooks},
	}
	ScriptNoscript = &Metric{
		Name: "cachewatch_redis_script_noscript_total", Kind: Counter,
		Help:    "EVALSHA calls answered NOSCRIPT (script cache flushed or never loaded), usually followed by an EVAL fallback.",
		Labels:  []Label{client, {Name: "script"}},
		Sources: []Source{Hooks},
	}
	PoolHits = &Metric{
		Name: "cachewatch_redis_pool_hits_total", Kind: Counter,
		Help:    "Times a free connection was found in the go-redis pool.",
		Labels:  []Label{client},
		Sources: []Source{Hooks},
	}
	PoolMisses = &Metric{
		Name: "cachewatch_redis_pool_misses_total", Kind: Counter,
		Help:    "Times no free connection was in the go-redis pool.",
		Labels:  []Label{client},
		Sources: []Source{Hooks},
	}
	PoolTimeouts = &Metric{
		Name: "cachewatch_redis_pool_timeouts_total", Kind: Counter,
		Help:    "Times waiting for a pool connection timed out: connection starvation.",
		Labels:  []Label{client},
		Sources: []Source{Hooks},
	}
	PoolWaits = &Metric{
		Name: "cachewatch_redis_pool_waits_total", Kind: Counter,
		Help:    "Times a caller had to wait for a pool connection.",
		Labels:  []Label{client},
		Sources: []Source{Hooks},
	}
	PoolWaitDuration = &Metric{
		Name: "cachewatch_redis_pool_wait_seconds_total", Kind: Counter, Unit: "seconds",
		Help:    "Total time callers spent waiting for a pool connection.",
		Labels:  []Label{client},
		Sources: []Source{Hooks},
	}
	PoolConnections = &Metric{
		Name: "cachewatch_redis_pool_connections", Kind: Gauge,
		Help:    "Connections in the go-redis pool by state.",
		Labels:  []Label{client, {Name: "state", Values: []string{"idle", "in_use"}}},
		Sources: []Source{Hooks},
	}
	PoolStaleConnections = &Metric{
		Name: "cachewatch_redis_pool_stale_connections_total", Kind: Counter,
		Help:    "Stale connections removed from the go-redis pool.",
		Labels:  []Label{client},
		Sources: []Source{Hooks},
	}
)

// Exporter signals: what a live Redis holds, sampled server-side.
var (
	ExporterUp = &Metric{
		Name: "cachewatch_exporter_up", Kind: Gauge,
		Help:    "1 when the last sample of the node succeeded, 0 otherwise.",
		Labels:  []Label{node},
		Sources: []Source{Exporter},
	}
	ExporterSampleDuration = &Metric{
		Name: "cachewatch_exporter_sample_duration_seconds", Kind: Gauge, Unit: "seconds",
		Help:    "Duration of the last sample of the node.",
		Labels:  []Label{node},
		Sources: []Source{Exporter},
	}
	ExporterLastSuccess = &Metric{
		Name: "cachewatch_exporter_last_success_timestamp_seconds", Kind: Gauge, Unit: "seconds",
		Help:    "Unix time of the last successful sample of the node.",
		Labels:  []Label{node},
		Sources: []Source{Exporter},
	}
	ExporterKeysScanned = &Metric{
		Name: "cachewatch_exporter_keys_scanned_total", Kind: Counter,
		Help:    "Keys returned by SCAN and inspected by the sampler.",
		Labels:  []Label{node},
		Sources: []Source{Exporter},
	}
	ExporterScanCycles = &Metric{
		Name: "cachewatch_exporter_scan_cycles_total", Kind: Counter,
		Help:    "Complete SCAN passes over the node's keyspace (a pass may span several samples).",
		Labels:  []Label{node},
		Sources: []Source{Exporter},
	}
	ExporterTruncated = &Metric{
		Name: "cachewatch_exporter_sample_truncated_total", Kind: Counter,
		Help:    "Samples cut short by the key or time budget; the SCAN cursor resumes on the next sample.",
		Labels:  []Label{node},
		Sources: []Source{Exporter},
	}
	ExporterErrors = &Metric{
		Name: "cachewatch_exporter_sample_errors_total", Kind: Counter,
		Help: "Sampler errors by stage; the other stages are still sampled.",
		Labels: []Label{node, {Name: "stage", Values: []string{"connect", "info", "scan", "keys", "locks", "queues", "latency"}},
			{Name: "class", Values: []string{"noperm", "auth", "timeout", "connection", "clusterdown", "malformed", "other"}}},
		Sources: []Source{Exporter},
	}
	ExporterKeyspaceCoverage = &Metric{
		Name: "cachewatch_exporter_keyspace_coverage_ratio", Kind: Gauge,
		Help:    "Fraction (0 to 1) of the node's keyspace covered by the keyspace figures being served; below 1 the view is partial.",
		Labels:  []Label{node},
		Sources: []Source{Exporter},
	}
	LocksHeld = &Metric{
		Name: "cachewatch_exporter_locks_held", Kind: Gauge,
		Help:    "Lock keys present (matching the lock patterns) in the last complete pass.",
		Labels:  []Label{node, keyGroup},
		Sources: []Source{Exporter},
	}
	LocksWithoutTTL = &Metric{
		Name: "cachewatch_exporter_locks_without_ttl", Kind: Gauge,
		Help:    "Lock keys with no expiry: held forever if their owner crashed (deadlock risk).",
		Labels:  []Label{node, keyGroup},
		Sources: []Source{Exporter},
	}
	LocksLongHeld = &Metric{
		Name: "cachewatch_exporter_locks_long_held", Kind: Gauge,
		Help:    "Locks whose owner token has been seen unchanged for longer than the long-held threshold.",
		Labels:  []Label{node, keyGroup},
		Sources: []Source{Exporter},
	}
	LockRemainingTTL = &Metric{
		Name: "cachewatch_exporter_lock_remaining_ttl_seconds", Kind: Histogram, Unit: "seconds",
		Help:    "Remaining TTL of sampled lock keys (locks without expiry are counted separately).",
		Labels:  []Label{node, keyGroup},
		Buckets: AgeBuckets, Sources: []Source{Exporter},
	}
	KeysSampled = &Metric{
		Name: "cachewatch_exporter_keys_sampled", Kind: Gauge,
		Help:    "Keys of the group seen in the last complete SCAN pass.",
		Labels:  []Label{node, keyGroup},
		Sources: []Source{Exporter},
	}
	KeysWithoutTTL = &Metric{
		Name: "cachewatch_exporter_keys_without_ttl", Kind: Gauge,
		Help:    "Sampled keys of the group that never expire.",
		Labels:  []Label{node, keyGroup},
		Sources: []Source{Exporter},
	}
	KeysExpiring = &Metric{
		Name: "cachewatch_exporter_keys_expiring", Kind: Gauge,
		Help: "Sampled keys of the group expiring within the given horizon (cumulative).",
		Labels: []Label{node, keyGroup,
			{Name: "within", Values: []string{"1s", "10s", "1m", "10m", "1h", "1d", "inf"}}},
		Sources: []Source{Exporter},
	}
	ExpirySync = &Metric{
		Name: "cachewatch_exporter_expiry_synchronisation", Kind: Gauge,
		Help:    "Keys of the group expiring in its busiest second divided by the count an even spread would give; far above 1 means missing TTL jitter and a coming stampede.",
		Labels:  []Label{node, keyGroup},
		Sources: []Source{Exporter},
	}
	ServerKeyspaceHits = &Metric{
		Name: "cachewatch_exporter_server_keyspace_hits_total", Kind: Counter,
		Help:    "Server keyspace hits (INFO stats), less the exporter's own lookups.",
		Labels:  []Label{node},
		Sources: []Source{Exporter},
	}
	ServerKeyspaceMisses = &Metric{
		Name: "cachewatch_exporter_server_keyspace_misses_total", Kind: Counter,
		Help:    "Server keyspace misses (INFO stats), less the exporter's own lookups.",
		Labels:  []Label{node},
		Sources: []Source{Exporter},
	}
	ServerExpiredKeys = &Metric{
		Name: "cachewatch_exporter_server_expired_keys_total", Kind: Counter,
		Help:    "Keys the server expired (INFO stats).",
		Labels:  []Label{node},
		Sources: []Source{Exporter},
	}
	ServerEvictedKeys = &Metric{
		Name: "cachewatch_exporter_server_evicted_keys_total", Kind: Counter,
		Help:    "Keys the server evicted under maxmemory (INFO stats).",
		Labels:  []Label{node},
		Sources: []Source{Exporter},
	}
	ServerMissBursts = &Metric{
		Name: "cachewatch_exporter_server_miss_bursts_total", Kind: Counter,
		Help:    "Samples in which the server's keyspace misses grew by at least the burst threshold.",
		Labels:  []Label{node},
		Sources: []Source{Exporter},
	}
	ServerCommandCalls = &Metric{
		Name: "cachewatch_exporter_server_command_calls_total", Kind: Counter,
		Help:    "Calls per command (INFO commandstats) for scripts and the lock and cache commands.",
		Labels:  []Label{node, command},
		Sources: []Source{Exporter},
	}
	ServerCommandSeconds = &Metric{
		Name: "cachewatch_exporter_server_command_seconds_total", Kind: Counter, Unit: "seconds",
		Help:    "Server time spent per command (INFO commandstats usec).",
		Labels:  []Label{node, command},
		Sources: []Source{Exporter},
	}
	ServerCommandFailed = &Metric{
		Name: "cachewatch_exporter_server_command_failed_total", Kind: Counter,
		Help:    "Failed and rejected calls per command (INFO commandstats).",
		Labels:  []Label{node, command},
		Sources: []Source{Exporter},
	}
	ServerCommandLatency = &Metric{
		Name: "cachewatch_exporter_server_command_latency_seconds", Kind: Gauge, Unit: "seconds",
		Help:    "Server-side latency percentiles per command (INFO latencystats, Redis 7+).",
		Labels:  []Label{node, command, {Name: "percentile", Values: []string{"p50", "p99", "p99.9"}}},
		Sources: []Source{Exporter},
	}
	ServerClients = &Metric{
		Name: "cachewatch_exporter_server_clients", Kind: Gauge,
		Help:    "Client connections by state (INFO clients).",
		Labels:  []Label{node, {Name: "state", Values: []string{"connected", "blocked"}}},
		Sources: []Source{Exporter},
	}
	ServerMemoryUsed = &Metric{
		Name: "cachewatch_exporter_server_memory_used_bytes", Kind: Gauge, Unit: "bytes",
		Help:    "Memory used by the server (INFO memory used_memory).",
		Labels:  []Label{node},
		Sources: []Source{Exporter},
	}
	ServerMemoryMax = &Metric{
		Name: "cachewatch_exporter_server_memory_max_bytes", Kind: Gauge, Unit: "bytes",
		Help:    "Configured maxmemory; 0 means no limit.",
		Labels:  []Label{node},
		Sources: []Source{Exporter},
	}
	QueueLength = &Metric{
		Name: "cachewatch_exporter_queue_length", Kind: Gauge,
		Help:    "Entries in a configured queue key: list length, stream length, or sorted-set (delayed jobs) size.",
		Labels:  []Label{node, queue, {Name: "type", Values: []string{"list", "stream", "zset"}}},
		Sources: []Source{Exporter},
	}
	QueueOldestAge = &Metric{
		Name: "cachewatch_exporter_queue_oldest_age_seconds", Kind: Gauge, Unit: "seconds",
		Help:    "Age of the oldest entry: first stream ID's time, or how overdue the earliest sorted-set due time is (0 when none is due).",
		Labels:  []Label{node, queue},
		Sources: []Source{Exporter},
	}
	StreamGroupPending = &Metric{
		Name: "cachewatch_exporter_stream_group_pending", Kind: Gauge,
		Help:    "Messages delivered to a consumer group but not acknowledged.",
		Labels:  []Label{node, queue, {Name: "group", Doc: "consumer group name (bounded by the stream's configuration)"}},
		Sources: []Source{Exporter},
	}
	StreamGroupsDropped = &Metric{
		Name: "cachewatch_exporter_stream_groups_dropped", Kind: Gauge,
		Help:    "Consumer groups of a stream not exported because the stream has more than the per-stream group cap.",
		Labels:  []Label{node, queue},
		Sources: []Source{Exporter},
	}
	StreamGroupLag = &Metric{
		Name: "cachewatch_exporter_stream_group_lag", Kind: Gauge,
		Help:    "Entries not yet delivered to a consumer group (XINFO GROUPS lag).",
		Labels:  []Label{node, queue, {Name: "group"}},
		Sources: []Source{Exporter},
	}
	StreamGroupOldestPending = &Metric{
		Name: "cachewatch_exporter_stream_group_oldest_pending_age_seconds", Kind: Gauge, Unit: "seconds",
		Help:    "Age of the oldest unacknowledged message of a consumer group.",
		Labels:  []Label{node, queue, {Name: "group"}},
		Sources: []Source{Exporter},
	}
)

// All returns the whole catalog in a stable order: client signals, hook
// signals, exporter signals.
func All() []*Metric {
	return []*Metric{
		LockAcquireDuration, LockAttempts, LockHoldDuration, LocksLost, LockRenewals,
		CacheLookups, StaleAge, RefreshFailures, RefreshConsecutiveFailures, HardTTLExpired,
		InvalidatedKeys, RecomputeDuration, SourceCalls, WriteSkew, StaleWritesRefused, DuplicateRecompute, IdempotencyChecks,
		MissBursts, Retries, BackoffDelay, CircuitBreakerState, SourceInFlight, KeyGroupOverflow,

		CommandDuration, CommandErrors, PipelineDuration, ScriptDuration, ScriptNoscript,
		PoolHits, PoolMisses, PoolTimeouts, PoolWaits, PoolWaitDuration, PoolConnections, PoolStaleConnections,

		ExporterUp, ExporterSampleDuration, ExporterLastSuccess, ExporterKeysScanned, ExporterScanCycles,
		ExporterTruncated, ExporterErrors, ExporterKeyspaceCoverage,
		LocksHeld, LocksWithoutTTL, LocksLongHeld, LockRemainingTTL,
		KeysSampled, KeysWithoutTTL, KeysExpiring, ExpirySync,
		ServerKeyspaceHits, ServerKeyspaceMisses, ServerExpiredKeys, ServerEvictedKeys, ServerMissBursts,
		ServerCommandCalls, ServerCommandSeconds, ServerCommandFailed, ServerCommandLatency,
		ServerClients, ServerMemoryUsed, ServerMemoryMax,
		QueueLength, QueueOldestAge, StreamGroupPending, StreamGroupsDropped, StreamGroupLag, StreamGroupOldestPending,
	}
}
