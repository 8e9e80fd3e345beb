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
	// sticky alerts keep firing while their data are missing.
	sticky bool
	// escalation: this level has a condition the others lack.
	escalation bool
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
	recs := recordingRules(cfg)
	var groups []Group
	index := map[string]int{}
	for _, d := range definitions(cfg) {
		i, ok := index[d.group]
		if !ok {
			i = len(groups)
			index[d.group] = i
			groups = append(groups, Group{Name: d.group, Recording: recs[d.group]})
		}
		groups[i].Alerts = append(groups[i].Alerts, d.alerts(cfg)...)
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
	// also, when set, is a further condition of this level only (an
	// escalation), joined by "and on (alsoOn)".
	also, alsoOn string
}

// runbook is an alert's section of docs/runbooks.md.
type runbook struct {
	meaning string
	// resolves says what a resolution means, when the generic sentence
	// (the value back under the threshold, the events out of the window)
	// does not say enough.
	resolves string
	causes   []string
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
	// by lists the labels of query's value: the labels the alert carries
	// besides severity, which inhibitions compare.
	by string
	// op is ">", ">=" or "<".
	op     string
	levels []level
	// guard, when set, is a condition the value must also meet: a traffic
	// floor, joined by "and on (guardOn)".
	guard, guardOn string
	// worse, when set, is a complete condition (threshold included) that
	// keeps the alert firing, joined by "or on (by)": a later, worse state
	// of the same failure must not read as its recovery.
	worse string
	// seen, when set, says where the alert's data come from, so that the
	// alert keeps firing while they are missing (see blind).
	seen   *sight
	forDur time.Duration
	// summary and description are templates; {{threshold}} is replaced by
	// the level's threshold text.
	summary     string
	description string
	runbook     runbook
	cases       []testCase
}

// sight is where an alert's data come from: healthy returns, per label set
// of on, a series while that source is seen (scraped and sampling).
type sight struct {
	// who names the source in the runbooks.
	who         string
	on, healthy string
	// fixture are series that make healthy true for the test cases'
	// labels (job api, node redis:6379).
	fixture []series
}

func (d definition) alerts(cfg Config) []Alert {
	out := make([]Alert, 0, len(d.levels))
	for _, l := range d.levels {
		out = append(out, Alert{
			Name:     d.name,
			Severity: l.severity,
			Expr:     d.expr(cfg, l),
			For:      d.forDur,
			Labels:   map[string]string{"severity": l.severity},
			Annotations: map[string]string{
				"summary":     strings.ReplaceAll(d.summary, "{{threshold}}", l.text),
				"description": strings.ReplaceAll(d.description, "{{threshold}}", l.text),
				"runbook_url": cfg.RunbookBaseURL + "#" + RunbookAnchor(d.name),
			},
			Op:           d.op,
			Threshold:    l.threshold,
			grafanaQuery: d.grafanaQuery(l),
			sticky:       d.seen != nil,
			escalation:   l.also != "",
		})
	}
	return out
}

// expr is the Prometheus condition of level l: value op threshold, the
// guard, the level's escalation, the worse state that keeps it firing and,
// for an alert with a source, the blind branch that keeps it firing while
// its data are missing.
func (d definition) expr(cfg Config, l level) string {
	e := d.condition(l)
	if d.worse != "" {
		e += fmt.Sprintf("\nor on (%s)\n%s", d.by, paren(d.worse))
	}
	if d.seen != nil {
		e += "\nor\n" + d.blind(cfg, l)
	}
	return e
}

// condition is value op threshold, with the guard and the level's
// escalation.
func (d definition) condition(l level) string {
	e := fmt.Sprintf("%s %s %s", paren(d.query), d.op, num(l.threshold))
	if d.guard != "" {
		e += fmt.Sprintf("\nand on (%s)\n%s", d.guardOn, paren(d.guard))
	}
	if l.also != "" {
		e += fmt.Sprintf("\nand on (%s)\n%s", l.alsoOn, paren(l.also))
	}
	return e
}

// blind keeps a firing alert firing while its source is not seen: an
// exporter that is down or not sampling, a service that is not scraped,
// shows no data, and no data is not a recovery. The alert's own ALERTS
// series latches it: the branch only holds an alert that was firing, never
// raises one, and lets it resolve as soon as the source is seen again. Its
// value is the last one seen within the lookback (or 1 past it).
func (d definition) blind(cfg Config, l level) string {
	latch := fmt.Sprintf(`%s{alertname=%q, alertstate="firing", severity=%q}`, alertsMetric, d.name, l.severity)
	last := lastValues(d.query, cfg.BlindLookback.String())
	return fmt.Sprintf("(\n  %s\n  or on (%s)\n  max by (%s) (%s)\n)\nand on (%s)\n%s\nunless on (%s)\n%s",
		paren(last), d.by, d.by, latch, d.by, latch, d.seen.on, paren(d.seen.healthy))
}

// grafanaQuery is the value query of level l for Grafana: the guard, the
// escalation and the worse state applied, the threshold left to Grafana's
// threshold expression. Grafana has no ALERTS series: its rules keep their
// state while data are missing by their no-data settings instead.
func (d definition) grafanaQuery(l level) string {
	q := d.query
	if d.guard != "" {
		q = fmt.Sprintf("%s and on (%s) (%s)", paren(q), d.guardOn, d.guard)
	}
	if l.also != "" {
		q = fmt.Sprintf("%s and on (%s) (%s)", paren(q), l.alsoOn, l.also)
	}
	if d.worse != "" {
		q = fmt.Sprintf("%s or on (%s) (%s)", paren(q), d.by, d.worse)
	}
	return q
}

// selectorOrString finds quoted strings (skipped) and instant vector
// selectors of cachewatch metrics and recording rules, with what follows
// them: a range selector's "[" marks one that is not instant.
var selectorOrString = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|((?:cachewatch_[a-z0-9_]+|[a-z_]+:[a-z0-9_:]+)(?:\{(?:[^}"]|"(?:[^"\\]|\\.)*")*\})?)(\s*\[)?`)

// lastValues rewrites query so that it reads the last value of each series
// within lookback instead of the current one: every instant selector of a
// cachewatch metric or recording rule becomes last_over_time(sel[lookback]).
func lastValues(query, lookback string) string {
	return selectorOrString.ReplaceAllStringFunc(query, func(m string) string {
		sub := selectorOrString.FindStringSubmatch(m)
		if sub[1] == "" || sub[2] != "" {
			return m // a string, or a range selector
		}
		return "last_over_time(" + sub[1] + "[" + lookback + "])"
	})
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
