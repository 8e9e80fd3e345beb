package alerts

import (
	"strings"
	"time"

	"github.com/cachewatch/cachewatch/signals"
)

// The dashboards the runbooks point at (package dashboards builds them).
const (
	boardContention = "cachewatch / Service contention"
	boardRedis      = "cachewatch / Redis commands & pool"
	boardKeyspace   = "cachewatch / Keyspace & locks"
)

// Labels of the fixtures' series.
const (
	svc = `job="api", key_group="lock:report:*"`
	cli = `job="api", instance="api-0:8080", client="orders"`
	exp = `job="cachewatch-exporter", instance="exporter:9121", node="redis:6379"`
)

var (
	svcLabels = map[string]string{"job": "api", "key_group": "lock:report:*"}
	expNode   = map[string]string{"job": "cachewatch-exporter", "node": "redis:6379"}
)

func with(base map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(base)+len(kv)/2)
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func d(x interface{ String() string }) string { return x.String() }

// lvl is a level that compares the value with threshold, shown as text.
func lvl(severity string, threshold float64, text string) level {
	return level{severity: severity, threshold: threshold, text: text}
}

// waiting and tryOnce are lock attempts of callers that wait for the lock
// and of callers that try once.
func waiting(attempt, result, values string) series {
	return series{signals.LockAttempts.String() + `{` + svc + `, mode="wait", attempt="` + attempt + `", result="` + result + `"}`, values}
}

func tryOnce(attempt, result, values string) series {
	return series{signals.LockAttempts.String() + `{` + svc + `, mode="try_once", attempt="` + attempt + `", result="` + result + `"}`, values}
}

// definitions returns every alert condition. Metric names come from the
// signals catalog; thresholds and `for:` durations from cfg.
func definitions(cfg Config) []definition {
	var defs []definition
	for _, part := range [][]definition{lockDefinitions(cfg), cacheDefinitions(cfg), redisDefinitions(cfg), keyspaceDefinitions(cfg), exporterDefinitions(cfg), freshnessDefinitions(cfg)} {
		defs = append(defs, part...)
	}
	return defs
}

func lockDefinitions(cfg Config) []definition {
	s := cfg.ServiceSelector
	win := d(cfg.EventWindow)
	r := names(cfg)
	return []definition{{
		group: groupLocks, name: "CachewatchLockAcquireLatencyHigh",
		query: r.lockAcquireP99, by: "job, key_group", op: ">",
		levels: []level{
			lvl(SeverityWarning, time.Duration(cfg.LockAcquireP99Warning).Seconds(), d(cfg.LockAcquireP99Warning)),
			lvl(SeverityCritical, time.Duration(cfg.LockAcquireP99Critical).Seconds(), d(cfg.LockAcquireP99Critical)),
		},
		// Only waiting callers count, and only where some of them had to
		// retry: a slow SET NX on an uncontended lock is a slow client or
		// Redis (see the Redis board), not lock contention.
		guard:       r.lockAttempts + " > " + num(cfg.MinLockAttemptsPerSecond) + " and " + r.lockRetries + " > 0",
		guardOn:     "job, key_group",
		seen:        serviceSight(cfg, signals.LockAttempts.String(), "0x59"),
		forDur:      time.Duration(cfg.LockAcquireFor),
		summary:     "Taking a lock is slow: callers wait on busy locks.",
		description: `Lock acquire p99 of key group {{ $labels.key_group }} in {{ $labels.job }} is {{ $value | humanizeDuration }} (threshold {{threshold}}).`,
		runbook: runbook{
			meaning:  "The 99th percentile of the time from a lock's first acquire attempt to its outcome (retries and backoff included), over callers that wait for the lock (`mode=\"wait\"`; try-once acquisitions do not count), is above the threshold while some of them had to retry: callers queue behind a lock that is held for long or fought over by many.",
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
				{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, mode="wait", outcome="acquired", le="0.05"}`, "0x59"},
				{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, mode="wait", outcome="acquired", le="0.1"}`, "0+60x59"},
				{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, mode="wait", outcome="acquired", le="+Inf"}`, "0+60x59"},
			},
			quietAt: []time.Duration{10 * time.Minute},
			want:    []want{{SeverityWarning, svcLabels, "Lock acquire p99 of key group lock:report:* in api is 99.5ms (threshold 50ms)."}},
		}, {
			name: "p99 near 1s",
			series: []series{
				waiting("first", "busy", "0+6x59"), waiting("first", "acquired", "0+54x59"), waiting("retry", "acquired", "0+6x59"),
				{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, mode="wait", outcome="acquired", le="0.5"}`, "0x59"},
				{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, mode="wait", outcome="acquired", le="1"}`, "0+60x59"},
				{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, mode="wait", outcome="acquired", le="+Inf"}`, "0+60x59"},
			},
			want: []want{
				{SeverityWarning, svcLabels, "Lock acquire p99 of key group lock:report:* in api is 995ms (threshold 50ms)."},
				{SeverityCritical, svcLabels, "Lock acquire p99 of key group lock:report:* in api is 995ms (threshold 500ms)."},
			},
		}, {
			name: "healthy: p99 under 5ms",
			series: []series{
				waiting("first", "busy", "0+6x59"), waiting("first", "acquired", "0+54x59"), waiting("retry", "acquired", "0+6x59"),
				{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, mode="wait", outcome="acquired", le="0.005"}`, "0+60x59"},
				{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, mode="wait", outcome="acquired", le="+Inf"}`, "0+60x59"},
			},
		}, {
			name: "quiet: p99 near 100ms but nobody had to retry (a slow client, not contention)",
			series: []series{
				waiting("first", "acquired", "0+60x59"),
				{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, mode="wait", outcome="acquired", le="0.05"}`, "0x59"},
				{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, mode="wait", outcome="acquired", le="0.1"}`, "0+60x59"},
				{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, mode="wait", outcome="acquired", le="+Inf"}`, "0+60x59"},
			},
		}, {
			name: "quiet: try-once acquisitions near 1s",
			series: []series{
				tryOnce("first", "busy", "0+30x59"), tryOnce("first", "acquired", "0+30x59"),
				{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, mode="try_once", outcome="acquired", le="0.5"}`, "0x59"},
				{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, mode="try_once", outcome="acquired", le="1"}`, "0+60x59"},
				{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, mode="try_once", outcome="acquired", le="+Inf"}`, "0+60x59"},
			},
		}},
	}, {
		group: groupLocks, name: "CachewatchLockContentionHigh",
		query: r.lockContention, by: "job, key_group", op: ">",
		levels: []level{
			lvl(SeverityWarning, cfg.LockContentionWarning, pct(cfg.LockContentionWarning)),
			lvl(SeverityCritical, cfg.LockContentionCritical, pct(cfg.LockContentionCritical)),
		},
		guard: r.lockAttempts + " > " + num(cfg.MinLockAttemptsPerSecond), guardOn: "job, key_group",
		seen:        serviceSight(cfg, signals.LockAttempts.String(), "0x59"),
		forDur:      time.Duration(cfg.LockContentionFor),
		summary:     "Many first lock attempts find the lock already taken.",
		description: `{{ $value | humanizePercentage }} of first lock attempts on key group {{ $labels.key_group }} in {{ $labels.job }} found the lock busy (threshold {{threshold}}).`,
		runbook: runbook{
			meaning:  "The share of first acquire attempts (one `SET NX` each) of callers that wait for the lock (`mode=\"wait\"`) that found it held is above the threshold. More than 5 % is bad: the losers retry, sleep and hold connections. Try-once acquisitions (`LockOptions{Backoff: Backoff{Retries: -1}}`, a run-once job whose losers are meant to skip the work) do not count: their busy share is on the dashboard, not in the alert.",
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
			name: "10% busy",
			series: []series{
				waiting("first", "busy", "0+6x59"),
				waiting("first", "acquired", "0+54x59"),
			},
			quietAt: []time.Duration{8 * time.Minute},
			want:    []want{{SeverityWarning, svcLabels, "10% of first lock attempts on key group lock:report:* in api found the lock busy (threshold 5%)."}},
		}, {
			name: "50% busy",
			series: []series{
				waiting("first", "busy", "0+30x59"),
				waiting("first", "acquired", "0+30x59"),
			},
			want: []want{
				{SeverityWarning, svcLabels, "50% of first lock attempts on key group lock:report:* in api found the lock busy (threshold 5%)."},
				{SeverityCritical, svcLabels, "50% of first lock attempts on key group lock:report:* in api found the lock busy (threshold 25%)."},
			},
		}, {
			name: "healthy: under 2% busy",
			series: []series{
				waiting("first", "busy", "0+1x59"),
				waiting("first", "acquired", "0+59x59"),
			},
		}, {
			name:   "quiet: a run-once job lock, 50% of its try-once attempts busy",
			series: []series{tryOnce("first", "busy", "0+30x59"), tryOnce("first", "acquired", "0+30x59")},
		}, {
			name: "quiet: 50% busy but under the traffic floor",
			series: []series{
				waiting("first", "busy", "0+1x59"),
				waiting("first", "acquired", "0+1x59"),
			},
		}},
	}, {
		group: groupLocks, name: "CachewatchLocksLost",
		query: sumBy("job, key_group, reason", increase(signals.LocksLost.String(), s, win)), by: "job, key_group, reason", op: ">",
		levels:      []level{lvl(SeverityWarning, 0, "0")},
		forDur:      time.Duration(cfg.LocksLostFor),
		summary:     "Locks were lost before their holder released them: two workers may have run the same critical section.",
		description: `{{ $value | humanize }} locks of key group {{ $labels.key_group }} in {{ $labels.job }} were lost before release ({{ $labels.reason }}) in the last ` + win + `.`,
		runbook: runbook{
			meaning: "A holder found its lock expired, its renewal refused, or another owner at release (`reason`: `expired`, `renew_failed`, `not_owner`, or `expired_or_not_owner` when a third-party release script answered 0). While the lock was gone a second worker could enter: duplicate or interleaved work.",
			causes: []string{
				"Lock TTL shorter than the work: the TTL was set to an optimistic estimate and real runs take longer (GC pauses, slow source).",
				"No renewal (heartbeat) for long work.",
				"Redis evicted or failed over and the lock key vanished.",
				"Code releasing with `DEL` instead of the owner-checked script (another worker's lock deleted).",
			},
			confirm: "On **" + boardContention + "**, panel *Lost locks by reason* and *Lock hold time p50 / p99* (compare hold p99 with the lock TTL); *Duplicate recomputes* shows the damage. On **" + boardKeyspace + "**, *Locks by remaining TTL* shows how close locks run to expiry.",
			fix:     "Take locks with `LockOptions.TTL` above the p99.9 of the work, or set `LockOptions.Renew: true` for work that may outlast one TTL (the lock's context is cancelled when the lease is lost, so stop work on `l.Context()`); use `LockOptions.Fencing` and check the fence downstream where a second writer would corrupt data; never release with `DEL`.",
		},
		cases: []testCase{{
			name:    "one lock expired",
			series:  []series{{signals.LocksLost.String() + `{` + svc + `, reason="expired"}`, "0x34 1x24"}},
			quietAt: []time.Duration{35 * time.Minute},
			want:    []want{{SeverityWarning, with(svcLabels, "reason", "expired"), "1 locks of key group lock:report:* in api were lost before release (expired) in the last 15m."}},
		}, {
			name:   "healthy: none lost",
			series: []series{{signals.LocksLost.String() + `{` + svc + `, reason="expired"}`, "0x59"}},
		}},
	}, {
		group: groupLocks, name: "CachewatchLockRenewalsFailing",
		query: sumBy("job, key_group", increase(signals.LockRenewals.String(), s, win, `result=~"lost|error"`)), by: "job, key_group", op: ">",
		levels:      []level{lvl(SeverityWarning, 0, "0")},
		forDur:      time.Duration(cfg.RenewalsFor),
		summary:     "Lease renewals of held locks fail: long work is losing its locks.",
		description: `{{ $value | humanize }} lease renewals of key group {{ $labels.key_group }} in {{ $labels.job }} failed in the last ` + win + `.`,
		runbook: runbook{
			meaning: "The heartbeat that extends a held lock (`LockOptions.Renew`) found the lock gone (`lost`) or could not reach Redis (`error`). The holder's context is cancelled; if it ignores that, it works on without a lock.",
			causes: []string{
				"The renewal interval (TTL/3) is too close to the TTL for the Redis latency or for process pauses (GC, CPU throttling).",
				"Redis unreachable or failing over; the lock key evicted under `maxmemory`.",
				"Another process deleted the lock without an owner check.",
			},
			confirm: "On **" + boardContention + "**, panel *Lease renewals by result* next to *Lost locks by reason*; on **" + boardRedis + "**, *Command errors by class* (timeouts, connection) and *Command latency p99 by command* for `evalsha`.",
			fix:     "Raise `LockOptions.TTL` so that TTL/3 covers Redis hiccups; make the work stop on `l.Context()` cancellation; fix connectivity (`CacheOptions.RedisTimeout`, pool size); set a `noeviction` or `volatile-*` policy so locks are not evicted.",
		},
		cases: []testCase{{
			name:    "a renewal errored",
			series:  []series{{signals.LockRenewals.String() + `{` + svc + `, result="error"}`, "0x34 1x24"}},
			quietAt: []time.Duration{38 * time.Minute},
			want:    []want{{SeverityWarning, svcLabels, "1 lease renewals of key group lock:report:* in api failed in the last 15m."}},
		}, {
			name:   "healthy: renewals succeed",
			series: []series{{signals.LockRenewals.String() + `{` + svc + `, result="renewed"}`, "0+10x59"}},
		}},
	}}
}

func cacheDefinitions(cfg Config) []definition {
	s := cfg.ServiceSelector
	win := d(cfg.EventWindow)
	r := names(cfg)
	w := window(cfg.RateWindow.String())
	cache := serviceSight(cfg, signals.CacheLookups.String(), "0x59")
	lookups := func(result, values string) series {
		return series{signals.CacheLookups.String() + `{` + svc + `, result="` + result + `"}`, values}
	}
	return []definition{{
		group: groupCache, name: "CachewatchCacheErrors",
		query: r.cacheErrors, by: "job, key_group", op: ">",
		levels: []level{lvl(SeverityCritical, cfg.CacheErrors, pct(cfg.CacheErrors))},
		guard:  r.lookups + " > " + num(cfg.MinLookupsPerSecond), guardOn: "job, key_group",
		seen:        cache,
		forDur:      time.Duration(cfg.CacheErrorsFor),
		summary:     "Callers get errors instead of data from the cache: the source fails and nothing safe is left to serve.",
		description: `{{ $value | humanizePercentage }} of cache lookups of key group {{ $labels.key_group }} in {{ $labels.job }} ended in an error for the caller (threshold {{threshold}}).`,
		runbook: runbook{
			meaning:  "Lookups answered with an error (`" + signals.CacheLookups.String() + "{result=\"error\"}`): the loader failed and there was no value within its hard TTL to serve (a miss, or a value past its hard TTL refused: `" + signals.HardTTLExpired.String() + "`), or Redis was unavailable and the direct call to the source failed or found no free slot. This is the harm stale-while-revalidate exists to prevent, and it is now reaching users; it pages for as long as it lasts, whatever came before it.",
			resolves: "It resolves when the share of failing lookups over the rate window falls below the threshold: the source (or Redis) answers again, or traffic stopped.",
			causes: []string{
				"The source (database, API) has been failing for longer than `HardTTL - FreshTTL`: stale-forever (CachewatchStaleForever) turned into errors.",
				"A cold key (never cached, or invalidated) whose loader fails: nothing stale exists to serve.",
				"Redis unavailable (the breaker open, CachewatchCircuitBreakerOpen) and the fallback to the source failing or out of slots (`FallbackConcurrency`).",
				"A loader that fails for some keys only (a deleted row returned as an error instead of `instrument.ErrNotFound`).",
			},
			confirm: "On **" + boardContention + "**, panels *Cache lookups by result (share)* (the `error` band), *Hard-TTL refusals*, *Refresh failures* and *Recompute duration p50 / p99* by result; *Circuit breaker state* tells a Redis outage from a source outage.",
			fix:     "Restore the source (or Redis). If serving older data beats an error, raise `CacheOptions.HardTTL`; keep `FailureHoldoff` so the recovering source is not stampeded; return `instrument.ErrNotFound` for missing rows so they are cached as absent rather than failing.",
		},
		cases: []testCase{{
			name:    "10% of lookups fail past the hard TTL",
			series:  []series{lookups("error", "0+6x59"), lookups("hit", "0+54x59")},
			quietAt: []time.Duration{2 * time.Minute},
			want:    []want{{SeverityCritical, svcLabels, "10% of cache lookups of key group lock:report:* in api ended in an error for the caller (threshold 1%)."}},
		}, {
			name:   "healthy: one error in an hour",
			series: []series{lookups("error", "0x29 1x30"), lookups("hit", "0+60x59")},
		}, {
			name:   "recovered: the errors stopped a quarter of an hour ago",
			series: []series{lookups("error", "0+6x29 180x30"), lookups("hit", "0+54x59")},
		}},
	}, {
		group: groupCache, name: "CachewatchStaleServeRatioHigh",
		query: r.staleRatio, by: "job, key_group", op: ">",
		levels: []level{lvl(SeverityWarning, cfg.StaleRatioWarning, pct(cfg.StaleRatioWarning))},
		guard:  r.lookups + " > " + num(cfg.MinLookupsPerSecond), guardOn: "job, key_group",
		seen:        cache,
		forDur:      time.Duration(cfg.StaleRatioFor),
		summary:     "Most cache lookups are served stale data.",
		description: `{{ $value | humanizePercentage }} of cache lookups of key group {{ $labels.key_group }} in {{ $labels.job }} were served stale (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "Stale-while-revalidate answers with values past their fresh TTL while one caller refreshes them. A high share means refreshes do not keep up or do not succeed: users see old data, and the step to stale-forever is short.",
			causes: []string{
				"Refreshes fail (source down, timeouts) so values stay stale until their hard TTL.",
				"Fresh TTL much shorter than the time a refresh takes.",
				"The refresh lease (`CacheOptions.LeaseTTL`) expires before slow loads finish, so no load ever stores.",
			},
			confirm: "On **" + boardContention + "**, panel *Cache lookups by result (share)* and *Stale age served p50 / p99*; then *Refresh failures* and *Recompute duration p50 / p99*.",
			fix:     "Fix the failing source first (see CachewatchStaleForever); size `CacheOptions.FreshTTL` above the recompute p99 and `LeaseTTL` above the slowest load; enable probabilistic early refresh (`CacheOptions.Beta: 1`) so hot keys refresh before they go stale.",
		},
		cases: []testCase{{
			name: "70% stale",
			series: []series{
				{signals.CacheLookups.String() + `{` + svc + `, result="stale"}`, "0+42x59"},
				{signals.CacheLookups.String() + `{` + svc + `, result="hit"}`, "0+18x59"},
			},
			quietAt: []time.Duration{10 * time.Minute},
			want:    []want{{SeverityWarning, svcLabels, "70% of cache lookups of key group lock:report:* in api were served stale (threshold 50%)."}},
		}, {
			name: "healthy: 10% stale",
			series: []series{
				{signals.CacheLookups.String() + `{` + svc + `, result="stale"}`, "0+6x59"},
				{signals.CacheLookups.String() + `{` + svc + `, result="hit"}`, "0+54x59"},
			},
		}},
	}, {
		group: groupCache, name: "CachewatchStaleForever",
		query: "max by (job, key_group) (" + vec(signals.RefreshConsecutiveFailures.String(), s) + ")", by: "job, key_group", op: ">=",
		levels: []level{lvl(SeverityCritical, cfg.ConsecutiveRefreshFailures, num(cfg.ConsecutiveRefreshFailures))},
		// Past the hard TTL the failing values expire and leave the gauge,
		// but callers now get errors: the same outage, worse.
		worse: "max by (job, key_group) (max_over_time(" + vec(signals.RefreshConsecutiveFailures.String(), s) + "[" + d(cfg.StaleForeverLookback) + "])) >= " + num(cfg.ConsecutiveRefreshFailures) +
			"\nand on (job, key_group)\n" + r.cacheErrors + " > 0",
		seen:        cache,
		forDur:      time.Duration(cfg.ConsecutiveRefreshFailuresFor),
		summary:     "Every refresh of some cached values fails: stale-while-revalidate has become stale-forever.",
		description: `A key of group {{ $labels.key_group }} in {{ $labels.job }} failed {{ $value }} refreshes in a row (threshold {{threshold}}): it is served stale until its hard TTL, then callers get errors.`,
		runbook: runbook{
			meaning:  "The longest current run of consecutive failed refreshes among the group's keys reached the threshold. The cache keeps answering with old data and refuses it once the hard TTL passes; from then on callers get errors (CachewatchCacheErrors pages too) and this alert keeps firing while they do, so the page never reads as a recovery.",
			resolves: "It resolves when refreshes succeed again (the run ended) and no lookup of the group failed within the rate window; it does not resolve into the errors that follow the hard TTL.",
			causes: []string{
				"The source (database, API) is down or rejects the loader's queries.",
				"The loader times out: its context is bounded by `CacheOptions.LeaseTTL`.",
				"A bug makes the loader fail for some keys only (a deleted row, a bad payload).",
			},
			confirm: "On **" + boardContention + "**, panels *Consecutive refresh failures*, *Refresh failures* and *Recompute duration p50 / p99* by result; *Stale age served p50 / p99* grows while it lasts; past the hard TTL, the `error` band of *Cache lookups by result (share)* and *Hard-TTL refusals*.",
			fix:     "Fix the source or the loader. Meanwhile `CacheOptions.FailureHoldoff` keeps a failing source from being hammered (one retry per hold-off), and `HardTTL` bounds how old served data can get; lower it if stale data is worse than an error.",
		},
		cases: []testCase{{
			name:    "7 failures in a row",
			series:  []series{{signals.RefreshConsecutiveFailures.String() + `{` + svc + `}`, "7x59"}},
			quietAt: []time.Duration{9 * time.Minute},
			want:    []want{{SeverityCritical, svcLabels, "A key of group lock:report:* in api failed 7 refreshes in a row (threshold 5): it is served stale until its hard TTL, then callers get errors."}},
		}, {
			name: "worse: past the hard TTL the run leaves the gauge and callers get errors",
			series: []series{
				{signals.RefreshConsecutiveFailures.String() + `{` + svc + `}`, "7x24 0x35"},
				lookups("error", "0x24 0+6x35"), lookups("hit", "0+54x59"),
			},
			want: []want{{SeverityCritical, svcLabels, "A key of group lock:report:* in api failed 7 refreshes in a row (threshold 5): it is served stale until its hard TTL, then callers get errors."}},
		}, {
			name: "recovered: refreshes succeed and nothing fails any more",
			series: []series{
				{signals.RefreshConsecutiveFailures.String() + `{` + svc + `}`, "7x24 0x35"},
				lookups("error", "0x24 0+6x9 54x25"), lookups("hit", "0+54x59"),
			},
		}, {
			name:   "healthy: 2 failures then success",
			series: []series{{signals.RefreshConsecutiveFailures.String() + `{` + svc + `}`, "2x59"}},
		}},
	}, {
		group: groupCache, name: "CachewatchLoaderAmplification",
		query: r.amplification, by: "job, key_group", op: ">",
		levels:      []level{lvl(SeverityWarning, cfg.LoaderAmplification, num(cfg.LoaderAmplification))},
		seen:        cache,
		forDur:      time.Duration(cfg.LoaderAmplificationFor),
		summary:     "More than one source call per stored load: a stampede got through to the source.",
		description: `Key group {{ $labels.key_group }} in {{ $labels.job }} makes {{ $value | humanize }} source calls per stored load (healthy: 1, threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "Source calls divided by the loads whose value was stored (`" + signals.SourceCalls.String() + "` over itself less `" + signals.StaleWritesRefused.String() + "`). Above 1, loaders ran whose result was thrown away because another loader took the lease or the key was invalidated mid-load: the source did the same work more than once.",
			causes: []string{
				"Loads slower than `CacheOptions.LeaseTTL`: the lease expires, a waiter takes over and loads again.",
				"Invalidation racing with loads (`Invalidate` while a refresh runs) on a hot key.",
				"Several caches with different names or codecs sharing keys, so their leases do not coordinate.",
			},
			confirm: "On **" + boardContention + "**, panel *Loader amplification (source calls per kept result)* with *Recompute duration p50 / p99* (compare its p99 with the lease TTL) and *Duplicate recomputes*.",
			fix:     "Raise `CacheOptions.LeaseTTL` above the recompute p99.9; invalidate after the source changed, not before; give one `instrument.Cache` per key space.",
		},
		cases: []testCase{{
			name: "half the loads refused",
			series: []series{
				{signals.SourceCalls.String() + `{` + svc + `, result="success"}`, "0+60x59"},
				{signals.StaleWritesRefused.String() + `{` + svc + `}`, "0+30x59"},
			},
			quietAt: []time.Duration{14 * time.Minute},
			want:    []want{{SeverityWarning, svcLabels, "Key group lock:report:* in api makes 2 source calls per stored load (healthy: 1, threshold 1)."}},
		}, {
			name:   "healthy: every load stored, nothing refused yet",
			series: []series{{signals.SourceCalls.String() + `{` + svc + `, result="success"}`, "0+60x59"}},
		}},
	}, {
		group: groupCache, name: "CachewatchMissBurst",
		query: r.missBursts + " * 60", by: "job, key_group", op: ">",
		levels:      []level{lvl(SeverityWarning, 0, "0")},
		seen:        cache,
		forDur:      time.Duration(cfg.MissBurstFor),
		summary:     "Cache misses come in bursts: a stampede is in progress.",
		description: `Key group {{ $labels.key_group }} in {{ $labels.job }} has {{ $value | humanize }} miss bursts a minute.`,
		runbook: runbook{
			meaning: "The windowed detector counted windows in which a key group's misses reached the burst threshold (`MissBurstWindow` / `MissBurstThreshold`), again and again for the `for:` duration: many callers miss the same keys at once.",
			causes: []string{
				"Keys written together expire together (missing TTL jitter).",
				"A mass invalidation or a flush, or deleting cache entries before the new data is ready.",
				"A cold start (deploy, new cache node) with no warm-up.",
			},
			confirm: "On **" + boardContention + "**, panels *Miss bursts* and *Cache lookups by result (share)*; on **" + boardKeyspace + "**, *Expiry synchronisation per key group* and *Server hit ratio* and *Server miss bursts*.",
			fix:     "Jitter TTLs (`CacheOptions.Jitter`); use `instrument.Cache.Fetch` so misses coalesce into one load per key; invalidate with `Invalidate`/`InvalidateMatch` after the new data exists; warm hot keys before switching traffic.",
		},
		cases: []testCase{{
			name:    "a burst a minute",
			series:  []series{{signals.MissBursts.String() + `{` + svc + `}`, "0+1x59"}},
			quietAt: []time.Duration{4 * time.Minute},
			want:    []want{{SeverityWarning, svcLabels, "Key group lock:report:* in api has 1 miss bursts a minute."}},
		}, {
			name:   "healthy: no bursts",
			series: []series{{signals.MissBursts.String() + `{` + svc + `}`, "0x59"}},
		}},
	}, {
		group: groupCache, name: "CachewatchWriteSkew",
		query: sumBy("job, key_group", increase(signals.WriteSkew.String(), s, win)), by: "job, key_group", op: ">",
		levels:      []level{lvl(SeverityInfo, 0, "0")},
		forDur:      time.Duration(cfg.WriteSkewFor),
		summary:     "Older results tried to overwrite newer ones (rejected by versioned writes).",
		description: `{{ $value | humanize }} versioned writes of key group {{ $labels.key_group }} in {{ $labels.job }} carried an older version than the stored one in the last ` + win + `.`,
		runbook: runbook{
			meaning: "`SetVersioned` refused writes whose version was older than the stored one. The data is safe (the newer version stays) but jobs complete out of order: a retried or slow job finished after a newer one.",
			causes: []string{
				"Queue retries redeliver old jobs after newer ones completed.",
				"Unbounded retries or missing idempotency keys make old work run again.",
				"Slow workers (lock lost mid-work) finish after their successor.",
			},
			confirm: "On **" + boardContention + "**, panel *Write skew and refused stale writes*, *Duplicate recomputes*, with *Idempotency checks by result* and *Lost locks by reason*; on **" + boardKeyspace + "**, the queue panels (oldest age, pending).",
			fix:     "Keep versioned writes (`SetVersioned`) where order matters; dedupe jobs with idempotency keys (`FirstSeen`); bound retries; fix lost locks (CachewatchLocksLost).",
		},
		cases: []testCase{{
			name:    "2 skewed writes",
			series:  []series{{signals.WriteSkew.String() + `{` + svc + `}`, "0x34 2x24"}},
			quietAt: []time.Duration{35 * time.Minute},
			want:    []want{{SeverityInfo, svcLabels, "2 versioned writes of key group lock:report:* in api carried an older version than the stored one in the last 15m."}},
		}, {
			name:   "healthy: none",
			series: []series{{signals.WriteSkew.String() + `{` + svc + `}`, "0x59"}},
		}},
	}, {
		group: groupCache, name: "CachewatchDuplicateRecompute",
		query: sumBy("job, key_group", increase(signals.DuplicateRecompute.String(), s, win)), by: "job, key_group", op: ">",
		levels:      []level{lvl(SeverityInfo, 0, "0")},
		forDur:      time.Duration(cfg.DuplicatesFor),
		summary:     "The same version was computed and written twice.",
		description: `{{ $value | humanize }} versioned writes of key group {{ $labels.key_group }} in {{ $labels.job }} repeated a version already stored in the last ` + win + `.`,
		runbook: runbook{
			meaning: "`SetVersioned` found the same version already stored: the work was done twice. Harmless for the data, wasteful for the source, and a sign that coordination leaks.",
			causes: []string{
				"Lock TTL shorter than the work: a second worker took over while the first still ran.",
				"Jobs redelivered (at-least-once queues) without an idempotency check.",
			},
			confirm: "On **" + boardContention + "**, panel *Write skew and refused stale writes*, *Duplicate recomputes* with *Lost locks by reason* and *Idempotency checks by result*.",
			fix:     "Renew long locks (`LockOptions.Renew`) or raise `LockOptions.TTL`; check `FirstSeen` idempotency keys before the work.",
		},
		cases: []testCase{{
			name:    "2 duplicates",
			series:  []series{{signals.DuplicateRecompute.String() + `{` + svc + `}`, "0x34 2x24"}},
			quietAt: []time.Duration{35 * time.Minute},
			want:    []want{{SeverityInfo, svcLabels, "2 versioned writes of key group lock:report:* in api repeated a version already stored in the last 15m."}},
		}, {
			name:   "healthy: none",
			series: []series{{signals.DuplicateRecompute.String() + `{` + svc + `}`, "0x59"}},
		}},
	}, {
		group: groupCache, name: "CachewatchCircuitBreakerOpen",
		// Closed is 0, half-open 1, open 2: a breaker that has not been
		// closed once in the last minute keeps failing its trial calls.
		// One short opening that closes again never fires.
		query: "max by (job, instance, client) (min_over_time(" + vec(signals.CircuitBreakerState.String(), s) + "[" + breakerWindow + "]))", by: "job, instance, client", op: ">=",
		levels:      []level{lvl(SeverityCritical, 1, "never closed")},
		seen:        serviceSight(cfg, signals.CircuitBreakerState.String(), "0x59"),
		forDur:      time.Duration(cfg.BreakerOpenFor),
		summary:     "The circuit breaker guarding Redis stays open: Redis calls fail and loads go straight to the source.",
		description: `Circuit breaker {{ $labels.client }} of {{ $labels.instance }} in {{ $labels.job }} has not closed in the last ` + breakerWindow + `.`,
		runbook: runbook{
			meaning:  "`CacheOptions.BreakerFailures` consecutive Redis failures opened the breaker (state 2), and its trial calls (half-open, state 1) keep failing: it has not been closed for a minute, and for the `for:` duration. While open, `Fetch` skips Redis and calls the loader directly, bounded by `FallbackConcurrency`: the cache protects nothing and the source takes the load.",
			resolves: "It resolves once the breaker has closed again; a breaker that opens for a few seconds and closes never fires.",
			causes: []string{
				"Redis down, unreachable, failing over or overloaded (timeouts).",
				"`CacheOptions.RedisTimeout` too low for the Redis latency.",
				"Connection pool starvation (see CachewatchPoolTimeouts).",
			},
			confirm: "On **" + boardContention + "**, panels *Circuit breaker state*, *Fallback calls in flight* and *Fallbacks by cause* (refused connections, error replies or a stalled Redis); on **" + boardRedis + "**, *Command errors by class* and *Pool waits and timeouts*; on **" + boardKeyspace + "**, *Exporter up*.",
			fix:     "Restore Redis. Keep `FallbackConcurrency` small enough for the source to survive; tune `RedisTimeout` and `BreakerOpenFor` if the breaker trips on normal latency.",
		},
		cases: []testCase{{
			name:    "open, its trial calls failing",
			series:  []series{{signals.CircuitBreakerState.String() + `{job="api", instance="api-0:8080", client="products"}`, "0x9 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2"}},
			quietAt: []time.Duration{2 * time.Minute, 10 * time.Minute},
			want:    []want{{SeverityCritical, map[string]string{"job": "api", "instance": "api-0:8080", "client": "products"}, "Circuit breaker products of api-0:8080 in api has not closed in the last 1m."}},
		}, {
			name:   "healthy: open for a few seconds, then closed",
			series: []series{{signals.CircuitBreakerState.String() + `{job="api", instance="api-0:8080", client="products"}`, "0x29 2 0x29"}},
		}, {
			name:   "healthy: closed, once half-open",
			series: []series{{signals.CircuitBreakerState.String() + `{job="api", instance="api-0:8080", client="products"}`, "0x29 1 0x28"}},
		}},
	}, {
		group: groupCache, name: "CachewatchKeyGroupOverflow",
		query: "sum by (job, instance) (" + w.rate(signals.KeyGroupOverflow.String(), s) + ") * 60", by: "job, instance", op: ">",
		levels:      []level{lvl(SeverityInfo, 0, "0")},
		forDur:      time.Duration(cfg.KeyGroupOverflowFor),
		summary:     "Keys fold into the `other` key group: the cap on distinct groups is reached.",
		description: `{{ $labels.instance }} in {{ $labels.job }} classifies {{ $value | humanize }} keys a minute into the other key group.`,
		runbook: runbook{
			meaning: "The key-group classifier reached its cap (200 by default) and folds new groups into `other`. Per-group panels and alerts lose precision for those keys.",
			causes: []string{
				"Names each shared by enough keys to be learnt (`--keygroup.min-keys`, 20 by default): large tenants or a small dictionary of words, each making its own group; or, with names kept from the first key (min-keys 1), an ID-like part the classifier does not recognise (slugs).",
				"A new feature with many key shapes.",
			},
			confirm: "On **" + boardContention + "**, the `key_group` variable lists many near-identical groups and `other` grows in *Cache lookups by result (share)*.",
			fix:     "Add rules to the `keygroup.Classifier` passed as `KeyGroups` (glob or regexp → group name), or `--keygroup.rule glob=group` for the exporter; raise the cap only if the groups are genuinely distinct.",
		},
		cases: []testCase{{
			name:    "6 a minute",
			series:  []series{{signals.KeyGroupOverflow.String() + `{job="api", instance="api-0:8080"}`, "0+6x59"}},
			quietAt: []time.Duration{14 * time.Minute},
			want:    []want{{SeverityInfo, map[string]string{"job": "api", "instance": "api-0:8080"}, "api-0:8080 in api classifies 6 keys a minute into the other key group."}},
		}, {
			name:   "healthy: none",
			series: []series{{signals.KeyGroupOverflow.String() + `{job="api", instance="api-0:8080"}`, "0x59"}},
		}},
	}}
}

func redisDefinitions(cfg Config) []definition {
	clientLabels := map[string]string{"job": "api", "client": "orders"}
	r := names(cfg)
	hook := serviceSight(cfg, signals.CommandDuration.String()+"_count", "0x59")
	scriptServer := func(m signals.ID, values string) series {
		return series{m.String() + `{` + exp + `, command="evalsha"}`, values}
	}
	return []definition{{
		group: groupRedis, name: "CachewatchRedisScriptsSlow",
		query: r.serverScriptMean, by: "job, node, command", op: ">",
		levels: []level{lvl(SeverityWarning, time.Duration(cfg.ServerScriptMean).Seconds(), d(cfg.ServerScriptMean))},
		guard: sumBy("job, node, command", window(cfg.RateWindow.String()).rate(signals.ServerCommandCalls.String(), cfg.ExporterSelector, scriptCommands)) +
			" > " + num(cfg.MinCommandsPerSecond), guardOn: "job, node, command",
		seen:        exporterSight(cfg, "server"),
		forDur:      time.Duration(cfg.ScriptP99For),
		summary:     "Lua scripts take long on the Redis server and block every other command.",
		description: `{{ $labels.command }} on {{ $labels.node }} takes {{ $value | humanizeDuration }} of server time per call (threshold {{threshold}}).`,
		runbook: runbook{
			meaning:  "The server-side time per call of a script command (EVAL, EVALSHA, FCALL and their read-only forms), from INFO commandstats as the exporter samples it, is above the threshold. This is what Redis itself spends: it runs scripts on its single thread, so while one runs every other command waits.",
			resolves: "It resolves when the server time per call over the rate window falls below the threshold.",
			causes: []string{
				"A script that loops over many keys or a large collection.",
				"A script that calls slow commands (`KEYS`, large `SMEMBERS`, `DEL` of big keys).",
				"A busy or swapping server: every command is slow, scripts included.",
			},
			confirm: "On **" + boardKeyspace + "**, panels *Server time per call* and *Server command latency percentiles*; on **" + boardRedis + "**, *Script latency p99 by script* names the script (client-side).",
			fix:     "Keep scripts O(1) like cachewatch's release/extend scripts; move bulk work out of Lua (SCAN + UNLINK in batches, as `InvalidateMatch` does); name third-party scripts with `hooks.Options.Scripts` to find the slow one.",
		},
		cases: []testCase{{
			name: "20ms per call",
			series: []series{
				scriptServer(signals.ServerCommandSeconds, "0+1.2x59"),
				scriptServer(signals.ServerCommandCalls, "0+60x59"),
			},
			quietAt: []time.Duration{9 * time.Minute},
			want:    []want{{SeverityWarning, with(expNode, "command", "evalsha"), "evalsha on redis:6379 takes 20ms of server time per call (threshold 5ms)."}},
		}, {
			name: "healthy: 100µs per call",
			series: []series{
				scriptServer(signals.ServerCommandSeconds, "0+0.006x59"),
				scriptServer(signals.ServerCommandCalls, "0+60x59"),
			},
		}, {
			name: "quiet: one slow call a minute",
			series: []series{
				scriptServer(signals.ServerCommandSeconds, "0+0.02x59"),
				scriptServer(signals.ServerCommandCalls, "0+1x59"),
			},
		}},
	}, {
		group: groupRedis, name: "CachewatchScriptLatencyHigh",
		query: r.scriptP99, by: "job, script", op: ">",
		levels:      []level{lvl(SeverityInfo, time.Duration(cfg.ScriptP99).Seconds(), d(cfg.ScriptP99))},
		forDur:      time.Duration(cfg.ScriptP99For),
		summary:     "Lua scripts are slow as the client sees them (client-side: network, pool and process scheduling included).",
		description: `Script {{ $labels.script }} in {{ $labels.job }} has a client-side p99 of {{ $value | humanizeDuration }} (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "EVAL/EVALSHA/FCALL latency of a named script, seen by the client, is above the threshold. Client-side time includes the network, the wait for a pooled connection and the client process's own scheduling: on a busy host an O(1) script can read tens of milliseconds while Redis spends microseconds on it. That is why this alert only informs (nobody is notified); what the server spends pages through CachewatchRedisScriptsSlow, from the exporter.",
			causes: []string{
				"A script that loops over many keys or a large collection.",
				"A busy or swapping server: every command is slow, scripts included.",
				"NOSCRIPT fallbacks: EVALSHA fails and the whole script body is sent again (check *NOSCRIPT replies*).",
			},
			confirm: "On **" + boardRedis + "**, panels *Script latency p99 by script* and *NOSCRIPT replies*; *Command latency p99 by command* shows whether everything is slow. On **" + boardKeyspace + "**, *Server command latency percentiles*.",
			fix:     "Keep scripts O(1) like cachewatch's release/extend scripts; move bulk work out of Lua (SCAN + UNLINK in batches, as `InvalidateMatch` does); name third-party scripts with `hooks.Options.Scripts` to find the slow one.",
		},
		cases: []testCase{{
			name: "p99 near 25ms",
			series: []series{
				{signals.ScriptDuration.String() + `_bucket{job="api", client="orders", script="release", command="evalsha", le="0.01"}`, "0x59"},
				{signals.ScriptDuration.String() + `_bucket{job="api", client="orders", script="release", command="evalsha", le="0.025"}`, "0+60x59"},
				{signals.ScriptDuration.String() + `_bucket{job="api", client="orders", script="release", command="evalsha", le="+Inf"}`, "0+60x59"},
			},
			quietAt: []time.Duration{9 * time.Minute},
			want:    []want{{SeverityInfo, map[string]string{"job": "api", "script": "release"}, "Script release in api has a client-side p99 of 24.85ms (threshold 10ms)."}},
		}, {
			name: "healthy: under 1ms",
			series: []series{
				{signals.ScriptDuration.String() + `_bucket{job="api", client="orders", script="release", command="evalsha", le="0.001"}`, "0+60x59"},
				{signals.ScriptDuration.String() + `_bucket{job="api", client="orders", script="release", command="evalsha", le="+Inf"}`, "0+60x59"},
			},
		}},
	}, {
		group: groupRedis, name: "CachewatchCommandErrorsHigh",
		query: r.commandErrors, by: "job, client", op: ">",
		levels: []level{
			lvl(SeverityWarning, cfg.CommandErrorsWarning, pct(cfg.CommandErrorsWarning)),
			lvl(SeverityCritical, cfg.CommandErrorsCritical, pct(cfg.CommandErrorsCritical)),
		},
		guard: r.commands + " > " + num(cfg.MinCommandsPerSecond), guardOn: "job, client",
		seen:        hook,
		forDur:      time.Duration(cfg.CommandErrorsFor),
		summary:     "Many Redis commands fail.",
		description: `{{ $value | humanizePercentage }} of Redis commands of client {{ $labels.client }} in {{ $labels.job }} failed (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "The share of commands answered with an error (a nil reply is not one) is above the threshold. `error_class` tells timeouts, connection errors, cluster redirections (moved/ask), NOSCRIPT, OOM, BUSY and ACL denials apart.",
			causes: []string{
				"Timeouts and connection errors: Redis overloaded, network trouble, or pool starvation.",
				"`oom`: maxmemory reached with a `noeviction` policy.",
				"`busy`: a long script blocks the server.",
				"`moved`/`ask` storms after a resharding with a client that does not follow the cluster.",
			},
			confirm: "On **" + boardRedis + "**, panel *Command errors by class* with *Command latency p99 by command*; on **" + boardKeyspace + "**, *Memory used and limit* and *Clients*.",
			fix:     "Follow the class: for timeouts raise capacity or the client's timeouts; for `oom` set an eviction policy or more memory; for `busy` fix the slow script; for `noperm` fix the ACL user.",
		},
		cases: []testCase{{
			name: "5% errors",
			series: []series{
				{signals.CommandErrors.String() + `{job="api", client="orders", command="get", error_class="timeout"}`, "0+3x59"},
				{signals.CommandDuration.String() + `_count{job="api", client="orders", command="get"}`, "0+60x59"},
			},
			quietAt: []time.Duration{9 * time.Minute},
			want:    []want{{SeverityWarning, clientLabels, "5% of Redis commands of client orders in api failed (threshold 1%)."}},
		}, {
			name: "50% errors",
			series: []series{
				{signals.CommandErrors.String() + `{job="api", client="orders", command="get", error_class="timeout"}`, "0+30x59"},
				{signals.CommandDuration.String() + `_count{job="api", client="orders", command="get"}`, "0+60x59"},
			},
			want: []want{
				{SeverityWarning, clientLabels, "50% of Redis commands of client orders in api failed (threshold 1%)."},
				{SeverityCritical, clientLabels, "50% of Redis commands of client orders in api failed (threshold 10%)."},
			},
		}, {
			name: "healthy: no errors",
			series: []series{
				{signals.CommandErrors.String() + `{job="api", client="orders", command="get", error_class="timeout"}`, "0x59"},
				{signals.CommandDuration.String() + `_count{job="api", client="orders", command="get"}`, "0+60x59"},
			},
		}},
	}, {
		group: groupRedis, name: "CachewatchPoolTimeouts",
		query: r.poolTimeouts + " * 60", by: "job, instance, client", op: ">",
		levels:      []level{lvl(SeverityWarning, 0, "0")},
		seen:        hook,
		forDur:      time.Duration(cfg.PoolTimeoutsFor),
		summary:     "Callers time out waiting for a Redis connection: the pool is starved.",
		description: `{{ $value | humanize }} waits a minute for a pool connection of client {{ $labels.client }} on {{ $labels.instance }} in {{ $labels.job }} timed out.`,
		runbook: runbook{
			meaning: "go-redis callers waited the whole `PoolTimeout` for a free connection and gave up. Requests fail although Redis itself may be healthy.",
			causes: []string{
				"Polling waiters or spinning lock retries hold connections (lock contention turning into connection starvation).",
				"Slow commands or scripts keep connections busy.",
				"Pool too small for the concurrency (`PoolSize`), or blocking commands (BLPOP, XREAD BLOCK) on the shared pool.",
			},
			confirm: "On **" + boardRedis + "**, panels *Pool waits and timeouts* and *Pool connections by state*; on **" + boardContention + "**, *Contention rate (busy first attempts / first attempts)* and *Retries* and *Backoff delay p50 / p99*.",
			fix:     "Fix contention first (CachewatchLockContentionHigh); bound retries (`LockOptions.Backoff.Retries`) and waits (caller contexts); give blocking consumers their own client; raise go-redis `PoolSize` only when Redis has headroom.",
		},
		cases: []testCase{{
			name:    "6 timeouts a minute",
			series:  []series{{signals.PoolTimeouts.String() + `{` + cli + `}`, "0+6x59"}},
			quietAt: []time.Duration{4 * time.Minute},
			want:    []want{{SeverityWarning, map[string]string{"job": "api", "instance": "api-0:8080", "client": "orders"}, "6 waits a minute for a pool connection of client orders on api-0:8080 in api timed out."}},
		}, {
			name:   "healthy: none",
			series: []series{{signals.PoolTimeouts.String() + `{` + cli + `}`, "0x59"}},
		}},
	}}
}

func keyspaceDefinitions(cfg Config) []definition {
	e := cfg.ExporterSelector
	r := names(cfg)
	locks, keys, server, queues := exporterSight(cfg, "locks"), exporterSight(cfg, "keys"), exporterSight(cfg, "server"), exporterSight(cfg, "queues")
	kgNode := with(expNode, "key_group", "lock:report:*")
	byGroup := func(m signals.ID) string {
		return "max by (job, node, key_group) (" + vec(m.String(), e) + ")"
	}
	lockSeries := func(m signals.ID, v string) []series {
		return []series{{m.String() + `{` + exp + `, key_group="lock:report:*"}`, v}}
	}
	return []definition{{
		group: groupKeyspace, name: "CachewatchLocksWithoutTTL",
		query: byGroup(signals.LocksWithoutTTL), by: "job, node, key_group", op: ">",
		levels:      []level{lvl(SeverityCritical, 0, "0")},
		seen:        locks,
		forDur:      time.Duration(cfg.LocksWithoutTTLFor),
		summary:     "Lock keys without expiry exist: a crashed owner holds them forever.",
		description: `{{ $value }} lock keys of group {{ $labels.key_group }} on {{ $labels.node }} have no TTL.`,
		runbook: runbook{
			meaning: "The exporter found lock keys (matching `--locks.pattern`) with no expiry. If their owner crashed, nobody will ever take these locks again: a deadlock until someone deletes them. This count is exact at the lock figures' timestamp (`" + signals.ExporterDataTimestamp.String() + "{family=\"locks\"}`); `" + signals.KeysWithoutTTL.String() + "` of the same group counts the same keys from a walk of the whole keyspace over minutes and may differ: trust this one.",
			causes: []string{
				"Code taking locks with `SETNX` + `EXPIRE` in two steps and crashing in between, or with `SET NX` and no `PX`.",
				"A `PERSIST` or a `SET` without `KEEPTTL` on a lock key.",
				"A key that matches the lock pattern but is not a lock (tune `--locks.pattern`).",
			},
			confirm: "On **" + boardKeyspace + "**, panels *Locks without TTL* and *Locks held*; `cachewatch doctor` lists the findings.",
			fix:     "Take locks with one `SET key token NX PX ttl` (what `instrument.Client.Lock` does; it refuses a lock without expiry). After checking the owner is gone, delete the stuck key with `UNLINK`.",
		},
		cases: []testCase{{
			name:    "2 locks without TTL",
			series:  lockSeries(signals.LocksWithoutTTL, "2x59"),
			quietAt: []time.Duration{4 * time.Minute},
			want:    []want{{SeverityCritical, kgNode, "2 lock keys of group lock:report:* on redis:6379 have no TTL."}},
		}, {
			name:   "healthy: none",
			series: lockSeries(signals.LocksWithoutTTL, "0x59"),
		}},
	}, {
		group: groupKeyspace, name: "CachewatchLocksLongHeld",
		query: byGroup(signals.LocksLongHeld), by: "job, node, key_group", op: ">",
		levels:      []level{lvl(SeverityWarning, 0, "0")},
		seen:        locks,
		forDur:      time.Duration(cfg.LocksLongHeldFor),
		summary:     "Locks are held by the same owner far longer than expected.",
		description: `{{ $value }} locks of group {{ $labels.key_group }} on {{ $labels.node }} have kept the same owner token past the long-held threshold.`,
		runbook: runbook{
			meaning: "The exporter saw the same owner token on a lock for longer than `--locks.long-held` (default 1m). Either the work under the lock is much longer than designed, or a renewal loop keeps a lock alive for a stuck worker.",
			causes: []string{
				"A stuck holder whose heartbeat (`LockOptions.Renew`) still runs.",
				"Work under the lock that waits on something slow (an external API, a queue).",
				"A lock TTL set far too long for the work, outliving a crashed owner.",
			},
			confirm: "On **" + boardKeyspace + "**, panels *Long-held locks* and *Locks by remaining TTL*; on **" + boardContention + "**, *Lock hold time p50 / p99* and *Lock acquire time p50 / p99* for waiters piling up.",
			fix:     "Bound the work under a lock with a context deadline; stop renewing when the work is stuck; keep `LockOptions.TTL` close to the expected work time (with renewal for the long tail).",
		},
		cases: []testCase{{
			name:    "1 long-held lock",
			series:  lockSeries(signals.LocksLongHeld, "1x59"),
			quietAt: []time.Duration{9 * time.Minute},
			want:    []want{{SeverityWarning, kgNode, "1 locks of group lock:report:* on redis:6379 have kept the same owner token past the long-held threshold."}},
		}, {
			name:   "healthy: none",
			series: lockSeries(signals.LocksLongHeld, "0x59"),
		}},
	}, {
		group: groupKeyspace, name: "CachewatchExpirySynchronised",
		query: byGroup(signals.ExpirySync), by: "job, node, key_group", op: ">",
		levels: []level{lvl(SeverityWarning, cfg.ExpirySync, num(cfg.ExpirySync))},
		guard:  byGroup(signals.KeysSampled) + " >= " + num(cfg.ExpirySyncMinKeys), guardOn: "job, node, key_group",
		seen:        keys,
		forDur:      time.Duration(cfg.ExpirySyncFor),
		summary:     "Many keys of a group expire in the same second: a stampede is coming.",
		description: `Keys of group {{ $labels.key_group }} on {{ $labels.node }} expire {{ $value | humanize }} times more often in their busiest second than an even spread would give (threshold {{threshold}}).`,
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
			series: append(lockSeries(signals.ExpirySync, "25x59"),
				lockSeries(signals.KeysSampled, "500x59")...),
			quietAt: []time.Duration{14 * time.Minute},
			want:    []want{{SeverityWarning, kgNode, "Keys of group lock:report:* on redis:6379 expire 25 times more often in their busiest second than an even spread would give (threshold 10)."}},
		}, {
			name: "quiet: synchronised but too few keys",
			series: append(lockSeries(signals.ExpirySync, "25x59"),
				lockSeries(signals.KeysSampled, "20x59")...),
		}, {
			name: "healthy: spread",
			series: append(lockSeries(signals.ExpirySync, "1.2x59"),
				lockSeries(signals.KeysSampled, "500x59")...),
		}},
	}, {
		group: groupKeyspace, name: "CachewatchServerHitRatioDrop",
		query: r.serverHitRatio1 + " - " + r.serverHitRatio, by: "job, node", op: ">",
		levels: []level{lvl(SeverityWarning, cfg.HitRatioDrop, pct(cfg.HitRatioDrop))},
		guard:  r.serverLookups + " > " + num(cfg.MinLookupsPerSecond), guardOn: "job, node",
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
				{signals.ServerKeyspaceHits.String() + `{` + exp + `}`, "0+54x29 1572+6x29"},
				{signals.ServerKeyspaceMisses.String() + `{` + exp + `}`, "0+6x29 228+54x29"},
			},
			evalAt:  50 * time.Minute,
			quietAt: []time.Duration{30 * time.Minute},
			want:    []want{{SeverityWarning, expNode, "The keyspace hit ratio of redis:6379 is 46.4% below its last-hour average (threshold 20%)."}},
		}, {
			name: "healthy: steady 90%",
			series: []series{
				{signals.ServerKeyspaceHits.String() + `{` + exp + `}`, "0+54x59"},
				{signals.ServerKeyspaceMisses.String() + `{` + exp + `}`, "0+6x59"},
			},
			evalAt: 50 * time.Minute,
		}},
	}, {
		group: groupKeyspace, name: "CachewatchQueueOldestAgeHigh",
		query: "max by (job, node, queue) (" + vec(signals.QueueOldestAge.String(), e) + ")", by: "job, node, queue", op: ">",
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
			series:  []series{{signals.QueueOldestAge.String() + `{` + exp + `, queue="orders"}`, "900x59"}},
			quietAt: []time.Duration{9 * time.Minute},
			want:    []want{{SeverityWarning, with(expNode, "queue", "orders"), "The oldest entry of queue orders on redis:6379 is 15m 0s old (threshold 5m)."}},
		}, {
			name:   "healthy: 5 seconds",
			series: []series{{signals.QueueOldestAge.String() + `{` + exp + `, queue="orders"}`, "5x59"}},
		}},
	}, {
		group: groupKeyspace, name: "CachewatchStreamLagHigh",
		query: "max by (job, node, queue, group) (" + vec(signals.StreamGroupLag.String(), e) + ")", by: "job, node, queue, group", op: ">",
		levels:      []level{lvl(SeverityWarning, cfg.StreamLag, num(cfg.StreamLag))},
		seen:        queues,
		forDur:      time.Duration(cfg.StreamFor),
		summary:     "A stream consumer group lags far behind the stream.",
		description: `Consumer group {{ $labels.group }} of stream {{ $labels.queue }} on {{ $labels.node }} has {{ $value | humanize }} entries not yet delivered (threshold {{threshold}}).`,
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
			series:  []series{{signals.StreamGroupLag.String() + `{` + exp + `, queue="orders", group="billing"}`, "5000x59"}},
			quietAt: []time.Duration{9 * time.Minute},
			want:    []want{{SeverityWarning, with(expNode, "queue", "orders", "group", "billing"), "Consumer group billing of stream orders on redis:6379 has 5k entries not yet delivered (threshold 1000)."}},
		}, {
			name:   "healthy: 3 behind",
			series: []series{{signals.StreamGroupLag.String() + `{` + exp + `, queue="orders", group="billing"}`, "3x59"}},
		}},
	}, {
		group: groupKeyspace, name: "CachewatchStreamPendingStuck",
		query: "max by (job, node, queue, group) (" + vec(signals.StreamGroupOldestPending.String(), e) + ")", by: "job, node, queue, group", op: ">",
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
			series:  []series{{signals.StreamGroupOldestPending.String() + `{` + exp + `, queue="orders", group="billing"}`, "600x59"}},
			quietAt: []time.Duration{9 * time.Minute},
			want:    []want{{SeverityWarning, with(expNode, "queue", "orders", "group", "billing"), "The oldest unacknowledged message of group billing on stream orders (redis:6379) is 10m 0s old (threshold 5m)."}},
		}, {
			name:   "healthy: 2 seconds",
			series: []series{{signals.StreamGroupOldestPending.String() + `{` + exp + `, queue="orders", group="billing"}`, "2x59"}},
		}},
	}}
}

func exporterDefinitions(cfg Config) []definition {
	e := cfg.ExporterSelector
	inst := map[string]string{"job": "cachewatch-exporter", "instance": "exporter:9121"}
	instNode := with(inst, "node", "redis:6379")
	// An exporter that goes blind while one of its critical alerts fires
	// is itself critical: that alert keeps firing on its last data, but
	// nobody can see whether the harm goes on or gets worse.
	blindCritical := func(on string) string {
		return "max by (" + on + ") (" + alertsMetric + `{alertstate="firing", severity="critical", alertname=~"` + strings.Join(exporterCriticals(cfg), "|") + `"})`
	}
	lockBlind := []series{
		{signals.LocksWithoutTTL.String() + `{` + exp + `, key_group="lock:report:*"}`, "2x19 stale"},
		{signals.ExporterUp.String() + `{` + exp + `}`, "1x19 stale"},
	}
	return []definition{{
		group: groupExporter, name: "CachewatchExporterDown",
		query: "min by (job, instance) (" + vec(upMetric, e) + ")", by: "job, instance", op: "<",
		levels: []level{
			{severity: SeverityWarning, threshold: 1, text: "1"},
			{severity: SeverityCritical, threshold: 1, text: "1", also: blindCritical("job"), alsoOn: "job"},
		},
		forDur:      time.Duration(cfg.ExporterDownFor),
		summary:     "Prometheus cannot scrape the cachewatch exporter: keyspace and lock alerts are blind.",
		description: `The cachewatch exporter {{ $labels.instance }} of job {{ $labels.job }} has not been scraped successfully.`,
		runbook: runbook{
			meaning:  "Prometheus's own `up` series for the exporter's target is 0: the scrape failed. The alerts on the exporter's metrics cannot see the Redis any more: those that were firing keep firing on their last data (blindness is not recovery), none can start. Critical when one of them is critical (`" + strings.Join(exporterCriticals(cfg), "`, `") + "`): the harm may go on or get worse unseen.",
			resolves: "It resolves when a scrape succeeds again; the blind alerts then resolve or go on as the fresh data say.",
			causes: []string{
				"The exporter process is down or restarting.",
				"Network, TLS or basic-auth mismatch between Prometheus and `--web.config.file`.",
				"A scrape timeout shorter than the exporter's answer time.",
			},
			confirm: "On **" + boardKeyspace + "**, panel *Exporter up* and the *Sampler health: can this board be trusted?* row; Prometheus's Targets page shows the scrape error.",
			fix:     "Restart the exporter and read its log; check `--web.listen-address`, `--web.config.file` and Prometheus's `scrape_timeout`.",
		},
		cases: []testCase{{
			name:    "down",
			series:  []series{{upMetric + `{job="cachewatch-exporter", instance="exporter:9121"}`, "0x59"}},
			quietAt: []time.Duration{4 * time.Minute},
			want:    []want{{SeverityWarning, inst, "The cachewatch exporter exporter:9121 of job cachewatch-exporter has not been scraped successfully."}},
		}, {
			name:   "healthy: up",
			series: []series{{upMetric + `{job="cachewatch-exporter", instance="exporter:9121"}`, "1x59"}},
		}, {
			name:   "quiet: another job is down",
			series: []series{{upMetric + `{job="api", instance="api-0:8080"}`, "0x59"}},
		}, {
			name:    "critical: down while a lock without TTL was paging",
			series:  append(lockBlind, series{upMetric + `{job="cachewatch-exporter", instance="exporter:9121"}`, "1x19 0x40"}),
			quietAt: []time.Duration{22 * time.Minute},
			want: []want{
				{SeverityWarning, inst, "The cachewatch exporter exporter:9121 of job cachewatch-exporter has not been scraped successfully."},
				{SeverityCritical, inst, "The cachewatch exporter exporter:9121 of job cachewatch-exporter has not been scraped successfully."},
			},
		}},
	}, {
		group: groupExporter, name: "CachewatchExporterSampleFailing",
		query: "min by (job, instance, node) (" + vec(signals.ExporterUp.String(), e) + ")", by: "job, instance, node", op: "<",
		levels: []level{
			{severity: SeverityWarning, threshold: 1, text: "1"},
			{severity: SeverityCritical, threshold: 1, text: "1", also: blindCritical("job, node"), alsoOn: "job, node"},
		},
		forDur:      time.Duration(cfg.ExporterFailingFor),
		summary:     "The cachewatch exporter cannot sample a Redis node.",
		description: `The exporter {{ $labels.instance }} fails to sample Redis node {{ $labels.node }}.`,
		runbook: runbook{
			meaning: "The exporter is scraped but its last sample of the node failed (`" + signals.ExporterUp.String() + "` is 0): the node is unreachable or refuses the exporter's commands. The alerts on the node's sampled data keep firing on their last data meanwhile, none can start; critical when one of them is critical.",
			causes: []string{
				"Redis down or unreachable from the exporter.",
				"Wrong password or ACL user (`$CACHEWATCH_REDIS_PASSWORD`, `--redis.password-file`, `--redis.user`), or an ACL without `INFO`/`SCAN`/`TTL` rights.",
				"TLS settings (`--redis.tls`, `--redis.tls-ca-file`).",
			},
			confirm: "On **" + boardKeyspace + "**, panels *Exporter up* and *Sampler errors by stage and class* (stage `connect` or `info`, class `auth`, `noperm`, `connection`).",
			fix:     "Fix connectivity or credentials; `cachewatch doctor` with the same flags prints the failing step.",
		},
		cases: []testCase{{
			name:    "failing",
			series:  []series{{signals.ExporterUp.String() + `{` + exp + `}`, "0x59"}},
			quietAt: []time.Duration{4 * time.Minute},
			want:    []want{{SeverityWarning, instNode, "The exporter exporter:9121 fails to sample Redis node redis:6379."}},
		}, {
			name:   "healthy: sampling",
			series: []series{{signals.ExporterUp.String() + `{` + exp + `}`, "1x59"}},
		}, {
			name: "critical: failing while a lock without TTL was paging",
			series: []series{
				{signals.LocksWithoutTTL.String() + `{` + exp + `, key_group="lock:report:*"}`, "2x19 stale"},
				{signals.ExporterUp.String() + `{` + exp + `}`, "1x19 0x40"},
			},
			quietAt: []time.Duration{22 * time.Minute},
			want: []want{
				{SeverityWarning, instNode, "The exporter exporter:9121 fails to sample Redis node redis:6379."},
				{SeverityCritical, instNode, "The exporter exporter:9121 fails to sample Redis node redis:6379."},
			},
		}},
	}, {
		group: groupExporter, name: "CachewatchExporterSampleErrors",
		query: "sum by (job, instance, node, stage) (" + window(cfg.RateWindow.String()).rate(signals.ExporterErrors.String(), e) + ") * 60", by: "job, instance, node, stage", op: ">",
		levels:      []level{lvl(SeverityInfo, 0, "0")},
		forDur:      time.Duration(cfg.ExporterErrorsFor),
		summary:     "The exporter keeps failing one sampling stage; its other figures are still served.",
		description: `The exporter {{ $labels.instance }} fails stage {{ $labels.stage }} on {{ $labels.node }} {{ $value | humanize }} times a minute.`,
		runbook: runbook{
			meaning: "One stage of the sampler (scan, keys, locks, queues, latency…) fails on every sample while the others succeed, so some panels are empty or stale.",
			causes: []string{
				"ACL rights missing for one command (`class=noperm`), e.g. `LATENCY` or `XINFO`.",
				"Timeouts on a large keyspace (`class=timeout`).",
				"A command answered by an error the sampler does not expect, e.g. from a proxy in front of Redis (`class=other`); a reply that is not Redis's or too large (`class=malformed`) makes the whole node down instead (*CachewatchExporterDown*).",
			},
			confirm: "On **" + boardKeyspace + "**, panel *Sampler errors by stage and class*.",
			fix:     "Grant the missing command to the exporter's ACL user; lower `--sample.max-keys` or raise `--sample.max-duration`; fix the `--queue` list.",
		},
		cases: []testCase{{
			name:    "6 a minute",
			series:  []series{{signals.ExporterErrors.String() + `{` + exp + `, stage="queues", class="noperm"}`, "0+6x59"}},
			quietAt: []time.Duration{14 * time.Minute},
			want:    []want{{SeverityInfo, with(instNode, "stage", "queues"), "The exporter exporter:9121 fails stage queues on redis:6379 6 times a minute."}},
		}, {
			name:   "healthy: none",
			series: []series{{signals.ExporterErrors.String() + `{` + exp + `, stage="queues", class="noperm"}`, "0x59"}},
		}},
	}, {
		group: groupExporter, name: "CachewatchExporterKeyspaceCoverageLow",
		query: "min by (job, instance, node) (" + vec(signals.ExporterKeyspaceCoverage.String(), e) + ")", by: "job, instance, node", op: "<",
		levels:      []level{lvl(SeverityWarning, cfg.KeyspaceCoverage, pct(cfg.KeyspaceCoverage))},
		forDur:      time.Duration(cfg.KeyspaceCoverageFor),
		summary:     "The exporter does not cover the whole keyspace: lock and expiry figures are partial.",
		description: `The exporter {{ $labels.instance }} covers {{ $value | humanizePercentage }} of the keyspace of {{ $labels.node }} (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "The keyspace figures served (locks held, locks without TTL, expiry synchronisation) come from a fraction of the node's keys: the per-sample budget does not let a SCAN pass finish. Alerts on those figures may miss problems.",
			causes: []string{
				"A keyspace larger than `--sample.max-keys` × samples per pass can cover in time.",
				"`--sample.max-duration` or `--sample.keys-per-second` too low for the keyspace.",
			},
			confirm: "On **" + boardKeyspace + "**, panels *Keyspace coverage*, *Scan cycles, truncated samples and keys scanned* and *Sample duration* in the *Sampler health: can this board be trusted?* row.",
			fix:     "Raise `--sample.max-keys`, `--sample.max-duration` or `--sample.keys-per-second` within what the server can afford, or narrow `--locks.pattern`.",
		},
		cases: []testCase{{
			name:    "40% covered",
			series:  []series{{signals.ExporterKeyspaceCoverage.String() + `{` + exp + `}`, "0.4x59"}},
			quietAt: []time.Duration{29 * time.Minute},
			want:    []want{{SeverityWarning, instNode, "The exporter exporter:9121 covers 40% of the keyspace of redis:6379 (threshold 100%)."}},
		}, {
			name:   "healthy: full",
			series: []series{{signals.ExporterKeyspaceCoverage.String() + `{` + exp + `}`, "1x59"}},
		}},
	}}
}

// exporterCriticals names the critical alerts computed from the exporter's
// samples.
func exporterCriticals(cfg Config) []string {
	var out []string
	for _, d := range keyspaceDefinitions(cfg) {
		for _, l := range d.levels {
			if l.severity == SeverityCritical && d.seen != nil {
				out = append(out, d.name)
				break
			}
		}
	}
	return out
}

// serviceSight: the service's data are seen while any series of live (a
// metric its emitters export from their start) of the job is scraped. It
// reads the services' own series, not Prometheus's up, so that services
// pushing OTLP are judged the same way.
func serviceSight(cfg Config, live, healthyValues string) *sight {
	return &sight{
		who:     "the service not scraped",
		on:      "job",
		healthy: "group by (job) (" + vec(live, cfg.ServiceSelector) + ")",
		fixture: []series{{live + `{job="api", instance="api-1:8080"}`, healthyValues}},
	}
}

// exporterSight: a node's data of family (locks, keys, server, queues)
// are seen while an exporter scrapes and samples the node and has
// refreshed that family within the stale-state bound (a lock pass that has
// not finished after a restart, or a failing stage, is no sight).
func exporterSight(cfg Config, family string) *sight {
	e := cfg.ExporterSelector
	fam := `family="` + family + `"`
	return &sight{
		who: "no exporter scraped, sampling the node and refreshing these figures",
		on:  "job, node",
		healthy: "max by (job, node) (" + vec(signals.ExporterUp.String(), e) + ") == 1" +
			"\nand on (job, node)\n(time() - max by (job, node) (" + vec(signals.ExporterDataTimestamp.String(), e, fam) + "))" +
			"\n<= " + num(cfg.LockStateStaleIntervals) + " * max by (job, node) (" + vec(signals.ExporterSampleInterval.String(), e) + ")",
		fixture: []series{
			{signals.ExporterUp.String() + `{` + exp + `}`, "1x59"},
			{signals.ExporterDataTimestamp.String() + `{` + exp + `, ` + fam + `}`, "0+60x59"},
			{signals.ExporterSampleInterval.String() + `{` + exp + `}`, "15x59"},
		},
	}
}
