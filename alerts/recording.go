package alerts

import (
	"fmt"
	"strings"

	"github.com/cachewatch/cachewatch/signals"
)

// upMetric is Prometheus's own per-target series, the one series the rules
// read that is not in the signals catalog.
const upMetric = "up"

// alertsMetric is the series Prometheus writes for every pending or firing
// alert (labels alertname, alertstate and the alert's own); the rules read
// it to keep an alert firing while its data is missing.
const alertsMetric = "ALERTS"

// vec is a vector selector: the metric with the config selector and extra
// matchers.
func vec(metric, selector string, extra ...string) string {
	return metric + "{" + strings.Join(append([]string{selector}, extra...), ", ") + "}"
}

// window is a range selector's window: a Prometheus duration.
type window string

// rate is rate(metric{selector, extra}[w]).
func (w window) rate(metric, selector string, extra ...string) string {
	return "rate(" + vec(metric, selector, extra...) + "[" + string(w) + "])"
}

// increase is increase(metric{selector, extra}[window]).
func increase(metric, selector, window string, extra ...string) string {
	return "increase(" + vec(metric, selector, extra...) + "[" + window + "])"
}

// sumBy aggregates e by labels.
func sumBy(labels, e string) string { return "sum by (" + labels + ") (" + e + ")" }

func p99(labels, bucketRate string) string {
	return "histogram_quantile(0.99, " + sumBy(labels+", le", bucketRate) + ")"
}

// record builds a level:metric:operations name. metric loses its _total
// suffix, as the Prometheus naming guide asks.
func record(level string, m string, ops string) string {
	return level + ":" + strings.TrimSuffix(m, "_total") + ":" + ops
}

// recNames are the names of the recording rules the alerts read. They are
// functions of the catalog, so a renamed metric renames its rules, and of
// the rate window, which the names say (ratio_rate5m).
type recNames struct {
	lockAcquireP99, lockAttempts, lockRetries, lockContention          string
	lookups, cacheErrors, staleRatio, amplification, missBursts        string
	scriptP99, serverScriptMean, commands, commandErrors, poolTimeouts string
	serverLookups, serverHitRatio, serverHitRatio1                     string
}

// The rule groups, one per area the alerts watch.
const (
	groupLocks    = "cachewatch-locks"
	groupCache    = "cachewatch-cache"
	groupRedis    = "cachewatch-redis"
	groupKeyspace = "cachewatch-keyspace"
	groupExporter = "cachewatch-exporter"
)

// names returns the recording rule names for cfg's rate window.
func names(cfg Config) recNames {
	w := "rate" + cfg.RateWindow.String()
	return recNames{
		lockAcquireP99:   record("key_group", signals.LockAcquireDuration.String(), "p99_"+w),
		lockAttempts:     record("key_group", signals.LockAttempts.String(), w),
		lockRetries:      record("key_group", "cachewatch_lock_retries", w),
		lockContention:   record("key_group", "cachewatch_lock_contention", "ratio_"+w),
		lookups:          record("key_group", signals.CacheLookups.String(), w),
		cacheErrors:      record("key_group", "cachewatch_cache_errors", "ratio_"+w),
		staleRatio:       record("key_group", "cachewatch_cache_stale", "ratio_"+w),
		amplification:    record("key_group", "cachewatch_loader_amplification", "ratio_"+w),
		missBursts:       record("key_group", signals.MissBursts.String(), w),
		scriptP99:        record("script", signals.ScriptDuration.String(), "p99_"+w),
		serverScriptMean: record("node_command", "cachewatch_exporter_server_script_seconds_per_call", "ratio_"+w),
		commands:         record("client", signals.CommandDuration.String()+"_count", w),
		commandErrors:    record("client", signals.CommandErrors.String(), "ratio_"+w),
		poolTimeouts:     record("instance_client", signals.PoolTimeouts.String(), w),
		serverLookups:    record("node", "cachewatch_exporter_server_keyspace_lookups", w),
		serverHitRatio:   record("node", "cachewatch_exporter_server_keyspace_hit", "ratio_"+w),
		serverHitRatio1:  record("node", "cachewatch_exporter_server_keyspace_hit", "ratio_rate1h"),
	}
}

// scriptCommands are the commands that run a script on the server.
const scriptCommands = `command=~"eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro"`

// recordingRules returns the recording rules, each in the group of the
// alerts that read it, so that Prometheus, which evaluates a group's rules
// in order, gives the alerts the value of the same evaluation. Each keeps
// job besides the labels its level names. None reads another, so each can
// be inlined into a Grafana query on its own.
func recordingRules(cfg Config) map[string][]RecordingRule {
	s, e := cfg.ServiceSelector, cfg.ExporterSelector
	n := names(cfg)
	w := window(cfg.RateWindow.String())
	kg := "job, key_group"
	// Contention and acquire latency count callers that wait for a lock;
	// a try-once acquisition (the caller asked not to wait) losing the race
	// is the design, not contention.
	waiting := `mode="wait"`
	firstBusy := sumBy(kg, w.rate(signals.LockAttempts.String(), s, waiting, `attempt="first"`, `result="busy"`))
	first := sumBy(kg, w.rate(signals.LockAttempts.String(), s, waiting, `attempt="first"`))
	lookups := sumBy(kg, w.rate(signals.CacheLookups.String(), s))
	calls := sumBy(kg, w.rate(signals.SourceCalls.String(), s, `result=~"success|error"`))
	refused := sumBy(kg, w.rate(signals.StaleWritesRefused.String(), s))
	hits := func(w window) string {
		return sumBy("job, node", w.rate(signals.ServerKeyspaceHits.String(), e))
	}
	misses := func(w window) string {
		return sumBy("job, node", w.rate(signals.ServerKeyspaceMisses.String(), e))
	}
	hitRatio := func(w window) string {
		return fmt.Sprintf("%s\n/\n(%s + %s)", hits(w), hits(w), misses(w))
	}
	nc := "job, node, command"
	return map[string][]RecordingRule{
		groupLocks: {
			{n.lockAcquireP99, p99(kg, w.rate(signals.LockAcquireDuration.String()+"_bucket", s, waiting))},
			{n.lockAttempts, sumBy(kg, w.rate(signals.LockAttempts.String(), s, waiting))},
			{n.lockRetries, sumBy(kg, w.rate(signals.LockAttempts.String(), s, waiting, `attempt="retry"`))},
			{n.lockContention, firstBusy + "\n/\n" + first},
		},
		groupCache: {
			{n.lookups, lookups},
			{n.cacheErrors, sumBy(kg, w.rate(signals.CacheLookups.String(), s, `result="error"`)) + "\n/\n" + lookups},
			{n.staleRatio, sumBy(kg, w.rate(signals.CacheLookups.String(), s, `result="stale"`)) + "\n/\n" + lookups},
			// Source calls per stored load: a load whose value was refused
			// (its lease passed to another loader, or the key was
			// invalidated, while it ran) was wasted work. 1 is healthy.
			{n.amplification, fmt.Sprintf("%s\n/\n(%s - (%s or 0 * %s))", calls, calls, refused, calls)},
			{n.missBursts, sumBy(kg, w.rate(signals.MissBursts.String(), s))},
		},
		groupRedis: {
			{n.scriptP99, p99("job, script", w.rate(signals.ScriptDuration.String()+"_bucket", s))},
			{n.serverScriptMean, sumBy(nc, w.rate(signals.ServerCommandSeconds.String(), e, scriptCommands)) + "\n/\n" +
				sumBy(nc, w.rate(signals.ServerCommandCalls.String(), e, scriptCommands))},
			{n.commands, sumBy("job, client", w.rate(signals.CommandDuration.String()+"_count", s))},
			{n.commandErrors, sumBy("job, client", w.rate(signals.CommandErrors.String(), s)) + "\n/\n" + sumBy("job, client", w.rate(signals.CommandDuration.String()+"_count", s))},
			{n.poolTimeouts, sumBy("job, instance, client", w.rate(signals.PoolTimeouts.String(), s))},
		},
		groupKeyspace: {
			{n.serverLookups, hits(w) + "\n+\n" + misses(w)},
			{n.serverHitRatio, hitRatio(w)},
			{n.serverHitRatio1, hitRatio("1h")},
		},
	}
}

// breakerWindow is how long a circuit breaker must have stayed away from
// closed for its alert: longer than one opening and its trial call, short
// enough that a Redis outage pages within minutes.
const breakerWindow = "1m"
