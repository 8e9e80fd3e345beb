package e2e

// STAND-IN, to be deleted when alerts/ lands on main: a tiny rule file.

import (
	"os"
	"path/filepath"
	"testing"
)

var devRules string

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
	if err := os.WriteFile(p, []byte(rulesText()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func rulesText() string {
	if devRules != "" {
		return devRules
	}
	return standinRules
}

func alertmanagerConfig(t *testing.T, webhookURL string) map[string]any {
	return map[string]any{
		"route": map[string]any{
			"receiver": "test-webhook", "group_by": []string{"alertname", "key_group"},
			"group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h",
		},
		"receivers": []any{map[string]any{
			"name":            "test-webhook",
			"webhook_configs": []any{map[string]any{"url": webhookURL, "send_resolved": false}},
		}},
	}
}
