package dashboards_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cachewatch/cachewatch/dashboards"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/signals"
)

// concrete replaces the template variables by what Grafana would send when
// every variable is "All", so that Prometheus can parse the expression.
var concrete = strings.NewReplacer(
	"$__rate_interval", "1m",
	"$job", ".+", "$instance", ".+", "$client", ".+", "$key_group", ".+",
)

// variableQueries returns the selector inside each board's label_values(…)
// variable query, keyed by "<uid> $<variable>", with the label it lists.
func variableQueries(t *testing.T) map[string][2]string {
	t.Helper()
	out := map[string][2]string{}
	labelValues := regexp.MustCompile(`^label_values\((.*), ([a-z_]+)\)$`)
	for _, b := range generated(t) {
		for _, v := range b.variables() {
			if v["type"] != "query" {
				continue
			}
			q, _ := v["query"].(string)
			m := labelValues.FindStringSubmatch(q)
			if m == nil {
				t.Fatalf("%s $%v: query %q is not label_values(selector, label)", b.uid(), v["name"], q)
			}
			out[fmt.Sprintf("%s $%v", b.uid(), v["name"])] = [2]string{m[1], m[2]}
		}
	}
	return out
}

// TestQueriesParseWithPromtool writes every panel and variable query as a
// recording rule and has the real Prometheus parser (promtool check rules)
// read them.
func TestQueriesParseWithPromtool(t *testing.T) {
	promtool := metrictest.Promtool(t)
	var rules []recordingRule
	var origin []string
	for _, q := range dashboards.Queries() {
		rules = append(rules, recordingRule{fmt.Sprintf("dashboards:query_%d", len(rules)), concrete.Replace(q.Expr)})
		origin = append(origin, q.Board+" / "+q.Panel)
	}
	for name, v := range variableQueries(t) {
		rules = append(rules, recordingRule{fmt.Sprintf("dashboards:query_%d", len(rules)), concrete.Replace(v[0])})
		origin = append(origin, name)
	}
	if out, err := checkRules(t, promtool, rules); err != nil {
		for i, o := range origin {
			t.Logf("dashboards:query_%d = %s: %s", i, o, rules[i].Expr)
		}
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

type recordingRule struct {
	Record string `json:"record"`
	Expr   string `json:"expr"`
}

// checkRules runs promtool check rules over the recording rules and
// returns its output; an error unless promtool accepted all of them.
func checkRules(t *testing.T, promtool string, rules []recordingRule) (string, error) {
	t.Helper()
	// JSON is YAML: the rule file needs no YAML library.
	file, err := json.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboards", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "queries.rules.yml")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput()
	if err == nil && !strings.Contains(string(out), fmt.Sprintf("SUCCESS: %d rules found", len(rules))) {
		err = fmt.Errorf("promtool did not report %d rules", len(rules))
	}
	return string(out), err
}

// TestPromtoolCheckCanFail shows promtool rejects a broken query the way
// TestQueriesParseWithPromtool relies on.
func TestPromtoolCheckCanFail(t *testing.T) {
	promtool := metrictest.Promtool(t)
	q := dashboards.Queries()[0]
	broken := []recordingRule{{"dashboards:ok", concrete.Replace(q.Expr)}, {"dashboards:broken", concrete.Replace(q.Expr) + ")"}}
	if out, err := checkRules(t, promtool, broken); err == nil {
		t.Fatalf("promtool accepted an unbalanced query:\n%s", out)
	}
}

// TestQueriesNameOnlyCatalogMetrics holds every query to the catalog: each
// metric is a catalog metric (or a histogram's _bucket/_sum/_count), each
// matcher's label is one of that metric's labels, and each grouping label
// is a label of a metric the query reads.
func TestQueriesNameOnlyCatalogMetrics(t *testing.T) {
	var exprs [][2]string
	for _, q := range dashboards.Queries() {
		exprs = append(exprs, [2]string{q.Board + " / " + q.Panel, q.Expr})
	}
	for name, v := range variableQueries(t) {
		exprs = append(exprs, [2]string{name, v[0]})
		// The listed label must be one the selected metrics carry.
		p, err := parsePromQL(v[0])
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(readableLabels(p), v[1]) {
			t.Errorf("%s: label_values lists %q, which its metrics do not carry", name, v[1])
		}
	}
	if len(exprs) < 60 {
		t.Fatalf("only %d queries: the boards lost panels", len(exprs))
	}
	for _, e := range exprs {
		for _, problem := range catalogProblems(e[1]) {
			t.Errorf("%s: %s", e[0], problem)
		}
	}
}

// TestCatalogCheckCanFail shows the catalog check rejects what it should.
func TestCatalogCheckCanFail(t *testing.T) {
	for _, expr := range []string{
		`sum(rate(cachewatch_lock_attempt_total{job=~"$job"}[$__rate_interval]))`,                               // misspelt metric
		`sum(rate(cachewatch_lock_attempts_total{node=~"x"}[$__rate_interval]))`,                                // label of another metric
		`sum by (command) (rate(cachewatch_lock_attempts_total[$__rate_interval]))`,                             // grouping by a foreign label
		`rate(cachewatch_exporter_up_bucket[$__rate_interval])`,                                                 // _bucket of a gauge
		`{__name__=~"cachewatch_exporter_up|cachewatch_nope"}`,                                                  // unknown name in __name__
		`histogram_quantile(0.5, sum by (le, reason) (rate(cachewatch_lock_hold_duration_seconds_bucket[1m])))`, // reason is not a label of it
	} {
		if len(catalogProblems(expr)) == 0 {
			t.Errorf("catalog check accepted %s", expr)
		}
	}
}

// alwaysThere are the labels Prometheus adds to every scraped series.
var alwaysThere = []string{"job", "instance"}

func catalogProblems(expr string) []string {
	p, err := parsePromQL(expr)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	names := signals.Names()
	for _, s := range p.selectors {
		metrics := s.names()
		if len(metrics) == 0 {
			problems = append(problems, "a selector without a metric name")
		}
		for _, name := range metrics {
			if labels, slo := sloRecordLabels(name); slo {
				for _, mt := range s.matchers {
					if mt.label != "__name__" && !slices.Contains(labels, mt.label) {
						problems = append(problems, fmt.Sprintf("%s has no label %q", name, mt.label))
					}
				}
				continue
			}
			m, ok := names[name]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s is not in the catalog", name))
				continue
			}
			for _, mt := range s.matchers {
				if mt.label != "__name__" && !slices.Contains(labelsOf(m, name), mt.label) {
					problems = append(problems, fmt.Sprintf("%s has no label %q", name, mt.label))
				}
			}
		}
	}
	readable := readableLabels(p)
	for _, l := range p.grouping {
		if !slices.Contains(readable, l) {
			problems = append(problems, fmt.Sprintf("grouping label %q is not a label of any metric the query reads", l))
		}
	}
	return problems
}

// labelsOf is the label names series name of m can carry.
func labelsOf(m signals.Metric, name string) []string {
	labels := append(m.LabelNames(), alwaysThere...)
	if m.HasEmitter(signals.Exporter) { // a multi-target exporter's target label
		labels = append(labels, "target")
	}
	if strings.HasSuffix(name, "_bucket") && m.Kind == signals.Histogram {
		labels = append(labels, "le")
	}
	return labels
}

func readableLabels(p promExpr) []string {
	var out []string
	names := signals.Names()
	for _, s := range p.selectors {
		for _, name := range s.names() {
			if m, ok := names[name]; ok {
				out = append(out, labelsOf(m, name)...)
			}
		}
	}
	return out
}
