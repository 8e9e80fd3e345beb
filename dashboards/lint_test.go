package dashboards_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cachewatch/cachewatch/alerts"
	"github.com/cachewatch/cachewatch/dashboards"
	"github.com/cachewatch/cachewatch/signals"
)

// The rules of grafana/dashboard-linter in strict mode, and this project's
// own (stable UIDs, links, runbook in every description), checked over the
// generated JSON. The linter itself cannot be installed from the module
// proxy.

// boardJSON is one dashboard as generic JSON, as Grafana reads it.
type boardJSON map[string]any

func (b boardJSON) uid() string { s, _ := b["uid"].(string); return s }

func (b boardJSON) variables() []map[string]any {
	templating, _ := b["templating"].(map[string]any)
	return objects(templating["list"])
}

func (b boardJSON) variable(name string) map[string]any {
	for _, v := range b.variables() {
		if v["name"] == name {
			return v
		}
	}
	return nil
}

// panels returns the non-row panels, those nested in collapsed rows too.
func (b boardJSON) panels() []map[string]any {
	var out []map[string]any
	for _, p := range objects(b["panels"]) {
		if p["type"] == "row" {
			out = append(out, objects(p["panels"])...)
			continue
		}
		out = append(out, p)
	}
	return out
}

func objects(v any) []map[string]any {
	list, _ := v.([]any)
	out := make([]map[string]any, 0, len(list))
	for _, x := range list {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func str(m map[string]any, path ...string) string {
	var cur any = m
	for _, k := range path {
		obj, _ := cur.(map[string]any)
		cur = obj[k]
	}
	s, _ := cur.(string)
	return s
}

// generated returns the boards as the JSON Dashboards writes.
func generated(t testing.TB) []boardJSON {
	t.Helper()
	ds, err := dashboards.Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]boardJSON, len(ds))
	for i, d := range ds {
		b, err := d.JSON()
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

var wantBoards = map[string]string{
	dashboards.ContentionUID: "cachewatch / Service contention",
	dashboards.RedisUID:      "cachewatch / Redis commands & pool",
	dashboards.KeyspaceUID:   "cachewatch / Keyspace & locks",
}

type rule func(b boardJSON) []string

var rules = map[string]rule{
	"uneditable": func(b boardJSON) []string {
		if b["editable"] != false {
			return []string{"editable is not false"}
		}
		return nil
	},
	"stable-uid": func(b boardJSON) []string {
		if title, ok := wantBoards[b.uid()]; !ok || b["title"] != title {
			return []string{fmt.Sprintf("uid %q / title %q is not one of the stable pairs", b.uid(), b["title"])}
		}
		return nil
	},
	"links": func(b boardJSON) []string {
		var urls []string
		for _, l := range objects(b["links"]) {
			urls = append(urls, str(l, "url"))
		}
		var problems []string
		for uid := range wantBoards {
			if uid != b.uid() && !slices.Contains(urls, "/d/"+uid) {
				problems = append(problems, "no link to "+uid)
			}
		}
		return problems
	},
	"template-datasource": func(b boardJSON) []string {
		v := b.variable("datasource")
		if v == nil || v["type"] != "datasource" || v["query"] != "prometheus" || v["label"] != "Data source" {
			return []string{fmt.Sprintf("want a prometheus datasource variable labelled \"Data source\", got %v", v)}
		}
		return nil
	},
	"template-labels": func(b boardJSON) []string {
		var problems []string
		for _, v := range b.variables() {
			name, _ := v["name"].(string)
			if want := variableLabels[name]; v["label"] != want {
				problems = append(problems, fmt.Sprintf("variable $%s is labelled %q, want %q", name, v["label"], want))
			}
		}
		return problems
	},
	"panel-runbook-link": func(b boardJSON) []string {
		var problems []string
		for _, p := range b.panels() {
			if problem := runbookLinkProblem(p); problem != "" {
				problems = append(problems, fmt.Sprintf("panel %q: %s", p["title"], problem))
			}
		}
		return problems
	},
	"alert-annotations": func(b boardJSON) []string {
		enabled := map[string]bool{}
		annotations, _ := b["annotations"].(map[string]any)
		for _, a := range objects(annotations["list"]) {
			e, err := parsePromQL(str(a, "expr"))
			if err != nil || len(e.selectors) != 1 || a["enable"] != true || str(a, "datasource", "uid") != "$datasource" {
				continue
			}
			sel := e.selectors[0]
			if sel.metric == "ALERTS" && sel.has("alertname", "=~", "Cachewatch.+") && sel.has("alertstate", "=", "firing") && sel.has("job", "=~", "$job") {
				for _, m := range sel.matchers {
					if m.label == "severity" && m.op == "=" {
						enabled[m.value] = true
					}
				}
			}
		}
		var problems []string
		for _, sev := range []string{alerts.SeverityCritical, alerts.SeverityWarning} {
			if !enabled[sev] {
				problems = append(problems, "no enabled annotation of firing "+sev+` ALERTS{alertname=~"Cachewatch.+", job=~"$job"} on $datasource`)
			}
		}
		return problems
	},
	"glance-row": func(b boardJSON) []string {
		top := objects(b["panels"])
		if len(top) == 0 || top[0]["type"] != "row" {
			return []string{"the board does not open with a row"}
		}
		var stats, coloured int
		for _, p := range top[1:] {
			if p["type"] == "row" {
				break
			}
			if p["type"] != "stat" {
				return []string{fmt.Sprintf("panel %q of the first row is a %v, not a stat", p["title"], p["type"])}
			}
			stats++
			if len(thresholdSteps(p)) > 1 {
				coloured++
			}
		}
		if stats < 3 || stats > 6 || coloured < 2 {
			return []string{fmt.Sprintf("the first row has %d stat panels, %d coloured by an alert's thresholds: want 3 to 6, most coloured", stats, coloured)}
		}
		return nil
	},
	"target-exporter-per-node": eachSelector(func(_ map[string]any, _ map[string]any, s selector, around []frame) []string {
		m, ok := signals.Names()[s.metric]
		if !ok || !m.HasEmitter(signals.Exporter) || !slices.Contains(m.LabelNames(), "node") {
			return nil
		}
		// The aggregation right around the series (or their rate):
		// max or min count a node's figure once however many exporters
		// sample it; grouping by instance shows each exporter's own.
		i := len(around) - 1
		if innermost(around) == "rate" {
			i--
		}
		if i >= 0 && (around[i].fn == "max" || around[i].fn == "min" || slices.Contains(around[i].by, "instance")) {
			return nil
		}
		return []string{s.metric + " is not reduced per node with max or min (nor grouped by exporter instance): two exporters of one node would double it"}
	}),
	"template-job":       queryVariableRule("job"),
	"template-instance":  queryVariableRule("instance"),
	"template-client":    labelVariableRule("client"),
	"template-key-group": labelVariableRule("key_group"),
	"panel-datasource": func(b boardJSON) []string {
		var problems []string
		for _, p := range b.panels() {
			if str(p, "datasource", "uid") != "$datasource" {
				problems = append(problems, fmt.Sprintf("panel %q: datasource %v", p["title"], p["datasource"]))
			}
			for _, tg := range objects(p["targets"]) {
				if str(tg, "datasource", "uid") != "$datasource" {
					problems = append(problems, fmt.Sprintf("panel %q target %v: datasource %v", p["title"], tg["refId"], tg["datasource"]))
				}
			}
		}
		return problems
	},
	"panel-title-description": func(b boardJSON) []string {
		var problems []string
		for _, p := range b.panels() {
			d := str(p, "description")
			if str(p, "title") == "" || !strings.Contains(d, "**Healthy:**") || !strings.Contains(d, "**Runbook:**") {
				problems = append(problems, fmt.Sprintf("panel %q: needs a title and a description with the healthy value and the runbook", p["title"]))
			}
			if strings.Contains(d, "#") && !strings.Contains(d, dashboards.RunbookURL+"#cachewatch") {
				problems = append(problems, fmt.Sprintf("panel %q: runbook link outside %s", p["title"], dashboards.RunbookURL))
			}
		}
		return problems
	},
	"panel-units": func(b boardJSON) []string {
		var problems []string
		for _, p := range b.panels() {
			if u := str(p, "fieldConfig", "defaults", "unit"); !validUnits()[u] {
				problems = append(problems, fmt.Sprintf("panel %q: unit %q is not a Grafana unit", p["title"], u))
			}
		}
		return problems
	},
	"panel-no-targets": func(b boardJSON) []string {
		var problems []string
		for _, p := range b.panels() {
			tgs := objects(p["targets"])
			if len(tgs) == 0 {
				problems = append(problems, fmt.Sprintf("panel %q has no targets", p["title"]))
			}
			for _, tg := range tgs {
				if str(tg, "expr") == "" {
					problems = append(problems, fmt.Sprintf("panel %q: a target without expr", p["title"]))
				}
			}
		}
		return problems
	},
	"target-promql": eachTarget(func(_ map[string]any, _ map[string]any, e promExpr) []string { return nil }),
	"target-job-instance": eachSelector(func(_ map[string]any, _ map[string]any, s selector, _ []frame) []string {
		// An SLO's recording rules are per job: they have no instance.
		if _, slo := sloRecordLabels(s.metric); slo && s.has("job", "=~", "$job") {
			return nil
		}
		if !s.has("job", "=~", "$job") || !s.has("instance", "=~", "$instance") {
			return []string{"not filtered by job=~\"$job\", instance=~\"$instance\""}
		}
		return nil
	}),
	"target-client":    filteredByVariable("client"),
	"target-key-group": filteredByVariable("key_group"),
	"target-rate-interval": eachSelector(func(_ map[string]any, _ map[string]any, s selector, around []frame) []string {
		if s.rng != "" && s.rng != "$__rate_interval" {
			return []string{fmt.Sprintf("range [%s], want [$__rate_interval]", s.rng)}
		}
		if fn := innermost(around); (fn == "rate" || fn == "irate" || fn == "increase") != (s.rng != "") {
			return []string{"a range belongs inside rate/irate/increase and nowhere else"}
		}
		return nil
	}),
	"target-counter-agg": eachSelector(func(_ map[string]any, _ map[string]any, s selector, around []frame) []string {
		if fn := innermost(around); strings.HasSuffix(s.metric, "_total") && fn != "rate" && fn != "irate" && fn != "increase" {
			return []string{s.metric + " outside rate/irate/increase"}
		}
		return nil
	}),
	"target-histogram": eachSelector(func(p, tg map[string]any, s selector, around []frame) []string {
		if !strings.HasSuffix(s.metric, "_bucket") {
			return nil
		}
		// The buckets must be summed by le (directly, or around rate, or
		// around the max per node that counts an exporter's node once)…
		i := len(around) - 1
		if innermost(around) == "rate" {
			i--
		}
		if i >= 0 && around[i].fn == "max" && slices.Contains(around[i].by, "le") && slices.Contains(around[i].by, "node") {
			i--
		}
		if i < 0 || around[i].fn != "sum" || !slices.Contains(around[i].by, "le") {
			return []string{s.metric + " not summed by le"}
		}
		// …and then either be the whole query of a heatmap, or the
		// argument of histogram_quantile.
		heat := p["type"] == "heatmap" && tg["format"] == "heatmap" && i == 0
		quantile := i >= 1 && around[i-1].fn == "histogram_quantile"
		if !heat && !quantile {
			return []string{s.metric + " neither in a heatmap nor in histogram_quantile(q, sum by (le, …)(…))"}
		}
		return nil
	}),
}

// variableLabels are the labels grafana/dashboard-linter's strict mode
// wants on the variables.
var variableLabels = map[string]string{
	"datasource": "Data source", "job": "Job", "instance": "Instance", "client": "Client", "key_group": "Key group",
}

// runbookLinkProblem checks a panel links to the runbook section its
// description names, and that docs/runbooks.md has that section.
func runbookLinkProblem(p map[string]any) string {
	links := objects(p["links"])
	if len(links) != 1 {
		return fmt.Sprintf("%d links, want one to its runbook section", len(links))
	}
	url := str(links[0], "url")
	base, anchor, _ := strings.Cut(url, "#")
	if base != dashboards.RunbookURL || !runbookAnchors()[anchor] {
		return fmt.Sprintf("link %s is no section of docs/runbooks.md", url)
	}
	desc := str(p, "description")
	named := ""
	if m := descriptionAlert.FindStringSubmatch(desc); m != nil {
		named = alerts.RunbookAnchor(m[1])
	} else if m := descriptionSection.FindStringSubmatch(desc); m != nil {
		named = dashboards.HeadingAnchor(m[1])
	}
	if named == "" || named != anchor {
		return fmt.Sprintf("link #%s, but the description names another runbook", anchor)
	}
	return ""
}

var (
	descriptionAlert   = regexp.MustCompile(`\*\*Runbook:\*\* \[(Cachewatch[A-Za-z]+)\]`)
	descriptionSection = regexp.MustCompile(`\*\*Runbook:\*\* docs/runbooks\.md, section "([^"]+)"`)
	runbookHeading     = regexp.MustCompile(`(?m)^#{2,3} (.+)$`)
)

// runbookAnchors are the anchors GitHub gives the headings of
// docs/runbooks.md.
var runbookAnchors = sync.OnceValue(func() map[string]bool {
	md, err := os.ReadFile(filepath.Join("..", "docs", "runbooks.md"))
	if err != nil {
		panic(err)
	}
	out := map[string]bool{}
	for _, h := range runbookHeading.FindAllStringSubmatch(string(md), -1) {
		out[dashboards.HeadingAnchor(h[1])] = true
	}
	return out
})

func queryVariableRule(name string) rule {
	return func(b boardJSON) []string {
		v := b.variable(name)
		if v == nil {
			return []string{"no " + name + " variable"}
		}
		if v["type"] != "query" || str(v, "datasource", "uid") != "$datasource" || v["multi"] != true ||
			v["includeAll"] != true || v["allValue"] != ".+" || v["refresh"] != 2.0 {
			return []string{fmt.Sprintf("$%s must be a multi-value query variable on $datasource with All = .+, refreshed on time-range change: %v", name, v)}
		}
		if q, _ := v["query"].(string); !strings.HasSuffix(q, ", "+name+")") {
			return []string{fmt.Sprintf("$%s lists %q", name, q)}
		}
		return nil
	}
}

func eachTarget(check func(p, tg map[string]any, e promExpr) []string) rule {
	return func(b boardJSON) []string {
		var problems []string
		for _, p := range b.panels() {
			for _, tg := range objects(p["targets"]) {
				e, err := parsePromQL(str(tg, "expr"))
				if err != nil {
					problems = append(problems, fmt.Sprintf("panel %q: %v", p["title"], err))
					continue
				}
				for _, problem := range check(p, tg, e) {
					problems = append(problems, fmt.Sprintf("panel %q: %s", p["title"], problem))
				}
			}
		}
		return problems
	}
}

func eachSelector(check func(p, tg map[string]any, s selector, around []frame) []string) rule {
	return eachTarget(func(p, tg map[string]any, e promExpr) []string {
		var problems []string
		for _, s := range e.selectors {
			problems = append(problems, check(p, tg, s, s.around)...)
		}
		return problems
	})
}

func innermost(around []frame) string {
	if len(around) == 0 {
		return ""
	}
	return around[len(around)-1].fn
}

func boardSelectors(b boardJSON) []selector {
	var out []selector
	for _, p := range b.panels() {
		for _, tg := range objects(p["targets"]) {
			if e, err := parsePromQL(str(tg, "expr")); err == nil {
				out = append(out, e.selectors...)
			}
		}
	}
	return out
}

func carries(s selector, label string) bool {
	if labels, slo := sloRecordLabels(s.metric); slo {
		return slices.Contains(labels, label)
	}
	m, ok := signals.Names()[s.metric]
	return ok && slices.Contains(m.LabelNames(), label)
}

// sloRecordLabels are the labels of a recording rule of an SLO (package
// alerts), which boards read for the SLOs: job and the SLO's level.
func sloRecordLabels(name string) ([]string, bool) {
	for _, s := range alerts.SLOs(alerts.DefaultConfig()) {
		for _, w := range append(alerts.SLOWindows(), "30d") {
			if s.ErrorRatioRecord(w) == name {
				return []string{"job", s.Level()}, true
			}
		}
	}
	return nil, false
}

// labelVariableRule: a board whose metrics carry label has a $label
// variable (and one that does not, none).
func labelVariableRule(label string) rule {
	return func(b boardJSON) []string {
		any := false
		for _, s := range boardSelectors(b) {
			any = any || carries(s, label)
		}
		v := b.variable(label)
		switch {
		case any && v == nil:
			return []string{"the board's metrics carry " + label + " but it has no " + label + " variable"}
		case !any && v != nil:
			return []string{"a " + label + " variable but no metric of the board carries " + label}
		case v != nil:
			return queryVariableRule(label)(b)
		}
		return nil
	}
}

// filteredByVariable: every selector of a metric that carries label
// filters it by $label, on a board that has the variable.
func filteredByVariable(label string) rule {
	return eachSelector(func(_ map[string]any, _ map[string]any, s selector, _ []frame) []string {
		if carries(s, label) && !s.has(label, "=~", "$"+label) {
			return []string{"not filtered by " + label + `=~"$` + label + `"`}
		}
		return nil
	})
}

// validUnits is every unit ID the SDK's units package declares: the units
// Grafana's unit picker knows.
var validUnits = sync.OnceValue(func() map[string]bool {
	dir, err := exec.Command("go", "list", "-f", "{{.Dir}}", "github.com/grafana/grafana-foundation-sdk/go/units").Output()
	if err != nil {
		panic(fmt.Sprintf("locate the SDK's units package: %v", err))
	}
	files, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(dir)), "*.go"))
	if err != nil || len(files) == 0 {
		panic(fmt.Sprintf("no source in the SDK's units package: %v", err))
	}
	units := map[string]bool{}
	for _, f := range files {
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			panic(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					units[s] = true
				}
			}
			return true
		})
	}
	return units
})

func lint(b boardJSON) map[string][]string {
	out := map[string][]string{}
	for name, r := range rules {
		if problems := r(b); len(problems) > 0 {
			out[name] = problems
		}
	}
	return out
}

// TestLint runs every rule over every generated board.
func TestLint(t *testing.T) {
	boards := generated(t)
	if len(boards) != len(wantBoards) {
		t.Fatalf("%d boards, want %d", len(boards), len(wantBoards))
	}
	for _, b := range boards {
		for name, problems := range lint(b) {
			for _, p := range problems {
				t.Errorf("%s: %s: %s", b.uid(), name, p)
			}
		}
		if len(b.panels()) < 10 {
			t.Errorf("%s: only %d panels", b.uid(), len(b.panels()))
		}
	}
}

// TestLintRulesCanFail breaks each rule once on a copy of a real board and
// checks that the rule reports it.
func TestLintRulesCanFail(t *testing.T) {
	firstPanel := func(b boardJSON) map[string]any { return panelTitled(b, "Lock acquire time p50 / p99") }
	firstTarget := func(b boardJSON) map[string]any { return objects(firstPanel(b)["targets"])[0] }
	// The contention board's lock acquire panel reads a key_group
	// histogram through histogram_quantile: every target rule can be
	// broken on it.
	mutations := map[string]func(b boardJSON){
		"uneditable":          func(b boardJSON) { b["editable"] = true },
		"stable-uid":          func(b boardJSON) { b["uid"] = "contention" },
		"links":               func(b boardJSON) { b["links"] = []any{} },
		"template-datasource": func(b boardJSON) { b.variable("datasource")["label"] = "Datasource" },
		"template-labels":     func(b boardJSON) { b.variable("job")["label"] = "job" },
		"panel-runbook-link":  func(b boardJSON) { firstPanel(b)["links"] = []any{} },
		"alert-annotations":   func(b boardJSON) { b["annotations"] = map[string]any{} },
		"glance-row":          func(b boardJSON) { objects(b["panels"])[1]["type"] = "timeseries" },
		"target-exporter-per-node": func(b boardJSON) {
			replaceInExpr(func(b boardJSON) map[string]any { return objects(panelTitled(b, "Locks without TTL")["targets"])[0] },
				"max by (target, node, key_group) (", "sum by (target, node, key_group) (")(b)
		},
		"template-job":            func(b boardJSON) { b.variable("job")["allValue"] = "" },
		"template-instance":       func(b boardJSON) { b.variable("instance")["refresh"] = 1.0 },
		"template-client":         dropVariable("client"),
		"template-key-group":      dropVariable("key_group"),
		"panel-datasource":        func(b boardJSON) { firstTarget(b)["datasource"] = map[string]any{"uid": "prometheus"} },
		"panel-title-description": func(b boardJSON) { firstPanel(b)["description"] = "Lock acquire time." },
		"panel-units": func(b boardJSON) {
			firstPanel(b)["fieldConfig"].(map[string]any)["defaults"].(map[string]any)["unit"] = "seconds"
		},
		"panel-no-targets":     func(b boardJSON) { firstPanel(b)["targets"] = []any{} },
		"target-promql":        func(b boardJSON) { firstTarget(b)["expr"] = str(firstTarget(b), "expr") + ")" },
		"target-job-instance":  replaceInExpr(firstTarget, `, instance=~"$instance"`, ""),
		"target-client":        replaceInExpr(firstTarget, `, client=~"$client"`, ""),
		"target-key-group":     replaceInExpr(firstTarget, `, key_group=~"$key_group"`, ""),
		"target-rate-interval": replaceInExpr(firstTarget, "[$__rate_interval]", "[5m]"),
		"target-counter-agg": func(b boardJSON) {
			firstTarget(b)["expr"] = signals.LockAttempts.String() + `{job=~"$job", instance=~"$instance", client=~"$client", key_group=~"$key_group"}`
		},
		"target-histogram": replaceInExpr(firstTarget, "sum by (le, key_group) (", "sum by (key_group) ("),
	}
	for name := range rules {
		if mutations[name] == nil {
			t.Errorf("rule %s has no mutation: nothing shows it can fail", name)
		}
	}
	// Rules about exporter series break on the keyspace board.
	onBoard := map[string]string{"target-exporter-per-node": dashboards.KeyspaceUID}
	for name, mutate := range mutations {
		t.Run(name, func(t *testing.T) {
			b := contentionBoard(t)
			if uid := onBoard[name]; uid != "" {
				b = boardByUID(t, uid)
			}
			mutate(b)
			got := lint(b)
			if len(got[name]) == 0 {
				t.Fatalf("rule %s did not report the mutation; reports: %v", name, got)
			}
			t.Logf("%s: %s", name, got[name][0])
		})
	}
}

func dropVariable(name string) func(boardJSON) {
	return func(b boardJSON) {
		templating := b["templating"].(map[string]any)
		templating["list"] = slices.DeleteFunc(templating["list"].([]any), func(v any) bool { return v.(map[string]any)["name"] == name })
	}
}

func replaceInExpr(target func(boardJSON) map[string]any, old, new string) func(boardJSON) {
	return func(b boardJSON) {
		tg := target(b)
		e := str(tg, "expr")
		if !strings.Contains(e, old) {
			panic(fmt.Sprintf("mutation: %q not in %q", old, e))
		}
		tg["expr"] = strings.Replace(e, old, new, 1)
	}
}

func contentionBoard(t *testing.T) boardJSON { return boardByUID(t, dashboards.ContentionUID) }

func boardByUID(t *testing.T, uid string) boardJSON {
	t.Helper()
	for _, b := range generated(t) {
		if b.uid() == uid {
			return b
		}
	}
	t.Fatalf("no board %s", uid)
	return nil
}

func panelTitled(b boardJSON, title string) map[string]any {
	for _, p := range b.panels() {
		if p["title"] == title {
			return p
		}
	}
	panic(fmt.Sprintf("%s has no panel %q", b.uid(), title))
}
