package alerts

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/alerting"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"go.yaml.in/yaml/v3"

	"github.com/cachewatch/cachewatch/signals"
)

// TestGeneratedFilesUpToDate fails while a committed file differs from what
// `go generate ./alerts` would write.
func TestGeneratedFilesUpToDate(t *testing.T) {
	files, err := render(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	tests, err := PromtoolTests(RulesFile)
	if err != nil {
		t.Fatal(err)
	}
	files[RulesTestFile] = tests
	runbooks, err := Runbooks(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string][]byte{filepath.Join("..", "docs", "runbooks.md"): runbooks}
	for name, data := range files {
		paths[filepath.Join("generated", name)] = data
	}
	for path, want := range paths {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%v (run go generate ./alerts)", err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./alerts and commit the result", path)
		}
	}
}

func TestAtLeastFifteenAlertsNamedMixinStyle(t *testing.T) {
	names := AlertNames()
	if len(names) < 15 {
		t.Fatalf("%d alert names, want at least 15", len(names))
	}
	camel := regexp.MustCompile(`^Cachewatch([A-Z][a-z0-9]*|TTL)+$`)
	alerts, err := Alerts(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		if !camel.MatchString(a.Name) {
			t.Errorf("%s: not a CamelCase name prefixed Cachewatch", a.Name)
		}
		switch a.Severity {
		case SeverityCritical, SeverityWarning, SeverityInfo:
		default:
			t.Errorf("%s: severity %q", a.Name, a.Severity)
		}
		if a.Labels["severity"] != a.Severity {
			t.Errorf("%s: severity label %q", a.Name, a.Labels["severity"])
		}
		if s := a.Annotations["summary"]; s == "" || strings.Contains(s, "{{") {
			t.Errorf("%s: summary %q must be a static sentence", a.Name, s)
		}
		if d := a.Annotations["description"]; !strings.Contains(d, "$labels.") && !strings.Contains(d, "$value") {
			t.Errorf("%s: description %q uses neither labels nor value", a.Name, d)
		}
		if a.For <= 0 {
			t.Errorf("%s: no for:", a.Name)
		}
	}
}

var recordName = regexp.MustCompile(`^[a-z_]+:cachewatch_[a-z0-9_]+:[a-z0-9_]+$`)

func TestRecordingRulesNamedLevelMetricOperations(t *testing.T) {
	groups, err := Rules(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	inGroup := map[string]bool{}
	for _, g := range groups {
		for _, r := range g.Recording {
			inGroup[r.Record] = true
		}
	}
	for _, rules := range recordingRules(DefaultConfig()) {
		for _, r := range rules {
			if !recordName.MatchString(r.Record) {
				t.Errorf("%s: not level:metric:operations", r.Record)
			}
			if !inGroup[r.Record] {
				t.Errorf("%s: in no rule group with alerts", r.Record)
			}
		}
	}
	contention := func(cfg Config) string { return recordingRules(cfg)[groupLocks][3].Record }
	if got := contention(DefaultConfig()); got != "key_group:cachewatch_lock_contention:ratio_rate5m" {
		t.Errorf("contention rule named %s", got)
	}
	cfg := DefaultConfig()
	cfg.RateWindow = model.Duration(time.Minute)
	if got := contention(cfg); got != "key_group:cachewatch_lock_contention:ratio_rate1m" {
		t.Errorf("with a 1m rate window, contention rule named %s", got)
	}
}

// promtool's test file, as far as this test reads it.
type parsedTests struct {
	Tests []struct {
		Name        string `yaml:"name"`
		InputSeries []struct {
			Series string `yaml:"series"`
		} `yaml:"input_series"`
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels map[string]string `yaml:"exp_labels"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
		PromqlExprTest []struct {
			Expr string `yaml:"expr"`
		} `yaml:"promql_expr_test"`
	} `yaml:"tests"`
}

// TestEveryAlertHasPromtoolCases reads the committed unit tests: each alert
// at each severity has a case where it fires, each alert a case with series
// where it stays quiet and one without series, and each recording rule a
// case.
func TestEveryAlertHasPromtoolCases(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("generated", RulesTestFile))
	if err != nil {
		t.Fatal(err)
	}
	var pt parsedTests
	if err := yaml.Unmarshal(data, &pt); err != nil {
		t.Fatal(err)
	}
	fires := map[string]bool{}
	quietWithSeries, quietEmpty, recorded := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, tg := range pt.Tests {
		for _, at := range tg.AlertRuleTest {
			for _, e := range at.ExpAlerts {
				fires[at.Alertname+"/"+e.ExpLabels["severity"]] = true
			}
			if len(at.ExpAlerts) == 0 && len(tg.InputSeries) > 0 && !strings.Contains(tg.Name, "quiet before") {
				quietWithSeries[at.Alertname] = true
			}
			if len(at.ExpAlerts) == 0 && len(tg.InputSeries) == 0 {
				quietEmpty[at.Alertname] = true
			}
		}
		for _, e := range tg.PromqlExprTest {
			recorded[strings.TrimSuffix(strings.TrimPrefix(e.Expr, "round("), ", 0.0001)")] = true
		}
	}
	alerts, err := Alerts(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		if !fires[a.Name+"/"+a.Severity] {
			t.Errorf("%s (%s): no promtool case where it fires", a.Name, a.Severity)
		}
		if !quietWithSeries[a.Name] {
			t.Errorf("%s: no promtool case where it stays quiet on series", a.Name)
		}
		if !quietEmpty[a.Name] {
			t.Errorf("%s: no promtool case without series", a.Name)
		}
	}
	for _, rules := range recordingRules(DefaultConfig()) {
		for _, r := range rules {
			if !recorded[r.Record] {
				t.Errorf("recording rule %s: no promtool case", r.Record)
			}
		}
	}
}

// TestOnlyCatalogMetricsAndLabels checks every expression of the rules, the
// Grafana queries and the fixtures' series: each metric is in the catalog
// (or is Prometheus's up, or one of our recording rules), each label is one
// the metric has (or a target label), each matched value one the catalog
// lists.
func TestOnlyCatalogMetricsAndLabels(t *testing.T) {
	groups, err := Rules(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	c := newCatalogCheck(groups)
	for _, g := range groups {
		for _, r := range g.Recording {
			c.check(t, r.Record, r.Expr)
		}
		for _, a := range g.Alerts {
			c.check(t, a.Name, a.Expr)
			c.check(t, a.Name+" (Grafana)", inlineRecording(a.grafanaQuery, recordingExprs(groups)))
		}
	}
	for _, d := range definitions(DefaultConfig()) {
		for _, tc := range d.cases {
			for _, s := range tc.series {
				c.check(t, d.name+" fixture", s.name)
			}
		}
	}
	for _, rc := range recordingCases() {
		for _, s := range rc.series {
			c.check(t, rc.record+" fixture", s.name)
		}
	}
}

// The mutation the checker must catch: a metric or label not in the catalog.
func TestCatalogCheckCatchesStrangers(t *testing.T) {
	groups, _ := Rules(DefaultConfig())
	c := newCatalogCheck(groups)
	for _, e := range []string{
		`rate(cachewatch_lock_attempt_total{job="x"}[5m])`,
		`sum by (job, key) (rate(cachewatch_lock_attempts_total{job="x"}[5m]))`,
		`cachewatch_lock_attempts_total{job="x", result="bussy"}`,
		`key_group:cachewatch_nothing:rate5m > 0`,
	} {
		if errs := c.errors(e); len(errs) == 0 {
			t.Errorf("%s: accepted", e)
		}
	}
}

type catalogCheck struct {
	metrics   map[string]signals.Metric
	labels    map[string]bool
	recording map[string]bool
}

// target is the exporter's own target label (naming an exporter by its
// Options.Name), on every series of a multi-target exporter (--targets.file, /probe).
var targetLabels = map[string]bool{"job": true, "instance": true, "target": true}

func newCatalogCheck(groups []Group) *catalogCheck {
	c := &catalogCheck{metrics: map[string]signals.Metric{}, labels: map[string]bool{}, recording: map[string]bool{}}
	for _, m := range signals.All() {
		c.metrics[m.Name] = m
		if m.Kind == signals.Histogram {
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				c.metrics[m.Name+suffix] = m
			}
		}
		for _, l := range m.Labels {
			c.labels[l.Name] = true
		}
	}
	for _, g := range groups {
		for _, r := range g.Recording {
			c.recording[r.Record] = true
		}
	}
	return c
}

func (c *catalogCheck) check(t *testing.T, where, e string) {
	t.Helper()
	for _, err := range c.errors(e) {
		t.Errorf("%s: %v", where, err)
	}
}

// errors parses e with Prometheus's parser and checks every selector and
// every label it groups by or matches on.
func (c *catalogCheck) errors(e string) []error {
	var errs []error
	for _, vs := range selectors(e) {
		var matchers []*labels.Matcher
		for _, m := range vs.LabelMatchers {
			if m.Name != labels.MetricName {
				matchers = append(matchers, m)
			}
		}
		switch m, known := c.metrics[vs.Name]; {
		case vs.Name == alertsMetric:
			errs = append(errs, alertsMatcherErrors(matchers)...)
		case strings.Contains(vs.Name, ":"):
			if !c.recording[vs.Name] {
				errs = append(errs, errors.New(vs.Name+" is not one of the recording rules"))
			}
		case !known && vs.Name != upMetric:
			errs = append(errs, errors.New("metric "+vs.Name+" is not in the catalog"))
		default:
			for _, mt := range matchers {
				errs = append(errs, c.matcherErrors(m, vs.Name, mt)...)
			}
		}
	}
	for _, l := range groupingLabels(e) {
		if !c.labels[l] && !targetLabels[l] && l != "le" {
			errs = append(errs, errors.New("label "+l+" is not in the catalog"))
		}
	}
	return errs
}

// alertsMatcherErrors checks a selector of ALERTS: it may only name
// cachewatch's own alerts, states, severities, tiers and SLOs.
func alertsMatcherErrors(matchers []*labels.Matcher) []error {
	var tierNames, sloNames []string
	for _, t := range tiers {
		tierNames = append(tierNames, t.name)
	}
	for _, s := range slos() {
		sloNames = append(sloNames, s.Name)
	}
	allowed := map[string][]string{
		"alertname":  AlertNames(),
		"alertstate": {"firing", "pending"},
		"severity":   {SeverityCritical, SeverityWarning, SeverityInfo},
		"tier":       tierNames,
		"slo":        sloNames,
	}
	var errs []error
	for _, mt := range matchers {
		values, ok := allowed[mt.Name]
		if !ok {
			errs = append(errs, errors.New("ALERTS has no label "+mt.Name+" of ours"))
			continue
		}
		for _, v := range strings.Split(mt.Value, "|") {
			if !contains(values, v) {
				errs = append(errs, errors.New("ALERTS{"+mt.Name+"} matches "+v+", which the rules do not produce"))
			}
		}
	}
	return errs
}

func (c *catalogCheck) matcherErrors(m signals.Metric, name string, mt *labels.Matcher) []error {
	label, value := mt.Name, mt.Value
	if targetLabels[label] || (label == "le" && strings.HasSuffix(name, "_bucket")) {
		return nil
	}
	if m.Name == "" {
		return []error{errors.New(name + " has no label " + label)}
	}
	for _, l := range m.Labels {
		if l.Name != label {
			continue
		}
		if len(l.Values) == 0 {
			return nil
		}
		values := []string{value}
		if mt.Type == labels.MatchRegexp || mt.Type == labels.MatchNotRegexp {
			values = strings.Split(value, "|")
		}
		var errs []error
		for _, v := range values {
			if !contains(l.Values, v) {
				errs = append(errs, errors.New(name+": "+label+" never takes the value "+v))
			}
		}
		return errs
	}
	return []error{errors.New(name + " has no label " + label)}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var heading = regexp.MustCompile(`(?m)^## (\S+)$`)

// TestRunbookSections proves every alert has its section in the committed
// docs/runbooks.md and every runbook_url anchor exists there.
func TestRunbookSections(t *testing.T) {
	md, err := os.ReadFile(filepath.Join("..", "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, h := range heading.FindAllStringSubmatch(string(md), -1) {
		anchors[strings.ToLower(h[1])] = true
	}
	alerts, err := Alerts(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		url := a.Annotations["runbook_url"]
		base, anchor, ok := strings.Cut(url, "#")
		if !ok || base != DefaultRunbookBaseURL || !anchors[anchor] {
			t.Errorf("%s: runbook_url %s has no section in docs/runbooks.md", a.Name, url)
		}
	}
	for _, d := range definitions(DefaultConfig()) {
		r := d.runbook
		if r.meaning == "" || len(r.causes) == 0 || r.fix == "" ||
			!(strings.Contains(r.confirm, boardContention) || strings.Contains(r.confirm, boardRedis) || strings.Contains(r.confirm, boardKeyspace)) {
			t.Errorf("%s: runbook lacks meaning, causes, a dashboard to confirm on, or a fix", d.name)
		}
	}
}

func TestGrafanaProvisioningShape(t *testing.T) {
	groups, err := Rules(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	data, err := GrafanaRules(groups, GrafanaOptions{DatasourceUID: "prom-uid"})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		APIVersion int `yaml:"apiVersion"`
		Groups     []struct {
			Name, Folder string
			Rules        []struct {
				UID       string            `yaml:"uid"`
				Title     string            `yaml:"title"`
				Condition string            `yaml:"condition"`
				Labels    map[string]string `yaml:"labels"`
				Data      []struct {
					RefID         string         `yaml:"refId"`
					DatasourceUID string         `yaml:"datasourceUid"`
					Model         map[string]any `yaml:"model"`
				} `yaml:"data"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.APIVersion != 1 || len(doc.Groups) == 0 {
		t.Fatalf("apiVersion %d, %d groups", doc.APIVersion, len(doc.Groups))
	}
	uids, n := map[string]bool{}, 0
	titles := map[string]bool{}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			n++
			if uids[r.UID] || len(r.UID) > 40 {
				t.Errorf("%s: uid %q duplicate or too long", r.Title, r.UID)
			}
			uids[r.UID] = true
			if r.Condition != "C" || len(r.Data) != 3 {
				t.Fatalf("%s: condition %s with %d queries", r.Title, r.Condition, len(r.Data))
			}
			if r.Data[0].DatasourceUID != "prom-uid" || r.Data[0].Model["expr"] == "" {
				t.Errorf("%s: query A %+v", r.Title, r.Data[0])
			}
			if r.Data[1].Model["type"] != "reduce" || r.Data[2].Model["type"] != "threshold" {
				t.Errorf("%s: B is %v, C is %v; want reduce and threshold", r.Title, r.Data[1].Model["type"], r.Data[2].Model["type"])
			}
			if r.Labels["severity"] == "" {
				t.Errorf("%s: no severity label", r.Title)
			}
			titles[r.Title] = true
		}
	}
	// Grafana sets alertname from the title: every rule is titled by its
	// alert's name, so routing, inhibitions and silences line up.
	for _, name := range AlertNames() {
		if !titles[name] {
			t.Errorf("no Grafana rule titled %s", name)
		}
		delete(titles, name)
	}
	for title := range titles {
		t.Errorf("Grafana rule titled %q, which is no alert's name", title)
	}
	want := 0
	for _, g := range groups {
		want += len(grafanaLevels(g.Alerts))
	}
	if n != want {
		t.Errorf("%d Grafana rules, want %d (one per alert, one more per escalation)", n, want)
	}
}

func TestConfigYAMLOverridesAndStrictKeys(t *testing.T) {
	cfg, err := ParseConfig(strings.NewReader("lock_contention_warning: 0.1\nlocks_without_ttl_for: 30s\nexporter_selector: 'job=\"redis-exp\"'\n"))
	if err != nil {
		t.Fatal(err)
	}
	alerts, err := Alerts(cfg)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, a := range alerts {
		switch {
		case a.Name == "CachewatchLockContentionHigh" && a.Severity == SeverityWarning:
			seen++
			if !strings.HasPrefix(a.Expr, "key_group:cachewatch_lock_contention:ratio_rate5m > 0.1\n") {
				t.Errorf("contention expr %q", a.Expr)
			}
			if !strings.Contains(a.Annotations["description"], "threshold 10%") {
				t.Errorf("description %q", a.Annotations["description"])
			}
		case a.Name == "CachewatchLocksWithoutTTL":
			seen++
			if a.For.Seconds() != 30 || !strings.Contains(a.Expr, `job="redis-exp"`) {
				t.Errorf("for %v, expr %s", a.For, a.Expr)
			}
		}
	}
	if seen != 2 {
		t.Fatalf("saw %d of the overridden alerts", seen)
	}

	_, err = ParseConfig(strings.NewReader("lock_contention_warning: 0.1\nlock_contension_critical: 0.3\n"))
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "lock_contension_critical") {
		t.Errorf("unknown key: %v", err)
	}
	for _, bad := range []string{
		"lock_contention_warning: 5\n",   // a ratio above 1
		"lock_acquire_for: 0s\n",         // no for:
		"service_selector: 'job=api'\n",  // not a matcher (unquoted value)
		"min_lookups_per_second: -1\n",   // negative
		"lock_acquire_p99_warning: 50\n", // not a duration
	} {
		if _, err := ParseConfig(strings.NewReader(bad)); !errors.Is(err, ErrConfig) {
			t.Errorf("%q: err %v, want ErrConfig", bad, err)
		}
	}
}

func TestConfigSet(t *testing.T) {
	cfg := DefaultConfig()
	for key, value := range map[string]string{
		"lock_acquire_p99_warning": "75ms", "stale_ratio_warning": "0.4", "runbook_base_url": "https://wiki.example/runbooks",
	} {
		if err := cfg.Set(key, value); err != nil {
			t.Fatal(err)
		}
		if got, _ := cfg.Get(key); got != value {
			t.Errorf("%s = %q after Set(%q)", key, got, value)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Set("lock_acquire_p99_warning", "fast"); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "lock_acquire_p99_warning") {
		t.Errorf("bad duration: %v", err)
	}
	if err := cfg.Set("no_such_key", "1"); !errors.Is(err, ErrConfig) {
		t.Errorf("unknown key: %v", err)
	}
	if len(cfg.Keys()) < 40 {
		t.Errorf("only %d keys", len(cfg.Keys()))
	}
}

func TestWriteFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	cfg := DefaultConfig()
	cfg.RunbookBaseURL = "https://wiki.example/cachewatch"
	if err := WriteFiles(dir, cfg); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{RulesFile, GrafanaFile, AlertmanagerFile} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if name != AlertmanagerFile && !bytes.Contains(data, []byte("https://wiki.example/cachewatch#cachewatchlockswithoutttl")) {
			t.Errorf("%s: runbook base URL not applied", name)
		}
	}
	bad := DefaultConfig()
	bad.StreamLag = -1
	if err := WriteFiles(t.TempDir(), bad); !errors.Is(err, ErrConfig) {
		t.Errorf("bad config: %v", err)
	}
}

var (
	boldRE       = regexp.MustCompile(`\*\*[^*]+\*\*`)
	italicRE     = regexp.MustCompile(`\*([^*]+)\*`)
	anchorLinkRE = regexp.MustCompile(`runbooks\.md#([a-z0-9-]+)`)
	sectionRE    = regexp.MustCompile(`docs/runbooks\.md, section \\?"([^"\\]+)\\?"`)
	anyHeading   = regexp.MustCompile(`(?m)^#{2,3} (.+)$`)
	notInAnchor  = regexp.MustCompile(`[^a-z0-9 _-]`)
)

// TestRunbooksAndDashboardsAgree checks both directions between the
// committed dashboards and the runbooks: every panel a runbook tells the
// reader to look at exists on a board, and every runbook link or section a
// panel names exists in docs/runbooks.md.
func TestRunbooksAndDashboardsAgree(t *testing.T) {
	boards, err := filepath.Glob(filepath.Join("..", "dashboards", "json", "*.json"))
	if err != nil || len(boards) == 0 {
		t.Fatalf("no committed dashboards in ../dashboards/json: %v", err)
	}
	titles := map[string]bool{}
	var all strings.Builder
	for _, path := range boards {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(data)
		var board struct{ Panels []panel }
		if err := json.Unmarshal(data, &board); err != nil {
			t.Fatal(err)
		}
		collectTitles(board.Panels, titles)
	}
	defs := definitions(DefaultConfig())
	for _, d := range defs {
		for _, m := range italicRE.FindAllStringSubmatch(boldRE.ReplaceAllString(d.runbook.confirm, ""), -1) {
			if !titles[m[1]] {
				t.Errorf("%s: runbook names panel %q, which no dashboard has", d.name, m[1])
			}
		}
	}
	md, err := os.ReadFile(filepath.Join("..", "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, h := range anyHeading.FindAllStringSubmatch(string(md), -1) {
		headings[h[1]] = true
		headings[strings.ToLower(h[1])] = true
		// The anchor GitHub gives the heading (panel links to sections).
		headings[strings.ReplaceAll(notInAnchor.ReplaceAllString(strings.ToLower(h[1]), ""), " ", "-")] = true
	}
	for _, m := range anchorLinkRE.FindAllStringSubmatch(all.String(), -1) {
		if !headings[m[1]] {
			t.Errorf("a dashboard links to runbooks.md#%s, which has no section", m[1])
		}
	}
	sections := sectionRE.FindAllStringSubmatch(all.String(), -1)
	if len(sections) == 0 || len(anchorLinkRE.FindAllString(all.String(), -1)) == 0 {
		t.Fatal("found no runbook links in the dashboards: the patterns are stale")
	}
	for _, m := range sections {
		if !headings[m[1]] {
			t.Errorf("a dashboard names runbook section %q, which does not exist", m[1])
		}
	}
}

type panel struct {
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

func collectTitles(ps []panel, into map[string]bool) {
	for _, p := range ps {
		into[p.Title] = true
		collectTitles(p.Panels, into)
	}
}

func TestEveryAlertNamesItsValue(t *testing.T) {
	for _, d := range definitions(DefaultConfig()) {
		if valueNames[d.name] == "" {
			t.Errorf("%s: no entry in valueNames", d.name)
		}
	}
}

// TestEveryAlertWaitsItsFor: each alert has a firing case that also checks
// it is still quiet before its `for:` has passed.
func TestEveryAlertWaitsItsFor(t *testing.T) {
	for _, d := range definitions(DefaultConfig()) {
		ok := false
		for _, c := range d.cases {
			ok = ok || (len(c.want) > 0 && len(c.quietAt) > 0)
		}
		if !ok {
			t.Errorf("%s: no firing case checks that it is quiet before its for:", d.name)
		}
	}
}

// TestGrafanaRulesMatchTheSDKSchema reads the committed provisioning file
// back into the SDK's Rule type with its strict decoder, which rejects
// unknown fields and missing required ones.
func TestGrafanaRulesMatchTheSDKSchema(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("generated", GrafanaFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Name   string           `yaml:"name"`
			Folder string           `yaml:"folder"`
			Rules  []map[string]any `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			// The provisioning format carries these on the group.
			r["ruleGroup"], r["folderUID"], r["orgID"] = g.Name, g.Folder, 1
			raw, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			var rule alerting.Rule
			// The SDK returns its error list typed, nil or not.
			var errs cog.BuildErrors
			if err := rule.UnmarshalJSONStrict(raw); err != nil && (!errors.As(err, &errs) || len(errs) > 0) {
				t.Errorf("%v: %v", r["title"], err)
			}
			if rule.Title == "" || len(rule.Data) != 3 {
				t.Errorf("%v: decoded to %+v", r["title"], rule)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no rules")
	}
}
