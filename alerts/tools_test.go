package alerts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cachewatch/cachewatch/internal/metrictest"
)

func TestPromtoolCheckRules(t *testing.T) {
	promtool := metrictest.Tool(t, "promtool", "prometheus")
	out := metrictest.RunTool(t, promtool, "check", "rules", filepath.Join("generated", RulesFile))
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool check rules:\n%s", out)
	}
}

// TestPromtoolTestRules runs the unit tests of every alert and recording
// rule through the real rule engine.
func TestPromtoolTestRules(t *testing.T) {
	promtool := metrictest.Tool(t, "promtool", "prometheus")
	metrictest.RunTool(t, promtool, "test", "rules", filepath.Join("generated", RulesTestFile))
}

// TestGrafanaQueriesParse feeds every Grafana query A (recording rules
// inlined) to promtool as a recording rule, so Prometheus's own parser
// checks it.
func TestGrafanaQueriesParse(t *testing.T) {
	promtool := metrictest.Tool(t, "promtool", "prometheus")
	alerts, err := Alerts(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	groups, _ := Rules(DefaultConfig())
	inline := recordingExprs(groups)
	var b strings.Builder
	b.WriteString("groups:\n  - name: grafana-queries\n    rules:\n")
	for i, a := range alerts {
		q := inlineRecording(a.grafanaQuery, inline)
		for name := range inline {
			if strings.Contains(q, name) {
				t.Errorf("%s: Grafana query still names recording rule %s", a.Name, name)
			}
		}
		fmt.Fprintf(&b, "      - record: grafana:query_%d\n        expr: '%s'\n", i, strings.ReplaceAll(q, "'", "''"))
	}
	path := filepath.Join(t.TempDir(), "grafana-queries.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	metrictest.RunTool(t, promtool, "check", "rules", path)
}

func TestAmtoolCheckConfig(t *testing.T) {
	amtool := metrictest.Tool(t, "amtool", "prometheus-alertmanager")
	file := filepath.Join("generated", AlertmanagerFile)
	metrictest.RunTool(t, amtool, "check-config", file)
	for severity, want := range map[string]string{
		SeverityCritical: ReceiverPage,
		SeverityWarning:  ReceiverTicket,
		SeverityInfo:     ReceiverQuiet,
	} {
		// amtool prints a warning about --alertmanager.url on stderr.
		stdout, err := exec.Command(amtool, "config", "routes", "test", "--config.file="+file,
			"alertname=CachewatchLockContentionHigh", "key_group=lock:report:*", "severity="+severity).Output()
		if err != nil {
			t.Fatalf("amtool config routes test: %v", err)
		}
		if out := string(stdout); strings.TrimSpace(out) != want {
			t.Errorf("severity %s routes to %q, want %s", severity, strings.TrimSpace(out), want)
		}
	}
}
