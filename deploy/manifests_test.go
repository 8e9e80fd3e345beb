package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"

	"github.com/cachewatch/cachewatch/alerts"
	"github.com/cachewatch/cachewatch/internal/metrictest"
)

// ruleFileGroups decodes a Prometheus rule file into the operator's rule
// groups, strictly.
func ruleFileGroups(t *testing.T, data []byte) []monitoringv1.RuleGroup {
	t.Helper()
	var rf struct {
		Groups []monitoringv1.RuleGroup `json:"groups"`
	}
	if err := decodeStrict(data, &rf); err != nil {
		t.Fatalf("rule file does not decode strictly: %v", err)
	}
	return rf.Groups
}

// promtoolCheckRules runs `promtool check rules` on groups written as a
// rule file.
func promtoolCheckRules(t *testing.T, groups []monitoringv1.RuleGroup) {
	t.Helper()
	data, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(metrictest.Promtool(t), "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("SUCCESS")) {
		t.Fatalf("promtool check rules: %s", out)
	}
}

// TestAlertsPrometheusRule decodes `cachewatch alerts --format
// prometheusrule` strictly into the operator's PrometheusRule, checks its
// metadata, that its groups are the rule file's for the same config, and
// runs promtool on them.
func TestAlertsPrometheusRule(t *testing.T) {
	cfg := []string{"--lock-contention-warning", "0.1", "--service-selector", `job=~"api|worker"`}
	out := run(t, append([]string{"alerts", "--format", "prometheusrule", "--prometheusrule.name", "cachewatch-rules",
		"--prometheusrule.namespace", "monitoring", "--prometheusrule.label", "release=kube-prometheus-stack",
		"--prometheusrule.label", "team=platform"}, cfg...)...)
	o := decodeAll(t, out)
	if len(o.PrometheusRules) != 1 || len(splitDocs(out)) != 1 {
		t.Fatalf("want one PrometheusRule, got %d documents", len(splitDocs(out)))
	}
	pr := o.PrometheusRules[0]
	if pr.Name != "cachewatch-rules" || pr.Namespace != "monitoring" ||
		!reflect.DeepEqual(pr.Labels, map[string]string{"release": "kube-prometheus-stack", "team": "platform"}) {
		t.Errorf("metadata %+v", pr.ObjectMeta)
	}

	dir := t.TempDir()
	run(t, append([]string{"alerts", "--out", dir}, cfg...)...)
	want := ruleFileGroups(t, readFile(t, filepath.Join(dir, alerts.RulesFile)))
	if !reflect.DeepEqual(pr.Spec.Groups, want) {
		t.Error("the PrometheusRule's groups differ from the rule file's for the same config")
	}
	if len(want) == 0 || len(want[0].Rules) == 0 {
		t.Fatal("no rules")
	}
	promtoolCheckRules(t, pr.Spec.Groups)

	run(t, "alerts", "--format", "prometheusrule", "--out", dir)
	if o := decodeAll(t, readFile(t, filepath.Join(dir, alerts.PrometheusRuleFile))); len(o.PrometheusRules) != 1 || o.PrometheusRules[0].Name != "cachewatch" {
		t.Errorf("--out %s: want a PrometheusRule named cachewatch in %s", dir, alerts.PrometheusRuleFile)
	}
}

// TestDashboardsConfigMaps decodes `cachewatch dashboards --format
// configmap` strictly into ConfigMaps: one per generated board, carrying
// the sidecar's label and folder annotation and the board's JSON byte for
// byte.
func TestDashboardsConfigMaps(t *testing.T) {
	boards, err := filepath.Glob(filepath.Join(root, "dashboards", "json", "*.json"))
	if err != nil || len(boards) == 0 {
		t.Fatalf("no generated boards: %v", err)
	}
	for _, tc := range []struct {
		name              string
		args              []string
		label, value      string
		annotation, dir   string
		namespace, extraK string
	}{
		{"defaults", nil, "grafana_dashboard", "1", "grafana_folder", "cachewatch", "", ""},
		{"configured", []string{"--configmap.namespace", "grafana", "--configmap.sidecar-label", "dashboards=cachewatch",
			"--configmap.folder-annotation", "k8s-sidecar-target-directory", "--configmap.folder", "/tmp/dashboards/redis",
			"--configmap.label", "team=platform"}, "dashboards", "cachewatch", "k8s-sidecar-target-directory", "/tmp/dashboards/redis", "grafana", "team"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := decodeAll(t, run(t, append([]string{"dashboards", "--format", "configmap"}, tc.args...)...))
			if len(o.ConfigMaps) != len(boards) {
				t.Fatalf("%d ConfigMaps for %d boards", len(o.ConfigMaps), len(boards))
			}
			seen := map[string]bool{}
			for _, cm := range o.ConfigMaps {
				if cm.Labels[tc.label] != tc.value || cm.Annotations[tc.annotation] != tc.dir || cm.Namespace != tc.namespace {
					t.Errorf("%s: labels %v, annotations %v, namespace %q", cm.Name, cm.Labels, cm.Annotations, cm.Namespace)
				}
				if tc.extraK != "" && cm.Labels[tc.extraK] == "" {
					t.Errorf("%s lacks the label %s", cm.Name, tc.extraK)
				}
				checkBoardData(t, cm.Name, cm.Data, boards)
				for key := range cm.Data {
					seen[key] = true
				}
			}
			if len(seen) != len(boards) {
				t.Errorf("the ConfigMaps hold %d distinct boards, want %d", len(seen), len(boards))
			}
		})
	}
}

// checkBoardData checks a ConfigMap's data holds one board, the committed
// file of the same name, byte for byte, among files.
func checkBoardData(t *testing.T, name string, data map[string]string, files []string) {
	t.Helper()
	if len(data) != 1 {
		t.Errorf("%s holds %d keys, want one board", name, len(data))
	}
	for key, content := range data {
		var file string
		for _, f := range files {
			if filepath.Base(f) == key {
				file = f
			}
		}
		if file == "" {
			t.Errorf("%s: key %s is no generated board", name, key)
			continue
		}
		if content != string(readFile(t, file)) {
			t.Errorf("%s: %s differs from %s", name, key, file)
		}
	}
}
