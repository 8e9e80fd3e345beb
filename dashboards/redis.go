package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/units"

	s "github.com/cachewatch/cachewatch/signals"
)

// redis is the wire view from the hook: every go-redis client's commands,
// scripts, errors and connection pool.
func redis() (*board, error) {
	x := &exprs{client: true}
	calls := x.rateOf(s.CommandDuration, "_count", []string{"client", "command"})
	poolWaits := x.rate(s.PoolWaits, []string{"client"})
	poolLookups := x.rate(s.PoolHits, []string{"client"}) + " + " + x.rate(s.PoolMisses, []string{"client"})

	b := &board{
		uid:         RedisUID,
		title:       "cachewatch / Redis commands & pool",
		description: "What every hooked go-redis client does on the wire: command and script latency, errors, pipelines and the connection pool.",
		anchors:     []s.ID{s.CommandDuration},
		client:      true,
		rows: []row{{
			title:  "At a glance",
			panels: redisGlance(x),
		}, {
			title: "Symptom: commands are slow",
			panels: []panel{{
				kind:  heatmapPanel,
				title: "Command latency (heatmap)",
				help: help{"Distribution of Redis command latency seen by the clients, all commands; a pipelined command gets an equal share of its pipeline.",
					"a tight band below 1 ms on a local network; a second band higher up is a slow command or a starved pool.", rbCommandLatency},
				unit:    units.Seconds,
				targets: []target{{x.heatmap(s.CommandDuration), "{{le}}"}},
			}, {
				title: "Command latency p99 by command",
				help: help{"99th percentile of command latency per client and command.",
					"below a few ms; one command far above the rest is the one to look at.", rbCommandLatency},
				unit:    units.Seconds,
				targets: []target{{x.quantile(0.99, s.CommandDuration, []string{"client", "command"}), "{{client}} {{command}}"}},
			}, {
				title: "Commands by command",
				help: help{"Commands per second per client and command.",
					"steady with traffic; a jump in SET or EVALSHA with flat traffic is lock spinning.", rbCommandLatency},
				unit:    units.OpsPerSecond,
				targets: []target{{calls, "{{client}} {{command}}"}},
			}},
		}, {
			title: "Cause: slow Lua scripts",
			panels: []panel{{
				title: "Script latency p99 by script",
				help: help{"99th percentile of EVAL/EVALSHA/FCALL latency per script name (never a SHA).",
					"below 1 ms: a script blocks the whole server while it runs.", rbScriptSlow},
				unit: units.Seconds, scale: alertValue,
				targets: []target{{x.quantile(0.99, s.ScriptDuration, []string{"client", "script"}), "{{client}} {{script}}"}},
			}, {
				title: "Script calls by script",
				help: help{"Script calls per second per script and command.",
					"steady; EVAL where EVALSHA is expected means the script cache keeps being flushed.", rbScriptSlow},
				unit:    units.OpsPerSecond,
				targets: []target{{x.rateOf(s.ScriptDuration, "_count", []string{"script", "command"}), "{{script}} {{command}}"}},
			}, {
				title: "NOSCRIPT replies",
				help: help{"EVALSHA calls answered NOSCRIPT (script cache flushed or script never loaded).",
					"0 after start-up; steady NOSCRIPT doubles every script call.", rbScriptSlow},
				unit:    units.OpsPerSecond,
				targets: []target{{x.rate(s.ScriptNoscript, []string{"client", "script"}), "{{client}} {{script}}"}},
			}},
		}, {
			title: "Cause: errors",
			panels: []panel{{
				title: "Command errors by class",
				help: help{"Command errors per second by class (timeout, connection, unavailable, moved, ask, oom, busy, noperm, other); a nil reply is not an error, nor a NOSCRIPT answered by EVAL.",
					"0; timeouts and connection errors point at the pool or the network, oom and busy at the server.", rbCommandErrors},
				unit:    units.OpsPerSecond,
				targets: []target{{x.rate(s.CommandErrors, []string{"client", "error_class"}), "{{client}} {{error_class}}"}},
			}, {
				title: "Command error ratio by command",
				help: help{"Share of each command's calls that failed.",
					"0.", rbCommandErrors},
				// No thresholds: the alert compares each client's share
				// over all its commands; one rare command's share may be
				// far higher without anything firing.
				unit: units.PercentUnit,
				targets: []target{{ratio(orZero(x.rate(s.CommandErrors, []string{"client", "command"}), calls), calls),
					"{{client}} {{command}}"}},
			}, {
				title: "Pipeline and transaction duration p99",
				help: help{"99th percentile of whole-pipeline and MULTI/EXEC durations.",
					"a few command latencies; long pipelines hold a connection and delay other callers.", rbPipelines},
				unit:    units.Seconds,
				targets: []target{{x.quantile(0.99, s.PipelineDuration, []string{"client", "kind"}), "{{client}} {{kind}}"}},
			}},
		}, {
			title: "Cause: the connection pool is starved",
			panels: []panel{{
				title: "Pool waits and timeouts",
				help: help{"Times callers had to wait for a pool connection, times that wait timed out, and stale connections removed from the pool.",
					"waits rare, timeouts 0, stale removals rare: timeouts are connection starvation, often lock spinning holding connections.", rbPoolTimeouts},
				// No thresholds: the waits and stale removals share the axis.
				unit: units.OpsPerSecond,
				targets: []target{
					{poolWaits, "waits {{client}}"},
					{x.rate(s.PoolTimeouts, []string{"client"}), "timeouts {{client}}"},
					{x.rate(s.PoolStaleConnections, []string{"client"}), "stale connections removed {{client}}"},
				},
			}, {
				title: "Pool wait time per wait",
				help: help{"Average time a waiting caller spent before it got a connection.",
					"well below the command timeout.", rbPoolTimeouts},
				unit:    units.Seconds,
				targets: []target{{ratio(x.rate(s.PoolWaitDuration, []string{"client"}), poolWaits), "{{client}}"}},
			}, {
				title: "Pool connections by state",
				help: help{"Connections in each client's pool, idle or in use.",
					"some idle; all in use with waits growing means the pool is too small or connections are held too long.", rbPoolTimeouts},
				unit:    units.Short,
				targets: []target{{x.agg("sum", s.PoolConnections, []string{"client", "state"}), "{{client}} {{state}}"}},
			}, {
				title: "Pool hit ratio",
				help: help{"Share of connection requests served by a free pooled connection.",
					"near 1; a falling ratio means new connections are dialled under load.", rbPoolTimeouts},
				unit: units.PercentUnit, max: 1,
				targets: []target{{ratio(x.rate(s.PoolHits, []string{"client"}), "("+poolLookups+")"), "{{client}}"}},
			}},
		}},
	}
	return b, x.err
}
