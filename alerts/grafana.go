package alerts

import (
	"encoding/json"
	"fmt"
	"regexp"
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
		count := map[string]int{}
		for _, a := range g.Alerts {
			count[a.Name]++
		}
		for _, a := range g.Alerts {
			// Grafana wants rule titles unique in a folder: the levels of
			// one alert get their severity in the title.
			title := a.Name
			if count[a.Name] > 1 {
				title += " (" + a.Severity + ")"
			}
			raw, err := grafanaRule(a, title, g.Name, inline, opts)
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

// grafanaRule builds one rule with the SDK and keeps the fields the
// provisioning format reads (not orgID, folderUID or ruleGroup, which the
// group carries).
func grafanaRule(a Alert, title, group string, inline map[string]string, opts GrafanaOptions) (json.RawMessage, error) {
	q, threshold := a.grafanaQuery, a.Threshold
	op, ok := grafanaOps[a.Op]
	if !ok || q == "" {
		return nil, fmt.Errorf("alerts: %s has no Grafana form", a.Name)
	}
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
	labels := map[string]string{}
	for k, v := range a.Labels {
		labels[k] = v
	}
	ann := map[string]string{}
	for k, v := range a.Annotations {
		ann[k] = grafanaTemplate(v)
	}
	rule, err := alerting.NewRuleBuilder(title).
		Uid(grafanaUID(a)).
		RuleGroup(group).
		FolderUID(opts.Folder).
		OrgID(1).
		Condition("C").
		Queries([]cog.Builder[alerting.Query]{query, reduce, cond}).
		For(promDuration(a.For)).
		NoDataState(alerting.RuleNoDataStateOK).
		ExecErrState(alerting.RuleExecErrStateError).
		Labels(labels).
		Annotations(ann).
		Build()
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

// grafanaUID is stable and within Grafana's 40-character limit.
func grafanaUID(a Alert) string {
	uid := "cw-" + strings.ToLower(strings.TrimPrefix(a.Name, "Cachewatch")) + "-" + a.Severity[:4]
	if len(uid) > 40 {
		uid = uid[:40]
	}
	return uid
}

var grafanaOps = map[string]expr.ExprTypeThresholdConditionsEvaluatorType{
	">":  expr.ExprTypeThresholdConditionsEvaluatorTypeGt,
	">=": expr.ExprTypeThresholdConditionsEvaluatorTypeGte,
	"<":  expr.ExprTypeThresholdConditionsEvaluatorTypeLt,
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

var metricName = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)

// inlineRecording replaces recording rule names in e by their expressions,
// for Grafana instances that query a Prometheus without the rule file.
func inlineRecording(e string, inline map[string]string) string {
	return metricName.ReplaceAllStringFunc(e, func(name string) string {
		if x, ok := inline[name]; ok {
			return "(" + strings.ReplaceAll(x, "\n", " ") + ")"
		}
		return name
	})
}

// grafanaTemplate adapts a Prometheus annotation template: Grafana keeps
// $labels but gives the value of the reduced query as $values.B.Value.
func grafanaTemplate(s string) string {
	return strings.ReplaceAll(s, "$value ", "$values.B.Value ")
}
