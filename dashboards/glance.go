package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/units"

	s "github.com/cachewatch/cachewatch/signals"
)

// Each board opens with a row of stat panels: the few figures an on-call
// engineer checks first, each the worst (or the total) of what the
// board's alerts compare, coloured by their thresholds. The panels below
// show which key group, client or node it is.

// worst is the largest value of a query with one series per key group,
// client or node: the figure a stat panel shows.
func worst(expr string) string { return "max (" + expr + ")" }

// contentionGlance: callers getting errors, stale data, lock contention,
// lost locks and loader amplification.
func contentionGlance(x *exprs, e contentionExprs) []panel {
	return []panel{{
		kind: statPanel, title: "Callers getting errors (worst key group)",
		help: help{"Share of cache lookups that returned an error to their caller (no value within its hard TTL to serve, the source failing), in the key group with the most. The cache availability SLO pages when they burn its error budget fast (see the Service-level objectives row).",
			"0.", rbCacheErrors},
		// The SLO compares burn rates over windows, not this share.
		unit: units.PercentUnit, max: 1, scale: notComparable,
		targets: []target{{worst(e.errorShare), "errors"}},
	}, {
		kind: statPanel, title: "Stale share (worst key group)",
		help: help{"Share of lookups answered with a stale value, in the key group with the most.",
			"a small share; a large one means refreshes fail or lag.", rbStaleServes},
		unit: units.PercentUnit, max: 1, scale: alertValue,
		targets: []target{{worst(e.staleShare), "stale"}},
	}, {
		kind: statPanel, title: "First-try contention (worst key group)",
		help: help{"Share of first lock attempts of waiting callers that found the lock held, in the key group with the most (try-once acquisitions lose by design and do not count).",
			"a few percent.", rbLockContention},
		unit: units.PercentUnit, max: 1, scale: alertValue,
		targets: []target{{worst(e.contention), "contention"}},
	}, {
		kind: statPanel, title: "Lock acquire p99 (worst key group)",
		help: help{"99th percentile of the time waiting callers take to get a lock, in the slowest key group.",
			"a few milliseconds.", rbLockAcquireSlow},
		unit: units.Seconds, scale: alertValue,
		targets: []target{{worst(e.acquireP99), "p99"}},
	}, {
		kind: statPanel, title: "Locks lost",
		help: help{"Locks lost before their holder released them, per second, all key groups and reasons.",
			"0.", rbLocksLost},
		unit: units.OpsPerSecond, scale: notComparable,
		targets: []target{{orZero(x.rate(s.LocksLost, nil), x.rate(s.LockAttempts, nil)), "lost"}},
	}, {
		kind: statPanel, title: "Loader calls per kept result (worst key group)",
		help: help{"Loader calls per loaded value that was kept, in the key group with the most.",
			"1: one load per refresh.", rbLoaderAmplified},
		unit: units.Short, scale: alertValue,
		targets: []target{{worst(e.amplification), "amplification"}},
	}}
}

// redisGlance: failing commands, slow scripts, a starved pool.
func redisGlance(x *exprs) []panel {
	clientCalls := x.rateOf(s.CommandDuration, "_count", []string{"client"})
	return []panel{{
		kind: statPanel, title: "Command error share (worst client)",
		help: help{"Share of Redis commands that failed, for the client with the most.",
			"0.", rbCommandErrors},
		unit: units.PercentUnit, max: 1, scale: alertValue,
		targets: []target{{worst(ratio(orZero(x.rate(s.CommandErrors, []string{"client"}), clientCalls), clientCalls)), "errors"}},
	}, {
		kind: statPanel, title: "Script p99 (worst script)",
		help: help{"99th percentile of script latency (EVAL/EVALSHA/FCALL) seen by the clients, for the slowest script.",
			"below 1 ms: a script blocks the server while it runs.", rbScriptSlow},
		unit: units.Seconds, scale: alertValue,
		targets: []target{{worst(x.quantile(0.99, s.ScriptDuration, []string{"script"})), "p99"}},
	}, {
		kind: statPanel, title: "Pool timeouts a minute",
		help: help{"Waits for a pool connection that timed out, a minute, all clients.",
			"0.", rbPoolTimeouts},
		unit: units.OpsPerMinute, scale: alertValue,
		targets: []target{{x.rate(s.PoolTimeouts, nil) + " * 60", "timeouts"}},
	}}
}

// keyspaceGlance: stuck locks, whether the exporter sees the server and how
// old its lock figures are, slow
// scripts on the server, and how well it serves.
func keyspaceGlance(x *exprs, hitRatio string) []panel {
	// The commands that run a script, as the catalog lists them.
	scripts := x.is(s.ServerCommandCalls, "command", x.label(s.ScriptDuration, "command").Values...)
	perCall := ratio(x.nodeRate(s.ServerCommandSeconds, []string{"command"}, scripts), x.nodeRate(s.ServerCommandCalls, []string{"command"}, scripts))
	return []panel{{
		kind: statPanel, title: "Locks without TTL (all nodes)",
		help: help{"Lock keys with no expiry, over all nodes and key groups." + haMax,
			"0.", rbLocksWithoutTTL},
		unit: units.Short, scale: alertValue,
		targets: []target{{"sum (" + x.nodeMax(s.LocksWithoutTTL, kg) + ")", "locks"}},
	}, {
		kind: statPanel, title: "Long-held locks (all nodes)",
		help: help{"Locks held by the same owner past the long-held threshold, over all nodes and key groups." + haMax,
			"0.", rbLocksLongHeld},
		unit: units.Short, scale: alertValue,
		targets: []target{{"sum (" + x.nodeMax(s.LocksLongHeld, kg) + ")", "locks"}},
	}, {
		kind: statPanel, title: "Exporter sampling (worst exporter)",
		help: help{"1 when every exporter's last sample of every node succeeded; 0 when one failed, and the figures of that node may be old.",
			"1.", rbExporterDown},
		unit: units.Short, max: 1, scale: alertValue,
		targets: []target{{x.agg("min", s.ExporterUp, nil), "up"}},
	}, {
		kind: statPanel, title: "Lock figures' age (oldest, in sample intervals)",
		help: help{"Time since the lock figures were last exact, over the sample interval, on the exporter and node where it is longest, as the alert judges each exporter: above a few intervals the lock figures beside it describe the past.",
			"below 1 with keyspace notifications.", rbLockStateStale},
		unit: units.Short, scale: alertValue, noValue: "no lock figures",
		targets: []target{{ratio("(time() - "+x.agg("min", s.ExporterDataTimestamp, nil, x.is(s.ExporterDataTimestamp, "family", "locks"))+")",
			x.agg("max", s.ExporterSampleInterval, nil)), "intervals"}},
	}, {
		kind: statPanel, title: "Server time per script call (worst)",
		help: help{"Server time per call of the script commands (EVAL, EVALSHA, FCALL…) from INFO commandstats, on the node and command with the most: what Redis spends, its single thread blocked." + haMax,
			"well below a millisecond.", rbServerScriptsSlow},
		unit: units.Seconds, scale: alertValue, noValue: "no script calls",
		targets: []target{{worst(perCall), "per call"}},
	}, {
		kind: statPanel, title: "Server hit ratio (worst node)",
		help: help{"Keyspace hits divided by lookups, on the node with the lowest ratio." + haMax,
			"steady; a sudden drop is a mass expiry or an eviction storm.", rbServerHitRatio},
		// No thresholds: the alert compares the fall of the ratio against
		// its last hour, not the ratio itself.
		unit: units.PercentUnit, max: 1,
		targets: []target{{"min (" + hitRatio + ")", "hit ratio"}},
	}}
}
