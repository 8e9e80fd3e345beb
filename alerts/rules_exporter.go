package alerts

import (
	"strings"
	"time"
)

func exporterDefinitions(cfg Config) []definition {
	inst := map[string]string{"job": "cachewatch-exporter", "instance": "exporter:9121"}
	instNode := with(inst, "node", "redis:6379")
	// An exporter that goes blind while one of its critical alerts fires
	// is itself critical: that alert keeps firing on its last data, but
	// nobody can see whether the harm goes on or gets worse.
	blindCritical := func(on string) string {
		return "max by (" + on + ") (" + alertsMetric + `{alertstate="firing", severity="critical", alertname=~"` + strings.Join(exporterCriticals(), "|") + `"})`
	}
	lockBlind := []series{
		{`cachewatch_exporter_locks_without_ttl{` + exp + `, key_group="lock:report:*"}`, "2x19 stale"},
		{`cachewatch_exporter_up{` + exp + `}`, "1x19 stale"},
	}
	return []definition{{
		group: groupExporter, name: "CachewatchExporterDown",
		query: `min by (job, instance) (up{${exporter_selector}})`, by: "job, instance", op: "<",
		levels: []level{
			{severity: SeverityWarning, threshold: 1, text: "1"},
			{severity: SeverityCritical, threshold: 1, text: "1", also: blindCritical("job"), alsoOn: "job"},
		},
		forDur:      time.Duration(cfg.ExporterDownFor),
		summary:     "Prometheus cannot scrape the cachewatch exporter: keyspace and lock alerts are blind.",
		description: `The cachewatch exporter {{ $labels.instance }} of job {{ $labels.job }} has not been scraped successfully.`,
		runbook: runbook{
			meaning:  "Prometheus's own `up` series for the exporter's target is 0: the scrape failed. The alerts on the exporter's metrics cannot see the Redis any more: those that were firing keep firing on their last data (blindness is not recovery), none can start. Critical when one of them is critical (`" + strings.Join(exporterCriticals(), "`, `") + "`): the harm may go on or get worse unseen.",
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
		query: `min by (job, instance, target, node) (cachewatch_exporter_up{${exporter_selector}})`, by: "job, instance, target, node", op: "<",
		levels: []level{
			{severity: SeverityWarning, threshold: 1, text: "1"},
			{severity: SeverityCritical, threshold: 1, text: "1", also: blindCritical("job, target, node"), alsoOn: "job, target, node"},
		},
		forDur:      time.Duration(cfg.ExporterFailingFor),
		summary:     "The cachewatch exporter cannot sample a Redis node.",
		description: `The exporter {{ $labels.instance }} fails to sample Redis node {{ $labels.node }}.`,
		runbook: runbook{
			meaning: "The exporter is scraped but its last sample of the node failed (`cachewatch_exporter_up` is 0): the node is unreachable or refuses the exporter's commands. The alerts on the node's sampled data keep firing on their last data meanwhile, none can start; critical when one of them is critical.",
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
			series:  []series{{`cachewatch_exporter_up{` + exp + `}`, "0x59"}},
			quietAt: []time.Duration{4 * time.Minute},
			want:    []want{{SeverityWarning, instNode, "The exporter exporter:9121 fails to sample Redis node redis:6379."}},
		}, {
			name:   "healthy: sampling",
			series: []series{{`cachewatch_exporter_up{` + exp + `}`, "1x59"}},
		}, {
			name: "critical: failing while a lock without TTL was paging",
			series: []series{
				{`cachewatch_exporter_locks_without_ttl{` + exp + `, key_group="lock:report:*"}`, "2x19 stale"},
				{`cachewatch_exporter_up{` + exp + `}`, "1x19 0x40"},
				{`up{job="cachewatch-exporter", instance="exporter:9121"}`, "1x59"},
			},
			quietAt: []time.Duration{22 * time.Minute},
			want: []want{
				{SeverityWarning, instNode, "The exporter exporter:9121 fails to sample Redis node redis:6379."},
				{SeverityCritical, instNode, "The exporter exporter:9121 fails to sample Redis node redis:6379."},
			},
		}},
	}, {
		group: groupExporter, name: "CachewatchExporterSampleErrors",
		query: `sum by (job, instance, target, node, stage) (rate(cachewatch_exporter_sample_errors_total{${exporter_selector}}[${rate_window}])) * 60`, by: "job, instance, target, node, stage", op: ">",
		levels:      []level{lvl(SeverityInfo, 0, "0")},
		forDur:      time.Duration(cfg.ExporterErrorsFor),
		summary:     "The exporter keeps failing one sampling stage; its other figures are still served.",
		description: `The exporter {{ $labels.instance }} fails stage {{ $labels.stage }} on {{ $labels.node }} {{ $value | printf "%.1f" }} times per minute.`,
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
			series:  []series{{`cachewatch_exporter_sample_errors_total{` + exp + `, stage="queues", class="noperm"}`, "0+6x59"}},
			quietAt: []time.Duration{14 * time.Minute},
			want:    []want{{SeverityInfo, with(instNode, "stage", "queues"), "The exporter exporter:9121 fails stage queues on redis:6379 6.0 times per minute."}},
		}, {
			name:   "healthy: none",
			series: []series{{`cachewatch_exporter_sample_errors_total{` + exp + `, stage="queues", class="noperm"}`, "0x59"}},
		}},
	}, {
		group: groupExporter, name: "CachewatchExporterKeyspaceCoverageLow",
		query: `min by (job, instance, target, node) (cachewatch_exporter_keyspace_coverage_ratio{${exporter_selector}})`, by: "job, instance, target, node", op: "<",
		levels:      []level{lvl(SeverityWarning, cfg.KeyspaceCoverage, pct(cfg.KeyspaceCoverage))},
		forDur:      time.Duration(cfg.KeyspaceCoverageFor),
		summary:     "The exporter has not covered the whole keyspace: its keyspace figures (keys without TTL, expiry synchronisation) are missing.",
		description: `The exporter {{ $labels.instance }} covers {{ $value | humanizePercentage }} of the keyspace of {{ $labels.node }} (threshold {{threshold}}).`,
		runbook: runbook{
			meaning: "The whole-keyspace pass has not completed since the exporter started (or since the node restarted or a sample failed): until it does, the key series (`keys_without_ttl`, `expiry_synchronisation`, memory per key group) are not exported and the alerts on them cannot fire. The lock series come from the lock index, not from this pass: they are not affected.",
			causes: []string{
				"A keyspace larger than `--sample.max-keys` × samples per pass can cover in time.",
				"`--sample.max-duration` or `--sample.keys-per-second` too low for the keyspace: at the default 1,000 keys/s a pass takes the node's keys / 1,000 seconds (over 4 hours beyond 14,400,000 keys).",
			},
			confirm: "On **" + boardKeyspace + "**, panels *Keyspace coverage*, *Scan cycles, truncated samples and keys scanned* and *Sample duration* in the *Sampler health: can this board be trusted?* row.",
			fix:     "Raise `--sample.max-keys`, `--sample.max-duration` or `--sample.keys-per-second` within what the server can afford, or narrow `--locks.pattern`.",
		},
		cases: []testCase{{
			name:    "40% covered",
			series:  []series{{`cachewatch_exporter_keyspace_coverage_ratio{` + exp + `}`, "0.4x299"}},
			evalAt:  250 * time.Minute,
			quietAt: []time.Duration{239 * time.Minute},
			want:    []want{{SeverityWarning, instNode, "The exporter exporter:9121 covers 40% of the keyspace of redis:6379 (threshold 100%)."}},
		}, {
			name:   "healthy: full",
			series: []series{{`cachewatch_exporter_keyspace_coverage_ratio{` + exp + `}`, "1x299"}},
		}},
	}}
}

// exporterCriticals names the critical alerts computed from the exporter's
// samples.
func exporterCriticals() []string {
	var out []string
	cfg := DefaultConfig()
	for _, d := range append(keyspaceDefinitions(cfg), redisNodeUnreachable(cfg)) {
		for _, l := range d.levels {
			if l.severity == SeverityCritical && d.seen != nil {
				out = append(out, d.name)
				break
			}
		}
	}
	return out
}
