package signals

// Metrics of the instrumented client (instrument) and the hook (hooks), by
// the Go identifier dashboards, alerts and emitters use. Each ID is the
// metric's name.
const (
	LockAcquireDuration       ID = "cachewatch_lock_acquire_duration_seconds"
	LockAttempts              ID = "cachewatch_lock_attempts_total"
	LockHoldDuration          ID = "cachewatch_lock_hold_duration_seconds"
	LocksLost                 ID = "cachewatch_locks_lost_total"
	LockLeaseEnds             ID = "cachewatch_lock_lease_ends_total"
	LockRenewals              ID = "cachewatch_lock_renewals_total"
	CacheLookups              ID = "cachewatch_cache_lookups_total"
	StaleAge                  ID = "cachewatch_cache_stale_age_seconds"
	LoaderRefreshFailures     ID = "cachewatch_loader_refresh_failures_total"
	LoaderConsecutiveFailures ID = "cachewatch_loader_consecutive_failures"
	HardTTLExpired            ID = "cachewatch_cache_hard_ttl_expired_total"
	InvalidatedKeys           ID = "cachewatch_cache_invalidated_keys_total"
	LoaderDuration            ID = "cachewatch_loader_duration_seconds"
	LoaderCalls               ID = "cachewatch_loader_calls_total"
	WriteSkew                 ID = "cachewatch_write_skew_total"
	StaleWritesRefused        ID = "cachewatch_cache_stale_writes_refused_total"
	DuplicateVersionWrites    ID = "cachewatch_duplicate_version_writes_total"
	IdempotencyChecks         ID = "cachewatch_idempotency_checks_total"
	MissBursts                ID = "cachewatch_cache_miss_bursts_total"
	Retries                   ID = "cachewatch_retries_total"
	BackoffDelay              ID = "cachewatch_backoff_delay_seconds"
	CircuitBreakerState       ID = "cachewatch_circuit_breaker_state"
	LoaderInFlight            ID = "cachewatch_loader_in_flight"
	CacheFallbacks            ID = "cachewatch_cache_fallbacks_total"
	KeyGroupOverflow          ID = "cachewatch_keygroup_overflow_total"
)

// Metrics of the hook only: what any go-redis client does on the wire.
const (
	CommandDuration      ID = "cachewatch_redis_command_duration_seconds"
	CommandErrors        ID = "cachewatch_redis_command_errors_total"
	PipelineDuration     ID = "cachewatch_redis_pipeline_duration_seconds"
	ScriptDuration       ID = "cachewatch_redis_script_duration_seconds"
	ScriptNoscript       ID = "cachewatch_redis_script_noscript_total"
	PoolHits             ID = "cachewatch_redis_pool_hits_total"
	PoolMisses           ID = "cachewatch_redis_pool_misses_total"
	PoolTimeouts         ID = "cachewatch_redis_pool_timeouts_total"
	PoolWaits            ID = "cachewatch_redis_pool_waits_total"
	PoolWaitDuration     ID = "cachewatch_redis_pool_wait_seconds_total"
	PoolConnections      ID = "cachewatch_redis_pool_connections"
	PoolStaleConnections ID = "cachewatch_redis_pool_stale_connections_total"
)

// Metrics of the exporter: what a live Redis holds, sampled server-side.
const (
	ExporterUp               ID = "cachewatch_exporter_up"
	ExporterSampleDuration   ID = "cachewatch_exporter_sample_duration_seconds"
	ExporterLastSuccess      ID = "cachewatch_exporter_last_success_timestamp_seconds"
	ExporterKeysScanned      ID = "cachewatch_exporter_keys_scanned_total"
	ExporterScanCycles       ID = "cachewatch_exporter_scan_cycles_total"
	ExporterTruncated        ID = "cachewatch_exporter_sample_truncated_total"
	ExporterErrors           ID = "cachewatch_exporter_sample_errors_total"
	ExporterKeyspaceCoverage ID = "cachewatch_exporter_keyspace_coverage_ratio"
	LocksHeld                ID = "cachewatch_exporter_locks_held"
	LocksWithoutTTL          ID = "cachewatch_exporter_locks_without_ttl"
	LocksLongHeld            ID = "cachewatch_exporter_locks_long_held"
	LocksExpiring            ID = "cachewatch_exporter_locks_expiring"
	LockNotifications        ID = "cachewatch_exporter_lock_notifications"
	LockIndexRepairs         ID = "cachewatch_exporter_lock_index_repairs_total"
	LockNotificationsRefused ID = "cachewatch_exporter_lock_notifications_refused"
	LockHolderHeld           ID = "cachewatch_exporter_lock_holder_held_seconds"
	LocksDeadHolder          ID = "cachewatch_exporter_locks_dead_holder"
	ExporterDataTimestamp    ID = "cachewatch_exporter_data_timestamp_seconds"
	ExporterSampleInterval   ID = "cachewatch_exporter_sample_interval_seconds"
	KeysMemory               ID = "cachewatch_exporter_keys_memory_bytes"
	KeysSampled              ID = "cachewatch_exporter_keys_sampled"
	KeysWithoutTTL           ID = "cachewatch_exporter_keys_without_ttl"
	KeysExpiring             ID = "cachewatch_exporter_keys_expiring"
	ExpirySync               ID = "cachewatch_exporter_expiry_synchronisation"
	ServerKeyspaceHits       ID = "cachewatch_exporter_server_keyspace_hits_total"
	ServerKeyspaceMisses     ID = "cachewatch_exporter_server_keyspace_misses_total"
	ServerExpiredKeys        ID = "cachewatch_exporter_server_expired_keys_total"
	ServerEvictedKeys        ID = "cachewatch_exporter_server_evicted_keys_total"
	ServerMissBursts         ID = "cachewatch_exporter_server_miss_bursts_total"
	ServerCommandCalls       ID = "cachewatch_exporter_server_command_calls_total"
	ServerCommandSeconds     ID = "cachewatch_exporter_server_command_seconds_total"
	ServerCommandFailed      ID = "cachewatch_exporter_server_command_failed_total"
	ServerCommandLatency     ID = "cachewatch_exporter_server_command_latency_seconds"
	ServerCommandDuration    ID = "cachewatch_exporter_server_command_duration_seconds"
	ServerClients            ID = "cachewatch_exporter_server_clients"
	ServerMemoryUsed         ID = "cachewatch_exporter_server_memory_used_bytes"
	ServerMemoryMax          ID = "cachewatch_exporter_server_memory_max_bytes"
	QueueLength              ID = "cachewatch_exporter_queue_length"
	QueueOldestAge           ID = "cachewatch_exporter_queue_oldest_age_seconds"
	StreamGroupPending       ID = "cachewatch_exporter_stream_group_pending"
	StreamGroupsDropped      ID = "cachewatch_exporter_stream_groups_dropped"
	StreamGroupLag           ID = "cachewatch_exporter_stream_group_lag"
	StreamGroupOldestPending ID = "cachewatch_exporter_stream_group_oldest_pending_age_seconds"
	QueueReadsSkipped        ID = "cachewatch_exporter_queue_reads_skipped_total"

	ProbeTargets    ID = "cachewatch_exporter_probe_targets"
	ProbeMaxTargets ID = "cachewatch_exporter_probe_max_targets"
	ProbeRefused    ID = "cachewatch_exporter_probe_refused_total"
)

// Reasons a probe is answered without sampling (label "reason" of
// ProbeRefused): a target, module or credential it cannot use (400), or a
// new target beyond --probe.max-targets (503).
const (
	ProbeRefusedBadRequest = "bad_request"
	ProbeRefusedMaxTargets = "max_targets"
)

// Bucket layouts shared by several histograms. Loopback Redis answers in tens
// of microseconds, so command buckets reach well below a millisecond.
var (
	// commandBuckets spans 25µs to 2.5s: single Redis commands and scripts.
	commandBuckets = []float64{0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
	// waitBuckets spans 0.5ms to 10s: lock acquisition and backoff waits.
	// The 0.05 bucket is the default alert's "p99 > 50 ms is bad" line.
	waitBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	// workBuckets spans 1ms to 5 minutes: lock hold times and recomputes.
	workBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	// ageBuckets spans 100ms to 1 day: the age of served stale data and
	// remaining lock TTLs.
	ageBuckets = []float64{0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400}
	// serverLatencyBuckets are the buckets of Redis's LATENCY HISTOGRAM:
	// powers of two microseconds from 1µs to about 1s (2^20 µs).
	serverLatencyBuckets = func() []float64 {
		out := make([]float64, 21)
		for i := range out {
			out[i] = float64(uint64(1)<<i) / 1e6
		}
		return out
	}()
)

// Horizons of the cumulative "within" label of the keys and locks expiring
// gauges; "inf" counts every key or lock with a TTL.
var withinValues = []string{"1s", "10s", "1m", "10m", "1h", "1d", "inf"}

// The labels the instrument client, the hook and the Redlock adapter set on
// every key-group series: which client (its Name option) and which key group.
const (
	ClientLabel   = "client"
	KeyGroupLabel = "key_group"
)

// The mode label of the lock acquisition signals (LockAttempts,
// LockAcquireDuration) and its values: whether the caller waits for a busy
// lock or asked not to. Contention and acquire-latency alerts count only
// ModeWait: losing the race is the design of a try-once acquisition.
const (
	ModeLabel   = "mode"
	ModeWait    = "wait"
	ModeTryOnce = "try_once"
)

// Outcomes of a lock lease's end (label OutcomeLabel of LockLeaseEnds and
// LockHoldDuration). Refused is the hook's only: the client knows which
// end a refused release follows and counts that end instead.
const (
	OutcomeLabel     = "outcome"
	EndReleased      = "released"
	EndExpired       = "expired"
	EndLost          = "lost"
	EndTakenOver     = "taken_over"
	EndRefused       = "refused"
	EndReleaseFailed = "error"
)

// The causes of a Cache's fallback to the loader (CacheFallbacks' cause
// label): the ways Redis fails. Slowness is not among them.
const (
	FallbackRedisDown  = "redis_down"
	FallbackRedisError = "redis_error"
	FallbackTimeout    = "timeout"
)

// FallbackCauses are the values of CacheFallbacks' cause label.
var FallbackCauses = []string{FallbackRedisDown, FallbackRedisError, FallbackTimeout}

// Label definitions reused across metrics.
var (
	keyGroup = Label{Name: KeyGroupLabel, Doc: "bounded key group from the classifier (user rules, else learnt from the keyspace's structure: identifiers stripped, a name kept only once many keys share it; overflow and keys not learnt yet in `other`)"}
	node     = Label{Name: "node", Doc: "Redis node address as configured or announced by the cluster"}
	client   = Label{Name: ClientLabel, Doc: "the `Name` option of the hook, the instrument client or the Redlock adapter (for a Cache's breaker and limiter, `CacheOptions.Name`, default its client's), default `default`; hooks on one registry need distinct names, instrument clients sharing a name add to the same series"}
	queue    = Label{Name: "queue", Doc: "queue key, from the exporter's configuration (never discovered)"}
	command  = Label{Name: "command", Doc: "lower-case Redis command name; commands outside the known set fold into `other`"}
	lockMode = Label{Name: ModeLabel, Values: []string{ModeWait, ModeTryOnce},
		Doc: "wait: the caller retries a busy lock until it is acquired or the caller gives up; " +
			"try_once: the caller asked not to wait, and a busy answer ends the acquisition by design " +
			"(instrument's LockOptions{Backoff: Backoff{Retries: -1}}, the Redlock adapter's Options.Backoff.Retries < 0; " +
			"the hook infers it on the wire: a busy first attempt not retried with the same key and token within hooks.Options.RetryHorizon " +
			"was a try-once caller's, and is counted once that horizon has passed; hooks.Options.TryOnce names key groups that are always try-once). " +
			"Contention alerts and the lock-wait SLI count only wait"}
	leaseEnd = Label{Name: OutcomeLabel,
		Values: []string{EndReleased, EndExpired, EndLost, EndTakenOver, EndRefused, EndReleaseFailed},
		Doc: "released: its holder released it; expired: it ran out before its holder released it, while the holder was still working (the dangerous end); " +
			"lost: its renewal failed until it ran out; taken_over: another holder took it within the lease (its holder found dead, or the key rewritten); " +
			"refused (the hook only): a release answered 0, the lock was gone or someone else's, which the wire cannot tell apart; " +
			"error: the release got no answer from Redis, and the key ends at its TTL"}
)

// Instrumented client and hook signals.
var clientMetrics = map[ID]*Metric{
	LockAcquireDuration: {
		Name: string(LockAcquireDuration), Kind: Histogram, Unit: "seconds",
		Help: "Time from the first acquire attempt to the outcome, including retries and backoff.",
		Labels: []Label{client, keyGroup, {Name: "outcome", Values: []string{"acquired", "gave_up", "error"},
			Doc: "gave_up: the caller stopped waiting (its retries spent, or its own context ended, during the backoff or an attempt); error: Redis failed. The hook sees gave_up only when the caller's context ends during an attempt"},
			lockMode},
		Buckets: waitBuckets, Emitters: []Emitter{Instrument, Hooks},
		OTel: OTelInstrument{"cachewatch.lock.acquire.duration", OTelHistogram, "s"},
	},
	LockAttempts: {
		Name: string(LockAttempts), Kind: Counter,
		Help: "Single lock acquire attempts (one SET NX each) by result; busy on a waiting caller's first try is contention (a try-once caller's busy answer is the design). An attempt cut off by its caller's own context (deadline, cancellation) got no result and is not counted: its acquisition gave up.",
		Labels: []Label{client, keyGroup,
			{Name: "result", Values: []string{"acquired", "busy", "error"}},
			{Name: "attempt", Values: []string{"first", "retry"},
				Doc: "retry: a later attempt of the same acquisition; the hook tells it by key and owner token, as lock libraries keep their token across retries"},
			lockMode},
		Emitters: []Emitter{Instrument, Hooks},
		OTel:     OTelInstrument{"cachewatch.lock.attempts", OTelCounter, "{attempt}"},
	},
	LockHoldDuration: {
		Name: string(LockHoldDuration), Kind: Histogram, Unit: "seconds",
		Help:    "Time a lock was held, from acquisition to release or loss, by how the lease ended.",
		Labels:  []Label{client, keyGroup, leaseEnd},
		Buckets: workBuckets, Emitters: []Emitter{Instrument},
		OTel: OTelInstrument{"cachewatch.lock.hold.duration", OTelHistogram, "s"},
	},
	LocksLost: {
		Name: string(LocksLost), Kind: Counter,
		Help: "Locks lost before their holder released them: expired, renewal failed, or owned by someone else at release.",
		Labels: []Label{client, keyGroup,
			{Name: "reason", Values: []string{"expired", "renew_failed", "not_owner", "expired_or_not_owner"},
				Doc: "expired_or_not_owner: an owner-checked release answered 0 and the wire cannot tell an expiry from another owner (third-party release scripts)"}},
		Emitters: []Emitter{Instrument, Hooks},
		OTel:     OTelInstrument{"cachewatch.locks.lost", OTelCounter, "{lock}"},
	},
	LockLeaseEnds: {
		Name: string(LockLeaseEnds), Kind: Counter,
		Help:     "Lock leases ended, by outcome: each lease the client took ends once (released, expired, lost, taken_over, error); the hook counts what owner-checked releases and renewals answer on the wire (released, refused, expired where the library's reply tells it, lost).",
		Labels:   []Label{client, keyGroup, leaseEnd},
		Emitters: []Emitter{Instrument, Hooks},
		OTel:     OTelInstrument{"cachewatch.lock.lease.ends", OTelCounter, "{lease}"},
	},
	LockRenewals: {
		Name: string(LockRenewals), Kind: Counter,
		Help:     "Lease renewals (heartbeats) of held locks by result.",
		Labels:   []Label{client, keyGroup, {Name: "result", Values: []string{"renewed", "lost", "error"}}},
		Emitters: []Emitter{Instrument},
		OTel:     OTelInstrument{"cachewatch.lock.renewals", OTelCounter, "{renewal}"},
	},
	CacheLookups: {
		Name: string(CacheLookups), Kind: Counter,
		Help: "Cache lookups by result: hit, stale (served while refreshing), miss, coalesced (waited for another caller's load), fallback (Redis unavailable, loaded directly), error (the caller got an error: the cache availability SLI's failures). The hook counts hits and misses of reads; a read that failed is a failed Redis command, not a lookup.",
		Labels: []Label{client, keyGroup,
			{Name: "result", Values: []string{"hit", "stale", "miss", "coalesced", "fallback", "error"}}},
		Emitters: []Emitter{Instrument, Hooks},
		OTel:     OTelInstrument{"cachewatch.cache.lookups", OTelCounter, "{lookup}"},
	},
	StaleAge: {
		Name: string(StaleAge), Kind: Histogram, Unit: "seconds",
		Help:    "How far past its fresh TTL a served stale value was.",
		Labels:  []Label{client, keyGroup},
		Buckets: ageBuckets, Emitters: []Emitter{Instrument},
		OTel: OTelInstrument{"cachewatch.cache.stale_age", OTelHistogram, "s"},
	},
	LoaderRefreshFailures: {
		Name: string(LoaderRefreshFailures), Kind: Counter,
		Help:     "Background refreshes of stale values whose loader failed.",
		Labels:   []Label{client, keyGroup},
		Emitters: []Emitter{Instrument},
		OTel:     OTelInstrument{"cachewatch.loader.refresh_failures", OTelCounter, "{refresh}"},
	},
	LoaderConsecutiveFailures: {
		Name: string(LoaderConsecutiveFailures), Kind: Gauge,
		Help:     "Longest current run of consecutive failed refreshes among the group's keys; a key leaves it on a success or when its value expires. Growth means stale-forever.",
		Labels:   []Label{client, keyGroup},
		Emitters: []Emitter{Instrument},
		OTel:     OTelInstrument{"cachewatch.loader.consecutive_failures", OTelGauge, "{refresh}"},
	},
	HardTTLExpired: {
		Name: string(HardTTLExpired), Kind: Counter,
		Help:     "Lookups that found only data past its hard TTL and refused to serve it; like cache_lookups_total, one per caller, callers sharing one read each counting one.",
		Labels:   []Label{client, keyGroup},
		Emitters: []Emitter{Instrument},
		OTel:     OTelInstrument{"cachewatch.cache.hard_ttl_expired", OTelCounter, "{lookup}"},
	},
	InvalidatedKeys: {
		Name: string(InvalidatedKeys), Kind: Counter,
		Help:     "Keys removed by invalidation (UNLINK), by how they were named: keys, or a pattern found by SCAN. A Cache's value counts under the key group of the name passed to Fetch, as its lookups do, whatever name it is stored under.",
		Labels:   []Label{client, keyGroup, {Name: "by", Values: []string{"keys", "pattern"}}},
		Emitters: []Emitter{Instrument},
		OTel:     OTelInstrument{"cachewatch.cache.invalidated_keys", OTelCounter, "{key}"},
	},
	LoaderDuration: {
		Name: string(LoaderDuration), Kind: Histogram, Unit: "seconds",
		Help:    "Loader call duration by result; a batch loader call (FetchMany) is observed once in each key group among its keys.",
		Labels:  []Label{client, keyGroup, {Name: "result", Values: []string{"success", "error"}}},
		Buckets: workBuckets, Emitters: []Emitter{Instrument},
		OTel: OTelInstrument{"cachewatch.loader.duration", OTelHistogram, "s"},
	},
	LoaderCalls: {
		Name: string(LoaderCalls), Kind: Counter,
		Help:     "Calls of the loader by result; per refresh this should be 1. A batch loader call (FetchMany) counts once in each key group among its keys, with the call's result: keys it leaves out are not-found answers, not calls or failures of their own.",
		Labels:   []Label{client, keyGroup, {Name: "result", Values: []string{"success", "error", "rejected"}}},
		Emitters: []Emitter{Instrument},
		OTel:     OTelInstrument{"cachewatch.loader.calls", OTelCounter, "{call}"},
	},
	WriteSkew: {
		Name: string(WriteSkew), Kind: Counter,
		Help:     "Versioned writes rejected because a newer version was already stored (older-over-newer prevented).",
		Labels:   []Label{client, keyGroup},
		Emitters: []Emitter{Instrument},
		OTel:     OTelInstrument{"cachewatch.write_skew", OTelCounter, "{write}"},
	},
	StaleWritesRefused: {
		Name: string(StaleWritesRefused), Kind: Counter,
		Help:     "Loaded values not stored because the key was invalidated, or its refresh claim passed to another loader, while the load ran (a stale write prevented).",
		Labels:   []Label{client, keyGroup},
		Emitters: []Emitter{Instrument},
		OTel:     OTelInstrument{"cachewatch.cache.stale_writes_refused", OTelCounter, "{write}"},
	},
	DuplicateVersionWrites: {
		Name: string(DuplicateVersionWrites), Kind: Counter,
		Help:     "Versioned writes of a version already stored: the same work was done twice.",
		Labels:   []Label{client, keyGroup},
		Emitters: []Emitter{Instrument},
		OTel:     OTelInstrument{"cachewatch.duplicate_version_writes", OTelCounter, "{write}"},
	},
	IdempotencyChecks: {
		Name: string(IdempotencyChecks), Kind: Counter,
		Help:     "Idempotency-key checks by result: first (work proceeds) or duplicate (work skipped).",
		Labels:   []Label{client, keyGroup, {Name: "result", Values: []string{"first", "duplicate", "error"}}},
		Emitters: []Emitter{Instrument},
		OTel:     OTelInstrument{"cachewatch.idempotency_checks", OTelCounter, "{check}"},
	},
	MissBursts: {
		Name: string(MissBursts), Kind: Counter,
		Help:     "Windows in which a key group's misses reached the burst threshold: a stampede in progress.",
		Labels:   []Label{client, keyGroup},
		Emitters: []Emitter{Instrument, Hooks},
		OTel:     OTelInstrument{"cachewatch.cache.miss_bursts", OTelCounter, "{burst}"},
	},
	Retries: {
		Name: string(Retries), Kind: Counter,
		Help:     "Retries after a busy lock or refresh claim, each preceded by a full-jitter backoff.",
		Labels:   []Label{client, keyGroup},
		Emitters: []Emitter{Instrument},
		OTel:     OTelInstrument{"cachewatch.retries", OTelCounter, "{retry}"},
	},
	BackoffDelay: {
		Name: string(BackoffDelay), Kind: Histogram, Unit: "seconds",
		Help:    "Backoff delays chosen before retries.",
		Labels:  []Label{client, keyGroup},
		Buckets: waitBuckets, Emitters: []Emitter{Instrument},
		OTel: OTelInstrument{"cachewatch.backoff.delay", OTelHistogram, "s"},
	},
	CircuitBreakerState: {
		Name: string(CircuitBreakerState), Kind: Gauge,
		Help:     "State of a Cache's circuit breaker guarding Redis: 0 closed, 1 half-open, 2 open.",
		Labels:   []Label{client},
		Emitters: []Emitter{Instrument},
		OTel:     OTelInstrument{"cachewatch.circuit_breaker.state", OTelGauge, "{state}"},
	},
	LoaderInFlight: {
		Name: string(LoaderInFlight), Kind: Gauge,
		Help:     "A Cache's direct-to-source fallback calls in flight (bounded by its concurrency limit).",
		Labels:   []Label{client},
		Emitters: []Emitter{Instrument},
		OTel:     OTelInstrument{"cachewatch.loader.in_flight", OTelUpDownCounter, "{call}"},
	},
	CacheFallbacks: {
		Name: string(CacheFallbacks), Kind: Counter,
		Help:     "Lookups a Cache sent to the loader directly because Redis was failing, by the failure: `redis_down` (connections refused, reset or closed), `redis_error` (error replies), `timeout` (round trips unanswered within RedisTimeout, as many times in a row as opened the breaker). While the breaker is open, each counts under the failure that opened it. A slow process, or a lookup waiting in its own queue, never falls back: it waits for Redis.",
		Labels:   []Label{client, {Name: "cause", Values: FallbackCauses}},
		Emitters: []Emitter{Instrument},
		OTel:     OTelInstrument{"cachewatch.cache.fallbacks", OTelCounter, "{lookup}"},
	},
	KeyGroupOverflow: {
		Name: string(KeyGroupOverflow), Kind: Counter,
		Help:     "Classifications folded into the `other` key group because the cap on distinct groups was reached.",
		Emitters: []Emitter{Instrument, Hooks, Exporter},
		OTel:     OTelInstrument{"cachewatch.keygroup.overflow", OTelObservableCounter, "{key}"},
	},
}

// Hook signals: what any go-redis client does on the wire.
var hookMetrics = map[ID]*Metric{
	CommandDuration: {
		Name: string(CommandDuration), Kind: Histogram, Unit: "seconds",
		Help:    "Redis command latency seen by the client, per command; a pipelined command gets an equal share of its pipeline's duration.",
		Labels:  []Label{client, command},
		Buckets: commandBuckets, Emitters: []Emitter{Hooks},
		OTel: OTelInstrument{"cachewatch.redis.command.duration", OTelHistogram, "s"},
	},
	CommandErrors: {
		Name: string(CommandErrors), Kind: Counter,
		Help: "Redis command errors by class; a nil reply is not an error, nor is a NOSCRIPT reply, which go-redis answers by sending the script (it is counted in redis_script_noscript_total).",
		Labels: []Label{client, command, {Name: "error_class",
			Values: []string{"timeout", "connection", "unavailable", "moved", "ask", "oom", "busy", "noperm", "other"},
			Doc:    "timeout: no reply in time (or no pool connection); connection: refused, reset or closed; unavailable: the server answered that it cannot serve (LOADING, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, READONLY). These three, and busy (a script blocks the server), are what the Redis availability SLI counts as failed"}},
		Emitters: []Emitter{Hooks},
		OTel:     OTelInstrument{"cachewatch.redis.command.errors", OTelCounter, "{error}"},
	},
	PipelineDuration: {
		Name: string(PipelineDuration), Kind: Histogram, Unit: "seconds",
		Help:    "Duration of whole pipelines and transactions.",
		Labels:  []Label{client, {Name: "kind", Values: []string{"pipeline", "tx"}}},
		Buckets: commandBuckets, Emitters: []Emitter{Hooks},
		OTel: OTelInstrument{"cachewatch.redis.pipeline.duration", OTelHistogram, "s"},
	},
	ScriptDuration: {
		Name: string(ScriptDuration), Kind: Histogram, Unit: "seconds",
		Help: "EVAL/EVALSHA/FCALL latency per script name (registered, recognised, or `unknown`).",
		Labels: []Label{client, {Name: "script", Doc: "registered or recognised script name, `unknown` otherwise; never a SHA"},
			{Name: "command", Values: []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}}},
		Buckets: commandBuckets, Emitters: []Emitter{Hooks},
		OTel: OTelInstrument{"cachewatch.redis.script.duration", OTelHistogram, "s"},
	},
	ScriptNoscript: {
		Name: string(ScriptNoscript), Kind: Counter,
		Help:     "EVALSHA calls answered NOSCRIPT (script cache flushed or never loaded), usually followed by an EVAL fallback.",
		Labels:   []Label{client, {Name: "script"}},
		Emitters: []Emitter{Hooks},
		OTel:     OTelInstrument{"cachewatch.redis.script.noscript", OTelCounter, "{call}"},
	},
	PoolHits: {
		Name: string(PoolHits), Kind: Counter,
		Help:     "Times a free connection was found in the go-redis pool.",
		Labels:   []Label{client},
		Emitters: []Emitter{Hooks},
		OTel:     OTelInstrument{"cachewatch.redis.pool.hits", OTelObservableCounter, "{hit}"},
	},
	PoolMisses: {
		Name: string(PoolMisses), Kind: Counter,
		Help:     "Times no free connection was in the go-redis pool.",
		Labels:   []Label{client},
		Emitters: []Emitter{Hooks},
		OTel:     OTelInstrument{"cachewatch.redis.pool.misses", OTelObservableCounter, "{miss}"},
	},
	PoolTimeouts: {
		Name: string(PoolTimeouts), Kind: Counter,
		Help:     "Times waiting for a pool connection timed out: connection starvation.",
		Labels:   []Label{client},
		Emitters: []Emitter{Hooks},
		OTel:     OTelInstrument{"cachewatch.redis.pool.timeouts", OTelObservableCounter, "{timeout}"},
	},
	PoolWaits: {
		Name: string(PoolWaits), Kind: Counter,
		Help:     "Times a caller had to wait for a pool connection.",
		Labels:   []Label{client},
		Emitters: []Emitter{Hooks},
		OTel:     OTelInstrument{"cachewatch.redis.pool.waits", OTelObservableCounter, "{wait}"},
	},
	PoolWaitDuration: {
		Name: string(PoolWaitDuration), Kind: Counter, Unit: "seconds",
		Help:     "Total time callers spent waiting for a pool connection.",
		Labels:   []Label{client},
		Emitters: []Emitter{Hooks},
		OTel:     OTelInstrument{"cachewatch.redis.pool.wait", OTelObservableCounter, "s"},
	},
	PoolConnections: {
		Name: string(PoolConnections), Kind: Gauge,
		Help:     "Connections in the go-redis pool by state.",
		Labels:   []Label{client, {Name: "state", Values: []string{"idle", "in_use"}}},
		Emitters: []Emitter{Hooks},
		OTel:     OTelInstrument{"cachewatch.redis.pool.connections", OTelObservableUpDownCounter, "{connection}"},
	},
	PoolStaleConnections: {
		Name: string(PoolStaleConnections), Kind: Counter,
		Help:     "Stale connections removed from the go-redis pool.",
		Labels:   []Label{client},
		Emitters: []Emitter{Hooks},
		OTel:     OTelInstrument{"cachewatch.redis.pool.stale_connections", OTelObservableCounter, "{connection}"},
	},
}

// Exporter signals: what a live Redis holds, sampled server-side.
var exporterMetrics = map[ID]*Metric{
	ExporterUp: {
		Name: string(ExporterUp), Kind: Gauge,
		Help:     "1 when the last sample of the node succeeded, 0 otherwise.",
		Labels:   []Label{node},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.up", OTelObservableGauge, ""},
	},
	ExporterSampleDuration: {
		Name: string(ExporterSampleDuration), Kind: Gauge, Unit: "seconds",
		Help:     "Duration of the last sample of the node.",
		Labels:   []Label{node},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.sample.duration", OTelObservableGauge, "s"},
	},
	ExporterLastSuccess: {
		Name: string(ExporterLastSuccess), Kind: Gauge, Unit: "seconds",
		Help:     "Unix time of the last successful sample of the node.",
		Labels:   []Label{node},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.last_success_timestamp", OTelObservableGauge, "s"},
	},
	ExporterKeysScanned: {
		Name: string(ExporterKeysScanned), Kind: Counter,
		Help:     "Keys returned by SCAN and inspected by the sampler.",
		Labels:   []Label{node},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.keys_scanned", OTelObservableCounter, "{key}"},
	},
	ExporterScanCycles: {
		Name: string(ExporterScanCycles), Kind: Counter,
		Help:     "Complete SCAN passes over the node's keyspace (a pass may span several samples).",
		Labels:   []Label{node},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.scan_cycles", OTelObservableCounter, "{cycle}"},
	},
	ExporterTruncated: {
		Name: string(ExporterTruncated), Kind: Counter,
		Help:     "Samples cut short by the key or time budget; the SCAN cursor resumes on the next sample.",
		Labels:   []Label{node},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.sample.truncated", OTelObservableCounter, "{sample}"},
	},
	ExporterErrors: {
		Name: string(ExporterErrors), Kind: Counter,
		Help: "Sampler errors by stage and class; after noperm, clusterdown or other the other stages are still sampled, auth, timeout, connection and malformed (a reply that is not Redis's, too large, or a SCAN that loops) make the node down.",
		Labels: []Label{node, {Name: "stage", Values: []string{"connect", "info", "scan", "keys", "locks", "notifications", "queues", "latency"}},
			{Name: "class", Values: []string{"noperm", "auth", "timeout", "connection", "clusterdown", "malformed", "other"}}},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.sample.errors", OTelObservableCounter, "{error}"},
	},
	ExporterKeyspaceCoverage: {
		Name: string(ExporterKeyspaceCoverage), Kind: Gauge,
		Help:     "Fraction (0 to 1) of the node's keyspace covered by the keyspace figures being served; below 1 the view is partial.",
		Labels:   []Label{node},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.keyspace.coverage", OTelObservableGauge, "1"},
	},
	LocksHeld: {
		Name: string(LocksHeld), Kind: Gauge,
		Help:     "Lock keys present (matching the lock patterns), as of data_timestamp_seconds{family=\"locks\"}.",
		Labels:   []Label{node, keyGroup},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.locks.held", OTelObservableGauge, "{lock}"},
	},
	LocksWithoutTTL: {
		Name: string(LocksWithoutTTL), Kind: Gauge,
		Help:     "Lock keys with no expiry: held forever if their owner crashed (deadlock risk).",
		Labels:   []Label{node, keyGroup},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.locks.without_ttl", OTelObservableGauge, "{lock}"},
	},
	LocksLongHeld: {
		Name: string(LocksLongHeld), Kind: Gauge,
		Help:     "Locks whose owner token has been seen unchanged for longer than the long-held threshold.",
		Labels:   []Label{node, keyGroup},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.locks.long_held", OTelObservableGauge, "{lock}"},
	},
	LocksExpiring: {
		Name: string(LocksExpiring), Kind: Gauge,
		Help:     "Lock keys of the group whose remaining TTL is at most the given horizon (cumulative; inf counts every lock with a TTL, locks without expiry are counted separately).",
		Labels:   []Label{node, keyGroup, {Name: "within", Values: withinValues}},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.locks.expiring", OTelObservableGauge, "{lock}"},
	},
	LockNotifications: {
		Name: string(LockNotifications), Kind: Gauge,
		Help:     "1 when the node's lock figures are kept exact by keyspace notifications (exact at a moment of every sample), 0 when they come from SCAN passes alone.",
		Labels:   []Label{node},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.lock.notifications", OTelObservableGauge, ""},
	},
	LockNotificationsRefused: {
		Name: string(LockNotificationsRefused), Kind: Gauge,
		Help:     "1 when the node publishes no keyspace events for the lock index and refused the exporter's CONFIG GET or SET of notify-keyspace-events (ACL, a renamed or missing CONFIG): its lock figures come from SCAN passes. 0 otherwise.",
		Labels:   []Label{node},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.lock.notifications_refused", OTelObservableGauge, ""},
	},
	LockIndexRepairs: {
		Name: string(LockIndexRepairs), Kind: Counter,
		Help:     "Lock keys a reconciling SCAN pass found the notification-fed lock index wrong about (a lost notification); 0 while notifications arrive.",
		Labels:   []Label{node},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.lock.index_repairs", OTelObservableCounter, "{key}"},
	},
	LockHolderHeld: {
		Name: string(LockHolderHeld), Kind: Gauge, Unit: "seconds",
		Help: "How long a holder has held its longest-held lock of the group, for the holders of the group's N longest-held locks (N: --locks.holders, default 5): " +
			"who holds a lock, by the service and host its value names (instrument's holder value, bsm/redislock's metadata). Bounded: at most N series per node and lock group, whatever the number of services; keys, tokens and process ids are never labels (`cachewatch locks` and doctor name them).",
		Labels: []Label{node, keyGroup,
			{Name: "service", Doc: "the holder's service (instrument's client `Name`, or redislock metadata's), from the lock's value; `opaque` for a value that names no holder (a bare token)"},
			{Name: "host", Doc: "the holder's host, from the lock's value; empty when it names none"}},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.lock.holder.held", OTelObservableGauge, "s"},
	},
	LocksDeadHolder: {
		Name: string(LocksDeadHolder), Kind: Gauge,
		Help: "Locks held by a dead process: the holder keeps a liveness key (instrument's live locks) and it is gone, so the next waiter takes the lock over before its TTL. " +
			"Checked once per sample, one EXISTS per holder process (at most 2000), not per lock; in a Cluster a node judges only the holders whose liveness key it holds. Locks of other libraries and unmarked locks are never counted.",
		Labels:   []Label{node, keyGroup},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.locks.dead_holder", OTelObservableGauge, "{lock}"},
	},
	ExporterDataTimestamp: {
		Name: string(ExporterDataTimestamp), Kind: Gauge, Unit: "seconds",
		Help: "Unix time of the oldest observation behind a series family's figures (their age is time() minus it). It stays while the family's series are left out (a failing stage), so the age keeps growing.",
		Labels: []Label{node, {Name: "family", Values: []string{"locks", "keys", "server", "queues"},
			Doc: "locks: `locks_*`; keys: `keys_*`, `expiry_synchronisation`; server: `server_*`; queues: `queue_*`, `stream_*`"}},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.data.timestamp", OTelObservableGauge, "s"},
	},
	ExporterSampleInterval: {
		Name: string(ExporterSampleInterval), Kind: Gauge, Unit: "seconds",
		Help:     "The exporter's configured time between samples (--sample.interval), to judge the data's age by.",
		Labels:   []Label{node},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.sample.interval", OTelObservableGauge, "s"},
	},
	KeysSampled: {
		Name: string(KeysSampled), Kind: Gauge,
		Help:     "Keys of the group seen in the last complete SCAN pass.",
		Labels:   []Label{node, keyGroup},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.keys.sampled", OTelObservableGauge, "{key}"},
	},
	KeysWithoutTTL: {
		Name: string(KeysWithoutTTL), Kind: Gauge,
		Help:     "Sampled keys of the group that never expire.",
		Labels:   []Label{node, keyGroup},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.keys.without_ttl", OTelObservableGauge, "{key}"},
	},
	KeysExpiring: {
		Name: string(KeysExpiring), Kind: Gauge,
		Help: "Sampled keys of the group expiring within the given horizon (cumulative).",
		Labels: []Label{node, keyGroup,
			{Name: "within", Values: withinValues}},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.keys.expiring", OTelObservableGauge, "{key}"},
	},
	KeysMemory: {
		Name: string(KeysMemory), Kind: Gauge, Unit: "bytes",
		Help:     "Estimated memory of the group's keys: the mean MEMORY USAGE of the keys sampled in the last complete pass times the group's keys (opt-in: --keys.memory-sample).",
		Labels:   []Label{node, keyGroup},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.keys.memory", OTelObservableGauge, "By"},
	},
	ExpirySync: {
		Name: string(ExpirySync), Kind: Gauge,
		Help:     "Keys of the group expiring in its busiest second divided by the count an even spread would give; far above 1 means missing TTL jitter and a coming stampede.",
		Labels:   []Label{node, keyGroup},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.expiry_synchronisation", OTelObservableGauge, ""},
	},
	ServerKeyspaceHits: {
		Name: string(ServerKeyspaceHits), Kind: Counter,
		Help:     "Server keyspace hits (INFO stats), less the exporter's own lookups.",
		Labels:   []Label{node},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.server.keyspace_hits", OTelObservableCounter, "{hit}"},
	},
	ServerKeyspaceMisses: {
		Name: string(ServerKeyspaceMisses), Kind: Counter,
		Help:     "Server keyspace misses (INFO stats), less the exporter's own lookups.",
		Labels:   []Label{node},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.server.keyspace_misses", OTelObservableCounter, "{miss}"},
	},
	ServerExpiredKeys: {
		Name: string(ServerExpiredKeys), Kind: Counter,
		Help:     "Keys the server expired (INFO stats).",
		Labels:   []Label{node},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.server.expired_keys", OTelObservableCounter, "{key}"},
	},
	ServerEvictedKeys: {
		Name: string(ServerEvictedKeys), Kind: Counter,
		Help:     "Keys the server evicted under maxmemory (INFO stats).",
		Labels:   []Label{node},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.server.evicted_keys", OTelObservableCounter, "{key}"},
	},
	ServerMissBursts: {
		Name: string(ServerMissBursts), Kind: Counter,
		Help:     "Samples in which the server's keyspace misses grew by at least the burst threshold.",
		Labels:   []Label{node},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.server.miss_bursts", OTelObservableCounter, "{burst}"},
	},
	ServerCommandCalls: {
		Name: string(ServerCommandCalls), Kind: Counter,
		Help:     "Calls per command (INFO commandstats) for scripts and the lock and cache commands.",
		Labels:   []Label{node, command},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.server.command.calls", OTelObservableCounter, "{call}"},
	},
	ServerCommandSeconds: {
		Name: string(ServerCommandSeconds), Kind: Counter, Unit: "seconds",
		Help:     "Server time spent per command (INFO commandstats usec).",
		Labels:   []Label{node, command},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.server.command", OTelObservableCounter, "s"},
	},
	ServerCommandFailed: {
		Name: string(ServerCommandFailed), Kind: Counter,
		Help:     "Failed and rejected calls per command (INFO commandstats).",
		Labels:   []Label{node, command},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.server.command.failed", OTelObservableCounter, "{call}"},
	},
	ServerCommandLatency: {
		Name: string(ServerCommandLatency), Kind: Gauge, Unit: "seconds",
		Help:     "Server-side latency percentiles per command (INFO latencystats, Redis 7+).",
		Labels:   []Label{node, command, {Name: "percentile", Values: []string{"p50", "p99", "p99.9"}}},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.server.command.latency", OTelObservableGauge, "s"},
	},
	ServerCommandDuration: {
		Name: string(ServerCommandDuration), Kind: Histogram, Unit: "seconds",
		Help:    "Server-side time per call by command, from LATENCY HISTOGRAM (Redis 7+): the distribution, not only percentiles; the sum is INFO commandstats usec.",
		Labels:  []Label{node, command},
		Buckets: serverLatencyBuckets, Emitters: []Emitter{Exporter},
		OTel: OTelInstrument{"cachewatch.exporter.server.command.duration.seconds", OTelGaugeHistogram, "s"},
	},
	ServerClients: {
		Name: string(ServerClients), Kind: Gauge,
		Help:     "Client connections by state (INFO clients).",
		Labels:   []Label{node, {Name: "state", Values: []string{"connected", "blocked"}}},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.server.clients", OTelObservableGauge, "{connection}"},
	},
	ServerMemoryUsed: {
		Name: string(ServerMemoryUsed), Kind: Gauge, Unit: "bytes",
		Help:     "Memory used by the server (INFO memory used_memory).",
		Labels:   []Label{node},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.server.memory.used", OTelObservableGauge, "By"},
	},
	ServerMemoryMax: {
		Name: string(ServerMemoryMax), Kind: Gauge, Unit: "bytes",
		Help:     "Configured maxmemory; 0 means no limit.",
		Labels:   []Label{node},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.server.memory.max", OTelObservableGauge, "By"},
	},
	QueueLength: {
		Name: string(QueueLength), Kind: Gauge,
		Help:     "Entries in a configured queue key: list length, stream length, or sorted-set (delayed jobs) size.",
		Labels:   []Label{node, queue, {Name: "type", Values: []string{"list", "stream", "zset"}}},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.queue.length", OTelObservableGauge, "{entry}"},
	},
	QueueOldestAge: {
		Name: string(QueueOldestAge), Kind: Gauge, Unit: "seconds",
		Help:     "Age of the oldest entry: first stream ID's time, or how overdue the earliest sorted-set due time is (0 when none is due).",
		Labels:   []Label{node, queue},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.queue.oldest_age", OTelObservableGauge, "s"},
	},
	StreamGroupPending: {
		Name: string(StreamGroupPending), Kind: Gauge,
		Help:     "Messages delivered to a consumer group but not acknowledged.",
		Labels:   []Label{node, queue, {Name: "group", Doc: "consumer group name (bounded by the stream's configuration)"}},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.stream.group.pending", OTelObservableGauge, "{message}"},
	},
	StreamGroupsDropped: {
		Name: string(StreamGroupsDropped), Kind: Gauge,
		Help:     "Consumer groups of a stream not exported because the stream has more than the per-stream group cap.",
		Labels:   []Label{node, queue},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.stream.groups_dropped", OTelObservableGauge, "{group}"},
	},
	StreamGroupLag: {
		Name: string(StreamGroupLag), Kind: Gauge,
		Help:     "Entries not yet delivered to a consumer group (XINFO GROUPS lag).",
		Labels:   []Label{node, queue, {Name: "group"}},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.stream.group.lag", OTelObservableGauge, "{entry}"},
	},
	QueueReadsSkipped: {
		Name: string(QueueReadsSkipped), Kind: Counter,
		Help: "Samples in which a queue read was left out because its last reply exceeded the per-read byte cap; the figures it gives are left out meanwhile.",
		Labels: []Label{node, queue, {Name: "read", Values: []string{"first_entry", "groups", "first_member"},
			Doc: "first_entry: a stream's first entry (XRANGE COUNT 1); groups: XINFO GROUPS; first_member: a sorted set's earliest member"}},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.queue.reads_skipped", OTelObservableCounter, "{sample}"},
	},
	StreamGroupOldestPending: {
		Name: string(StreamGroupOldestPending), Kind: Gauge, Unit: "seconds",
		Help:     "Age of the oldest unacknowledged message of a consumer group.",
		Labels:   []Label{node, queue, {Name: "group"}},
		Emitters: []Emitter{Exporter},
		OTel:     OTelInstrument{"cachewatch.exporter.stream.group.oldest_pending_age", OTelObservableGauge, "s"},
	},
}

// Probe signals: the health of /probe (exporter/probe), on the exporter's
// own /metrics.
var proberMetrics = map[ID]*Metric{
	ProbeTargets: {
		Name: string(ProbeTargets), Kind: Gauge,
		Help:     "Targets the exporter samples because they were probed (/probe) within --probe.idle-timeout.",
		Emitters: []Emitter{Prober},
		OTel:     OTelInstrument{"cachewatch.exporter.probe.targets", OTelObservableGauge, "{target}"},
	},
	ProbeMaxTargets: {
		Name: string(ProbeMaxTargets), Kind: Gauge,
		Help:     "The most targets sampled at once (--probe.max-targets); a probe of a new target beyond it is refused.",
		Emitters: []Emitter{Prober},
		OTel:     OTelInstrument{"cachewatch.exporter.probe.max_targets", OTelObservableGauge, "{target}"},
	},
	ProbeRefused: {
		Name: string(ProbeRefused), Kind: Counter,
		Help:     "Probes answered without metrics: bad_request (400: a target, module or credential it cannot use), max_targets (503: a new target beyond --probe.max-targets). Their targets are not watched.",
		Labels:   []Label{{Name: "reason", Values: []string{ProbeRefusedBadRequest, ProbeRefusedMaxTargets}}},
		Emitters: []Emitter{Prober},
		OTel:     OTelInstrument{"cachewatch.exporter.probe.refused", OTelObservableCounter, "{probe}"},
	},
}

// order is the catalog's stable order: client signals, hook signals,
// exporter signals.
var order = []ID{
	LockAcquireDuration, LockAttempts, LockHoldDuration, LocksLost, LockLeaseEnds, LockRenewals,
	CacheLookups, StaleAge, LoaderRefreshFailures, LoaderConsecutiveFailures, HardTTLExpired,
	InvalidatedKeys, LoaderDuration, LoaderCalls, WriteSkew, StaleWritesRefused, DuplicateVersionWrites, IdempotencyChecks,
	MissBursts, Retries, BackoffDelay, CircuitBreakerState, LoaderInFlight, CacheFallbacks, KeyGroupOverflow,

	CommandDuration, CommandErrors, PipelineDuration, ScriptDuration, ScriptNoscript,
	PoolHits, PoolMisses, PoolTimeouts, PoolWaits, PoolWaitDuration, PoolConnections, PoolStaleConnections,

	ExporterUp, ExporterSampleDuration, ExporterLastSuccess, ExporterKeysScanned, ExporterScanCycles,
	ExporterTruncated, ExporterErrors, ExporterKeyspaceCoverage,
	ExporterDataTimestamp, ExporterSampleInterval,
	LocksHeld, LocksWithoutTTL, LocksLongHeld, LocksExpiring, LockNotifications, LockIndexRepairs,
	LockNotificationsRefused, LockHolderHeld, LocksDeadHolder,
	KeysSampled, KeysWithoutTTL, KeysExpiring, KeysMemory, ExpirySync,
	ServerKeyspaceHits, ServerKeyspaceMisses, ServerExpiredKeys, ServerEvictedKeys, ServerMissBursts,
	ServerCommandCalls, ServerCommandSeconds, ServerCommandFailed, ServerCommandLatency, ServerCommandDuration,
	ServerClients, ServerMemoryUsed, ServerMemoryMax,
	QueueLength, QueueOldestAge, StreamGroupPending, StreamGroupsDropped, StreamGroupLag, StreamGroupOldestPending,
	QueueReadsSkipped,

	ProbeTargets, ProbeMaxTargets, ProbeRefused,
}
