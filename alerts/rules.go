// Package alerts generates cachewatch's Prometheus recording and alerting
// rules, the same alerts as Grafana-managed rules, the runbooks page, an
// Alertmanager configuration and a sloth SLO spec, all from one set of
// definitions that read thresholds and objectives from a Config.
//
// Pages follow harm to callers: service-level indicators generated from the
// signals catalog (cache lookups answered without an error, Redis commands
// answered as a client sees them, waiting lock acquisitions within a bound)
// page when their error budget burns fast, in the multi-window,
// multi-burn-rate tiers of the SRE workbook; a few states that cannot heal
// by themselves page too (Redis unreachable, a lock without TTL). Causes —
// contention, stale serves, miss bursts, pool timeouts, lost locks — open
// tickets that the pages' runbooks point to.
//
// The rules follow the monitoring-mixin conventions: each group's recording
// rules and alerts are literal PromQL templates in one file (rules_*.go),
// whose ${key} placeholders a Config fills, as the Helm chart and the mixin
// fill the same templates (RulesTemplate). Recording rules are named
// level:metric:operations (the level lists the labels kept besides job);
// alerts are CamelCase names prefixed Cachewatch with a severity label
// (critical pages, warning opens a ticket, info notifies nobody), a static
// summary, a description templated with labels and value, and a
// runbook_url pointing at the alert's section of docs/runbooks.md.
//
// `go generate ./alerts` rewrites the committed files in alerts/generated/
// and docs/runbooks.md; a test fails while they are stale.
package alerts

import (
	"fmt"
	"maps"
	"slices"
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

// Alert is one Prometheus alerting rule. An alert name may appear more than
// once: once per severity (warning and critical thresholds of one
// condition; Alertmanager inhibits the warning while the critical fires),
// or once per burn-rate tier of an SLO (its tier label says which; a
// faster tier inhibits the slower ones).
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
	// grafanaDescription is the description for Grafana, which has no
	// query template function.
	grafanaDescription string
	// sticky alerts keep firing while their data are missing.
	sticky bool
	// own: this level is a rule of its own in Grafana (an escalation, or
	// a tier with its own query); uid tells it apart.
	own bool
	uid string
}

// Group is one rule group of the rule file.
type Group struct {
	Name      string
	Recording []RecordingRule
	Alerts    []Alert
}

// Rules returns the rule groups for cfg, one per area the alerts watch
// (the SLOs, locks, cache, Redis commands, keyspace, exporter): each
// group's recording rules, then its alerts. It fails when cfg does not
// validate.
func Rules(cfg Config) ([]Group, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return rules(cfg), nil
}

// rules builds the groups of a valid cfg (or of the rules template's
// probe, whose values are valid only as text).
func rules(cfg Config) []Group {
	recs := recordingRules(cfg)
	var groups []Group
	index := map[string]int{}
	for _, name := range groupOrder {
		index[name] = len(groups)
		groups = append(groups, Group{Name: name, Recording: recs[name]})
	}
	for _, d := range definitions(cfg) {
		i := index[d.group]
		groups[i].Alerts = append(groups[i].Alerts, d.alerts(cfg)...)
	}
	return groups
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

// level is one rule of a definition: a severity and its threshold, or a
// burn-rate tier of an SLO with its own query, labels and `for:`.
type level struct {
	severity  string
	threshold float64
	// text is the threshold as the description shows it ("50ms", "5%").
	text string
	// also, when set, is a further condition of this level only (an
	// escalation), joined by "and on (alsoOn)".
	also, alsoOn string
	// unless, when set, is a condition that silences this level, joined by
	// "unless on (by)": a faster tier of the same SLO fired within this
	// tier's short window, so the incident has been paged already.
	unless string
	// labels, query and forDur, when set, are the level's own: a tier's
	// labels, value query and `for:`.
	labels map[string]string
	query  string
	forDur time.Duration
	// description, when set, replaces the definition's.
	description string
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

// definition is one alert condition with its levels, runbook and promtool
// fixtures. Its PromQL is filled in from the group's templates.
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
	// the level's threshold text. impact, when set, is a sentence the
	// description ends with that runs a query (Prometheus only).
	summary     string
	description string
	impact      string
	runbook     runbook
	cases       []testCase
}

// sight is where an alert's data come from: healthy returns, per label set
// of on, a series while that source is seen (scraped and sampling); exists
// returns, per job, a series while the source's targets are in service
// discovery (Prometheus's up, whatever its value). A source that exists
// and is not seen is blind; one that does not exist is gone.
type sight struct {
	// who names the source in the runbooks.
	who                 string
	on, healthy, exists string
	// fixture are series that make healthy and exists true for the test
	// cases' labels (job api, node redis:6379).
	fixture []series
}

func (d definition) queryOf(l level) string {
	if l.query != "" {
		return l.query
	}
	return d.query
}

func (d definition) forOf(l level) time.Duration {
	if l.forDur != 0 {
		return l.forDur
	}
	return d.forDur
}

func (d definition) alerts(cfg Config) []Alert {
	out := make([]Alert, 0, len(d.levels))
	for _, l := range d.levels {
		labels := map[string]string{"severity": l.severity}
		maps.Copy(labels, l.labels)
		desc := d.description
		if l.description != "" {
			desc = l.description
		}
		desc = strings.ReplaceAll(desc, "{{threshold}}", l.text)
		a := Alert{
			Name:     d.name,
			Severity: l.severity,
			Expr:     d.expr(cfg, l),
			For:      d.forOf(l),
			Labels:   labels,
			Annotations: map[string]string{
				"summary":     strings.ReplaceAll(d.summary, "{{threshold}}", l.text),
				"description": desc + d.impact,
				"runbook_url": cfg.RunbookBaseURL + "#" + RunbookAnchor(d.name),
			},
			Op:                 d.op,
			Threshold:          l.threshold,
			grafanaQuery:       d.grafanaQuery(l),
			grafanaDescription: desc,
			sticky:             d.seen != nil,
			own:                l.also != "" || l.query != "",
			uid:                l.severity,
		}
		if tier := l.labels["tier"]; tier != "" {
			a.uid = tier
		}
		out = append(out, a)
	}
	return out
}

// expr is the Prometheus condition of level l: value op threshold, the
// guard, the level's escalation and silencer, the worse state that keeps
// it firing and, for an alert with a source, the blind branch that keeps
// it firing while its data are missing.
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
// escalation and silencer.
func (d definition) condition(l level) string {
	e := fmt.Sprintf("%s %s %s", paren(d.queryOf(l)), d.op, num(l.threshold))
	if d.guard != "" {
		e += fmt.Sprintf("\nand on (%s)\n%s", d.guardOn, paren(d.guard))
	}
	if l.also != "" {
		e += fmt.Sprintf("\nand on (%s)\n%s", l.alsoOn, paren(l.also))
	}
	if l.unless != "" {
		e += fmt.Sprintf("\nunless on (%s)\n%s", d.by, paren(l.unless))
	}
	return e
}

// latch is the ALERTS series of level l while it fires.
func (d definition) latch(l level) string {
	matchers := []string{fmt.Sprintf("alertname=%q", d.name), `alertstate="firing"`, fmt.Sprintf("severity=%q", l.severity)}
	for _, k := range slices.Sorted(maps.Keys(l.labels)) {
		matchers = append(matchers, fmt.Sprintf("%s=%q", k, l.labels[k]))
	}
	return alertsMetric + "{" + strings.Join(matchers, ", ") + "}"
}

// blind keeps a firing alert firing while its source is blind: it exists
// (its targets are in service discovery) but is not seen (not scraped, or
// an exporter not sampling). No data from a blind source is not a
// recovery; a gone source (its job left service discovery) is, and its
// alerts resolve. The alert's own ALERTS series latches it: the branch only
// holds an alert that was firing, never raises one, and lets it resolve as
// soon as the source is seen again. Its value is the last one seen while
// the source was seen, within the lookback (or 1 past it).
func (d definition) blind(cfg Config, l level) string {
	latch := d.latch(l)
	last := lastValues(d.queryOf(l), time.Duration(cfg.BlindLookback))
	return fmt.Sprintf("(\n  %s\n  or on (%s)\n  max by (%s) (%s)\n)\nand on (%s)\n%s\nand on (job)\n%s\nunless on (%s)\n%s",
		strings.ReplaceAll(paren(last), "\n", "\n  "), d.by, d.by, latch, d.by, latch, d.seen.exists, d.seen.on, paren(d.seen.healthy))
}

// grafanaQuery is the value query of level l for Grafana: the guard, the
// escalation, the silencer and the worse state applied, the threshold left
// to Grafana's threshold expression. Grafana has no ALERTS series of its
// own rules: they keep their state while data are missing by their
// no-data settings instead, and a silencer reading ALERTS silences nothing
// there.
func (d definition) grafanaQuery(l level) string {
	q := d.queryOf(l)
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

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func pct(f float64) string { return num(f*100) + "%" }
