package e2e

// STAND-IN, to be deleted when dashboards/ and alerts/ land on main: one
// query per catalog metric in the dashboards' style, and a tiny rule file.

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cachewatch/cachewatch/signals"
)

type panelQuery struct{ Board, Panel, Expr string }

func dashboardQueries() []panelQuery {
	var out []panelQuery
	for _, m := range signals.All() {
		sel := `job=~"$job", instance=~"$instance"`
		if slices.Contains(m.LabelNames(), "key_group") {
			sel += `, key_group=~"$key_group"`
		}
		var expr string
		switch m.Kind {
		case signals.Counter:
			expr = `sum by (job) (rate(` + m.Name + `{` + sel + `}[$__rate_interval]))`
		case signals.Gauge:
			expr = `max by (job) (` + m.Name + `{` + sel + `})`
		case signals.Histogram:
			expr = `histogram_quantile(0.99, sum by (le) (rate(` + m.Name + `_bucket{` + sel + `}[$__rate_interval])))`
		}
		out = append(out, panelQuery{Board: "standin", Panel: m.Name, Expr: expr})
	}
	return out
}

const standinRules = `groups:
- name: cachewatch-standin
  rules:
  - record: key_group:cachewatch_lock_contention:ratio_rate5m
    expr: sum by (key_group) (rate(cachewatch_lock_attempts_total{attempt="first",result="busy"}[5m])) / sum by (key_group) (rate(cachewatch_lock_attempts_total{attempt="first"}[5m]))
  - alert: CachewatchLocksWithoutTTL
    expr: max by (key_group) (cachewatch_exporter_locks_without_ttl) > 0
    for: 5s
    labels:
      severity: critical
    annotations:
      summary: Lock keys without expiry.
      description: '{{ $value }} locks of {{ $labels.key_group }} have no TTL.'
      runbook_url: https://github.com/cachewatch/cachewatch/blob/main/docs/runbooks.md#cachewatchlockswithoutttl
`

const locksWithoutTTLAlert = "CachewatchLocksWithoutTTL"

func writeRules(t *testing.T, dir string) string {
	p := filepath.Join(dir, "rules.yml")
	if err := os.WriteFile(p, []byte(standinRules), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
