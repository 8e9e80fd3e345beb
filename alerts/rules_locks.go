package alerts

import (
	"time"
)

// locksRecording are the recording rules of the lock tickets: acquire
// latency, attempts, retries and contention of callers that wait for a
// lock (mode="wait"; a try-once acquisition losing the race is its design,
// not contention).
var locksRecording = []recording{{
	record: "key_group:cachewatch_lock_acquire_duration_seconds:p99_rate${rate_window}",
	expr:   `histogram_quantile(0.99, sum by (job, key_group, le) (rate(cachewatch_lock_acquire_duration_seconds_bucket{${service_selector}, mode="wait"}[${rate_window}])))`,
	seen:   "cachewatch_lock_acquire_duration_seconds_count",
}, {
	record: "key_group:cachewatch_lock_attempts:rate${rate_window}",
	expr:   `sum by (job, key_group) (rate(cachewatch_lock_attempts_total{${service_selector}, mode="wait"}[${rate_window}]))`,
	seen:   "cachewatch_lock_attempts_total",
}, {
	record: "key_group:cachewatch_lock_retries:rate${rate_window}",
	expr:   `sum by (job, key_group) (rate(cachewatch_lock_attempts_total{${service_selector}, mode="wait", attempt="retry"}[${rate_window}]))`,
	seen:   "cachewatch_lock_attempts_total",
}, {
	record: "key_group:cachewatch_lock_contention:ratio_rate${rate_window}",
	expr: `sum by (job, key_group) (rate(cachewatch_lock_attempts_total{${service_selector}, mode="wait", attempt="first", result="busy"}[${rate_window}]))
/
sum by (job, key_group) (rate(cachewatch_lock_attempts_total{${service_selector}, mode="wait", attempt="first"}[${rate_window}]))`,
	seen: "cachewatch_lock_attempts_total",
}}

// waiting and tryOnce are lock attempts of callers that wait for the lock
// and of callers that try once.
func waiting(attempt, result, values string) series {
	return series{`cachewatch_lock_attempts_total{` + svc + `, mode="wait", attempt="` + attempt + `", result="` + result + `"}`, values}
}

func tryOnce(attempt, result, values string) series {
	return series{`cachewatch_lock_attempts_total{` + svc + `, mode="try_once", attempt="` + attempt + `", result="` + result + `"}`, values}
}

// acquired is a bucket of the acquire-time histogram of waiting callers'
// acquisitions.
func acquired(le, values string) series {
	return series{`cachewatch_lock_acquire_duration_seconds_bucket{` + svc + `, mode="wait", outcome="acquired", le="` + le + `"}`, values}
}

func lockDefinitions(cfg Config) []definition {
	return []definition{lockAcquireLatency(cfg), lockContention(cfg), locksLost(cfg), lockRenewals(cfg)}
}

func lockAcquireLatency(cfg Config) definition {
	return definition{
		group: groupLocks, name: "CachewatchLockAcquireLatencyHigh",
		query: "key_group:cachewatch_lock_acquire_duration_seconds:p99_rate${rate_window}", by: "job, key_group", op: ">",
		levels: []level{lvl(SeverityWarning, time.Duration(cfg.LockAcquireP99Warning).Seconds(), d(cfg.LockAcquireP99Warning))},
		// Only waiting callers count, and only where some of them had to
		// retry: a slow SET NX on an uncontended lock is a slow client or
		// Redis (see the Redis board), not lock contention.
		guard:       "key_group:cachewatch_lock_attempts:rate${rate_window} > ${min_lock_attempts_per_second:num}\nand\nkey_group:cachewatch_lock_retries:rate${rate_window} > 0",
		guardOn:     "job, key_group",
		seen:        serviceSight("cachewatch_lock_attempts_total", "0x59"),
		forDur:      time.Duration(cfg.LockAcquireFor),
		summary:     "Taking a lock is slow: callers wait on busy locks.",
		description: `Lock acquire p99 of key group {{ $labels.key_group }} in {{ $labels.job }} is {{ $value | humanizeDuration }} (threshold {{threshold}}).`,
		runbook: runbook{
			meaning:  "The 99th percentile of the time from a lock's first acquire attempt to its outcome (retries and backoff included), over callers that wait for the lock (`mode=\"wait\"`; try-once acquisitions do not count), is above the threshold while some of them had to retry: callers queue behind a lock that is held for long or fought over by many. A cause: when waits pass the lock-wait objective's bound, CachewatchLockWaitBudgetBurn pages.",
			resolves: "It resolves when the p99 falls below the threshold or no waiting caller has to retry any more.",
			causes: []string{
				"Many workers want the same lock at once (a hot key, a cache stampede funnelled into a lock).",
				"Backoff too aggressive or too lazy: fixed delays or a large `Backoff.Max` make waiters sleep past the release; no jitter makes them collide again.",
				"The holder works long under the lock (slow source, recompute inside the lock).",
				"Waiters poll the lock instead of reading a stale value (stale-while-revalidate would answer them at once).",
			},
			confirm: "On **" + boardContention + "**, panel *Lock acquire time p50 / p99* by key group, next to *Contention rate (busy first attempts / first attempts)* and *Lock hold time p50 / p99*. If hold time is high too, the work under the lock is the cause; if contention is high, too many callers fight for it. On **" + boardRedis + "**, *Pool waits and timeouts* tells whether waiters also drain the connection pool.",
			fix:     "Serve stale while one caller refreshes (`instrument.NewCache` with `CacheOptions.FreshTTL` and `HardTTL`) instead of locking on every read; keep full-jitter backoff (`LockOptions.Backoff{Base, Max, Retries}`) bounded; split one global lock into per-resource locks; move slow work out of the lock.",
		},
		cases: []testCase{{
			name: "p99 near 100ms",
			series: []series{
				waiting("first", "busy", "0+6x59"), waiting("first", "acquired", "0+54x59"), waiting("retry", "acquired", "0+6x59"),
				acquired("0.05", "0x59"), acquired("0.1", "0+60x59"), acquired("+Inf", "0+60x59"),
				{`cachewatch_lock_acquire_duration_seconds_count{` + svc + `, mode="wait", outcome="acquired"}`, "0+60x59"},
			},
			quietAt: []time.Duration{10 * time.Minute},
			want:    []want{{SeverityWarning, svcLabels, "Lock acquire p99 of key group lock:report:* in api is 99.5ms (threshold 50ms)."}},
		}, {
			name: "healthy: p99 under 5ms",
			series: []series{
				waiting("first", "busy", "0+6x59"), waiting("first", "acquired", "0+54x59"), waiting("retry", "acquired", "0+6x59"),
				acquired("0.005", "0+60x59"), acquired("+Inf", "0+60x59"),
				{`cachewatch_lock_acquire_duration_seconds_count{` + svc + `, mode="wait", outcome="acquired"}`, "0+60x59"},
			},
		}, {
			name: "quiet: p99 near 100ms but nobody had to retry (a slow client, not contention)",
			series: []series{
				waiting("first", "acquired", "0+60x59"),
				acquired("0.05", "0x59"), acquired("0.1", "0+60x59"), acquired("+Inf", "0+60x59"),
				{`cachewatch_lock_acquire_duration_seconds_count{` + svc + `, mode="wait", outcome="acquired"}`, "0+60x59"},
			},
		}, {
			name: "quiet: try-once acquisitions near 1s",
			series: []series{
				tryOnce("first", "busy", "0+30x59"), tryOnce("first", "acquired", "0+30x59"),
				{`cachewatch_lock_acquire_duration_seconds_bucket{` + svc + `, mode="try_once", outcome="acquired", le="0.5"}`, "0x59"},
				{`cachewatch_lock_acquire_duration_seconds_bucket{` + svc + `, mode="try_once", outcome="acquired", le="1"}`, "0+60x59"},
				{`cachewatch_lock_acquire_duration_seconds_bucket{` + svc + `, mode="try_once", outcome="acquired", le="+Inf"}`, "0+60x59"},
			},
		}},
	}
}

func lockContention(cfg Config) definition {
	return definition{
		group: groupLocks, name: "CachewatchLockContentionHigh",
		query: "key_group:cachewatch_lock_contention:ratio_rate${rate_window}", by: "job, key_group", op: ">",
		levels: []level{lvl(SeverityWarning, cfg.LockContentionWarning, pct(cfg.LockContentionWarning))},
		guard:  "key_group:cachewatch_lock_attempts:rate${rate_window} > ${min_lock_attempts_per_second:num}", guardOn: "job, key_group",
		seen:        serviceSight("cachewatch_lock_attempts_total", "0x59"),
		forDur:      time.Duration(cfg.LockContentionFor),
		summary:     "Many first lock attempts of waiting callers find the lock already taken.",
		description: `{{ $value | humanizePercentage }} of first lock attempts of waiting callers on key group {{ $labels.key_group }} in {{ $labels.job }} found the lock busy (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "The share of first acquire attempts (one `SET NX` each) of callers that wait for the lock (`mode=\"wait\"`) that found it held is above the threshold. More than 5 % is bad: the losers retry, sleep and hold connections. " +
				"Try-once acquisitions do not count: a run-once job whose losers skip the work (`LockOptions{Backoff: Backoff{Retries: -1}}` in `instrument`; on the wire, the hook infers it when a busy first attempt is not retried within `hooks.Options.RetryHorizon`) loses the race by design; its busy share is on the dashboard, not in the alert. " +
				"A cause, so a ticket: callers are harmed when waits pass the lock-wait objective's bound, which CachewatchLockWaitBudgetBurn pages.",
			resolves: "It resolves when the share of busy first attempts of waiting callers falls below the threshold.",
			causes: []string{
				"Missing jitter: workers woken by the same event (an expiry, a deploy, a cron) retry in lockstep.",
				"One lock guards too much (a global refresh lock) so unrelated work serialises.",
				"A hot key expires and every caller tries to recompute it (no stale-while-revalidate, no coalescing).",
				"Polling waiters: callers spin on the lock instead of waiting for the value.",
			},
			confirm: "On **" + boardContention + "**, panel *Contention rate (busy first attempts / first attempts)* per key group, with *Retries* and *Backoff delay p50 / p99*. *Cache lookups by result (share)* and *Miss bursts* show whether a stampede drives it; on **" + boardKeyspace + "**, *Expiry synchronisation per key group* shows keys expiring together.",
			fix:     "Use `instrument.Cache.Fetch` (in-process and cross-process coalescing: one refresh per key) rather than a lock per reader; jitter TTLs (`CacheOptions.Jitter`, default 0.1) and keep full-jitter backoff (`LockOptions.Backoff`); lock per resource, not globally.",
		},
		cases: []testCase{{
			name:    "10% busy",
			series:  []series{waiting("first", "busy", "0+6x59"), waiting("first", "acquired", "0+54x59")},
			quietAt: []time.Duration{8 * time.Minute},
			want:    []want{{SeverityWarning, svcLabels, "10% of first lock attempts of waiting callers on key group lock:report:* in api found the lock busy (threshold 5%)."}},
		}, {
			name:   "healthy: under 2% busy",
			series: []series{waiting("first", "busy", "0+1x59"), waiting("first", "acquired", "0+59x59")},
		}, {
			name: "quiet for 20 minutes: a run-once job of four instances, 3 busy attempts in 4, none retried (inferred try-once)",
			series: []series{tryOnce("first", "busy", "0+90x59"), waiting("first", "acquired", "0+30x59"),
				{`cachewatch_lock_acquire_duration_seconds_count{` + svc + `, mode="wait", outcome="acquired"}`, "0+30x59"}},
			neverAt: []time.Duration{10 * time.Minute, 20 * time.Minute},
		}, {
			name:   "quiet: 50% busy but under the traffic floor",
			series: []series{waiting("first", "busy", "0+1x59"), waiting("first", "acquired", "0+1x59")},
		}},
	}
}

func locksLost(cfg Config) definition {
	return definition{
		group: groupLocks, name: "CachewatchLocksLost",
		query: `sum by (job, key_group, reason) (increase(cachewatch_locks_lost_total{${service_selector}}[${event_window}]))`, by: "job, key_group, reason", op: ">=",
		levels:      []level{lvl(SeverityWarning, cfg.LocksLost, num(cfg.LocksLost))},
		forDur:      time.Duration(cfg.LocksLostFor),
		summary:     "Locks were lost before their holder released them: two workers may have run the same critical section.",
		description: `{{ $value | printf "%.0f" }} locks of key group {{ $labels.key_group }} in {{ $labels.job }} were lost before release ({{ $labels.reason }}) in the last ${event_window} (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "A holder found its lock expired, its renewal refused, or another owner at release (`reason`: `expired`, `renew_failed`, `not_owner`, or `expired_or_not_owner` when a third-party release script answered 0), at least the threshold's number of times in the event window. While the lock was gone a second worker could enter: duplicate or interleaved work. One lost lock alone is an event to look into on the dashboard; a ticket opens when it repeats.",
			causes: []string{
				"Lock TTL shorter than the work: the TTL was set to an optimistic estimate and real runs take longer (GC pauses, slow source).",
				"No renewal (heartbeat) for long work.",
				"Redis evicted or failed over and the lock key vanished.",
				"Code releasing with `DEL` instead of the owner-checked script (another worker's lock deleted).",
			},
			confirm: "On **" + boardContention + "**, panel *Lost locks by reason* and *Lock hold time p50 / p99* (compare hold p99 with the lock TTL); *Lease ends by outcome* shows how the other leases of the key group end; *Duplicate version writes* shows the damage. On **" + boardKeyspace + "**, *Locks by remaining TTL* shows how close locks run to expiry, and *Lock holders (longest-held)* which service and host hold them.",
			fix:     "Take locks with `LockOptions.TTL` above the p99.9 of the work, or set `LockOptions.Renew: true` for work that may outlast one TTL (the lock's context is cancelled when the lease is lost, so stop work on `l.Context()`); use `LockOptions.Fencing` and check the fence downstream where a second writer would corrupt data; never release with `DEL`.",
		},
		cases: []testCase{{
			name:    "3 locks expired",
			series:  []series{{`cachewatch_locks_lost_total{` + svc + `, reason="expired"}`, "0x34 3x24"}},
			quietAt: []time.Duration{35 * time.Minute},
			want:    []want{{SeverityWarning, with(svcLabels, "reason", "expired"), "3 locks of key group lock:report:* in api were lost before release (expired) in the last 15m (threshold 3)."}},
		}, {
			name:   "quiet: one lost lock is an event, not a pattern",
			series: []series{{`cachewatch_locks_lost_total{` + svc + `, reason="expired"}`, "0x34 1x24"}},
		}, {
			name:   "healthy: none lost",
			series: []series{{`cachewatch_locks_lost_total{` + svc + `, reason="expired"}`, "0x59"}},
		}},
	}
}

func lockRenewals(cfg Config) definition {
	return definition{
		group: groupLocks, name: "CachewatchLockRenewalsFailing",
		query: `sum by (job, key_group) (increase(cachewatch_lock_renewals_total{${service_selector}, result=~"lost|error"}[${event_window}]))`, by: "job, key_group", op: ">=",
		levels:      []level{lvl(SeverityWarning, cfg.RenewalsFailed, num(cfg.RenewalsFailed))},
		forDur:      time.Duration(cfg.RenewalsFor),
		summary:     "Lease renewals of held locks fail: long work is losing its locks.",
		description: `{{ $value | printf "%.0f" }} lease renewals of key group {{ $labels.key_group }} in {{ $labels.job }} failed in the last ${event_window} (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "The heartbeat that extends a held lock (`LockOptions.Renew`) found the lock gone (`lost`) or could not reach Redis (`error`), at least the threshold's number of times in the event window. The holder's context is cancelled; if it ignores that, it works on without a lock.",
			causes: []string{
				"The renewal interval (TTL/3) is too close to the TTL for the Redis latency or for process pauses (GC, CPU throttling).",
				"Redis unreachable or failing over; the lock key evicted under `maxmemory`.",
				"Another process deleted the lock without an owner check.",
			},
			confirm: "On **" + boardContention + "**, panel *Lease renewals by result* next to *Lost locks by reason*; on **" + boardRedis + "**, *Command errors by class* (timeouts, connection) and *Command latency p99 by command* for `evalsha`.",
			fix:     "Raise `LockOptions.TTL` so that TTL/3 covers Redis hiccups; make the work stop on `l.Context()` cancellation; fix connectivity (`CacheOptions.RedisTimeout`, pool size); set a `noeviction` or `volatile-*` policy so locks are not evicted.",
		},
		cases: []testCase{{
			name:    "4 renewals errored",
			series:  []series{{`cachewatch_lock_renewals_total{` + svc + `, result="error"}`, "0x34 4x24"}},
			quietAt: []time.Duration{38 * time.Minute},
			want:    []want{{SeverityWarning, svcLabels, "4 lease renewals of key group lock:report:* in api failed in the last 15m (threshold 3)."}},
		}, {
			name:   "healthy: renewals succeed",
			series: []series{{`cachewatch_lock_renewals_total{` + svc + `, result="renewed"}`, "0+10x59"}},
		}},
	}
}
