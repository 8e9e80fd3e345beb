// Package alerts generates cachewatch's Prometheus recording and alerting
// rules, the same alerts as Grafana-managed rules, the runbooks page and an
// Alertmanager configuration, all from one set of definitions that read
// metric names from the signals catalog and thresholds from a Config.
//
// The rules follow the monitoring-mixin conventions: recording rules are
// named level:metric:operations (the level lists the labels kept besides
// job, which every rule keeps), alerts are CamelCase names prefixed
// Cachewatch with a severity label (critical, warning or info), a static
// summary, a description templated with labels and value, and a runbook_url
// pointing at the alert's section of docs/runbooks.md.
//
// `go generate ./alerts` rewrites the committed files in alerts/generated/
// and docs/runbooks.md; a test fails while they are stale.
package alerts

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

//go:generate go run ./internal/gen -out generated -runbooks ../docs/runbooks.md

// Severities of the alerts, as the severity label.
const (
	SeverityCritical = "critical"
	SeverityWarning  = "warning"
	SeverityInfo     = "info"
)

// RecordingRule is one Prometheus recording rule.
type RecordingRule struct {
	Record string
	Expr   string
}

// Alert is one Prometheus alerting rule. An alert name may appear twice,
// once per severity (warning and critical thresholds of one condition);
// Alertmanager then inhibits the warning while the critical fires.
type Alert struct {
	Name     string
	Severity string
	// Expr is the complete PromQL condition, threshold included.
	Expr string
	// For is how long Expr must hold before the alert fires.
	For time.Duration
	// Labels are the rule's labels (severity included).
	Labels map[string]string
	// Annotations are summary, description and runbook_url.
	Annotations map[string]string

	// Op and Threshold are the comparison of Expr: the alert fires while
	// the value compares true with Threshold (Op is ">", ">=" or "<").
	// Dashboards draw the same thresholds on the panels that show the value.
	Op        string
	Threshold float64

	// grafanaQuery is the value query of Grafana's rule, guards applied.
	grafanaQuery string
}

// Group is one rule group of the rule file.
type Group struct {
	Name      string
	Recording []RecordingRule
	Alerts    []Alert
}

// Rules returns the rule groups for cfg, one per area the alerts watch
// (locks, cache, Redis commands, keyspace, exporter): each group's
// recording rules, then its alerts. It fails when cfg does not validate.
func Rules(cfg Config) ([]Group, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var groups []Group
	index := map[string]int{}
	groupOf := func(name string) *Group {
		i, ok := index[name]
		if !ok {
			i = len(groups)
			index[name] = i
			groups = append(groups, Group{Name: name})
		}
		return &groups[i]
	}
	defs := definitions(cfg)
	for _, d := range defs {
		groupOf(d.group)
	}
	for _, r := range recordingRules(cfg) {
		g := groupOf(recordingGroup[r.Record])
		g.Recording = append(g.Recording, r)
	}
	for _, d := range defs {
		g := groupOf(d.group)
		g.Alerts = append(g.Alerts, d.alerts(cfg)...)
	}
	return groups, nil
}

// Alerts returns every alerting rule for cfg in rule-file order.
func Alerts(cfg Config) ([]Alert, error) {
	groups, err := Rules(cfg)
	if err != nil {
		return nil, err
	}
	var out []Alert
	for _, g := range groups {
		out = append(out, g.Alerts...)
	}
	return out, nil
}

// AlertNames returns the distinct alert names in rule-file order.
func AlertNames() []string {
	var names []string
	for _, d := range definitions(DefaultConfig()) {
		names = append(names, d.name)
	}
	return names
}

// RunbookAnchor is the fragment of an alert's section in docs/runbooks.md:
// the lower-cased alert name, as GitHub derives it from the heading.
func RunbookAnchor(alertName string) string { return strings.ToLower(alertName) }

// level is one severity of a definition: its threshold.
type level struct {
	severity  string
	threshold float64
	// text is the threshold as the description shows it ("50ms", "5%").
	text string
}

// runbook is an alert's section of docs/runbooks.md.
type runbook struct {
	meaning string
	causes  []string
	// confirm names the board and panels that show the problem.
	confirm string
	fix     string
}

// definition is one alert condition with its severities, runbook and
// promtool fixtures.
type definition struct {
	group string
	name  string
	// query is the value the alert compares (also Grafana's query A).
	query string
	// op is ">", ">=" or "<".
	op     string
	levels []level
	// guard, when set, is a condition the value must also meet: a traffic
	// floor, joined by "and on (guardOn)".
	guard, guardOn string
	forDur         time.Duration
	summary        string
	// description is a template; {{threshold}} is replaced by the level's
	// threshold text.
	description string
	runbook     runbook
	cases       []testCase
}

func (d definition) alerts(cfg Config) []Alert {
	out := make([]Alert, 0, len(d.levels))
	for _, l := range d.levels {
		out = append(out, Alert{
			Name:     d.name,
			Severity: l.severity,
			Expr:     d.expr(l.threshold),
			For:      d.forDur,
			Labels:   map[string]string{"severity": l.severity},
			Annotations: map[string]string{
				"summary":     d.summary,
				"description": strings.ReplaceAll(d.description, "{{threshold}}", l.text),
				"runbook_url": cfg.RunbookBaseURL + "#" + RunbookAnchor(d.name),
			},
			Op:           d.op,
			Threshold:    l.threshold,
			grafanaQuery: d.grafanaQuery(),
		})
	}
	return out
}

// expr is the Prometheus condition: value op threshold, and the guard.
func (d definition) expr(threshold float64) string {
	e := fmt.Sprintf("%s %s %s", paren(d.query), d.op, num(threshold))
	if d.guard != "" {
		e += fmt.Sprintf("\nand on (%s)\n%s", d.guardOn, d.guard)
	}
	return e
}

// grafanaQuery is the value query for Grafana: the guard applied, the
// threshold left to Grafana's threshold expression.
func (d definition) grafanaQuery() string {
	if d.guard == "" {
		return d.query
	}
	return fmt.Sprintf("%s and on (%s) (%s)", paren(d.query), d.guardOn, d.guard)
}

// paren wraps e in parentheses when it has a set operator (and, or,
// unless), the only operators that bind looser than a comparison; other
// expressions read as written.
func paren(e string) string {
	if setOperator.MatchString(e) {
		return "(" + e + ")"
	}
	return e
}

var setOperator = regexp.MustCompile(`\b(and|or|unless)\b`)

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func pct(f float64) string { return num(f*100) + "%" }
