package alerts

import (
	"time"
)

// keyspaceRecording are the recording rules of the exporter's server-side
// figures.
var keyspaceRecording = []recording{{
	record: "node:cachewatch_exporter_server_keyspace_lookups:rate${rate_window}",
	expr: `sum by (job, target, node) (rate(cachewatch_exporter_server_keyspace_hits_total{${exporter_selector}}[${rate_window}]))
+
sum by (job, target, node) (rate(cachewatch_exporter_server_keyspace_misses_total{${exporter_selector}}[${rate_window}]))`,
}, {
	record: "node:cachewatch_exporter_server_keyspace_hit:ratio_rate${rate_window}",
	expr:   hitRatio("${rate_window}"),
}, {
	record: "node:cachewatch_exporter_server_keyspace_hit:ratio_rate1h",
	expr:   hitRatio("1h"),
}}

func hitRatio(window string) string {
	hits := `sum by (job, target, node) (rate(cachewatch_exporter_server_keyspace_hits_total{${exporter_selector}}[` + window + `]))`
	misses := `sum by (job, target, node) (rate(cachewatch_exporter_server_keyspace_misses_total{${exporter_selector}}[` + window + `]))`
	return hits + "\n/\n(" + hits + " + " + misses + ")"
}

func keyspaceDefinitions(cfg Config) []definition {
	locks, keys, server, queues := exporterSight("locks"), exporterSight("keys"), exporterSight("server"), exporterSight("queues")
	kgNode := with(expNode, "key_group", "lock:report:*")
	byGroup := func(m string) string {
		return "max by (job, target, node, key_group) (" + m + "{${exporter_selector}})"
	}
	lockSeries := func(m, v string) []series {
		return []series{{m + `{` + exp + `, key_group="lock:report:*"}`, v}}
	}
	return []definition{{
		group: groupKeyspace, name: "CachewatchLocksWithoutTTL",
		query: byGroup("cachewatch_exporter_locks_without_ttl"), by: "job, target, node, key_group", op: ">",
		levels:      []level{lvl(SeverityCritical, 0, "0")},
		seen:        locks,
		forDur:      time.Duration(cfg.LocksWithoutTTLFor),
		summary:     "Lock keys without expiry exist: a crashed owner holds them forever.",
		description: `{{ $value | printf "%.0f" }} lock keys of group {{ $labels.key_group }} on {{ $labels.node }} have no TTL.`,
		runbook: runbook{
			meaning: "The exporter found lock keys (matching `--locks.pattern`) with no expiry. If their owner crashed, nobody will ever take these locks again: a deadlock until someone deletes them. This count is exact at the lock figures' timestamp (`cachewatch_exporter_data_timestamp_seconds{family=\"locks\"}`); `cachewatch_exporter_keys_without_ttl` of the same group counts the same keys from a walk of the whole keyspace over minutes and may differ: trust this one.",
			causes: []string{
				"Code taking locks with `SETNX` + `EXPIRE` in two steps and crashing in between, or with `SET NX` and no `PX`.",
				"A `PERSIST` or a `SET` without `KEEPTTL` on a lock key.",
				"A key that matches the lock pattern but is not a lock (tune `--locks.pattern`).",
			},
			confirm: "Start from **" + boardKeyspace + "**, table *Lock holders (longest-held)*: the service and host each group's oldest locks name as their holder, and for how long; " + holdersCLI + " Then panels *Locks without TTL* and *Locks held*.",
			fix:     "Take locks with one `SET key token NX PX ttl` (what `instrument.Client.Lock` does; it refuses a lock without expiry). After checking the owner is gone, delete the stuck key with `UNLINK`.",
		},
		cases: []testCase{{
			name:    "2 locks without TTL",
			series:  lockSeries("cachewatch_exporter_locks_without_ttl", "2x59"),
			quietAt: []time.Duration{4 * time.Minute},
			want:    []want{{SeverityCritical, kgNode, "2 lock keys of group lock:report:* on redis:6379 have no TTL."}},
		}, {
			name:   "healthy: none",
			series: lockSeries("cachewatch_exporter_locks_without_ttl", "0x59"),
		}},
	}, {
		group: groupKeyspace, name: "CachewatchLocksLongHeld",
		query: byGroup("cachewatch_exporter_locks_long_held"), by: "job, target, node, key_group", op: ">",
		levels:      []level{lvl(SeverityWarning, 0, "0")},
		seen:        locks,
		forDur:      time.Duration(cfg.LocksLongHeldFor),
		summary:     "Locks are held by the same owner far longer than expected.",
		description: `{{ $value | printf "%.0f" }} locks of group {{ $labels.key_group }} on {{ $labels.node }} have kept the same owner token past the long-held threshold.`,
		runbook: runbook{
			meaning: "The exporter saw the same owner token on a lock for longer than `--locks.long-held` (default 1m). Either the work under the lock is much longer than designed, or a renewal loop keeps a lock alive for a stuck worker.",
			causes: []string{
				"A stuck holder whose heartbeat (`LockOptions.Renew`) still runs.",
				"Work under the lock that waits on something slow (an external API, a queue).",
				"A lock TTL set far too long for the work, outliving a crashed owner.",
			},
			confirm: "Start from **" + boardKeyspace + "**, table *Lock holders (longest-held)*: the service and host each group's oldest locks name as their holder, and for how long; " + holdersCLI + " Then panels *Long-held locks* and *Locks by remaining TTL*; on **" + boardContention + "**, *Lock hold time p50 / p99* and *Lock acquire time p50 / p99* for waiters piling up.",
			fix:     "Bound the work under a lock with a context deadline; stop renewing when the work is stuck; keep `LockOptions.TTL` close to the expected work time (with renewal for the long tail).",
		},
		cases: []testCase{{
			name:    "1 long-held lock",
			series:  lockSeries("cachewatch_exporter_locks_long_held", "1x59"),
			quietAt: []time.Duration{9 * time.Minute},
			want:    []want{{SeverityWarning, kgNode, "1 locks of group lock:report:* on redis:6379 have kept the same owner token past the long-held threshold."}},
		}, {
			name:   "healthy: none",
			series: lockSeries("cachewatch_exporter_locks_long_held", "0x59"),
		}},
	}, {
		group: groupKeyspace, name: "CachewatchExpirySynchronised",
		query: byGroup("cachewatch_exporter_expiry_synchronisation"), by: "job, target, node, key_group", op: ">",
		levels: []level{lvl(SeverityWarning, cfg.ExpirySync, num(cfg.ExpirySync))},
		guard:  byGroup("cachewatch_exporter_keys_sampled") + " >= ${expiry_sync_min_keys:num}", guardOn: "job, target, node, key_group",
		seen:        keys,
		forDur:      time.Duration(cfg.ExpirySyncFor),
		summary:     "Many keys of a group expire in the same second: a stampede is coming.",
		description: `Keys of group {{ $labels.key_group }} on {{ $labels.node }} expire {{ $value | printf "%.1f" }} times more often in their busiest second than an even spread would give (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "Of the group's sampled keys, those expiring in the busiest second outnumber an even spread by the shown factor. When they expire, every reader misses at once.",
			causes: []string{
				"Missing TTL jitter: keys written in one batch (a warm-up, a cron) with the same TTL.",
				"A fixed expiry time (`EXPIREAT` midnight) for a whole group.",
			},
			confirm: "On **" + boardKeyspace + "**, panels *Expiry synchronisation per key group* and *Keys expiring within 1 s / 10 s / 1 min*; later, *Miss bursts* on **" + boardContention + "**.",
			fix:     "Write TTLs with jitter (`CacheOptions.Jitter`, default 0.1, takes up to 10 % off every TTL at random); spread batch warm-ups; use stale-while-revalidate so an expiry costs one refresh, not a stampede.",
		},
		cases: []testCase{{
			name: "25× synchronised",
			series: append(lockSeries("cachewatch_exporter_expiry_synchronisation", "25x59"),
				lockSeries("cachewatch_exporter_keys_sampled", "500x59")...),
			quietAt: []time.Duration{14 * time.Minute},
			want:    []want{{SeverityWarning, kgNode, "Keys of group lock:report:* on redis:6379 expire 25.0 times more often in their busiest second than an even spread would give (threshold 10)."}},
		}, {
			name: "quiet: synchronised but too few keys",
			series: append(lockSeries("cachewatch_exporter_expiry_synchronisation", "25x59"),
				lockSeries("cachewatch_exporter_keys_sampled", "20x59")...),
		}, {
			name: "healthy: spread",
			series: append(lockSeries("cachewatch_exporter_expiry_synchronisation", "1.2x59"),
				lockSeries("cachewatch_exporter_keys_sampled", "500x59")...),
		}},
	}, {
		group: groupKeyspace, name: "CachewatchServerHitRatioDrop",
		query: "node:cachewatch_exporter_server_keyspace_hit:ratio_rate1h - node:cachewatch_exporter_server_keyspace_hit:ratio_rate${rate_window}", by: "job, target, node", op: ">",
		levels: []level{lvl(SeverityWarning, cfg.HitRatioDrop, pct(cfg.HitRatioDrop))},
		guard:  "node:cachewatch_exporter_server_keyspace_lookups:rate${rate_window} > ${min_lookups_per_second:num}", guardOn: "job, target, node",
		seen:        server,
		forDur:      time.Duration(cfg.HitRatioDropFor),
		summary:     "The Redis server's hit ratio dropped sharply.",
		description: `The keyspace hit ratio of {{ $labels.node }} is {{ $value | humanizePercentage }} below its last-hour average (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "The server-side hit ratio over 5 minutes fell below its 1-hour average by more than the threshold (in ratio points). Requests that used to hit now go to the source.",
			causes: []string{
				"A mass invalidation, a `FLUSHDB`, a restart without persistence, a failover to a cold replica.",
				"Evictions under `maxmemory` (check *Expired and evicted keys*).",
				"A deploy that changed key names (new prefix, new version in the key).",
				"Synchronised expiry of a large group.",
			},
			confirm: "On **" + boardKeyspace + "**, panels *Server hit ratio* and *Server miss bursts*, *Expired and evicted keys* and *Memory used and limit*; on **" + boardContention + "**, *Cache lookups by result (share)* by key group shows which group misses.",
			fix:     "Give Redis memory or a fitting eviction policy; warm the cache before switching traffic; jitter TTLs; invalidate narrowly (`Invalidate` by key rather than `InvalidateMatch`).",
		},
		cases: []testCase{{
			name: "90% then 10%",
			series: []series{
				{`cachewatch_exporter_server_keyspace_hits_total{` + exp + `}`, "0+54x29 1572+6x29"},
				{`cachewatch_exporter_server_keyspace_misses_total{` + exp + `}`, "0+6x29 228+54x29"},
			},
			evalAt:  50 * time.Minute,
			quietAt: []time.Duration{30 * time.Minute},
			want:    []want{{SeverityWarning, expNode, "The keyspace hit ratio of redis:6379 is 46.4% below its last-hour average (threshold 20%)."}},
		}, {
			name: "healthy: steady 90%",
			series: []series{
				{`cachewatch_exporter_server_keyspace_hits_total{` + exp + `}`, "0+54x59"},
				{`cachewatch_exporter_server_keyspace_misses_total{` + exp + `}`, "0+6x59"},
			},
			evalAt: 50 * time.Minute,
		}},
	}, {
		group: groupKeyspace, name: "CachewatchQueueOldestAgeHigh",
		query: `max by (job, target, node, queue) (cachewatch_exporter_queue_oldest_age_seconds{${exporter_selector}})`, by: "job, target, node, queue", op: ">",
		levels:      []level{lvl(SeverityWarning, time.Duration(cfg.QueueOldestAge).Seconds(), d(cfg.QueueOldestAge))},
		seen:        queues,
		forDur:      time.Duration(cfg.QueueOldestAgeFor),
		summary:     "The oldest message of a queue is old: workers do not keep up.",
		description: `The oldest entry of queue {{ $labels.queue }} on {{ $labels.node }} is {{ $value | humanizeDuration }} old (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "The first entry of a configured queue (stream, list with timestamps, or due delayed job in a sorted set) is older than the threshold: consumers are stuck, too few, or slowed by lock waits.",
			causes: []string{
				"Workers blocked on contended locks or on a slow source.",
				"Crashed consumers, or too few of them for the arrival rate.",
				"Poison messages retried forever without backoff.",
			},
			confirm: "On **" + boardKeyspace + "**, panels *Queue length* and *Oldest entry age*, with *Stream lag and pending per consumer group*; on **" + boardContention + "**, *Lock acquire time p50 / p99* and *Retries* and *Backoff delay p50 / p99*.",
			fix:     "Scale consumers; bound retries and move poison messages aside; remove lock waits from the consumer path (idempotency keys with `FirstSeen` instead of locks; versioned writes with `SetVersioned`).",
		},
		cases: []testCase{{
			name:    "15 minutes old",
			series:  []series{{`cachewatch_exporter_queue_oldest_age_seconds{` + exp + `, queue="orders"}`, "900x59"}},
			quietAt: []time.Duration{9 * time.Minute},
			want:    []want{{SeverityWarning, with(expNode, "queue", "orders"), "The oldest entry of queue orders on redis:6379 is 15m 0s old (threshold 5m)."}},
		}, {
			name:   "healthy: 5 seconds",
			series: []series{{`cachewatch_exporter_queue_oldest_age_seconds{` + exp + `, queue="orders"}`, "5x59"}},
		}},
	}, {
		group: groupKeyspace, name: "CachewatchStreamLagHigh",
		query: `max by (job, target, node, queue, group) (cachewatch_exporter_stream_group_lag{${exporter_selector}})`, by: "job, target, node, queue, group", op: ">",
		levels:      []level{lvl(SeverityWarning, cfg.StreamLag, num(cfg.StreamLag))},
		seen:        queues,
		forDur:      time.Duration(cfg.StreamFor),
		summary:     "A stream consumer group lags far behind the stream.",
		description: `Consumer group {{ $labels.group }} of stream {{ $labels.queue }} on {{ $labels.node }} has {{ $value | printf "%.0f" }} entries not yet delivered (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "Entries were added to the stream that the group has not read yet (XINFO GROUPS lag): the group's consumers read slower than producers write.",
			causes: []string{
				"Too few consumers, or consumers blocked on locks or a slow source.",
				"A producer burst (retries without backoff, duplicate enqueues).",
			},
			confirm: "On **" + boardKeyspace + "**, panels *Stream lag and pending per consumer group* and *Queue length*.",
			fix:     "Add consumers to the group; dedupe producers with idempotency keys (`FirstSeen`); bound producer retries.",
		},
		cases: []testCase{{
			name:    "5000 behind",
			series:  []series{{`cachewatch_exporter_stream_group_lag{` + exp + `, queue="orders", group="billing"}`, "5000x59"}},
			quietAt: []time.Duration{9 * time.Minute},
			want:    []want{{SeverityWarning, with(expNode, "queue", "orders", "group", "billing"), "Consumer group billing of stream orders on redis:6379 has 5000 entries not yet delivered (threshold 1000)."}},
		}, {
			name:   "healthy: 3 behind",
			series: []series{{`cachewatch_exporter_stream_group_lag{` + exp + `, queue="orders", group="billing"}`, "3x59"}},
		}},
	}, {
		group: groupKeyspace, name: "CachewatchStreamPendingStuck",
		query: `max by (job, target, node, queue, group) (cachewatch_exporter_stream_group_oldest_pending_age_seconds{${exporter_selector}})`, by: "job, target, node, queue, group", op: ">",
		levels:      []level{lvl(SeverityWarning, time.Duration(cfg.StreamPendingAge).Seconds(), d(cfg.StreamPendingAge))},
		seen:        queues,
		forDur:      time.Duration(cfg.StreamFor),
		summary:     "A stream message was delivered but not acknowledged for a long time.",
		description: `The oldest unacknowledged message of group {{ $labels.group }} on stream {{ $labels.queue }} ({{ $labels.node }}) is {{ $value | humanizeDuration }} old (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "A consumer took a message and never acknowledged it: the consumer crashed, hangs, or fails on it every time.",
			causes: []string{
				"A crashed consumer whose pending entries nobody claims (no `XAUTOCLAIM`).",
				"A consumer stuck on a lock or a slow source.",
				"A poison message failing on every attempt.",
			},
			confirm: "On **" + boardKeyspace + "**, panels *Stream lag and pending per consumer group* and *Oldest pending message age*.",
			fix:     "Claim idle entries (`XAUTOCLAIM` with a min-idle time) in the consumers; dead-letter messages after a bounded number of deliveries; make handlers idempotent (`FirstSeen`) so a claimed message can run again safely.",
		},
		cases: []testCase{{
			name:    "10 minutes pending",
			series:  []series{{`cachewatch_exporter_stream_group_oldest_pending_age_seconds{` + exp + `, queue="orders", group="billing"}`, "600x59"}},
			quietAt: []time.Duration{9 * time.Minute},
			want:    []want{{SeverityWarning, with(expNode, "queue", "orders", "group", "billing"), "The oldest unacknowledged message of group billing on stream orders (redis:6379) is 10m 0s old (threshold 5m)."}},
		}, {
			name:   "healthy: 2 seconds",
			series: []series{{`cachewatch_exporter_stream_group_oldest_pending_age_seconds{` + exp + `, queue="orders", group="billing"}`, "2x59"}},
		}},
	}}
}

// holdersCLI is where the lock runbooks go from the holders table: the
// commands that name each lock's key and process.
const holdersCLI = "`cachewatch locks --redis.url …` lists every lock with its key, holder (service, host, pid), held for, TTL left and `alive?` — `no` when the holder's process is gone (its liveness key expired: the next waiter takes a live lock over, so a `no` that stays names a lock nobody waits for, or one without TTL that only deleting frees), `yes` while it runs, `unknown` for other libraries' and unmarked locks — and `cachewatch doctor` names the holder of each lock it flags; panel *Locks held by a dead holder* counts the `no`s per group."
