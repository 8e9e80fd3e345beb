package alerts

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// sloPeriod is the period of every SLO's error budget.
const sloPeriod = "30d"

// SLO is one service-level objective the rules page on: a service-level
// indicator generated from the catalog, as the bad and all events of a
// window, per job and identity label.
type SLO struct {
	// Name is the slo label of its alerts ("cache-availability").
	Name string
	// Alert is the name of its burn-rate alerts.
	Alert string
	// Objective is the share of good events over 30 days, from the Config.
	Objective float64
	// ErrorQuery and TotalQuery are the rates of bad and of all events
	// over the window {{.window}} (sloth's placeholder), by job and the
	// identity label.
	ErrorQuery, TotalQuery string
	// Description says what is good and what is bad.
	Description string

	level, by  string // recording level; labels of the rates
	objective  string // the Config key of the objective
	minTraffic string // the Config key of the traffic floor
	live       string // the metric whose presence says the job is seen
	noun       string // what an event is, in descriptions ("cache lookups")
	whose      string // whose events, as a description template
	harm       string // what callers suffer, in descriptions
	summary    string
	runbook    runbook
	// fixture are series of good and bad events in promtool's notation,
	// of the test cases' labels.
	fixture func(good, bad string) []series
}

// tier is one burn-rate tier: the error budget share that burns in the
// long window (the short one agreeing) pages or opens a ticket.
type tier struct {
	name, long, short string
	factor            float64
	budget            string // the share of the 30-day budget, in words
	severity          string
	forKey            string
}

// tiers are the SRE workbook's (and sloth's) tiers for a 30-day budget:
// factor = budget share × 30 days / long window.
var tiers = []tier{
	{"1h", "1h", "5m", 14.4, "2%", SeverityCritical, "burn_page_1h_for"},
	{"6h", "6h", "30m", 6, "5%", SeverityCritical, "burn_page_6h_for"},
	{"1d", "1d", "2h", 3, "10%", SeverityWarning, "burn_ticket_1d_for"},
	{"3d", "3d", "6h", 1, "10%", SeverityWarning, "burn_ticket_3d_for"},
}

// sloWindows are the windows the SLIs are recorded over: every tier's
// long and short window.
var sloWindows = []string{"5m", "30m", "1h", "2h", "6h", "1d", "3d"}

// SLOs returns the service-level objectives for cfg, their queries filled
// in.
func SLOs(cfg Config) []SLO {
	out := slos()
	for i := range out {
		s := &out[i]
		s.ErrorQuery, s.TotalQuery = expand(cfg, s.ErrorQuery), expand(cfg, s.TotalQuery)
		s.Objective = objectiveOf(cfg, s.objective)
	}
	return out
}

// objectiveOf is the objective of a Config key.
func objectiveOf(cfg Config, key string) float64 { return cfg.field(key).Float() }

// slos are the SLO templates.
func slos() []SLO {
	return []SLO{cacheAvailability(), redisAvailability(), lockWait()}
}

func cacheAvailability() SLO {
	return SLO{
		Name: "cache-availability", Alert: "CachewatchCacheAvailabilityBudgetBurn",
		ErrorQuery: `sum by (job, key_group) (rate(cachewatch_cache_lookups_total{${service_selector}, result="error"}[{{.window}}]))`,
		TotalQuery: `sum by (job, key_group) (rate(cachewatch_cache_lookups_total{${service_selector}}[{{.window}}]))`,
		Description: "Cache lookups answered without an error: hits, stale serves, misses loaded, coalesced callers and fallbacks to the source are good; " +
			"a lookup that ends in an error for its caller (the loader failed with nothing safe to serve, or Redis was down and the fallback failed) is bad.",
		level: "key_group", by: "job, key_group", objective: "cache_availability_objective", minTraffic: "min_lookups_per_second",
		live: "cachewatch_cache_lookups_total", noun: "cache lookups",
		whose: "of key group {{ $labels.key_group }} in {{ $labels.job }}", harm: "callers get errors instead of data",
		summary: "Cache lookups fail callers fast enough to spend the error budget: callers get errors now.",
		runbook: runbook{
			meaning: "The share of cache lookups (`instrument.Cache.Fetch`) that ended in an error for the caller burns the error budget of the cache availability objective " +
				"(`cache_availability_objective`, default 99.9 % over 30 days) in the tier's time: the loader fails and nothing within its hard TTL is left to serve, " +
				"or Redis is unavailable and the direct call to the source failed or found no free slot. Stale answers are good: this is the harm " +
				"stale-while-revalidate exists to prevent, now reaching users.",
			causes: []string{
				"The source (database, API) has been failing for longer than `HardTTL - FreshTTL`: stale-forever (ticket CachewatchStaleForever) turned into errors.",
				"A cold key (never cached, or invalidated) whose loader fails: nothing stale exists to serve.",
				"Redis unavailable (page CachewatchRedisUnreachable, ticket CachewatchCircuitBreakerOpen) and the fallback to the source failing or out of slots (`FallbackConcurrency`).",
				"A loader that fails for some keys only (a deleted row returned as an error instead of `instrument.ErrNotFound`).",
			},
			confirm: "On **" + boardContention + "**, the *Service-level objectives* row (*Error budget remaining*, *Burn rate by window (cache availability)*), then *Cache lookups by result (share)* (the `error` band), *Hard-TTL refusals*, *Loader refresh failures* and *Loader duration p50 / p99* by result; *Circuit breaker state* tells a Redis outage from a source outage.",
			fix:     "Restore the source (or Redis). If serving older data beats an error, raise `CacheOptions.HardTTL`; keep `FailureHoldoff` so the recovering source is not stampeded; return `instrument.ErrNotFound` for missing rows so they are cached as absent rather than failing.",
		},
		fixture: func(good, bad string) []series {
			return []series{{`cachewatch_cache_lookups_total{` + svc + `, result="hit"}`, good}, {`cachewatch_cache_lookups_total{` + svc + `, result="error"}`, bad}}
		},
	}
}

func redisAvailability() SLO {
	return SLO{
		Name: "redis-availability", Alert: "CachewatchRedisAvailabilityBudgetBurn",
		ErrorQuery: `sum by (job, client) (rate(cachewatch_redis_command_errors_total{${service_selector}, error_class=~"timeout|connection|unavailable|busy"}[{{.window}}]))`,
		TotalQuery: `sum by (job, client) (rate(cachewatch_redis_command_duration_seconds_count{${service_selector}}[{{.window}}]))`,
		Description: "Redis commands as a client sees them (the hook): a command that got a reply is good, error replies of the command itself (WRONGTYPE, NOPERM, OOM) included; " +
			"a command that got none is bad: connection refused or reset, timeouts (the pool's included), and servers that cannot serve (LOADING, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, READONLY, BUSY). " +
			"Replies the client handles itself, such as NOSCRIPT before EVAL, are no errors.",
		level: "client", by: "job, client", objective: "redis_availability_objective", minTraffic: "min_commands_per_second",
		live: "cachewatch_redis_command_duration_seconds_count", noun: "Redis commands",
		whose: "of client {{ $labels.client }} in {{ $labels.job }}", harm: "commands get no reply",
		summary: "Redis commands go unanswered fast enough to spend the error budget: the service cannot reach Redis reliably.",
		runbook: runbook{
			meaning: "The share of Redis commands that got no reply (refused or reset connections, timeouts, LOADING/MASTERDOWN-class replies) burns the error budget of the Redis availability objective " +
				"(`redis_availability_objective`, default 99.9 % over 30 days) in the tier's time. A Redis that cannot be reached at all pages as CachewatchRedisUnreachable instead, which inhibits this alert.",
			causes: []string{
				"Redis overloaded, swapping or blocked by slow commands and scripts (`busy`): timeouts.",
				"Network trouble between the service and Redis: resets and timeouts.",
				"A failover, a replica still loading its dataset, a Cluster resharding: `unavailable` replies.",
				"Pool starvation (ticket CachewatchPoolTimeouts): callers time out waiting for a connection.",
			},
			confirm: "On **" + boardContention + "**, *Burn rate by window (redis availability)* in the *Service-level objectives* row; on **" + boardRedis + "**, panels *Command errors by class*, *Command latency p99 by command* and *Pool waits and timeouts*; on **" + boardKeyspace + "**, *Clients* and *Memory used and limit*.",
			fix:     "Follow the class: for timeouts raise capacity or the client's timeouts and fix slow commands (ticket CachewatchRedisScriptsSlow); for connection errors fix the network or the server; for `unavailable` let the failover finish and check replication.",
		},
		fixture: func(good, bad string) []series {
			return []series{{`cachewatch_redis_command_duration_seconds_count{` + cli + `, command="get"}`, sumSeries(good, bad)},
				{`cachewatch_redis_command_errors_total{` + cli + `, command="get", error_class="timeout"}`, bad}}
		},
	}
}

func lockWait() SLO {
	total := `sum by (job, key_group) (rate(cachewatch_lock_acquire_duration_seconds_count{${service_selector}, mode="wait"}[{{.window}}]))`
	good := `sum by (job, key_group) (rate(cachewatch_lock_acquire_duration_seconds_bucket{${service_selector}, mode="wait", outcome="acquired", le="${lock_wait_threshold:seconds}"}[{{.window}}]))`
	return SLO{
		Name: "lock-wait", Alert: "CachewatchLockWaitBudgetBurn",
		ErrorQuery: total + "\n-\n(" + good + " or " + total + " * 0)",
		TotalQuery: total,
		Description: "Acquisitions of callers that wait for a lock (mode wait; try-once acquisitions, whose losers skip the work, do not count): " +
			"acquired within `lock_wait_threshold` (default 500ms) is good; acquired later, given up or failed is bad.",
		level: "key_group", by: "job, key_group", objective: "lock_wait_objective", minTraffic: "min_lock_attempts_per_second",
		live: "cachewatch_lock_acquire_duration_seconds_count", noun: "waiting lock acquisitions",
		whose: "of key group {{ $labels.key_group }} in {{ $labels.job }}", harm: "callers wait too long for locks or give up",
		summary: "Callers that wait for locks wait too long or give up, fast enough to spend the error budget.",
		runbook: runbook{
			meaning: "The share of waiting lock acquisitions that took longer than `lock_wait_threshold` (default 500ms, a bucket bound of the acquire-time histogram), gave up or failed burns the error budget of the lock-wait objective " +
				"(`lock_wait_objective`, default 99 % over 30 days) in the tier's time: callers queue behind a lock that is held for long or fought over by many.",
			causes: []string{
				"Contention (ticket CachewatchLockContentionHigh): many workers want the same lock at once (a hot key, a stampede funnelled into a lock).",
				"The holder works long under the lock (slow source, recompute inside the lock); see *Lock hold time p50 / p99*.",
				"Backoff too lazy: a large `Backoff.Max` makes waiters sleep past the release; too few retries make them give up.",
				"Locks lost mid-work (ticket CachewatchLocksLost) or never released (page CachewatchLocksWithoutTTL).",
			},
			confirm: "On **" + boardContention + "**, the *Service-level objectives* row (*Burn rate by window (lock wait)*), then *Lock acquire time p50 / p99*, *Contention rate (busy first attempts / first attempts)* and *Lock hold time p50 / p99*.",
			fix:     "Serve stale while one caller refreshes (`instrument.NewCache`) instead of locking on every read; split one global lock into per-resource locks; move slow work out of the lock; keep full-jitter backoff bounded (`LockOptions.Backoff`).",
		},
		fixture: func(good, bad string) []series {
			return []series{{`cachewatch_lock_acquire_duration_seconds_bucket{` + svc + `, mode="wait", outcome="acquired", le="0.5"}`, good},
				{`cachewatch_lock_acquire_duration_seconds_count{` + svc + `, mode="wait", outcome="acquired"}`, sumSeries(good, bad)}}
		},
	}
}

// record names the recording rule of an SLO's metric and operation.
func (s SLO) record(metric, op string) string {
	return s.level + ":cachewatch_slo_" + strings.ReplaceAll(s.Name, "-", "_") + "_" + metric + ":" + op
}

func (s SLO) errorRatio(window string) string { return s.record("errors", "ratio_rate"+window) }
func (s SLO) events(window string) string     { return s.record("events", "rate"+window) }

// inWindow is a query of the SLO over window.
func inWindow(q, window string) string { return strings.ReplaceAll(q, "{{.window}}", window) }

// recording is the SLO's recording rules: the error ratio over every
// window, the rate of events over each long window (the traffic floor) and
// the 30-day error ratio (the budget spent), averaged from the 5m ratios as
// sloth does.
func (s SLO) recording() []recording {
	var out []recording
	for _, w := range sloWindows {
		errs, total := inWindow(s.ErrorQuery, w), inWindow(s.TotalQuery, w)
		out = append(out, recording{s.errorRatio(w), "(\n" + errs + "\nor\n" + total + " * 0\n)\n/\n" + total, s.live})
	}
	for _, t := range tiers {
		out = append(out, recording{s.events(t.long), inWindow(s.TotalQuery, t.long), s.live})
	}
	return append(out, recording{s.errorRatio(sloPeriod), "avg_over_time(" + s.errorRatio("5m") + "[" + sloPeriod + "])", ""})
}

// sloDefinitions are the burn-rate alerts, one per SLO with a level per
// tier.
func sloDefinitions(cfg Config) []definition {
	var out []definition
	for _, s := range slos() {
		d := definition{
			group: sloGroup(s), name: s.Alert, by: s.by, op: ">",
			seen:    serviceSight(s.live, "0+60x59"),
			summary: s.summary,
			runbook: s.runbook,
			cases:   sloCases(s),
		}
		d.runbook.resolves = "A tier resolves when its short window's burn falls below its factor: about 5 minutes after the errors stop for the 1h tier. " +
			"A slower tier stays quiet while a faster one of the same SLO fired within its short window (the incident has paged), and Alertmanager inhibits it while the faster one fires."
		for i, t := range tiers {
			d.levels = append(d.levels, s.tierLevel(cfg, t, tiers[:i]))
		}
		out = append(out, d)
	}
	return out
}

// tierLevel is the level of tier t: the burn over its long window above
// its factor, the short window agreeing, over more traffic than the floor,
// unless a faster tier fired within its short window.
func (s SLO) tierLevel(cfg Config, t tier, faster []tier) level {
	budget := "(1 - ${" + s.objective + ":num})"
	l := level{
		severity: t.severity, threshold: t.factor, text: num(t.factor),
		query: s.errorRatio(t.long) + " / " + budget,
		also: s.errorRatio(t.short) + " / " + budget + " > " + num(t.factor) +
			"\nand on (" + s.by + ")\n" + s.events(t.long) + " > ${" + s.minTraffic + ":num}",
		alsoOn: s.by,
		labels: map[string]string{"tier": t.name, "slo": s.Name},
		forDur: durationOf(cfg, t.forKey),
		description: fmt.Sprintf("%s %s fail %s times as fast as the %s objective allows, over the last %s and %s: %s of the %s error budget burns in %s; %s.",
			upperFirst(s.noun), s.whose, `{{ $value | printf "%.1f" }}`, pct(objectiveOf(cfg, s.objective)), t.long, t.short, t.budget, sloPeriod, t.long, s.harm),
	}
	if len(faster) > 0 {
		var names []string
		for _, f := range faster {
			names = append(names, f.name)
		}
		l.unless = fmt.Sprintf("max by (%s) (max_over_time(%s{alertname=%q, alertstate=\"firing\", tier=~%q}[%s]))",
			s.by, alertsMetric, s.Alert, strings.Join(names, "|"), t.short)
	}
	return l
}

// durationOf is the duration of a Config key.
func durationOf(cfg Config, key string) time.Duration {
	return time.Duration(cfg.field(key).Interface().(model.Duration))
}

func upperFirst(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

// Level is the identity label of the SLO's indicator besides job:
// key_group or client.
func (s SLO) Level() string { return s.level }

// ErrorRatioRecord names the recording rule of the SLO's error ratio over
// window: one of SLOWindows, or 30d (the budget spent).
func (s SLO) ErrorRatioRecord(window string) string { return s.errorRatio(window) }

// SLOWindows are the windows the SLOs' error ratios are recorded over.
func SLOWindows() []string { return slices.Clone(sloWindows) }
