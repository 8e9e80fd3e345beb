package alerts

import (
	"time"
)

// cacheRecording are the recording rules of the cache tickets.
var cacheRecording = []recording{{
	record: "key_group:cachewatch_cache_lookups:rate${rate_window}",
	expr:   `sum by (job, key_group) (rate(cachewatch_cache_lookups_total{${service_selector}}[${rate_window}]))`,
	seen:   "cachewatch_cache_lookups_total",
}, {
	record: "key_group:cachewatch_cache_stale:ratio_rate${rate_window}",
	expr: `sum by (job, key_group) (rate(cachewatch_cache_lookups_total{${service_selector}, result="stale"}[${rate_window}]))
/
sum by (job, key_group) (rate(cachewatch_cache_lookups_total{${service_selector}}[${rate_window}]))`,
	seen: "cachewatch_cache_lookups_total",
}, {
	// Loader calls per stored load: a load whose value was refused (its
	// refresh claim passed to another loader, or the key was invalidated, while it
	// ran) was wasted work. 1 is healthy.
	record: "key_group:cachewatch_loader_amplification:ratio_rate${rate_window}",
	expr: `sum by (job, key_group) (rate(cachewatch_loader_calls_total{${service_selector}, result=~"success|error"}[${rate_window}]))
/
(
  sum by (job, key_group) (rate(cachewatch_loader_calls_total{${service_selector}, result=~"success|error"}[${rate_window}]))
  -
  (
    sum by (job, key_group) (rate(cachewatch_cache_stale_writes_refused_total{${service_selector}}[${rate_window}]))
    or
    0 * sum by (job, key_group) (rate(cachewatch_loader_calls_total{${service_selector}, result=~"success|error"}[${rate_window}]))
  )
)`,
	seen: "cachewatch_loader_calls_total",
}, {
	record: "key_group:cachewatch_cache_miss_bursts:rate${rate_window}",
	expr:   `sum by (job, key_group) (rate(cachewatch_cache_miss_bursts_total{${service_selector}}[${rate_window}]))`,
	seen:   "cachewatch_cache_miss_bursts_total",
}}

// breakerWindow is how long a circuit breaker must have stayed away from
// closed for its ticket: longer than one opening and its trial call.
const breakerWindow = "1m"

func lookups(result, values string) series {
	return series{`cachewatch_cache_lookups_total{` + svc + `, result="` + result + `"}`, values}
}

func cacheDefinitions(cfg Config) []definition {
	return []definition{staleRatio(cfg), staleForever(cfg), loaderAmplification(cfg), missBurst(cfg),
		writeSkew(cfg), duplicateVersionWrites(cfg), breakerOpen(cfg), keyGroupOverflow(cfg)}
}

func staleRatio(cfg Config) definition {
	return definition{
		group: groupCache, name: "CachewatchStaleServeRatioHigh",
		query: "key_group:cachewatch_cache_stale:ratio_rate${rate_window}", by: "job, key_group", op: ">",
		levels: []level{lvl(SeverityWarning, cfg.StaleRatioWarning, pct(cfg.StaleRatioWarning))},
		guard:  "key_group:cachewatch_cache_lookups:rate${rate_window} > ${min_lookups_per_second:num}", guardOn: "job, key_group",
		seen:        serviceSight("cachewatch_cache_lookups_total", "0x59"),
		forDur:      time.Duration(cfg.StaleRatioFor),
		summary:     "Most cache lookups are served stale data.",
		description: `{{ $value | humanizePercentage }} of cache lookups of key group {{ $labels.key_group }} in {{ $labels.job }} were served stale (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "Stale-while-revalidate answers with values past their fresh TTL while one caller refreshes them. A high share means refreshes do not keep up or do not succeed: users see old data, and the step to stale-forever is short. Stale answers are answers: the cache availability objective counts them as good, so this is a ticket, not a page.",
			causes: []string{
				"Refreshes fail (source down, timeouts) so values stay stale until their hard TTL.",
				"Fresh TTL much shorter than the time a refresh takes.",
				"The refresh claim (`CacheOptions.RefreshClaimTTL`) expires before slow loads finish, so no load ever stores.",
			},
			confirm: "On **" + boardContention + "**, panel *Cache lookups by result (share)* and *Stale age served p50 / p99*; then *Loader refresh failures* and *Loader duration p50 / p99*.",
			fix:     "Fix the failing source first (see CachewatchStaleForever); size `CacheOptions.FreshTTL` above the recompute p99 and `RefreshClaimTTL` above the slowest load; enable probabilistic early refresh (`CacheOptions.Beta: 1`) so hot keys refresh before they go stale.",
		},
		cases: []testCase{{
			name:    "70% stale",
			series:  []series{lookups("stale", "0+42x59"), lookups("hit", "0+18x59")},
			quietAt: []time.Duration{10 * time.Minute},
			want:    []want{{SeverityWarning, svcLabels, "70% of cache lookups of key group lock:report:* in api were served stale (threshold 50%)."}},
		}, {
			name:   "healthy: 10% stale",
			series: []series{lookups("stale", "0+6x59"), lookups("hit", "0+54x59")},
		}},
	}
}

func staleForever(cfg Config) definition {
	return definition{
		group: groupCache, name: "CachewatchStaleForever",
		query: `max by (job, key_group) (cachewatch_loader_consecutive_failures{${service_selector}})`, by: "job, key_group", op: ">=",
		levels: []level{lvl(SeverityWarning, cfg.ConsecutiveLoaderFailures, num(cfg.ConsecutiveLoaderFailures))},
		// Past the hard TTL the failing values expire and leave the gauge,
		// but callers now get errors: the same outage, worse.
		worse: `max by (job, key_group) (max_over_time(cachewatch_loader_consecutive_failures{${service_selector}}[${stale_forever_lookback}])) >= ${consecutive_loader_failures:num}
and on (job, key_group)
sum by (job, key_group) (rate(cachewatch_cache_lookups_total{${service_selector}, result="error"}[${rate_window}])) > 0`,
		seen:        serviceSight("cachewatch_cache_lookups_total", "0x59"),
		forDur:      time.Duration(cfg.ConsecutiveLoaderFailuresFor),
		summary:     "Every refresh of some cached values fails: stale-while-revalidate has become stale-forever.",
		description: `A key of group {{ $labels.key_group }} in {{ $labels.job }} failed {{ $value | printf "%.0f" }} refreshes in a row (threshold {{threshold}}): it is served stale until its hard TTL, then callers get errors.`,
		runbook: runbook{
			meaning: "The longest current run of consecutive failed refreshes among the group's keys reached the threshold. The cache keeps answering with old data (no harm yet: stale answers are good for the cache availability objective) and refuses it once the hard TTL passes; " +
				"from then on callers get errors, which page as CachewatchCacheAvailabilityBudgetBurn, and this ticket stays open while they do, so it never reads as a recovery.",
			resolves: "It resolves when refreshes succeed again (the run ended) and no lookup of the group failed within the rate window; it does not resolve into the errors that follow the hard TTL.",
			causes: []string{
				"The source (database, API) is down or rejects the loader's queries.",
				"The loader times out: its context is bounded by `CacheOptions.RefreshClaimTTL`.",
				"A bug makes the loader fail for some keys only (a deleted row, a bad payload).",
			},
			confirm: "On **" + boardContention + "**, panels *Consecutive loader failures*, *Loader refresh failures* and *Loader duration p50 / p99* by result; *Stale age served p50 / p99* grows while it lasts; past the hard TTL, the `error` band of *Cache lookups by result (share)* and *Hard-TTL refusals*.",
			fix:     "Fix the source or the loader. Meanwhile `CacheOptions.FailureHoldoff` keeps a failing source from being hammered (one retry per hold-off), and `HardTTL` bounds how old served data can get; lower it if stale data is worse than an error.",
		},
		cases: []testCase{{
			name:    "7 failures in a row",
			series:  []series{{`cachewatch_loader_consecutive_failures{` + svc + `}`, "7x59"}},
			quietAt: []time.Duration{9 * time.Minute},
			want:    []want{{SeverityWarning, svcLabels, "A key of group lock:report:* in api failed 7 refreshes in a row (threshold 5): it is served stale until its hard TTL, then callers get errors."}},
		}, {
			name: "worse: past the hard TTL the run leaves the gauge and callers get errors",
			series: []series{
				{`cachewatch_loader_consecutive_failures{` + svc + `}`, "7x24 0x35"},
				lookups("error", "0x24 0+6x35"), lookups("hit", "0+54x59"),
			},
			want: []want{{SeverityWarning, svcLabels, "A key of group lock:report:* in api failed 7 refreshes in a row (threshold 5): it is served stale until its hard TTL, then callers get errors."}},
		}, {
			name: "recovered: refreshes succeed and nothing fails any more",
			series: []series{
				{`cachewatch_loader_consecutive_failures{` + svc + `}`, "7x24 0x35"},
				lookups("error", "0x24 0+6x9 54x25"), lookups("hit", "0+54x59"),
			},
		}, {
			name:   "healthy: 2 failures then success",
			series: []series{{`cachewatch_loader_consecutive_failures{` + svc + `}`, "2x59"}},
		}},
	}
}

func loaderAmplification(cfg Config) definition {
	return definition{
		group: groupCache, name: "CachewatchLoaderAmplification",
		query: "key_group:cachewatch_loader_amplification:ratio_rate${rate_window}", by: "job, key_group", op: ">",
		levels:      []level{lvl(SeverityWarning, cfg.LoaderAmplification, num(cfg.LoaderAmplification))},
		seen:        serviceSight("cachewatch_cache_lookups_total", "0x59"),
		forDur:      time.Duration(cfg.LoaderAmplificationFor),
		summary:     "More than one loader call per stored load: a stampede got through to the source.",
		description: `Key group {{ $labels.key_group }} in {{ $labels.job }} makes {{ $value | printf "%.1f" }} loader calls per stored load (healthy: 1, threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "Loader calls divided by the loads whose value was stored (`cachewatch_loader_calls_total` over itself less `cachewatch_cache_stale_writes_refused_total`). Above 1, loaders ran whose result was thrown away because another loader took the refresh claim or the key was invalidated mid-load: the source did the same work more than once.",
			causes: []string{
				"Loads slower than `CacheOptions.RefreshClaimTTL`: the refresh claim expires, a waiter takes over and loads again.",
				"Invalidation racing with loads (`Invalidate` while a refresh runs) on a hot key.",
				"Several caches with different names or codecs sharing keys, so their refresh claims do not coordinate.",
			},
			confirm: "On **" + boardContention + "**, panel *Loader amplification (loader calls per kept result)* with *Loader duration p50 / p99* (compare its p99 with `CacheOptions.RefreshClaimTTL`) and *Duplicate version writes*.",
			fix:     "Raise `CacheOptions.RefreshClaimTTL` above the recompute p99.9; invalidate after the source changed, not before; give one `instrument.Cache` per key space.",
		},
		cases: []testCase{{
			name: "half the loads refused",
			series: []series{
				{`cachewatch_loader_calls_total{` + svc + `, result="success"}`, "0+60x59"},
				{`cachewatch_cache_stale_writes_refused_total{` + svc + `}`, "0+30x59"},
			},
			quietAt: []time.Duration{14 * time.Minute},
			want:    []want{{SeverityWarning, svcLabels, "Key group lock:report:* in api makes 2.0 loader calls per stored load (healthy: 1, threshold 1)."}},
		}, {
			name:   "healthy: every load stored, nothing refused yet",
			series: []series{{`cachewatch_loader_calls_total{` + svc + `, result="success"}`, "0+60x59"}},
		}},
	}
}

func missBurst(cfg Config) definition {
	return definition{
		group: groupCache, name: "CachewatchMissBurst",
		query: "key_group:cachewatch_cache_miss_bursts:rate${rate_window} * 60", by: "job, key_group", op: ">",
		levels:      []level{lvl(SeverityWarning, cfg.MissBurstsPerMinute, num(cfg.MissBurstsPerMinute)+" per minute")},
		seen:        serviceSight("cachewatch_cache_lookups_total", "0x59"),
		forDur:      time.Duration(cfg.MissBurstFor),
		summary:     "Cache misses come in bursts: stampedes keep happening.",
		description: `Key group {{ $labels.key_group }} in {{ $labels.job }} has {{ $value | printf "%.1f" }} miss bursts per minute over the last ${rate_window} (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "The windowed detector counted windows in which a key group's misses reached the burst threshold (`MissBurstWindow` / `MissBurstThreshold`) more often than the threshold, again and again for the `for:` duration: many callers miss the same keys at once. One burst is an event on the dashboard; bursts that keep coming open a ticket.",
			causes: []string{
				"Keys written together expire together (missing TTL jitter).",
				"A mass invalidation or a flush, or deleting cache entries before the new data is ready.",
				"A cold start (deploy, new cache node) with no warm-up.",
			},
			confirm: "On **" + boardContention + "**, panels *Miss bursts* and *Cache lookups by result (share)*; on **" + boardKeyspace + "**, *Expiry synchronisation per key group* and *Server hit ratio* and *Server miss bursts*.",
			fix:     "Jitter TTLs (`CacheOptions.Jitter`); use `instrument.Cache.Fetch` so misses coalesce into one load per key; invalidate with `Invalidate`/`InvalidateMatch` after the new data exists; warm hot keys before switching traffic.",
		},
		cases: []testCase{{
			name:    "3 bursts a minute",
			series:  []series{{`cachewatch_cache_miss_bursts_total{` + svc + `}`, "0+3x59"}},
			quietAt: []time.Duration{4 * time.Minute},
			want:    []want{{SeverityWarning, svcLabels, "Key group lock:report:* in api has 3.0 miss bursts per minute over the last 5m (threshold 1 per minute)."}},
		}, {
			name:   "quiet: a burst now and then",
			series: []series{{`cachewatch_cache_miss_bursts_total{` + svc + `}`, "0x20 1x20 2x17"}},
		}, {
			name:   "healthy: no bursts",
			series: []series{{`cachewatch_cache_miss_bursts_total{` + svc + `}`, "0x59"}},
		}},
	}
}

func writeSkew(cfg Config) definition {
	return definition{
		group: groupCache, name: "CachewatchWriteSkew",
		query: `sum by (job, key_group) (increase(cachewatch_write_skew_total{${service_selector}}[${event_window}]))`, by: "job, key_group", op: ">",
		levels:      []level{lvl(SeverityInfo, 0, "0")},
		forDur:      time.Duration(cfg.WriteSkewFor),
		summary:     "Older results tried to overwrite newer ones (rejected by versioned writes).",
		description: `{{ $value | printf "%.0f" }} versioned writes of key group {{ $labels.key_group }} in {{ $labels.job }} carried an older version than the stored one in the last ${event_window}.`,
		runbook: runbook{
			meaning: "`SetVersioned` refused writes whose version was older than the stored one. The data is safe (the newer version stays) but jobs complete out of order: a retried or slow job finished after a newer one. Informational: nobody is notified.",
			causes: []string{
				"Queue retries redeliver old jobs after newer ones completed.",
				"Unbounded retries or missing idempotency keys make old work run again.",
				"Slow workers (lock lost mid-work) finish after their successor.",
			},
			confirm: "On **" + boardContention + "**, panel *Write skew and refused stale writes*, *Duplicate version writes*, with *Idempotency checks by result* and *Lost locks by reason*; on **" + boardKeyspace + "**, the queue panels (oldest age, pending).",
			fix:     "Keep versioned writes (`SetVersioned`) where order matters; dedupe jobs with idempotency keys (`FirstSeen`); bound retries; fix lost locks (CachewatchLocksLost).",
		},
		cases: []testCase{{
			name:    "2 skewed writes",
			series:  []series{{`cachewatch_write_skew_total{` + svc + `}`, "0x34 2x24"}},
			quietAt: []time.Duration{35 * time.Minute},
			want:    []want{{SeverityInfo, svcLabels, "2 versioned writes of key group lock:report:* in api carried an older version than the stored one in the last 15m."}},
		}, {
			name:   "healthy: none",
			series: []series{{`cachewatch_write_skew_total{` + svc + `}`, "0x59"}},
		}},
	}
}

func duplicateVersionWrites(cfg Config) definition {
	return definition{
		group: groupCache, name: "CachewatchDuplicateVersionWrites",
		query: `sum by (job, key_group) (increase(cachewatch_duplicate_version_writes_total{${service_selector}}[${event_window}]))`, by: "job, key_group", op: ">",
		levels:      []level{lvl(SeverityInfo, 0, "0")},
		forDur:      time.Duration(cfg.DuplicatesFor),
		summary:     "The same version was computed and written twice.",
		description: `{{ $value | printf "%.0f" }} versioned writes of key group {{ $labels.key_group }} in {{ $labels.job }} repeated a version already stored in the last ${event_window}.`,
		runbook: runbook{
			meaning: "`SetVersioned` found the same version already stored: the work was done twice. Harmless for the data, wasteful for the source, and a sign that coordination leaks. Informational: nobody is notified.",
			causes: []string{
				"Lock TTL shorter than the work: a second worker took over while the first still ran.",
				"Jobs redelivered (at-least-once queues) without an idempotency check.",
			},
			confirm: "On **" + boardContention + "**, panel *Write skew and refused stale writes*, *Duplicate version writes* with *Lost locks by reason* and *Idempotency checks by result*.",
			fix:     "Renew long locks (`LockOptions.Renew`) or raise `LockOptions.TTL`; check `FirstSeen` idempotency keys before the work.",
		},
		cases: []testCase{{
			name:    "2 duplicates",
			series:  []series{{`cachewatch_duplicate_version_writes_total{` + svc + `}`, "0x34 2x24"}},
			quietAt: []time.Duration{35 * time.Minute},
			want:    []want{{SeverityInfo, svcLabels, "2 versioned writes of key group lock:report:* in api repeated a version already stored in the last 15m."}},
		}, {
			name:   "healthy: none",
			series: []series{{`cachewatch_duplicate_version_writes_total{` + svc + `}`, "0x59"}},
		}},
	}
}

func breakerOpen(cfg Config) definition {
	state := func(values string) []series {
		return []series{{`cachewatch_circuit_breaker_state{job="api", instance="api-0:8080", client="products"}`, values}}
	}
	return definition{
		group: groupCache, name: "CachewatchCircuitBreakerOpen",
		// Closed is 0, half-open 1, open 2: a breaker that has not been
		// closed once in the last minute keeps failing its trial calls.
		// One short opening that closes again never fires.
		query: `max by (job, instance, client) (min_over_time(cachewatch_circuit_breaker_state{${service_selector}}[` + breakerWindow + `]))`, by: "job, instance, client", op: ">=",
		levels:      []level{lvl(SeverityWarning, 1, "never closed")},
		seen:        serviceSight("cachewatch_circuit_breaker_state", "0x59"),
		forDur:      time.Duration(cfg.BreakerOpenFor),
		summary:     "The circuit breaker guarding Redis stays open: Redis calls fail and loads go straight to the source.",
		description: `Circuit breaker {{ $labels.client }} of {{ $labels.instance }} in {{ $labels.job }} has not closed in the last ` + breakerWindow + `.`,
		impact:      fallbackImpact,
		runbook: runbook{
			meaning: "`CacheOptions.BreakerFailures` consecutive Redis failures opened the breaker (state 2), and its trial calls (half-open, state 1) keep failing: it has not been closed for a minute, and for the `for:` duration. While open, `Fetch` skips Redis and calls the loader directly, bounded by `FallbackConcurrency`: the cache protects nothing and the source takes the load. " +
				"A cause, so a ticket: CachewatchRedisUnreachable pages when Redis is unreachable (and inhibits this ticket), CachewatchCacheAvailabilityBudgetBurn when callers get errors.",
			resolves: "It resolves once the breaker has closed again; a breaker that opens for a few seconds and closes never fires.",
			causes: []string{
				"Redis down, unreachable, failing over or overloaded (timeouts).",
				"`CacheOptions.RedisTimeout` too low for the Redis latency.",
				"Connection pool starvation (see CachewatchPoolTimeouts).",
			},
			confirm: "On **" + boardContention + "**, panels *Circuit breaker state*, *Fallback calls in flight* and *Fallbacks by cause* (refused connections, error replies or a stalled Redis); on **" + boardRedis + "**, *Command errors by class* and *Pool waits and timeouts*; on **" + boardKeyspace + "**, *Exporter up*.",
			fix:     "Restore Redis. Keep `FallbackConcurrency` small enough for the source to survive; tune `CacheOptions.RedisTimeout`, and `CacheOptions.BreakerHalfOpenAfter` (how long the breaker stays open before its trial call), if the breaker trips on normal latency.",
		},
		cases: []testCase{{
			name:    "open, its trial calls failing",
			series:  state("0x9 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2 2 1 2"),
			quietAt: []time.Duration{2 * time.Minute, 10 * time.Minute},
			want:    []want{{SeverityWarning, map[string]string{"job": "api", "instance": "api-0:8080", "client": "products"}, "Circuit breaker products of api-0:8080 in api has not closed in the last 1m."}},
		}, {
			name:   "healthy: open for a few seconds, then closed",
			series: state("0x29 2 0x29"),
		}, {
			name:   "healthy: closed, once half-open",
			series: state("0x29 1 0x28"),
		}},
	}
}

// fallbackImpact names the load a Redis outage moves to the source: the
// job's lookups per minute that fall back to the loader (Prometheus only:
// Grafana's templates cannot query).
const fallbackImpact = `{{ with printf "sum(rate(cachewatch_cache_fallbacks_total{job=%q}[${rate_window}])) * 60 > 0" $labels.job | query }} Meanwhile {{ . | first | value | printf "%.0f" }} lookups per minute fall back to the source (the database).{{ end }}`

func keyGroupOverflow(cfg Config) definition {
	return definition{
		group: groupCache, name: "CachewatchKeyGroupOverflow",
		query: `sum by (job, instance) (rate(cachewatch_keygroup_overflow_total{${service_selector}}[${rate_window}])) * 60`, by: "job, instance", op: ">",
		levels:      []level{lvl(SeverityInfo, 0, "0")},
		forDur:      time.Duration(cfg.KeyGroupOverflowFor),
		summary:     "Keys fold into the `other` key group: the cap on distinct groups is reached.",
		description: `{{ $labels.instance }} in {{ $labels.job }} classifies {{ $value | printf "%.1f" }} keys per minute into the other key group.`,
		runbook: runbook{
			meaning: "The key-group classifier reached its cap (200 by default) and folds new groups into `other`. Per-group panels and alerts lose precision for those keys. Informational: nobody is notified.",
			causes: []string{
				"Names each shared by enough keys to be learnt (`--keygroup.min-keys`, 20 by default): large tenants or a small dictionary of words, each making its own group; or, with names kept from the first key (min-keys 1), an ID-like part the classifier does not recognise (slugs).",
				"A new feature with many key shapes.",
			},
			confirm: "On **" + boardContention + "**, the `key_group` variable lists many near-identical groups and `other` grows in *Cache lookups by result (share)*.",
			fix:     "Add rules to the `keygroup.Classifier` passed as `KeyGroups` (glob or regexp → group name), or `--keygroup.rule glob=group` for the exporter; raise the cap only if the groups are genuinely distinct.",
		},
		cases: []testCase{{
			name:    "6 a minute",
			series:  []series{{`cachewatch_keygroup_overflow_total{job="api", instance="api-0:8080"}`, "0+6x59"}},
			quietAt: []time.Duration{14 * time.Minute},
			want:    []want{{SeverityInfo, map[string]string{"job": "api", "instance": "api-0:8080"}, "api-0:8080 in api classifies 6.0 keys per minute into the other key group."}},
		}, {
			name:   "healthy: none",
			series: []series{{`cachewatch_keygroup_overflow_total{job="api", instance="api-0:8080"}`, "0x59"}},
		}},
	}
}
