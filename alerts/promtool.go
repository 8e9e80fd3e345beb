package alerts

import (
	"bytes"
	"fmt"

	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/cachewatch/cachewatch/signals"
)

// File names written by WriteFiles.
const (
	RulesFile        = "cachewatch-rules.yaml"
	RulesTestFile    = "cachewatch-rules.test.yaml"
	GrafanaFile      = "grafana-alert-rules.yaml"
	AlertmanagerFile = "alertmanager.yaml"
)

// testCase is one promtool unit test of an alert: input series, and the
// alerts expected at evalAt (none for a healthy case). quietAt are earlier
// times at which nothing may fire yet: the `for:` has not passed.
type testCase struct {
	name    string
	series  []series
	evalAt  time.Duration
	quietAt []time.Duration
	want    []want
}

// series is one input series in promtool's expanding notation.
type series struct{ name, values string }

// want is one expected alert: its severity, labels besides alertname and
// severity, and its rendered description.
type want struct {
	severity string
	labels   map[string]string
	desc     string
}

// defaultEvalAt leaves every `for:` of the default config, and the rate
// windows before it, behind.
const defaultEvalAt = 45 * time.Minute

// recordingCase tests one recording rule: the value it records at 30m.
type recordingCase struct {
	record string
	series []series
	labels string
	value  float64
}

func recordingCases() []recordingCase {
	const kg = `job="api", key_group="lock:report:*"`
	attempts := []series{
		{signals.LockAttempts.String() + `{` + svc + `, attempt="first", result="busy"}`, "0+6x59"},
		{signals.LockAttempts.String() + `{` + svc + `, attempt="first", result="acquired"}`, "0+54x59"},
		{signals.LockAttempts.String() + `{` + svc + `, attempt="retry", result="acquired"}`, "0+60x59"},
	}
	lookups := []series{
		{signals.CacheLookups.String() + `{` + svc + `, result="stale"}`, "0+15x59"},
		{signals.CacheLookups.String() + `{` + svc + `, result="hit"}`, "0+45x59"},
	}
	server := []series{
		{signals.ServerKeyspaceHits.String() + `{` + exp + `}`, "0+54x59"},
		{signals.ServerKeyspaceMisses.String() + `{` + exp + `}`, "0+6x59"},
	}
	commands := []series{
		{signals.CommandErrors.String() + `{job="api", client="orders", command="get", error_class="timeout"}`, "0+3x59"},
		{signals.CommandDuration.String() + `_count{job="api", client="orders", command="get"}`, "0+60x59"},
	}
	return []recordingCase{
		{recLockAcquireP99, []series{
			{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, outcome="acquired", le="0.05"}`, "0x59"},
			{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, outcome="acquired", le="0.1"}`, "0+60x59"},
			{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, outcome="gave_up", le="0.1"}`, "0x59"},
			{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, outcome="acquired", le="+Inf"}`, "0+60x59"},
			{signals.LockAcquireDuration.String() + `_bucket{` + svc + `, outcome="gave_up", le="+Inf"}`, "0x59"},
		}, kg, 0.0995},
		{recLockAttempts, attempts, kg, 2},
		{recLockContention, attempts, kg, 0.1},
		{recLookups, lookups, kg, 1},
		{recStaleRatio, lookups, kg, 0.25},
		{recAmplification, []series{
			{signals.SourceCalls.String() + `{` + svc + `, result="success"}`, "0+48x59"},
			{signals.SourceCalls.String() + `{` + svc + `, result="error"}`, "0+12x59"},
			{signals.SourceCalls.String() + `{` + svc + `, result="rejected"}`, "0+60x59"},
			{signals.StaleWritesRefused.String() + `{` + svc + `}`, "0+30x59"},
		}, kg, 2},
		{recMissBursts, []series{{signals.MissBursts.String() + `{` + svc + `}`, "0+6x59"}}, kg, 0.1},
		{recScriptP99, []series{
			{signals.ScriptDuration.String() + `_bucket{job="api", client="orders", script="release", command="evalsha", le="0.01"}`, "0x59"},
			{signals.ScriptDuration.String() + `_bucket{job="api", client="orders", script="release", command="evalsha", le="0.025"}`, "0+60x59"},
			{signals.ScriptDuration.String() + `_bucket{job="api", client="orders", script="release", command="evalsha", le="+Inf"}`, "0+60x59"},
		}, `job="api", script="release"`, 0.02485},
		{recCommands, commands, `job="api", client="orders"`, 1},
		{recCommandErrors, commands, `job="api", client="orders"`, 0.05},
		{recPoolTimeouts, []series{{signals.PoolTimeouts.String() + `{` + cli + `}`, "0+6x59"}}, `job="api", instance="api-0:8080", client="orders"`, 0.1},
		{recServerLookups, server, `job="cachewatch-exporter", node="redis:6379"`, 1},
		{recServerHitRatio, server, `job="cachewatch-exporter", node="redis:6379"`, 0.9},
		{recServerHitRatio1, server, `job="cachewatch-exporter", node="redis:6379"`, 0.9},
	}
}

// The promtool unit-test file format.
type (
	testFile struct {
		RuleFiles          []string    `yaml:"rule_files"`
		EvaluationInterval string      `yaml:"evaluation_interval"`
		Tests              []testGroup `yaml:"tests"`
	}
	testGroup struct {
		Name        string        `yaml:"name"`
		Interval    string        `yaml:"interval"`
		InputSeries []inputSeries `yaml:"input_series"`
		AlertTests  []alertTest   `yaml:"alert_rule_test,omitempty"`
		ExprTests   []exprTest    `yaml:"promql_expr_test,omitempty"`
	}
	inputSeries struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	}
	alertTest struct {
		EvalTime  string     `yaml:"eval_time"`
		Alertname string     `yaml:"alertname"`
		ExpAlerts []expAlert `yaml:"exp_alerts"`
	}
	expAlert struct {
		ExpLabels      map[string]string `yaml:"exp_labels"`
		ExpAnnotations map[string]string `yaml:"exp_annotations"`
	}
	exprTest struct {
		Expr       string      `yaml:"expr"`
		EvalTime   string      `yaml:"eval_time"`
		ExpSamples []expSample `yaml:"exp_samples"`
	}
	expSample struct {
		Labels string  `yaml:"labels"`
		Value  float64 `yaml:"value"`
	}
)

func promDuration(d time.Duration) string { return model.Duration(d).String() }

// PromtoolTests returns the promtool unit tests (`promtool test rules`) of
// the rules DefaultConfig generates, reading them from ruleFile (a path
// relative to the test file). Every alert has a firing case, healthy cases
// and a case without series; every recording rule has a case.
func PromtoolTests(ruleFile string) ([]byte, error) {
	cfg := DefaultConfig()
	tf := testFile{RuleFiles: []string{ruleFile}, EvaluationInterval: "1m"}
	for _, d := range definitions(cfg) {
		groups, err := alertTestGroups(cfg, d)
		if err != nil {
			return nil, err
		}
		tf.Tests = append(tf.Tests, groups...)
	}
	for _, rc := range recordingCases() {
		tf.Tests = append(tf.Tests, testGroup{
			Name: "recording " + rc.record, Interval: "1m", InputSeries: inputs(rc.series),
			ExprTests: []exprTest{{Expr: rc.record, EvalTime: "30m",
				ExpSamples: []expSample{{Labels: rc.record + "{" + rc.labels + "}", Value: rc.value}}}},
		})
	}
	return marshalYAML(tf)
}

func inputs(ss []series) []inputSeries {
	out := make([]inputSeries, len(ss))
	for i, s := range ss {
		out[i] = inputSeries{Series: s.name, Values: s.values}
	}
	return out
}

func alertTestGroups(cfg Config, d definition) ([]testGroup, error) {
	byLevel := map[string]Alert{}
	for _, a := range d.alerts(cfg) {
		byLevel[a.Severity] = a
	}
	cases := append(append([]testCase(nil), d.cases...), testCase{name: "quiet: no series"})
	var out []testGroup
	for _, c := range cases {
		at := c.evalAt
		if at == 0 {
			at = defaultEvalAt
		}
		tg := testGroup{Name: d.name + ": " + c.name, Interval: "1m", InputSeries: inputs(c.series)}
		for _, q := range c.quietAt {
			tg.AlertTests = append(tg.AlertTests, alertTest{EvalTime: promDuration(q), Alertname: d.name, ExpAlerts: []expAlert{}})
		}
		exp := []expAlert{}
		for _, w := range c.want {
			a, ok := byLevel[w.severity]
			if !ok {
				return nil, fmt.Errorf("alerts: %s case %q expects severity %s, which it does not have", d.name, c.name, w.severity)
			}
			labels := map[string]string{"severity": w.severity}
			for k, v := range w.labels {
				labels[k] = v
			}
			ann := map[string]string{}
			for k, v := range a.Annotations {
				ann[k] = v
			}
			ann["description"] = w.desc
			exp = append(exp, expAlert{ExpLabels: labels, ExpAnnotations: ann})
		}
		tg.AlertTests = append(tg.AlertTests, alertTest{EvalTime: promDuration(at), Alertname: d.name, ExpAlerts: exp})
		out = append(out, tg)
	}
	return out, nil
}

// The Prometheus rule file format.
type (
	ruleFile struct {
		Groups []ruleGroup `yaml:"groups"`
	}
	ruleGroup struct {
		Name  string     `yaml:"name"`
		Rules []fileRule `yaml:"rules"`
	}
	fileRule struct {
		Record      string            `yaml:"record,omitempty"`
		Alert       string            `yaml:"alert,omitempty"`
		Expr        string            `yaml:"expr"`
		For         string            `yaml:"for,omitempty"`
		Labels      map[string]string `yaml:"labels,omitempty"`
		Annotations map[string]string `yaml:"annotations,omitempty"`
	}
)

// PrometheusRules renders the groups as a Prometheus rule file.
func PrometheusRules(groups []Group) ([]byte, error) {
	var rf ruleFile
	for _, g := range groups {
		rg := ruleGroup{Name: g.Name}
		for _, r := range g.Recording {
			rg.Rules = append(rg.Rules, fileRule{Record: r.Record, Expr: r.Expr})
		}
		for _, a := range g.Alerts {
			rg.Rules = append(rg.Rules, fileRule{Alert: a.Name, Expr: a.Expr, For: promDuration(a.For), Labels: a.Labels, Annotations: a.Annotations})
		}
		rf.Groups = append(rf.Groups, rg)
	}
	return marshalYAML(rf)
}

const generatedHeader = "# Generated by `go generate ./alerts` (package alerts) from signals/catalog.go. DO NOT EDIT.\n"

func marshalYAML(v any) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(generatedHeader)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("alerts: encode yaml: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("alerts: encode yaml: %w", err)
	}
	return buf.Bytes(), nil
}
