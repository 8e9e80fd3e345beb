package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-jsonnet"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"

	"github.com/cachewatch/cachewatch/alerts"
	"github.com/cachewatch/cachewatch/internal/doccheck"
)

// mixinOutput is what a mixin user renders: the rule groups (alerts and
// recording rules) and the dashboards by file name.
type mixinOutput struct {
	Groups     []monitoringv1.RuleGroup   `json:"groups"`
	Dashboards map[string]json.RawMessage `json:"dashboards"`
}

// evalMixin evaluates mixin.libsonnet with go-jsonnet, its _config
// overridden by config (camelCase keys), as kube-prometheus would.
func evalMixin(t *testing.T, config map[string]any) (mixinOutput, error) {
	t.Helper()
	vm := jsonnet.MakeVM()
	vm.Importer(&jsonnet.FileImporter{JPaths: []string{filepath.Join(root, "mixin")}})
	override, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	vm.ExtCode("config", string(override))
	out, err := vm.EvaluateAnonymousSnippet("render.jsonnet", `
local mixin = (import 'mixin.libsonnet') + { _config+:: std.extVar('config') };
{
  groups: mixin.prometheusRules.groups + mixin.prometheusAlerts.groups,
  dashboards: mixin.grafanaDashboards,
}`)
	if err != nil {
		return mixinOutput{}, err
	}
	var m mixinOutput
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("the mixin's rules do not decode strictly into the operator's types: %v", err)
	}
	return m, nil
}

// TestMixinDefaultsAreTheGeneratedFiles evaluates the mixin with its
// default _config: its rules are the committed rule file's and its
// dashboards the committed boards.
func TestMixinDefaultsAreTheGeneratedFiles(t *testing.T) {
	m, err := evalMixin(t, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	want := ruleFileGroups(t, readFile(t, filepath.Join(root, "alerts", "generated", alerts.RulesFile)))
	if !reflect.DeepEqual(m.Groups, want) {
		t.Errorf("the mixin's default rules differ from alerts/generated/%s:\n%s", alerts.RulesFile, firstRuleDiff(m.Groups, want))
	}
	promtoolCheckRules(t, m.Groups)
	files, _ := filepath.Glob(filepath.Join(root, "dashboards", "json", "*.json"))
	if len(m.Dashboards) != len(files) || len(files) == 0 {
		t.Fatalf("the mixin has %d dashboards, dashboards/json %d", len(m.Dashboards), len(files))
	}
	for _, f := range files {
		var got, want any
		if err := json.Unmarshal(m.Dashboards[filepath.Base(f)], &got); err != nil {
			t.Fatalf("%s: %v", filepath.Base(f), err)
		}
		if err := json.Unmarshal(readFile(t, f), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("the mixin's %s differs from %s", filepath.Base(f), f)
		}
	}
}

// TestMixinConfigChangesTheRules changes every key of _config at once, to
// values distinct from each other, and each selector alone: the rules must
// be exactly what `cachewatch alerts` writes for the same config, and a
// selector must replace the default in every rule that had it.
func TestMixinConfigChangesTheRules(t *testing.T) {
	snake, cfg := distinctConfig(t)
	camel := camelKeys(snake)
	m, err := evalMixin(t, camel)
	if err != nil {
		t.Fatal(err)
	}
	if want := goRuleGroups(t, cfg); !reflect.DeepEqual(m.Groups, want) {
		t.Errorf("every key changed: the mixin's rules differ from cachewatch alerts':\n%s", firstRuleDiff(m.Groups, want))
	}
	t.Logf("all %d _config keys changed at once: rules equal cachewatch alerts' for that config", len(camel))

	defaults := alerts.DefaultConfig()
	for _, sel := range []struct{ key, value string }{
		{"service_selector", `job=~"api|worker"`},
		{"exporter_selector", `job="redis-cachewatch", namespace="cache"`},
	} {
		old, _ := defaults.Get(sel.key)
		m, err := evalMixin(t, map[string]any{camelCase(sel.key): sel.value})
		if err != nil {
			t.Fatal(err)
		}
		cfg := alerts.DefaultConfig()
		if err := cfg.Set(sel.key, sel.value); err != nil {
			t.Fatal(err)
		}
		if want := goRuleGroups(t, cfg); !reflect.DeepEqual(m.Groups, want) {
			t.Errorf("%s changed: the mixin's rules differ from cachewatch alerts':\n%s", sel.key, firstRuleDiff(m.Groups, want))
		}
		defaultRules := ruleFileGroups(t, readFile(t, filepath.Join(root, "alerts", "generated", alerts.RulesFile)))
		changed := 0
		for i, g := range defaultRules {
			for j, r := range g.Rules {
				got := m.Groups[i].Rules[j].Expr.String()
				if strings.Contains(r.Expr.String(), "{"+old) {
					changed++
					if !strings.Contains(got, "{"+sel.value) || strings.Contains(got, "{"+old) {
						t.Errorf("%s changed: rule %s%s still reads %s", sel.key, r.Record, r.Alert, got)
					}
				}
			}
		}
		if changed == 0 {
			t.Errorf("no rule uses %s", sel.key)
		}
		t.Logf("%s changed: %d rules carry the new selector", sel.key, changed)
	}
}

// TestMixinRefusesBadConfig checks that a bad value fails the evaluation
// with an error naming the _config key.
func TestMixinRefusesBadConfig(t *testing.T) {
	for key, v := range map[string]any{
		"lockAcquireFor":        "soon",
		"lockContentionWarning": 5,
		"staleRatioWarning":     "high",
		"serviceSelector":       "",
	} {
		_, err := evalMixin(t, map[string]any{key: v})
		if err == nil || !strings.Contains(err.Error(), "_config."+key) {
			t.Errorf("_config.%s = %v: error %v, want one naming it", key, v, err)
		}
	}
}

// TestMixinWritesNumbersAsGo checks the mixin writes numbers as package
// alerts does (strconv's shortest 'g'): thresholds must read the same in
// both.
func TestMixinWritesNumbersAsGo(t *testing.T) {
	values := []float64{0, 1000, 100, 10, 5, 0.05, 0.01, 0.1, 0.3, 1e6, 1234567, 999999, 100000, 123456.7, 0.0001, 0.00001,
		2.5e-5, 0.000123, 1e21, 0.0078125, 1.5, 600, 86400, 31536000, 0.25}
	vm := jsonnet.MakeVM()
	vm.Importer(&jsonnet.FileImporter{JPaths: []string{filepath.Join(root, "mixin")}})
	in, _ := json.Marshal(values)
	out, err := vm.EvaluateAnonymousSnippet("num.jsonnet", `local lib = import 'lib/template.libsonnet'; [lib.num(x) for x in `+string(in)+`]`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	for i, x := range values {
		if want := strconv.FormatFloat(x, 'g', -1, 64); got[i] != want {
			t.Errorf("num(%v) = %s, want %s", x, got[i], want)
		}
	}
}

// TestDocsMixinSnippets evaluates every jsonnet block of the README and
// the docs (the mixin's README, the Kubernetes page) against the mixin
// vendored where jsonnet-bundler puts it, imported as those pages say.
func TestDocsMixinSnippets(t *testing.T) {
	all, err := doccheck.All(root)
	if err != nil {
		t.Fatal(err)
	}
	vendor := t.TempDir()
	link := filepath.Join(vendor, "github.com", "cachewatch", "cachewatch", "mixin")
	abs, err := filepath.Abs(filepath.Join(root, "mixin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(abs, link); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, b := range all {
		if b.Lang != "jsonnet" {
			continue
		}
		n++
		vm := jsonnet.MakeVM()
		vm.Importer(&jsonnet.FileImporter{JPaths: []string{vendor}})
		out, err := vm.EvaluateAnonymousSnippet(b.File, b.Text)
		if err != nil {
			t.Errorf("%s: %v", b, err)
			continue
		}
		var files map[string]json.RawMessage
		if err := json.Unmarshal([]byte(out), &files); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if !strings.Contains(string(files["cachewatch-rules.json"]), `job=~\"api|worker\"`) || len(files) < 2 {
			t.Errorf("%s renders %d files without the configured selector", b, len(files))
		}
	}
	if n == 0 {
		t.Fatal("no jsonnet block in the docs: the mixin's import is shown nowhere")
	}
}
