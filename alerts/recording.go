package alerts

import (
	"fmt"
	"strings"

	"github.com/cachewatch/cachewatch/signals"
)

// rateWindow is the window of every rate in the rules; the recording rule
// names say it (rate5m), so it is not configurable.
const rateWindow = "5m"

// upMetric is Prometheus's own per-target series, the one series the rules
// read that is not in the signals catalog.
const upMetric = "up"

// vec is a vector selector: the metric with the config selector and extra
// matchers.
func vec(metric, selector string, extra ...string) string {
	return metric + "{" + strings.Join(append([]string{selector}, extra...), ", ") + "}"
}

// rate is rate(metric{selector, extra}[5m]).
func rate(metric, selector string, extra ...string) string {
	return "rate(" + vec(metric, selector, extra...) + "[" + rateWindow + "])"
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

// Names of the recording rules the alerts read. They are functions of the
// catalog so a renamed metric renames its rules.
var (
	recLockAcquireP99  = record("key_group", signals.LockAcquireDuration.String(), "p99_rate5m")
	recLockAttempts    = record("key_group", signals.LockAttempts.String(), "rate5m")
	recLockContention  = record("key_group", "cachewatch_lock_contention", "ratio_rate5m")
	recLookups         = record("key_group", signals.CacheLookups.String(), "rate5m")
	recStaleRatio      = record("key_group", "cachewatch_cache_stale", "ratio_rate5m")
	recAmplification   = record("key_group", "cachewatch_loader_amplification", "ratio_rate5m")
	recMissBursts      = record("key_group", signals.MissBursts.String(), "rate5m")
	recScriptP99       = record("script", signals.ScriptDuration.String(), "p99_rate5m")
	recCommands        = record("client", signals.CommandDuration.String()+"_count", "rate5m")
	recCommandErrors   = record("client", signals.CommandErrors.String(), "ratio_rate5m")
	recPoolTimeouts    = record("instance_client", signals.PoolTimeouts.String(), "rate5m")
	recServerLookups   = record("node", "cachewatch_exporter_server_keyspace_lookups", "rate5m")
	recServerHitRatio  = record("node", "cachewatch_exporter_server_keyspace_hit", "ratio_rate5m")
	recServerHitRatio1 = record("node", "cachewatch_exporter_server_keyspace_hit", "ratio_rate1h")
)

// recordingGroup names the rule group of each recording rule: the group of
// the alerts that read it, so that Prometheus, which evaluates a group's
// rules in order, gives the alerts the value of the same evaluation.
var recordingGroup = map[string]string{
	recLockAcquireP99: "cachewatch-locks", recLockAttempts: "cachewatch-locks", recLockContention: "cachewatch-locks",
	recLookups: "cachewatch-cache", recStaleRatio: "cachewatch-cache", recAmplification: "cachewatch-cache", recMissBursts: "cachewatch-cache",
	recScriptP99: "cachewatch-redis", recCommands: "cachewatch-redis", recCommandErrors: "cachewatch-redis", recPoolTimeouts: "cachewatch-redis",
	recServerLookups: "cachewatch-keyspace", recServerHitRatio: "cachewatch-keyspace", recServerHitRatio1: "cachewatch-keyspace",
}

// recordingRules returns the recording rules. Each keeps job besides the
// labels its level names. None reads another, so each can be inlined into
// a Grafana query on its own.
func recordingRules(cfg Config) []RecordingRule {
	s, e := cfg.ServiceSelector, cfg.ExporterSelector
	kg := "job, key_group"
	firstBusy := sumBy(kg, rate(signals.LockAttempts.String(), s, `attempt="first"`, `result="busy"`))
	first := sumBy(kg, rate(signals.LockAttempts.String(), s, `attempt="first"`))
	calls := sumBy(kg, rate(signals.SourceCalls.String(), s, `result=~"success|error"`))
	refused := sumBy(kg, rate(signals.StaleWritesRefused.String(), s))
	hits := func(w string) string {
		return sumBy("job, node", "rate("+vec(signals.ServerKeyspaceHits.String(), e)+"["+w+"])")
	}
	misses := func(w string) string {
		return sumBy("job, node", "rate("+vec(signals.ServerKeyspaceMisses.String(), e)+"["+w+"])")
	}
	hitRatio := func(w string) string {
		return fmt.Sprintf("%s\n/\n(%s + %s)", hits(w), hits(w), misses(w))
	}
	return []RecordingRule{
		{recLockAcquireP99, p99(kg, rate(signals.LockAcquireDuration.String()+"_bucket", s))},
		{recLockAttempts, sumBy(kg, rate(signals.LockAttempts.String(), s))},
		{recLockContention, firstBusy + "\n/\n" + first},
		{recLookups, sumBy(kg, rate(signals.CacheLookups.String(), s))},
		{recStaleRatio, sumBy(kg, rate(signals.CacheLookups.String(), s, `result="stale"`)) + "\n/\n" + sumBy(kg, rate(signals.CacheLookups.String(), s))},
		// Source calls per stored load: a load whose value was refused
		// (its lease passed to another loader, or the key was invalidated,
		// while it ran) was wasted work. 1 is healthy.
		{recAmplification, fmt.Sprintf("%s\n/\n(%s - (%s or 0 * %s))", calls, calls, refused, calls)},
		{recMissBursts, sumBy(kg, rate(signals.MissBursts.String(), s))},
		{recScriptP99, p99("job, script", rate(signals.ScriptDuration.String()+"_bucket", s))},
		{recCommands, sumBy("job, client", rate(signals.CommandDuration.String()+"_count", s))},
		{recCommandErrors, sumBy("job, client", rate(signals.CommandErrors.String(), s)) + "\n/\n" + sumBy("job, client", rate(signals.CommandDuration.String()+"_count", s))},
		{recPoolTimeouts, sumBy("job, instance, client", rate(signals.PoolTimeouts.String(), s))},
		{recServerLookups, hits("5m") + "\n+\n" + misses("5m")},
		{recServerHitRatio, hitRatio("5m")},
		{recServerHitRatio1, hitRatio("1h")},
	}
}
