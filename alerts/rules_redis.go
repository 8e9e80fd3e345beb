package alerts

import (
	"time"
)

// redisRecording are the recording rules of the Redis tickets.
var redisRecording = []recording{{
	record: "script:cachewatch_redis_script_duration_seconds:p99_rate${rate_window}",
	expr:   `histogram_quantile(0.99, sum by (job, script, le) (rate(cachewatch_redis_script_duration_seconds_bucket{${service_selector}}[${rate_window}])))`,
	seen:   "cachewatch_redis_script_duration_seconds_count",
}, {
	record: "node_command:cachewatch_exporter_server_script_seconds_per_call:ratio_rate${rate_window}",
	expr: `sum by (job, target, node, command) (rate(cachewatch_exporter_server_command_seconds_total{${exporter_selector}, ` + scriptCommands + `}[${rate_window}]))
/
sum by (job, target, node, command) (rate(cachewatch_exporter_server_command_calls_total{${exporter_selector}, ` + scriptCommands + `}[${rate_window}]))`,
}, {
	record: "client:cachewatch_redis_command_duration_seconds_count:rate${rate_window}",
	expr:   `sum by (job, client) (rate(cachewatch_redis_command_duration_seconds_count{${service_selector}}[${rate_window}]))`,
	seen:   "cachewatch_redis_command_duration_seconds_count",
}, {
	record: "client:cachewatch_redis_command_errors:ratio_rate${rate_window}",
	expr: `sum by (job, client) (rate(cachewatch_redis_command_errors_total{${service_selector}}[${rate_window}]))
/
sum by (job, client) (rate(cachewatch_redis_command_duration_seconds_count{${service_selector}}[${rate_window}]))`,
	seen: "cachewatch_redis_command_duration_seconds_count",
}, {
	record: "instance_client:cachewatch_redis_pool_timeouts:rate${rate_window}",
	expr:   `sum by (job, instance, client) (rate(cachewatch_redis_pool_timeouts_total{${service_selector}}[${rate_window}]))`,
	seen:   "cachewatch_redis_pool_timeouts_total",
}}

// scriptCommands are the commands that run a script on the server.
const scriptCommands = `command=~"eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro"`

// noReply are the error classes of a command that got no reply from a
// server that could serve it: the client could not reach Redis.
const noReply = `error_class=~"timeout|connection|unavailable"`

func redisDefinitions(cfg Config) []definition {
	return []definition{redisUnreachable(cfg), redisNodeUnreachable(cfg), serverScriptsSlow(cfg), scriptLatency(cfg),
		commandErrors(cfg), poolTimeouts(cfg)}
}

// redisUnreachable pages when every command a client sent within the
// window went unanswered, however few: the counts are exact differences
// of the counters (a series born within the window counts from 0), so a
// breaker that cuts the traffic to a trial call now and then does not slow
// the page, and one command answered in the window is enough to stay
// quiet.
func redisUnreachable(cfg Config) definition {
	return definition{
		group: groupRedis, name: "CachewatchRedisUnreachable",
		query: redisUnreachableQuery,
		by:    "job, client", op: ">",
		levels:      []level{lvl(SeverityCritical, 0, "0")},
		guard:       redisUnreachableGuard,
		guardOn:     "job, client",
		seen:        serviceSight("cachewatch_redis_command_duration_seconds_count", "0x59"),
		forDur:      time.Duration(cfg.RedisUnreachableFor),
		summary:     "Redis is unreachable: no command of a client got a reply.",
		description: `Client {{ $labels.client }} of {{ $labels.job }} got no reply to any of the {{ $value | printf "%.0f" }} commands it sent in the last ${redis_unreachable_window} (refused, reset, timed out, or LOADING/MASTERDOWN-class replies): Redis is unreachable from it.`,
		impact:      fallbackImpact,
		runbook:     redisUnreachableRunbook(),
		cases:       redisUnreachableCases(),
	}
}

// redisUnreachableQuery counts, per job and client, the commands that got
// no reply within the window.
const redisUnreachableQuery = `sum by (job, client) (
  cachewatch_redis_command_errors_total{${service_selector}, ` + noReply + `}
  - (
    cachewatch_redis_command_errors_total{${service_selector}, ` + noReply + `} offset ${redis_unreachable_window}
    or
    0 * cachewatch_redis_command_errors_total{${service_selector}, ` + noReply + `}
  )
)`

// redisUnreachableGuard keeps the page quiet while any command of the
// window got a reply.
const redisUnreachableGuard = `(
  sum by (job, client) (
    cachewatch_redis_command_duration_seconds_count{${service_selector}}
    - (
      cachewatch_redis_command_duration_seconds_count{${service_selector}} offset ${redis_unreachable_window}
      or
      0 * cachewatch_redis_command_duration_seconds_count{${service_selector}}
    )
  )
  - on (job, client)
  sum by (job, client) (
    cachewatch_redis_command_errors_total{${service_selector}, ` + noReply + `}
    - (
      cachewatch_redis_command_errors_total{${service_selector}, ` + noReply + `} offset ${redis_unreachable_window}
      or
      0 * cachewatch_redis_command_errors_total{${service_selector}, ` + noReply + `}
    )
  )
) < 1`

func redisUnreachableRunbook() runbook {
	return runbook{
		meaning: "Every command the client (a hooked go-redis client, by its `client` label) sent within `redis_unreachable_window` failed for want of a reply: connections refused or reset, timeouts, or a server that answers it cannot serve. " +
			"It pages whatever the traffic: a circuit breaker that cuts the traffic to a trial call now and then does not slow it, and one answered command in the window keeps it quiet. " +
			"It inhibits the Redis availability and cache availability pages and the command-error and breaker tickets of the same job: one incident, one page. The description names the load moved to the source meanwhile: lookups per minute that fell back to the loader (`cachewatch_cache_fallbacks_total`).",
		resolves: "It resolves once a command gets a reply again (or the job stops sending any).",
		causes: []string{
			"Redis down, restarting, or killed (OOM killer, eviction of its pod).",
			"A network partition, a firewall or security-group change, DNS pointing elsewhere.",
			"Redis loading its dataset after a restart (`LOADING`) or a replica whose master is down (`MASTERDOWN`).",
			"Every connection of the pool stuck behind blocking commands (all calls time out).",
		},
		confirm: "On **" + boardRedis + "**, panels *Command errors by class* (connection, timeout, unavailable) and *Pool connections by state*; on **" + boardKeyspace + "**, *Exporter up* (an exporter of the same Redis pages CachewatchRedisNodeUnreachable); on **" + boardContention + "**, *Fallbacks by cause* and *Circuit breaker state*.",
		fix:     "Restore Redis or the path to it; meanwhile keep the fallback bounded (`CacheOptions.FallbackConcurrency`) so the database survives the load the description names.",
	}
}

func redisUnreachableCases() []testCase {
	count := func(values string) series {
		return series{`cachewatch_redis_command_duration_seconds_count{` + cli + `, command="get"}`, values}
	}
	failed := func(values string) series {
		return series{`cachewatch_redis_command_errors_total{` + cli + `, command="get", error_class="connection"}`, values}
	}
	clientLabels := map[string]string{"job": "api", "client": "orders"}
	return []testCase{{
		name:    "Redis killed under 20 commands a second: every command since fails",
		series:  []series{count("0+1200x29 34860+60x29"), failed("_x30 60+60x29")},
		quietAt: []time.Duration{30 * time.Minute},
		want:    []want{{SeverityCritical, clientLabels, "Client orders of api got no reply to any of the 60 commands it sent in the last 1m (refused, reset, timed out, or LOADING/MASTERDOWN-class replies): Redis is unreachable from it."}},
	}, {
		name:   "a breaker cutting the traffic to 2 trial commands a minute does not hide it",
		series: []series{count("0+1200x29 34802+2x29"), failed("_x30 2+2x29")},
		want:   []want{{SeverityCritical, clientLabels, "Client orders of api got no reply to any of the 2 commands it sent in the last 1m (refused, reset, timed out, or LOADING/MASTERDOWN-class replies): Redis is unreachable from it."}},
	}, {
		name:   "healthy: a reset now and then, the other commands answered",
		series: []series{count("0+1200x59"), failed("0+6x59")},
	}, {
		name:   "recovered: answered again",
		series: []series{count("0+1200x29 34860+60x9 35460+1200x19"), failed("_x30 60+60x9 600x19")},
	}}
}

// redisNodeUnreachable pages when the exporter could not reach a node in
// any sample within the window.
func redisNodeUnreachable(cfg Config) definition {
	failed := func(values string) series {
		return series{`cachewatch_exporter_sample_errors_total{` + exp + `, stage="connect", class="connection"}`, values}
	}
	success := func(values string) series {
		return series{`cachewatch_exporter_last_success_timestamp_seconds{` + exp + `}`, values}
	}
	up := func(values string) series { return series{`cachewatch_exporter_up{` + exp + `}`, values} }
	return definition{
		group: groupRedis, name: "CachewatchRedisNodeUnreachable",
		query: `sum by (job, instance, target, node) (
  cachewatch_exporter_sample_errors_total{${exporter_selector}, stage="connect", class=~"connection|timeout"}
  - (
    cachewatch_exporter_sample_errors_total{${exporter_selector}, stage="connect", class=~"connection|timeout"} offset ${redis_unreachable_window}
    or
    0 * cachewatch_exporter_sample_errors_total{${exporter_selector}, stage="connect", class=~"connection|timeout"}
  )
)`,
		by: "job, instance, target, node", op: ">",
		levels: []level{lvl(SeverityCritical, 0, "0")},
		// No sample succeeded within the window.
		guard: `group by (job, instance, target, node) (cachewatch_exporter_up{${exporter_selector}})
unless on (job, instance, target, node)
time() - max by (job, instance, target, node) (cachewatch_exporter_last_success_timestamp_seconds{${exporter_selector}}) < ${redis_unreachable_window:seconds}`,
		guardOn:     "job, instance, target, node",
		seen:        exporterSight("server"),
		forDur:      time.Duration(cfg.RedisUnreachableFor),
		summary:     "A Redis node is unreachable from the exporter that samples it.",
		description: `The exporter {{ $labels.instance }} could not reach Redis node {{ $labels.node }} in any of its {{ $value | printf "%.0f" }} samples in the last ${redis_unreachable_window} (refused, reset, timed out, or LOADING/MASTERDOWN-class replies).`,
		runbook: runbook{
			meaning: "Every sample the exporter took of the node within `redis_unreachable_window` failed to connect (stage `connect`, class `connection` or `timeout`): the node is down or unreachable from the exporter. " +
				"Services on the node page CachewatchRedisUnreachable from their own clients; both views page, each once, as they may differ (a partition). While the exporter itself cannot be scraped the page stays: blindness is not recovery.",
			resolves: "It resolves once a sample of the node succeeds again.",
			causes: []string{
				"Redis down, restarting, or killed.",
				"A network partition between the exporter and the node, a firewall change, DNS pointing elsewhere.",
				"Redis loading its dataset after a restart (`LOADING`), a replica whose master is down (`MASTERDOWN`).",
			},
			confirm: "On **" + boardKeyspace + "**, panels *Exporter up* and *Sampler errors by stage and class* (stage `connect`); `cachewatch doctor` with the exporter's flags prints the failing step.",
			fix:     "Restore Redis or the path to it.",
		},
		cases: []testCase{{
			name:    "the node is gone: every sample fails to connect",
			series:  []series{failed("_x30 4+4x29"), success("0+60x29 1740x29"), up("1x29 0x30")},
			quietAt: []time.Duration{30 * time.Minute},
			want:    []want{{SeverityCritical, with(expNode, "instance", "exporter:9121"), "The exporter exporter:9121 could not reach Redis node redis:6379 in any of its 4 samples in the last 1m (refused, reset, timed out, or LOADING/MASTERDOWN-class replies)."}},
		}, {
			name:   "healthy: one failed sample among successes",
			series: []series{failed("0x29 1x30"), success("0+60x59"), up("1x59")},
		}},
	}
}

func serverScriptsSlow(cfg Config) definition {
	scriptServer := func(m, values string) series {
		return series{m + `{` + exp + `, command="evalsha"}`, values}
	}
	return definition{
		group: groupRedis, name: "CachewatchRedisScriptsSlow",
		query: "node_command:cachewatch_exporter_server_script_seconds_per_call:ratio_rate${rate_window}", by: "job, target, node, command", op: ">",
		levels: []level{lvl(SeverityWarning, time.Duration(cfg.ServerScriptMean).Seconds(), d(cfg.ServerScriptMean))},
		guard: `sum by (job, target, node, command) (rate(cachewatch_exporter_server_command_calls_total{${exporter_selector}, ` + scriptCommands + `}[${rate_window}]))
> ${min_commands_per_second:num}`,
		guardOn:     "job, target, node, command",
		seen:        exporterSight("server"),
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
				scriptServer("cachewatch_exporter_server_command_seconds_total", "0+1.2x59"),
				scriptServer("cachewatch_exporter_server_command_calls_total", "0+60x59"),
			},
			quietAt: []time.Duration{9 * time.Minute},
			want:    []want{{SeverityWarning, with(expNode, "command", "evalsha"), "evalsha on redis:6379 takes 20ms of server time per call (threshold 5ms)."}},
		}, {
			name: "healthy: 100µs per call",
			series: []series{
				scriptServer("cachewatch_exporter_server_command_seconds_total", "0+0.006x59"),
				scriptServer("cachewatch_exporter_server_command_calls_total", "0+60x59"),
			},
		}, {
			name: "quiet: one slow call a minute",
			series: []series{
				scriptServer("cachewatch_exporter_server_command_seconds_total", "0+0.02x59"),
				scriptServer("cachewatch_exporter_server_command_calls_total", "0+1x59"),
			},
		}},
	}
}

func scriptLatency(cfg Config) definition {
	bucket := func(le, values string) series {
		return series{`cachewatch_redis_script_duration_seconds_bucket{job="api", client="orders", script="release", command="evalsha", le="` + le + `"}`, values}
	}
	return definition{
		group: groupRedis, name: "CachewatchScriptLatencyHigh",
		query: "script:cachewatch_redis_script_duration_seconds:p99_rate${rate_window}", by: "job, script", op: ">",
		levels:      []level{lvl(SeverityInfo, time.Duration(cfg.ScriptP99).Seconds(), d(cfg.ScriptP99))},
		forDur:      time.Duration(cfg.ScriptP99For),
		summary:     "Lua scripts are slow as the client sees them (client-side: network, pool and process scheduling included).",
		description: `Script {{ $labels.script }} in {{ $labels.job }} has a client-side p99 of {{ $value | humanizeDuration }} (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "EVAL/EVALSHA/FCALL latency of a named script, seen by the client, is above the threshold. Client-side time includes the network, the wait for a pooled connection and the client process's own scheduling: on a busy host an O(1) script can read tens of milliseconds while Redis spends microseconds on it. That is why this alert only informs (nobody is notified); what the server spends opens a ticket through CachewatchRedisScriptsSlow, from the exporter.",
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
			series: []series{bucket("0.01", "0x59"), bucket("0.025", "0+60x59"), bucket("+Inf", "0+60x59"),
				{`cachewatch_redis_script_duration_seconds_count{job="api", client="orders", script="release", command="evalsha"}`, "0+60x59"}},
			quietAt: []time.Duration{9 * time.Minute},
			want:    []want{{SeverityInfo, map[string]string{"job": "api", "script": "release"}, "Script release in api has a client-side p99 of 24.85ms (threshold 10ms)."}},
		}, {
			name:   "healthy: under 1ms",
			series: []series{bucket("0.001", "0+60x59"), bucket("+Inf", "0+60x59")},
		}},
	}
}

func commandErrors(cfg Config) definition {
	clientLabels := map[string]string{"job": "api", "client": "orders"}
	cmds := func(errors, all string) []series {
		return []series{
			{`cachewatch_redis_command_errors_total{job="api", client="orders", command="get", error_class="timeout"}`, errors},
			{`cachewatch_redis_command_duration_seconds_count{job="api", client="orders", command="get"}`, all},
		}
	}
	return definition{
		group: groupRedis, name: "CachewatchCommandErrorsHigh",
		query: "client:cachewatch_redis_command_errors:ratio_rate${rate_window}", by: "job, client", op: ">",
		levels: []level{lvl(SeverityWarning, cfg.CommandErrorsWarning, pct(cfg.CommandErrorsWarning))},
		guard:  "client:cachewatch_redis_command_duration_seconds_count:rate${rate_window} > ${min_commands_per_second:num}", guardOn: "job, client",
		seen:        serviceSight("cachewatch_redis_command_duration_seconds_count", "0x59"),
		forDur:      time.Duration(cfg.CommandErrorsFor),
		summary:     "Many Redis commands fail.",
		description: `{{ $value | humanizePercentage }} of Redis commands of client {{ $labels.client }} in {{ $labels.job }} failed (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "The share of commands answered with an error is above the threshold (a nil reply is not one, nor a NOSCRIPT that go-redis answers by sending the script). `error_class` tells timeouts, connection errors, unavailable servers, cluster redirections (moved/ask), OOM, BUSY and ACL denials apart. " +
				"A ticket for the cause: commands that got no reply burn the Redis availability objective, which pages (CachewatchRedisAvailabilityBudgetBurn, or CachewatchRedisUnreachable when none does).",
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
			name:    "5% errors",
			series:  cmds("0+3x59", "0+60x59"),
			quietAt: []time.Duration{9 * time.Minute},
			want:    []want{{SeverityWarning, clientLabels, "5% of Redis commands of client orders in api failed (threshold 1%)."}},
		}, {
			name:   "healthy: no errors",
			series: cmds("0x59", "0+60x59"),
		}},
	}
}

func poolTimeouts(cfg Config) definition {
	return definition{
		group: groupRedis, name: "CachewatchPoolTimeouts",
		query: "instance_client:cachewatch_redis_pool_timeouts:rate${rate_window} * 60", by: "job, instance, client", op: ">",
		levels:      []level{lvl(SeverityWarning, cfg.PoolTimeoutsPerMinute, num(cfg.PoolTimeoutsPerMinute)+" per minute")},
		seen:        serviceSight("cachewatch_redis_command_duration_seconds_count", "0x59"),
		forDur:      time.Duration(cfg.PoolTimeoutsFor),
		summary:     "Callers time out waiting for a Redis connection: the pool is starved.",
		description: `{{ $value | printf "%.1f" }} waits per minute for a pool connection of client {{ $labels.client }} on {{ $labels.instance }} in {{ $labels.job }} timed out over the last ${rate_window} (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "go-redis callers waited the whole `PoolTimeout` for a free connection and gave up, more often than the threshold, for the `for:` duration. Requests fail although Redis itself may be healthy; those failures burn the Redis availability objective (class `timeout`), which pages if they cost enough.",
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
			series:  []series{{`cachewatch_redis_pool_timeouts_total{` + cli + `}`, "0+6x59"}},
			quietAt: []time.Duration{4 * time.Minute},
			want:    []want{{SeverityWarning, map[string]string{"job": "api", "instance": "api-0:8080", "client": "orders"}, "6.0 waits per minute for a pool connection of client orders on api-0:8080 in api timed out over the last 5m (threshold 1 per minute)."}},
		}, {
			name:   "quiet: a timeout now and then",
			series: []series{{`cachewatch_redis_pool_timeouts_total{` + cli + `}`, "0x20 1x20 2x17"}},
		}, {
			name:   "healthy: none",
			series: []series{{`cachewatch_redis_pool_timeouts_total{` + cli + `}`, "0x59"}},
		}},
	}
}
