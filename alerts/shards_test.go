package alerts

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/cachewatch/cachewatch/internal/metrictest"
)

// shardTarget is one probed target, scraped by one of 3 exporter replicas:
// the three share a node (one Redis, three databases), so only target
// tells their series apart.
type shardTarget struct {
	name         string
	locks        int
	hits, misses int
}

var shardTargets = []shardTarget{
	{"redis://redis:6379/0", 1, 180, 60}, // hit ratios 0.75, 0.5, 0.25: exact in binary
	{"redis://redis:6379/1", 2, 60, 60},
	{"redis://redis:6379/2", 3, 60, 180},
}

// shardSeries are the series one replica scrapes from target t.
func shardSeries(t shardTarget) []map[string]string {
	ls := fmt.Sprintf(`job="cachewatch-exporter", instance=%q, target=%q, node="redis:6379"`, t.name, t.name)
	return []map[string]string{
		{"series": `up{job="cachewatch-exporter", instance="` + t.name + `"}`, "values": "1x40"},
		{"series": "cachewatch_exporter_up{" + ls + "}", "values": "1x40"},
		{"series": "cachewatch_exporter_sample_interval_seconds{" + ls + "}", "values": "15x40"},
		{"series": "cachewatch_exporter_data_timestamp_seconds{" + ls + `, family="locks"}`, "values": "0+60x40"},
		{"series": "cachewatch_exporter_locks_without_ttl{" + ls + `, key_group="lock:report:*"}`, "values": fmt.Sprintf("%dx40", t.locks)},
		{"series": "cachewatch_exporter_server_keyspace_hits_total{" + ls + "}", "values": fmt.Sprintf("0+%dx40", t.hits)},
		{"series": "cachewatch_exporter_server_keyspace_misses_total{" + ls + "}", "values": fmt.Sprintf("0+%dx40", t.misses)},
	}
}

// shardExpectations are the answers the rules must give for targets: the
// lock alert and the hit ratio, one per target.
func shardExpectations(targets []shardTarget) []map[string]any {
	var alerts, ratios []map[string]any
	for _, t := range targets {
		ls := fmt.Sprintf(`job="cachewatch-exporter", target=%q, node="redis:6379"`, t.name)
		alerts = append(alerts, map[string]any{"labels": `ALERTS{alertname="CachewatchLocksWithoutTTL", alertstate="firing", severity="critical", ` +
			ls + `, key_group="lock:report:*"}`, "value": 1})
		ratios = append(ratios, map[string]any{"labels": "node:cachewatch_exporter_server_keyspace_hit:ratio_rate5m{" + ls + "}",
			"value": float64(t.hits) / float64(t.hits+t.misses)})
	}
	return []map[string]any{
		{"expr": `ALERTS{alertname="CachewatchLocksWithoutTTL", alertstate="firing"}`, "eval_time": "20m", "exp_samples": alerts},
		{"expr": "node:cachewatch_exporter_server_keyspace_hit:ratio_rate5m", "eval_time": "20m", "exp_samples": ratios},
	}
}

// The exporter's rules give the same answers evaluated on each replica's
// series (a Prometheus per shard) as on the union of the 3 replicas' (the
// global view in Thanos, Mimir or VictoriaMetrics): what they aggregate
// keeps target apart, so the union's answers are the shards' side by side,
// even for targets that share a node.
func TestRulesSameOnShardsAndUnion(t *testing.T) {
	promtool := metrictest.Promtool(t)
	rules, err := filepath.Abs(filepath.Join("generated", RulesFile))
	if err != nil {
		t.Fatal(err)
	}
	var tests []map[string]any
	var union []map[string]string
	for _, tg := range shardTargets {
		tests = append(tests, map[string]any{"name": "shard " + tg.name, "interval": "1m",
			"input_series": shardSeries(tg), "promql_expr_test": shardExpectations([]shardTarget{tg})})
		union = append(union, shardSeries(tg)...)
	}
	tests = append(tests, map[string]any{"name": "union of 3 shards", "interval": "1m",
		"input_series": union, "promql_expr_test": shardExpectations(shardTargets)})
	out, err := yaml.Marshal(map[string]any{"rule_files": []string{rules}, "evaluation_interval": "1m", "tests": tests})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "shards.test.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := metrictest.RunTool(t, promtool, "test", "rules", path); !strings.Contains(got, "SUCCESS") {
		t.Fatalf("promtool test rules:\n%s", got)
	}
}
