package alerts

import (
	"time"
)

// freshnessDefinitions watch the age of what the exporter serves: lock
// figures older than a few sample intervals are a lock view nobody should
// trust, whatever they say.
func freshnessDefinitions(cfg Config) []definition {
	instNode := map[string]string{"job": "cachewatch-exporter", "instance": "exporter:9121", "node": "redis:6379"}
	asOf := func(v string) series {
		return series{`cachewatch_exporter_data_timestamp_seconds{` + exp + `, family="locks"}`, v}
	}
	interval := series{`cachewatch_exporter_sample_interval_seconds{` + exp + `}`, "15x59"}
	return []definition{{
		group: groupExporter, name: "CachewatchLockStateStale", by: "job, instance, target, node",
		query: `(time() - min by (job, instance, target, node) (cachewatch_exporter_data_timestamp_seconds{${exporter_selector}, family="locks"}))
/ max by (job, instance, target, node) (cachewatch_exporter_sample_interval_seconds{${exporter_selector}})`,
		op:          ">",
		levels:      []level{lvl(SeverityWarning, cfg.LockStateStaleIntervals, num(cfg.LockStateStaleIntervals)+" intervals")},
		forDur:      time.Duration(cfg.LockStateStaleFor),
		summary:     "The exporter's lock figures are old: locks held, without TTL and long-held may be wrong.",
		description: `The lock figures of {{ $labels.node }} served by {{ $labels.instance }} are {{ $value | printf "%.0f" }} sample intervals old (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "`time() - cachewatch_exporter_data_timestamp_seconds{family=\"locks\"}` is the time since the lock figures were last exact. Above a few intervals, the lock series (and the alerts on them, such as locks without TTL) describe the past: a stuck lock may be missing, a released one still shown.",
			causes: []string{
				"Keyspace notifications are off (`cachewatch_exporter_lock_notifications` 0) and one SCAN pass over the keyspace takes longer than an interval at `--locks.scan-budget` (the limit in docs/exporter.md): the server refused the exporter's `CONFIG SET` (`cachewatch_exporter_lock_notifications_refused` 1), or `--locks.notifications` is `existing` or `off`.",
				"The exporter has just started, or its subscription broke, and the sync pass has not finished (its duration is the keyspace size times the server's SCAN time per key, over the budget).",
				"The lock stage fails (see *Sampler errors by stage and class*, stage `locks` or `notifications`): its series are left out while the age grows.",
				"More lock keys than `--locks.max-tracked`.",
			},
			confirm: "On **" + boardKeyspace + "**, panels *Age of lock, keyspace, server and queue figures* and *Lock figures kept exact by keyspace notifications* in the *Freshness: how old are these figures?* row, and *Sampler errors by stage and class*.",
			fix:     "Turn keyspace notifications on for the lock index (`notify-keyspace-events` with `" + "Kg$xe" + "` in the server's configuration, or grant the exporter `+config|set`); otherwise raise `--locks.scan-budget` within what the server can spare or narrow `--locks.pattern`; grant the refused commands; raise `--locks.max-tracked`.",
		},
		cases: []testCase{{
			name:    "lock figures not refreshed since the exporter lost them",
			series:  []series{asOf("0x59"), interval},
			quietAt: []time.Duration{0},
			want:    []want{{SeverityWarning, instNode, "The lock figures of redis:6379 served by exporter:9121 are 180 sample intervals old (threshold 3 intervals)."}},
		}, {
			name:   "healthy: refreshed every interval",
			series: []series{asOf("0+60x59"), interval},
		}},
	}}
}
