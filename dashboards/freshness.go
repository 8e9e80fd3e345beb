package dashboards

import (
	"slices"

	"github.com/grafana/grafana-foundation-sdk/go/units"

	s "github.com/cachewatch/cachewatch/signals"
)

// rbLockStateStale is the runbook of the alert on old lock figures.
var rbLockStateStale = runbook{alert: "CachewatchLockStateStale"}

// freshnessRow tells how old the keyspace board's figures are: every lock
// and keyspace series family's age, the lock figures' age in sample
// intervals (the alert's value), and how the lock figures are kept exact.
// Ages are the sampler's own, so shown per exporter.
func freshnessRow(x *exprs) row {
	byFamily := append(append([]string{}, perInstance...), "family")
	return row{
		title: "Freshness: how old are these figures?",
		panels: []panel{{
			title: "Lock figures' age in sample intervals",
			help: help{"Time since the lock figures were last exact, over the exporter's sample interval." + perExporter,
				"at most 1 with keyspace notifications (every sample finds a moment the index was exact at); below the time a SCAN pass takes without.", rbLockStateStale},
			unit: units.Short, scale: alertValue,
			targets: []target{{ratio("(time() - "+x.agg("min", s.ExporterDataTimestamp, perInstance, x.is(s.ExporterDataTimestamp, "family", "locks"))+")",
				x.agg("max", s.ExporterSampleInterval, perInstance)), "{{instance}} {{target}} {{node}}"}},
		}, {
			title: "Age of lock, keyspace, server and queue figures",
			help: help{"Seconds since the oldest observation behind each series family; it keeps growing while a failing stage's series are left out." + perExporter,
				"locks, server and queues below one interval; keys below the time a whole-keyspace pass takes.", rbLockStateStale},
			unit:    units.Seconds,
			targets: []target{{"time() - " + x.agg("min", s.ExporterDataTimestamp, byFamily), "{{family}} {{instance}} {{target}} {{node}}"}},
		}, {
			title: "Lock figures kept exact by keyspace notifications",
			help: help{"1 when keyspace notifications keep the node's lock figures exact at a moment of every sample; 0 when they come from SCAN passes alone (a pass's reading, as often as a pass fits the budget). Refused: the server publishes no keyspace events and refused the exporter's CONFIG GET or SET (ACL, a renamed CONFIG)." + perExporter,
				"1 on large keyspaces; 0 is fine while a SCAN pass fits one interval; refused 0.", rbLockStateStale},
			unit: units.Short, max: 1,
			targets: []target{
				{x.agg("min", s.LockNotifications, perInstance), "{{instance}} {{target}} {{node}}"},
				{x.agg("max", s.LockNotificationsRefused, perInstance), "refused {{instance}} {{target}} {{node}}"},
			},
		}, {
			title: "Lock index repairs",
			help: help{"Lock keys per second that a reconciling SCAN pass found the notification-fed lock index wrong about: lost notifications." + perExporter,
				"0.", rbLockStateStale},
			unit:    units.OpsPerSecond,
			targets: []target{{x.rate(s.LockIndexRepairs, perInstance), "{{instance}} {{target}} {{node}}"}},
		}, {
			title: "Queue reads left out (reply over the cap)",
			help: help{"Samples per second that left out a queue read (a stream's first entry or group list, a sorted set's first member) because its last reply exceeded the exporter's per-read byte cap." + perExporter,
				"0; otherwise that queue's oldest-entry age or group figures are missing.", rbQueueBacklog},
			unit:    units.OpsPerSecond,
			targets: []target{{x.rate(s.QueueReadsSkipped, []string{"instance", targetLabel, "node", "queue", "read"}), "{{instance}} {{queue}} {{read}}"}},
		}},
	}
}

// serverViewsRow shows the server-side views: latency distributions per
// command and memory per key group.
func serverViewsRow(x *exprs) row {
	return row{
		title: "Server views: latency distribution and memory per key group",
		panels: []panel{{
			kind:  heatmapPanel,
			title: "Server time per call (heatmap, LATENCY HISTOGRAM)",
			help: help{"Distribution of the server-side time per call of every command (Redis 7+ LATENCY HISTOGRAM), without the network." + haMax,
				"microseconds; a band at milliseconds is a slow command or script blocking every client.", rbServerCommandStats},
			unit:    units.Seconds,
			targets: []target{{"sum by (le) (" + nodeBuckets(x, nil) + ")", "{{le}}"}},
		}, {
			title: "Server time per call p99 by command",
			help: help{"99th percentile of the server-side time per call, per command, from LATENCY HISTOGRAM." + haMax,
				"microseconds for GET/SET; scripts as short as possible.", rbServerCommandStats},
			unit:    units.Seconds,
			targets: []target{{"histogram_quantile(0.99, sum by (command, le) (" + nodeBuckets(x, []string{"command"}) + "))", "{{command}}"}},
		}, {
			title: "Estimated memory per key group",
			help: help{"Mean MEMORY USAGE of the keys sampled in the last whole-keyspace pass times the group's keys (exporter flag --keys.memory-sample; empty when off)." + haMax,
				"steady; a group that grows without bound has no TTL or an unbounded value.", rbServerResources},
			unit:    units.BytesIEC,
			targets: []target{{x.nodeTotal(s.KeysMemory, kg), "{{key_group}}"}},
		}},
	}
}

// nodeBuckets is the rate of the server latency histogram's buckets, each
// node's counted once: max by (node, by…, le) over its exporters.
func nodeBuckets(x *exprs, by []string) string {
	return "max " + x.by(s.ServerCommandDuration, append(append(slices.Clone(perNode), by...), "le")...) +
		"(rate(" + x.sel(s.ServerCommandDuration, "_bucket") + "[" + rateInterval + "]))"
}
