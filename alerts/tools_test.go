package alerts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

func TestPromtoolCheckRules(t *testing.T) {
	promtool := metrictest.Tool(t, "promtool", "prometheus")
	out := metrictest.RunTool(t, promtool, "check", "rules", filepath.Join("generated", RulesFile))
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool check rules:\n%s", out)
	}
}

// TestPromtoolTestRules runs the committed unit tests of every alert and
// recording rule through the real rule engine. promtool evaluates every
// rule it loaded at every step of every test group, so the tests of each
// rule group run against that group alone (with the groups its rules
// read), two promtool processes at a time.
func TestPromtoolTestRules(t *testing.T) {
	promtool := metrictest.Tool(t, "promtool", "prometheus")
	files := splitPromtoolTests(t, t.TempDir())
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for _, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out, err := exec.Command(promtool, "test", "rules", f).CombinedOutput()
			if err != nil {
				t.Errorf("promtool test rules %s: %v\n%s", filepath.Base(f), err, out)
			}
		}()
	}
	wg.Wait()
}

// splitPromtoolTests writes, per rule group, a rule file of the group and
// of the groups its rules read (recording rules, ALERTS), and a test file
// of the committed tests of the group's alerts and recording rules, into
// dir; it returns the test files.
func splitPromtoolTests(t *testing.T, dir string) []string {
	groups, err := Rules(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{} // alert or record name → its group
	for _, g := range groups {
		for _, r := range g.Recording {
			owner[r.Record] = g.Name
		}
		for _, a := range g.Alerts {
			owner[a.Name] = g.Name
		}
	}
	data, err := os.ReadFile(filepath.Join("generated", RulesTestFile))
	if err != nil {
		t.Fatal(err)
	}
	var committed map[string]any
	if err := yaml.Unmarshal(data, &committed); err != nil {
		t.Fatal(err)
	}
	tests := map[string][]any{}
	for _, tg := range committed["tests"].([]any) {
		name := tg.(map[string]any)["name"].(string)
		subject, _, _ := strings.Cut(strings.TrimPrefix(name, "recording "), ":")
		if strings.HasPrefix(name, "recording ") {
			subject = strings.TrimPrefix(name, "recording ")
		}
		g, ok := owner[subject]
		if !ok {
			t.Fatalf("test %q is of no alert or recording rule", name)
		}
		tests[g] = append(tests[g], tg)
	}
	var files []string
	for _, g := range groups {
		if len(tests[g.Name]) == 0 {
			continue
		}
		rules, err := PrometheusRules(withReads(groups, g.Name, owner))
		if err != nil {
			t.Fatal(err)
		}
		ruleFile, testFile := filepath.Join(dir, g.Name+".yaml"), filepath.Join(dir, g.Name+".test.yaml")
		doc := map[string]any{"rule_files": []string{filepath.Base(ruleFile)}, "evaluation_interval": committed["evaluation_interval"], "tests": tests[g.Name]}
		out, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(ruleFile, rules, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(testFile, out, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, testFile)
	}
	return files
}

// withReads returns the group named name and every group its rules read,
// transitively, in rule-file order.
func withReads(groups []Group, name string, owner map[string]string) []Group {
	need := map[string]bool{name: true}
	for changed := true; changed; {
		changed = false
		for _, g := range groups {
			if !need[g.Name] {
				continue
			}
			var exprs []string
			for _, r := range g.Recording {
				exprs = append(exprs, r.Expr)
			}
			for _, a := range g.Alerts {
				exprs = append(exprs, a.Expr)
			}
			for _, e := range exprs {
				for _, read := range readsOf(e) {
					if o, ok := owner[read]; ok && !need[o] {
						need[o], changed = true, true
					}
				}
			}
		}
	}
	var out []Group
	for _, g := range groups {
		if need[g.Name] {
			out = append(out, g)
		}
	}
	return out
}

// readsOf lists the recording rules and alerts e reads.
func readsOf(e string) []string {
	var out []string
	for _, vs := range selectors(e) {
		if vs.Name != alertsMetric {
			out = append(out, vs.Name)
			continue
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == "alertname" {
				out = append(out, strings.Split(m.Value, "|")...)
			}
		}
	}
	return out
}

// TestGrafanaQueriesParse feeds every Grafana query A (recording rules
// inlined) to promtool as a recording rule, so Prometheus's own parser
// checks it.
func TestGrafanaQueriesParse(t *testing.T) {
	promtool := metrictest.Tool(t, "promtool", "prometheus")
	alerts, err := Alerts(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	groups, _ := Rules(DefaultConfig())
	inline := recordingExprs(groups)
	var b strings.Builder
	b.WriteString("groups:\n  - name: grafana-queries\n    rules:\n")
	for i, a := range alerts {
		q := inlineRecording(a.grafanaQuery, inline)
		for name := range inline {
			if strings.Contains(q, name) {
				t.Errorf("%s: Grafana query still names recording rule %s", a.Name, name)
			}
		}
		fmt.Fprintf(&b, "      - record: grafana:query_%d\n        expr: '%s'\n", i, strings.ReplaceAll(q, "'", "''"))
	}
	path := filepath.Join(t.TempDir(), "grafana-queries.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	metrictest.RunTool(t, promtool, "check", "rules", path)
}

func TestAmtoolCheckConfig(t *testing.T) {
	amtool := metrictest.Tool(t, "amtool", "prometheus-alertmanager")
	file := filepath.Join("generated", AlertmanagerFile)
	metrictest.RunTool(t, amtool, "check-config", file)
	for severity, want := range map[string]string{
		SeverityCritical: ReceiverPage,
		SeverityWarning:  ReceiverTicket,
		SeverityInfo:     ReceiverQuiet,
	} {
		// amtool prints a warning about --alertmanager.url on stderr.
		stdout, err := exec.Command(amtool, "config", "routes", "test", "--config.file="+file,
			"alertname=CachewatchLockContentionHigh", "key_group=lock:report:*", "severity="+severity).Output()
		if err != nil {
			t.Fatalf("amtool config routes test: %v", err)
		}
		if out := string(stdout); strings.TrimSpace(out) != want {
			t.Errorf("severity %s routes to %q, want %s", severity, strings.TrimSpace(out), want)
		}
	}
}

// TestSlothValidatesTheSpec runs the real sloth (`go install
// github.com/slok/sloth/cmd/sloth@v0.16.0`; scripts/test.sh builds it into
// the tools directory) over the committed spec: it parses it and generates
// its Prometheus rules.
func TestSlothValidatesTheSpec(t *testing.T) {
	sloth := slothBinary(t)
	out := metrictest.RunTool(t, sloth, "validate", "--no-log", "-i", filepath.Join("generated", SlothFile))
	t.Log(strings.TrimSpace(out))
	// The check can fail: a spec without the window in its queries is
	// refused.
	broken := filepath.Join(t.TempDir(), SlothFile)
	data, err := os.ReadFile(filepath.Join("generated", SlothFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(broken, []byte(strings.ReplaceAll(string(data), "{{.window}}", "5m")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sloth, "validate", "--no-log", "-i", broken).CombinedOutput(); err == nil {
		t.Fatalf("sloth validated a spec whose queries have no window:\n%s", out)
	}
}

// slothBinary finds sloth in PATH or in the tools directory scripts/test.sh
// builds it into, or skips t (fails it with CACHEWATCH_REQUIRE_REDIS=1,
// as .ci/run sets).
func slothBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("sloth"); err == nil {
		return p
	}
	tools := os.Getenv("CACHEWATCH_TOOLS")
	if tools == "" {
		home, _ := os.UserHomeDir()
		tools = filepath.Join(home, ".cache", "cachewatch", "tools")
	}
	if p := filepath.Join(tools, "sloth"); fileExists(p) {
		return p
	}
	const how = "go install github.com/slok/sloth/cmd/sloth@v0.16.0, or run scripts/test.sh"
	if os.Getenv(redistest.RequireEnv) == "1" {
		t.Fatalf("sloth not found in PATH or %s (%s)", tools, how)
	}
	t.Skipf("sloth not found in PATH or %s: %s", tools, how)
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
