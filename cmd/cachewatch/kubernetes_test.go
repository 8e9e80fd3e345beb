package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The Kubernetes formats print to stdout without --out, and refuse
// metadata the API server would refuse with one line naming the flag.
func TestKubernetesFormats(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"prometheusrule", []string{"alerts", "--format", "prometheusrule", "--prometheusrule.label", "release=kps"}, 0, "kind: PrometheusRule"},
		{"configmap", []string{"dashboards", "--format", "configmap"}, 0, "kind: ConfigMap"},
		{"bad label", []string{"alerts", "--format", "prometheusrule", "--prometheusrule.label", "Bad Key=x"}, exitUsage, `--prometheusrule.*: alerts: PrometheusRule cachewatch: invalid Kubernetes metadata: label key "Bad Key"`},
		{"bad name", []string{"alerts", "--format", "prometheusrule", "--prometheusrule.name", "Cache_Watch"}, exitUsage, `name "Cache_Watch"`},
		{"bad namespace", []string{"dashboards", "--format", "configmap", "--configmap.namespace", "Monitoring"}, exitUsage, `--configmap.*: dashboards: ConfigMap cachewatch-contention: invalid Kubernetes metadata: namespace "Monitoring"`},
		{"bad sidecar label", []string{"dashboards", "--format", "configmap", "--configmap.sidecar-label", "grafana_dashboard"}, exitUsage, "want KEY=VALUE"},
		{"configmap push", []string{"dashboards", "--format", "configmap", "--grafana-url", "http://grafana"}, exitUsage, "--format json"},
		{"rules need a directory", []string{"alerts", "--format", "rules"}, exitUsage, "--out DIR is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), tc.args, &out, &errOut)
			got := out.String()
			if code != 0 {
				got = errOut.String()
				if strings.Count(got, "\n") != 1 || out.Len() != 0 {
					t.Errorf("want one line on stderr and nothing on stdout, got %q / %q", errOut.String(), out.String())
				}
			}
			if code != tc.code || !strings.Contains(got, tc.want) {
				t.Errorf("exit %d, output %q; want exit %d and %q", code, got, tc.code, tc.want)
			}
		})
	}
}
