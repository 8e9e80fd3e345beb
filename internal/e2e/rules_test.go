package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/cachewatch/cachewatch/alerts"
)

// locksWithoutTTLAlert is the alert the test causes on purpose.
const locksWithoutTTLAlert = "CachewatchLocksWithoutTTL"

// ruleConfig is alerts' default configuration (its exporter selector matches
// the exporter's job name here) with the caused alert's `for:` shortened
// through the Config, as an operator would override it, so that the test
// does not wait out the default.
func ruleConfig(t *testing.T) alerts.Config {
	t.Helper()
	cfg := alerts.DefaultConfig()
	cfg.LocksWithoutTTLFor = model.Duration(5 * time.Second)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// writeRules writes the Prometheus rule file that package alerts generates
// for cfg into dir and returns its path.
func writeRules(t *testing.T, dir string, cfg alerts.Config) (path string) {
	t.Helper()
	b, err := alerts.PrometheusRules(ruleGroups(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, alerts.RulesFile)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// generatedExprs returns every expression of the rules that package alerts
// generates for cfg (recording rules first), as writeRules writes them, and
// the PromQL queries of the same alerts as Grafana-managed rules.
func generatedExprs(t *testing.T, cfg alerts.Config) (exprs, grafanaExprs []string) {
	t.Helper()
	groups := ruleGroups(t, cfg)
	for _, g := range groups {
		for _, r := range g.Recording {
			exprs = append(exprs, r.Expr)
		}
		for _, a := range g.Alerts {
			exprs = append(exprs, a.Expr)
		}
	}
	return exprs, grafanaQueries(t, groups)
}

// ruleGroups are the rule groups package alerts generates for cfg.
func ruleGroups(t *testing.T, cfg alerts.Config) []alerts.Group {
	t.Helper()
	groups, err := alerts.Rules(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return groups
}

// grafanaQueries returns the PromQL queries of the Grafana-managed rules
// (the Prometheus data source's queries; the others are Grafana expressions).
func grafanaQueries(t *testing.T, groups []alerts.Group) []string {
	t.Helper()
	b, err := alerts.GrafanaRules(groups, alerts.GrafanaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Data []struct {
					Model struct {
						Datasource struct{ Type string }
						Expr       string
					}
				}
			}
		}
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatalf("generated Grafana rules: %v", err)
	}
	var out []string
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			for _, d := range r.Data {
				if d.Model.Datasource.Type == "prometheus" {
					out = append(out, d.Model.Expr)
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no PromQL query found in the generated Grafana rules:\n%.2000s", b)
	}
	return out
}

// alertRule returns the generated rule of the alert name with the given
// severity.
func alertRule(t *testing.T, cfg alerts.Config, name, severity string) alerts.Alert {
	t.Helper()
	all, err := alerts.Alerts(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range all {
		if a.Name == name && a.Severity == severity {
			return a
		}
	}
	t.Fatalf("alerts generates no %s with severity %q", name, severity)
	return alerts.Alert{}
}

// receiverFor is where the generated routing sends each severity.
var receiverFor = map[string]string{
	alerts.SeverityCritical: alerts.ReceiverPage,
	alerts.SeverityWarning:  alerts.ReceiverTicket,
}

// alertmanagerConfig is the Alertmanager configuration that package alerts
// generates — routing by severity, grouping, inhibitions — with every
// receiver's webhook pointed at the test's and the routes' waits before a
// first and a next notification cut to a second.
func alertmanagerConfig(t *testing.T, webhookURL string) map[string]any {
	t.Helper()
	cfg := shippedAlertmanagerConfig(t, webhookURL)
	shortenWaits(cfg["route"].(map[string]any), true)
	return cfg
}

// shippedAlertmanagerConfig is the generated Alertmanager configuration as
// shipped, only its receivers' webhooks pointed at the test's.
func shippedAlertmanagerConfig(t *testing.T, webhookURL string) map[string]any {
	t.Helper()
	b, err := alerts.AlertmanagerConfig(alerts.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("generated Alertmanager config: %v", err)
	}
	if _, ok := cfg["route"].(map[string]any); !ok {
		t.Fatalf("generated Alertmanager config has no route:\n%s", b)
	}
	receivers, _ := cfg["receivers"].([]any)
	for _, r := range receivers {
		hooks, _ := r.(map[string]any)["webhook_configs"].([]any)
		for _, h := range hooks {
			h.(map[string]any)["url"] = webhookURL
		}
	}
	return cfg
}

// shortenWaits sets group_wait and group_interval to 1s on the root route
// and wherever a child route sets its own.
func shortenWaits(route map[string]any, root bool) {
	for _, k := range []string{"group_wait", "group_interval"} {
		if _, set := route[k]; set || root {
			route[k] = "1s"
		}
	}
	children, _ := route["routes"].([]any)
	for _, c := range children {
		if m, ok := c.(map[string]any); ok {
			shortenWaits(m, false)
		}
	}
}
