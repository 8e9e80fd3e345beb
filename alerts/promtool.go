package alerts

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// File names written by WriteFiles.
const (
	RulesFile          = "cachewatch-rules.yaml"
	RulesTestFile      = "cachewatch-rules.test.yaml"
	GrafanaFile        = "grafana-alert-rules.yaml"
	GrafanaRoutingFile = "grafana-notification-policies.yaml"
	AlertmanagerFile   = "alertmanager.yaml"
)

// testCase is one promtool unit test of an alert: input series, and the
// alerts expected at evalAt (none for a healthy case). quietAt are earlier
// times at which nothing may fire yet: the `for:` has not passed.
type testCase struct {
	name   string
	series []series
	// interval is the series' sampling interval (default 1m).
	interval time.Duration
	evalAt   time.Duration
	quietAt  []time.Duration
	want     []want
	// firingOnly checks only which alerts fire (their ALERTS series), not
	// their annotations: for values that depend on how Prometheus
	// extrapolates a rate over data that stopped. firingAt adds such
	// checks at more times.
	firingOnly bool
	firingAt   map[time.Duration][]want
	// neverAt are times at which the alert may be neither pending nor
	// firing: its condition does not hold, whatever its `for:`. With
	// neverSeverity, only its levels of that severity.
	neverAt       []time.Duration
	neverSeverity string
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
		waiting("first", "busy", "0+6x59"), waiting("first", "acquired", "0+54x59"), waiting("retry", "acquired", "0+60x59"),
		// A run-once job's try-once attempts are not contention.
		tryOnce("first", "busy", "0+600x59"),
	}
	looks := []series{lookups("stale", "0+15x59"), lookups("hit", "0+42x59"), lookups("error", "0+3x59")}
	server := []series{
		{`cachewatch_exporter_server_keyspace_hits_total{` + exp + `}`, "0+54x59"},
		{`cachewatch_exporter_server_keyspace_misses_total{` + exp + `}`, "0+6x59"},
	}
	commands := []series{
		{`cachewatch_redis_command_errors_total{job="api", client="orders", command="get", error_class="timeout"}`, "0+3x59"},
		{`cachewatch_redis_command_errors_total{job="api", client="orders", command="lpush", error_class="other"}`, "0+3x59"},
		{`cachewatch_redis_command_duration_seconds_count{job="api", client="orders", command="get"}`, "0+60x59"},
	}
	waits := []series{
		acquired("0.5", "0+57x59"), acquired("+Inf", "0+58x59"),
		{`cachewatch_lock_acquire_duration_seconds_count{` + svc + `, mode="wait", outcome="acquired"}`, "0+58x59"},
		{`cachewatch_lock_acquire_duration_seconds_count{` + svc + `, mode="wait", outcome="gave_up"}`, "0+2x59"},
		{`cachewatch_lock_acquire_duration_seconds_count{` + svc + `, mode="try_once", outcome="acquired"}`, "0+600x59"},
	}
	out := []recordingCase{
		{"key_group:cachewatch_lock_acquire_duration_seconds:p99_rate5m", []series{
			acquired("0.05", "0x59"), acquired("0.1", "0+60x59"), acquired("+Inf", "0+60x59"),
			{`cachewatch_lock_acquire_duration_seconds_bucket{` + svc + `, mode="wait", outcome="gave_up", le="0.1"}`, "0x59"},
			{`cachewatch_lock_acquire_duration_seconds_bucket{` + svc + `, mode="wait", outcome="gave_up", le="+Inf"}`, "0x59"},
			{`cachewatch_lock_acquire_duration_seconds_bucket{` + svc + `, mode="try_once", outcome="acquired", le="0.05"}`, "0+600x59"},
			{`cachewatch_lock_acquire_duration_seconds_bucket{` + svc + `, mode="try_once", outcome="acquired", le="+Inf"}`, "0+600x59"},
			{`cachewatch_lock_acquire_duration_seconds_count{` + svc + `, mode="wait", outcome="acquired"}`, "0+60x59"},
		}, kg, 0.0995},
		{"key_group:cachewatch_lock_attempts:rate5m", attempts, kg, 2},
		{"key_group:cachewatch_lock_retries:rate5m", attempts, kg, 1},
		{"key_group:cachewatch_lock_contention:ratio_rate5m", attempts, kg, 0.1},
		{"key_group:cachewatch_cache_lookups:rate5m", looks, kg, 1},
		{"key_group:cachewatch_cache_stale:ratio_rate5m", looks, kg, 0.25},
		{"key_group:cachewatch_loader_amplification:ratio_rate5m", []series{
			{`cachewatch_loader_calls_total{` + svc + `, result="success"}`, "0+48x59"},
			{`cachewatch_loader_calls_total{` + svc + `, result="error"}`, "0+12x59"},
			{`cachewatch_loader_calls_total{` + svc + `, result="rejected"}`, "0+60x59"},
			{`cachewatch_cache_stale_writes_refused_total{` + svc + `}`, "0+30x59"},
		}, kg, 2},
		{"key_group:cachewatch_cache_miss_bursts:rate5m", []series{{`cachewatch_cache_miss_bursts_total{` + svc + `}`, "0+6x59"}}, kg, 0.1},
		{"script:cachewatch_redis_script_duration_seconds:p99_rate5m", []series{
			{`cachewatch_redis_script_duration_seconds_bucket{job="api", client="orders", script="release", command="evalsha", le="0.01"}`, "0x59"},
			{`cachewatch_redis_script_duration_seconds_bucket{job="api", client="orders", script="release", command="evalsha", le="0.025"}`, "0+60x59"},
			{`cachewatch_redis_script_duration_seconds_bucket{job="api", client="orders", script="release", command="evalsha", le="+Inf"}`, "0+60x59"},
			{`cachewatch_redis_script_duration_seconds_count{job="api", client="orders", script="release", command="evalsha"}`, "0+60x59"},
		}, `job="api", script="release"`, 0.0249},
		{"node_command:cachewatch_exporter_server_script_seconds_per_call:ratio_rate5m", []series{
			{`cachewatch_exporter_server_command_seconds_total{` + exp + `, command="evalsha"}`, "0+15x59"},
			{`cachewatch_exporter_server_command_calls_total{` + exp + `, command="evalsha"}`, "0+60x59"},
			{`cachewatch_exporter_server_command_seconds_total{` + exp + `, command="get"}`, "0+60x59"},
			{`cachewatch_exporter_server_command_calls_total{` + exp + `, command="get"}`, "0+60x59"},
		}, `job="cachewatch-exporter", node="redis:6379", command="evalsha"`, 0.25},
		{"client:cachewatch_redis_command_duration_seconds_count:rate5m", commands, `job="api", client="orders"`, 1},
		{"client:cachewatch_redis_command_errors:ratio_rate5m", commands, `job="api", client="orders"`, 0.1},
		{"instance_client:cachewatch_redis_pool_timeouts:rate5m", []series{
			{`cachewatch_redis_pool_timeouts_total{` + cli + `}`, "0+6x59"},
		}, `job="api", instance="api-0:8080", client="orders"`, 0.1},
		{"node:cachewatch_exporter_server_keyspace_lookups:rate5m", server, `job="cachewatch-exporter", node="redis:6379"`, 1},
		{"node:cachewatch_exporter_server_keyspace_hit:ratio_rate5m", server, `job="cachewatch-exporter", node="redis:6379"`, 0.9},
		{"node:cachewatch_exporter_server_keyspace_hit:ratio_rate1h", server, `job="cachewatch-exporter", node="redis:6379"`, 0.9},
	}
	// Every SLO's ratio over every window and events over each tier's
	// long one: cache lookups 5 % errors, Redis commands 5 % without a
	// reply (the command's own error replies, such as WRONGTYPE, are
	// answers), waiting acquisitions 5 % late or given up (try-once ones
	// not counted).
	sliSeries := map[string][]series{"cache-availability": looks, "redis-availability": commands, "lock-wait": waits}
	sliLabels := map[string]string{"cache-availability": kg, "redis-availability": `job="api", client="orders"`, "lock-wait": kg}
	for _, s := range slos() {
		for _, w := range sloWindows {
			out = append(out, recordingCase{s.errorRatio(w), sliSeries[s.Name], sliLabels[s.Name], 0.05})
		}
		// A rate is the increase over the whole window: 30 minutes of one
		// event a second, over a window of 1h or longer.
		for _, t := range tiers {
			window, _ := model.ParseDuration(t.long)
			out = append(out, recordingCase{s.events(t.long), sliSeries[s.Name], sliLabels[s.Name],
				math.Round(1800/time.Duration(window).Seconds()*1e4) / 1e4})
		}
		out = append(out, recordingCase{s.errorRatio(sloPeriod), sliSeries[s.Name], sliLabels[s.Name], 0.05})
	}
	return out
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
		// Rounded: a ratio of two extrapolated rates is exact only to the
		// last bits.
		tf.Tests = append(tf.Tests, testGroup{
			Name: "recording " + rc.record, Interval: "1m", InputSeries: inputs(rc.series),
			ExprTests: []exprTest{{Expr: "round(" + rc.record + ", 0.0001)", EvalTime: "30m",
				ExpSamples: []expSample{{Labels: "{" + rc.labels + "}", Value: rc.value}}}},
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
		byLevel[a.Severity+"/"+a.Labels["tier"]] = a
	}
	cases := append(append([]testCase(nil), d.cases...), testCase{name: "quiet: no series"})
	cases = append(cases, blindCases(d)...)
	var out []testGroup
	for _, c := range cases {
		tg, err := alertTestGroup(d, c, byLevel)
		if err != nil {
			return nil, err
		}
		out = append(out, tg)
	}
	return out, nil
}

// alertTestGroup is one case of d as a promtool test group.
func alertTestGroup(d definition, c testCase, byLevel map[string]Alert) (testGroup, error) {
	at := c.evalAt
	if at == 0 {
		at = defaultEvalAt
	}
	interval := time.Minute
	if c.interval != 0 {
		interval = c.interval
	}
	tg := testGroup{Name: d.name + ": " + c.name, Interval: promDuration(interval), InputSeries: inputs(c.series)}
	never := fmt.Sprintf(`%s{alertname=%q}`, alertsMetric, d.name)
	if c.neverSeverity != "" {
		never = fmt.Sprintf(`%s{alertname=%q, severity=%q}`, alertsMetric, d.name, c.neverSeverity)
	}
	for _, q := range c.neverAt {
		tg.ExprTests = append(tg.ExprTests, exprTest{Expr: never, EvalTime: promDuration(q), ExpSamples: []expSample{}})
	}
	if c.firingOnly {
		for _, q := range slices.Sorted(maps.Keys(c.firingAt)) {
			tg.ExprTests = append(tg.ExprTests, firingTest(d.name, promDuration(q), c.firingAt[q]))
		}
		tg.ExprTests = append(tg.ExprTests, firingTest(d.name, promDuration(at), c.want))
		return tg, nil
	}
	for _, q := range c.quietAt {
		tg.AlertTests = append(tg.AlertTests, alertTest{EvalTime: promDuration(q), Alertname: d.name, ExpAlerts: []expAlert{}})
	}
	exp := []expAlert{}
	for _, w := range c.want {
		a, ok := byLevel[w.severity+"/"+w.labels["tier"]]
		if !ok {
			return testGroup{}, fmt.Errorf("alerts: %s case %q expects severity %s, tier %q, which it does not have", d.name, c.name, w.severity, w.labels["tier"])
		}
		labels := map[string]string{"severity": w.severity}
		maps.Copy(labels, w.labels)
		ann := maps.Clone(a.Annotations)
		ann["description"] = w.desc
		exp = append(exp, expAlert{ExpLabels: labels, ExpAnnotations: ann})
	}
	tg.AlertTests = append(tg.AlertTests, alertTest{EvalTime: promDuration(at), Alertname: d.name, ExpAlerts: exp})
	return tg, nil
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

const generatedHeader = "# Generated by cachewatch (package alerts) from its metric catalog and alert settings: `cachewatch alerts`,\n" +
	"# or `go generate ./alerts` for the copy committed with the defaults. DO NOT EDIT: change the settings and generate again.\n"

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

// firingTest expects exactly the alerts of wants to fire at evalTime, by
// their ALERTS series.
func firingTest(name, evalTime string, wants []want) exprTest {
	t := exprTest{Expr: fmt.Sprintf(`%s{alertname=%q, alertstate="firing"}`, alertsMetric, name), EvalTime: evalTime, ExpSamples: []expSample{}}
	for _, w := range wants {
		labels := []string{fmt.Sprintf("alertname=%q", name), `alertstate="firing"`, fmt.Sprintf("severity=%q", w.severity)}
		for _, k := range slices.Sorted(maps.Keys(w.labels)) {
			labels = append(labels, fmt.Sprintf("%s=%q", k, w.labels[k]))
		}
		t.ExpSamples = append(t.ExpSamples, expSample{Labels: alertsMetric + "{" + strings.Join(labels, ", ") + "}", Value: 1})
	}
	return t
}

// blindCases prove an alert with a source (definition.seen) keeps firing
// while the source is blind and only then: its first firing case with
// every series cut off at 40m, the source's targets still in service
// discovery (up 0); the same, the job gone from service discovery (no up);
// its data gone while the source is still seen; and cut off before the
// alert could fire.
func blindCases(d definition) []testCase {
	if d.seen == nil {
		return nil
	}
	var firing testCase
	for _, c := range d.cases {
		if len(c.want) > 0 && c.evalAt == 0 && !c.firingOnly {
			firing = c
			break
		}
	}
	if firing.name == "" {
		return nil
	}
	const cut, after = 40, 55 * time.Minute
	var data, up []series
	for _, s := range d.seen.fixture {
		if strings.HasPrefix(s.name, upMetric+"{") {
			up = append(up, s)
		} else {
			data = append(data, s)
		}
	}
	with := append(append([]series(nil), firing.series...), data...)
	// down keeps the source's targets in service discovery, failing from
	// the nth sample.
	down := func(n int) []series {
		out := make([]series, len(up))
		for i, s := range up {
			out[i] = series{s.name, fmt.Sprintf("1x%d 0x%d", n-1, 59-n)}
		}
		return out
	}
	out := []testCase{{
		name:   "blind: its source's targets exist and are not seen, so it keeps firing (" + firing.name + ")",
		series: append(cutOff(with, cut), down(cut)...), evalAt: after, want: firing.want, firingOnly: true,
	}, {
		name:   "gone: its source's job left service discovery, so it resolves (" + firing.name + ")",
		series: cutOff(append(with, up...), cut), evalAt: after, firingOnly: true,
	}, {
		name:   "seen: its source is seen and its data are gone, so it resolves (" + firing.name + ")",
		series: append(cutOff(firing.series, cut), d.seen.fixture...), evalAt: after, firingOnly: true,
	}}
	if d.forDur > 2*time.Minute {
		out = append(out, testCase{
			name:   "blind before it fired: it never fires (" + firing.name + ")",
			series: append(cutOff(with, 2), down(2)...), evalAt: after, firingOnly: true,
		})
	}
	return out
}

// cutOff ends every series after its first n samples with a staleness
// marker, as a target that stops being scraped leaves it.
func cutOff(ss []series, n int) []series {
	out := make([]series, len(ss))
	for i, s := range ss {
		vals := expandSeries(s.values)
		if len(vals) > n {
			vals = vals[:n]
		}
		out[i] = series{s.name, strings.Join(append(vals, "stale"), " ")}
	}
	return out
}

// expandSeries expands promtool's notation (a, axn, a+bxn, a-bxn, _, _xn,
// stale) into one value per sample.
func expandSeries(values string) []string {
	var out []string
	for _, tok := range strings.Fields(values) {
		m := seriesToken.FindStringSubmatch(tok)
		if m == nil {
			out = append(out, tok)
			continue
		}
		start, n := m[1], 0
		if m[4] != "" {
			n, _ = strconv.Atoi(m[4])
		}
		if start == "_" { // _xn is n missing samples, where axn is n+1 values
			for range max(n, 1) {
				out = append(out, "_")
			}
			continue
		}
		a, _ := strconv.ParseFloat(start, 64)
		step := 0.0
		if m[3] != "" {
			step, _ = strconv.ParseFloat(m[3], 64)
			if m[2] == "-" {
				step = -step
			}
		}
		for i := range n + 1 {
			out = append(out, num(a+float64(i)*step))
		}
	}
	return out
}

var seriesToken = regexp.MustCompile(`^(_|-?[0-9.e+]+?)(?:([+-])([0-9.e]+))?(?:x([0-9]+))?$`)
