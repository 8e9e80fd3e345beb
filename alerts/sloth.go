package alerts

import (
	"fmt"
	"math"
	"strings"
)

// SlothFile is the conventional file name of SlothSpec's output.
const SlothFile = "cachewatch-slos.sloth.yaml"

// The sloth prometheus/v1 spec (github.com/slok/sloth, pkg/prometheus/api/v1).
type (
	slothSpec struct {
		Version string     `yaml:"version"`
		Service string     `yaml:"service"`
		SLOs    []slothSLO `yaml:"slos"`
	}
	slothSLO struct {
		Name        string            `yaml:"name"`
		Objective   float64           `yaml:"objective"`
		Description string            `yaml:"description"`
		Labels      map[string]string `yaml:"labels,omitempty"`
		SLI         struct {
			Events slothEvents `yaml:"events"`
		} `yaml:"sli"`
		Alerting slothAlerting `yaml:"alerting"`
	}
	slothEvents struct {
		ErrorQuery string `yaml:"error_query"`
		TotalQuery string `yaml:"total_query"`
	}
	slothAlerting struct {
		Name        string            `yaml:"name"`
		Labels      map[string]string `yaml:"labels,omitempty"`
		Annotations map[string]string `yaml:"annotations,omitempty"`
		PageAlert   slothAlert        `yaml:"page_alert"`
		TicketAlert slothAlert        `yaml:"ticket_alert"`
	}
	slothAlert struct {
		Labels map[string]string `yaml:"labels"`
	}
)

// SlothSpec returns the SLOs of cfg as a sloth prometheus/v1 spec, for
// teams that generate their SLO rules with sloth: the same indicators
// (the same queries over sloth's {{.window}}), objectives and alert
// names, page alerts critical and ticket alerts warning, so that
// AlertmanagerConfig routes them as it routes ours. Sloth's windows for a
// 30-day period are the tiers of Rules.
func SlothSpec(cfg Config) ([]byte, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	spec := slothSpec{Version: "prometheus/v1", Service: "cachewatch"}
	for _, s := range SLOs(cfg) {
		slo := slothSLO{
			Name: s.Name, Description: s.Description,
			// sloth takes a percentage; rounding drops the float noise of
			// ×100 (0.999 → 99.9).
			Objective: math.Round(s.Objective*100*1e9) / 1e9,
			Labels:    map[string]string{"slo": s.Name},
			Alerting: slothAlerting{
				Name:   s.Alert,
				Labels: map[string]string{"slo": s.Name},
				Annotations: map[string]string{
					"summary":     s.summary,
					"runbook_url": cfg.RunbookBaseURL + "#" + RunbookAnchor(s.Alert),
				},
				PageAlert:   slothAlert{Labels: map[string]string{"severity": SeverityCritical}},
				TicketAlert: slothAlert{Labels: map[string]string{"severity": SeverityWarning}},
			},
		}
		slo.SLI.Events = slothEvents{ErrorQuery: "(\n" + s.ErrorQuery + "\n)\nor\n(\n" + s.TotalQuery + "\n) * 0", TotalQuery: s.TotalQuery}
		spec.SLOs = append(spec.SLOs, slo)
	}
	return marshalYAML(spec)
}

// SLIMarkdown documents the service-level indicators for docs/metrics.md:
// what each counts as good and bad, per which labels, its default
// objective, the recording rules the alerts and dashboards read, and its
// queries over a window.
func SLIMarkdown(cfg Config) []byte {
	var b strings.Builder
	b.WriteString("\n## Service-level indicators (`alerts/`)\n\n")
	b.WriteString("Generated from the metrics above by package `alerts`, which pages when an indicator burns its error budget fast ")
	b.WriteString("(docs/runbooks.md, *Service-level objectives*). Each is recorded per job and its identity label as ")
	b.WriteString("`<label>:cachewatch_slo_<name>_errors:ratio_rate<window>` for the windows " + strings.Join(sloWindows, ", ") + " and " + sloPeriod + ", ")
	b.WriteString("with the events' rate over each tier's long window as `<label>:cachewatch_slo_<name>_events:rate<window>`.\n\n")
	b.WriteString("| SLI | per | objective (default, 30d) | good and bad events | rate of bad events (5m window) | rate of all events (5m window) |\n|---|---|---|---|---|---|\n")
	for _, s := range SLOs(cfg) {
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | `%s` | `%s` |\n", s.Name, s.by, pct(s.Objective), mdCell(s.Description),
			mdCell(oneLine(strings.ReplaceAll(s.ErrorQuery, "{{.window}}", "5m"))), mdCell(oneLine(strings.ReplaceAll(s.TotalQuery, "{{.window}}", "5m"))))
	}
	return []byte(b.String())
}
