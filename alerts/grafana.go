package alerts

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/alerting"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/expr"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// GrafanaOptions places the Grafana-managed rules.
type GrafanaOptions struct {
	// DatasourceUID is the Prometheus data source the queries run on
	// (default "prometheus").
	DatasourceUID string
	// Folder is the folder title the rule groups are provisioned into
	// (default "cachewatch").
	Folder string
	// Interval is how often Grafana evaluates the groups (default "1m").
	Interval string
}

func (o GrafanaOptions) withDefaults() GrafanaOptions {
	if o.DatasourceUID == "" {
		o.DatasourceUID = "prometheus"
	}
	if o.Folder == "" {
		o.Folder = "cachewatch"
	}
	if o.Interval == "" {
		o.Interval = "1m"
	}
	return o
}

// GrafanaRules returns the alerts of groups as Grafana-managed alert rules
// in Grafana's file-provisioning shape (apiVersion 1, groups). Each rule
// runs the alert's value query (A, with recording rules inlined, so Grafana
// needs no Prometheus rule file), reduces it to the last value (B) and
// compares that with the threshold (C). Recording rules are not included.
func GrafanaRules(groups []Group, opts GrafanaOptions) ([]byte, error) {
	opts = opts.withDefaults()
	inline := recordingExprs(groups)
	type provGroup struct {
		OrgID    int               `json:"orgId"`
		Name     string            `json:"name"`
		Folder   string            `json:"folder"`
		Interval string            `json:"interval"`
		Rules    []json.RawMessage `json:"rules"`
	}
	var out []provGroup
	for _, g := range groups {
		if len(g.Alerts) == 0 {
			continue
		}
		pg := provGroup{OrgID: 1, Name: g.Name, Folder: opts.Folder, Interval: opts.Interval}
		for _, levels := range grafanaLevels(g.Alerts) {
			raw, err := grafanaRule(levels, g.Name, inline, opts)
			if err != nil {
				return nil, err
			}
			pg.Rules = append(pg.Rules, raw)
		}
		out = append(out, pg)
	}
	// Round-trip through JSON so the SDK's own field names are kept, then
	// emit YAML, the usual provisioning format.
	doc, err := json.Marshal(map[string]any{"apiVersion": 1, "groups": out})
	if err != nil {
		return nil, fmt.Errorf("alerts: grafana rules: %w", err)
	}
	var generic any
	if err := json.Unmarshal(doc, &generic); err != nil {
		return nil, fmt.Errorf("alerts: grafana rules: %w", err)
	}
	return marshalYAML(generic)
}

// grafanaLevels groups alerts into Grafana rules: the levels of one alert
// that compare the same value become one rule titled by the alert's name,
// whose severity label the value chooses (Grafana sets alertname from the
// title, so routing, inhibitions and silences see the same names as with
// Prometheus's rules); a level with a condition of its own (an escalation)
// becomes a rule of its own with the same title, which Grafana 12 and
// later accept. Levels come least severe first, as definitions list them.
func grafanaLevels(alerts []Alert) [][]Alert {
	var out [][]Alert
	for _, a := range alerts {
		if n := len(out); n > 0 && out[n-1][0].Name == a.Name && out[n-1][0].grafanaQuery == a.grafanaQuery {
			out[n-1] = append(out[n-1], a)
			continue
		}
		out = append(out, []Alert{a})
	}
	return out
}

// grafanaRule builds the rule of one alert's levels with the SDK and keeps
// the fields the provisioning format reads (not orgID, folderUID or
// ruleGroup, which the group carries).
func grafanaRule(levels []Alert, group string, inline map[string]string, opts GrafanaOptions) (json.RawMessage, error) {
	a := levels[0]
	op, ok := grafanaOps[a.Op]
	if !ok || a.grafanaQuery == "" {
		return nil, fmt.Errorf("alerts: %s has no Grafana form", a.Name)
	}
	uid := grafanaUID(a.Name, "")
	if a.own {
		uid = grafanaUID(a.Name, a.uid)
	}
	// Missing data keep a sticky rule's last state: blindness is not
	// recovery (the Prometheus rules latch on their ALERTS series instead).
	noData, execErr := alerting.RuleNoDataStateOK, alerting.RuleExecErrStateError
	if a.sticky {
		noData, execErr = alerting.RuleNoDataStateKeepLast, alerting.RuleExecErrStateKeepLast
	}
	builder := alerting.NewRuleBuilder(a.Name).
		Uid(uid).
		RuleGroup(group).
		FolderUID(opts.Folder).
		OrgID(1).
		Condition("C").
		Queries(grafanaQueries(a.grafanaQuery, a.Threshold, op, inline, opts)).
		For(promDuration(a.For)).
		NoDataState(noData).
		ExecErrState(execErr).
		Labels(grafanaLabels(levels)).
		Annotations(grafanaAnnotations(levels))
	if a.sticky {
		builder.MissingSeriesEvalsToResolve(grafanaMissingEvals)
	}
	rule, err := builder.Build()
	if err != nil {
		return nil, fmt.Errorf("alerts: grafana rule %s: %w", a.Name, err)
	}
	raw, err := json.Marshal(rule)
	if err != nil {
		return nil, fmt.Errorf("alerts: grafana rule %s: %w", a.Name, err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	for _, k := range []string{"orgID", "folderUID", "ruleGroup"} {
		delete(fields, k)
	}
	return json.Marshal(fields)
}

// grafanaMissingEvals is how many evaluations a series of a sticky rule
// may be missing before Grafana resolves it: a day at the default 1m
// interval.
const grafanaMissingEvals = 1440

// grafanaQueries are the rule's data: the value query q (A, recording
// rules inlined, so Grafana needs no Prometheus rule file), reduced to its
// last value (B) and compared with the least severe threshold (C).
func grafanaQueries(q string, threshold float64, op expr.ExprTypeThresholdConditionsEvaluatorType, inline map[string]string, opts GrafanaOptions) []cog.Builder[alerting.Query] {
	ds := common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr(opts.DatasourceUID)}
	query := alerting.NewQueryBuilder("A").
		DatasourceUid(opts.DatasourceUID).
		RelativeTimeRange(600, 0).
		Model(prometheus.NewDataqueryBuilder().Expr(inlineRecording(q, inline)).Instant().RefId("A").Datasource(ds))
	exprDS := common.DataSourceRef{Type: cog.ToPtr("__expr__"), Uid: cog.ToPtr("__expr__")}
	reduce := alerting.NewQueryBuilder("B").DatasourceUid("__expr__").
		Model(expr.NewExprBuilder().TypeReduce(expr.NewTypeReduceBuilder().
			RefId("B").Expression("A").Reducer(expr.TypeReduceReducerLast).Datasource(exprDS)))
	cond := alerting.NewQueryBuilder("C").DatasourceUid("__expr__").
		Model(expr.NewExprBuilder().TypeThreshold(expr.NewTypeThresholdBuilder().
			RefId("C").Expression("B").Datasource(exprDS).
			Conditions([]cog.Builder[expr.ExprTypeThresholdConditions]{
				expr.NewExprTypeThresholdConditionsBuilder().Evaluator(
					expr.NewExprTypeThresholdConditionsEvaluatorBuilder().Type(op).Params([]float64{threshold})),
			})))
	return []cog.Builder[alerting.Query]{query, reduce, cond}
}

// grafanaLabels are the first level's labels with the severity the value
// chooses among the levels.
func grafanaLabels(levels []Alert) map[string]string {
	labels := map[string]string{}
	for k, v := range levels[0].Labels {
		labels[k] = v
	}
	labels["severity"] = bySeverity(levels, func(l Alert) string { return l.Severity })
	return labels
}

// grafanaAnnotations are the annotations of the level the value chooses.
func grafanaAnnotations(levels []Alert) map[string]string {
	ann := map[string]string{}
	for k := range levels[0].Annotations {
		ann[k] = bySeverity(levels, func(l Alert) string {
			if k == "description" {
				return grafanaTemplate(l.grafanaDescription)
			}
			return grafanaTemplate(l.Annotations[k])
		})
	}
	return ann
}

// bySeverity is a Grafana template that picks, by the reduced value B,
// the text of the most severe level whose threshold the value crosses;
// with one level, or one text for all, it is that text.
func bySeverity(levels []Alert, text func(Alert) string) string {
	out := text(levels[0])
	for _, l := range levels[1:] {
		if t := text(l); t != out {
			out = fmt.Sprintf("{{ if %s $values.B.Value %s }}%s{{ else }}%s{{ end }}", grafanaCompare[l.Op], num(l.Threshold), t, out)
		}
	}
	return out
}

var grafanaCompare = map[string]string{">": "gt", ">=": "ge", "<": "lt"}

// grafanaUID is stable and within Grafana's 40-character limit; level
// tells a level that is a rule of its own apart (its severity, or its
// tier).
func grafanaUID(name, level string) string {
	uid := "cw-" + strings.ToLower(strings.TrimPrefix(name, "Cachewatch"))
	if level != "" {
		uid += "-" + level[:min(4, len(level))]
	}
	if len(uid) > 40 {
		uid = uid[:40]
	}
	return uid
}

// recordingExprs maps each recording rule name to its expression.
func recordingExprs(groups []Group) map[string]string {
	m := map[string]string{}
	for _, g := range groups {
		for _, r := range g.Recording {
			m[r.Record] = r.Expr
		}
	}
	return m
}

// grafanaTemplate adapts a Prometheus annotation template: Grafana keeps
// $labels but gives the value of the reduced query as $values.B.Value.
func grafanaTemplate(s string) string {
	return strings.ReplaceAll(s, "$value ", "$values.B.Value ")
}

var grafanaOps = map[string]expr.ExprTypeThresholdConditionsEvaluatorType{
	">":  expr.ExprTypeThresholdConditionsEvaluatorTypeGt,
	">=": expr.ExprTypeThresholdConditionsEvaluatorTypeGte,
	"<":  expr.ExprTypeThresholdConditionsEvaluatorTypeLt,
}
