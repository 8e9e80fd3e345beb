package alerts

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/alerting"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"go.yaml.in/yaml/v3"
)

// TestLastValuesRewritesInstantSelectorsOnly: the blind branch reads the
// last value of every instant selector and leaves range selectors,
// strings and label names alone.
func TestLastValuesRewritesInstantSelectorsOnly(t *testing.T) {
	for in, want := range map[string]string{
		`max by (job, node) (cachewatch_exporter_up{job="x"})`:                      `max by (job, node) (last_over_time(cachewatch_exporter_up{job="x"}[1d]))`,
		`key_group:cachewatch_lock_contention:ratio_rate5m`:                         `last_over_time(key_group:cachewatch_lock_contention:ratio_rate5m[1d])`,
		`sum(rate(cachewatch_lock_attempts_total{key_group="a:b:c"}[5m])) * 60`:     `sum(rate(cachewatch_lock_attempts_total{key_group="a:b:c"}[5m])) * 60`,
		`node:cachewatch_exporter_server_keyspace_hit:ratio_rate1h - node:x:ratio`:  `last_over_time(node:cachewatch_exporter_server_keyspace_hit:ratio_rate1h[1d]) - last_over_time(node:x:ratio[1d])`,
		`min_over_time(cachewatch_circuit_breaker_state{job=~".+"}[1m])`:            `min_over_time(cachewatch_circuit_breaker_state{job=~".+"}[1m])`,
		`max by (job) (cachewatch_exporter_locks_held{key_group="lock:{x}:*"}) > 0`: `max by (job) (last_over_time(cachewatch_exporter_locks_held{key_group="lock:{x}:*"}[1d])) > 0`,
		`label_replace(cachewatch_exporter_up, "x", "$1", "node", "(.*)")`:          `label_replace(last_over_time(cachewatch_exporter_up[1d]), "x", "$1", "node", "(.*)")`,
		`x{a="b"} - x{a="b"} offset 1m`:                                             `last_over_time(x{a="b"}[1d]) - last_over_time(x{a="b"}[1d] offset 1m)`,
		`sum by (job) (
  x{b="c", a="b"}
)`: `sum by (job) (
  last_over_time(x{b="c", a="b"}[1d])
)`,
	} {
		if got := lastValues(in, 24*time.Hour); got != want {
			t.Errorf("lastValues(%s)\n got %s\nwant %s", in, got, want)
		}
	}
}

// TestEveryStateAlertIsStickyAndEveryPageToo: alerts on a state (a gauge or
// a ratio) keep firing while their data are missing; so does every alert
// that pages, except those about the exporter itself, which are computed
// from Prometheus's own up and the sampler's health.
func TestEveryPageIsSticky(t *testing.T) {
	for _, d := range definitions(DefaultConfig()) {
		critical := slices.ContainsFunc(d.levels, func(l level) bool { return l.severity == SeverityCritical })
		if critical && d.seen == nil && d.group != groupExporter {
			t.Errorf("%s pages but would resolve when its data go missing", d.name)
		}
		if d.seen != nil && d.by == "" {
			t.Errorf("%s is sticky but names no labels to latch on", d.name)
		}
	}
}

// TestInhibitionsEqualOnlyLabelsTheAlertsCarry: an equal label that one
// side lacks matches "" on both and mutes across jobs or key groups.
func TestInhibitionsEqualOnlyLabelsTheAlertsCarry(t *testing.T) {
	by := map[string][]string{}
	for _, d := range definitions(DefaultConfig()) {
		by[d.name] = labelList(d.by)
	}
	rules, err := inhibitRules(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	named := func(matchers []string) []string {
		for _, m := range matchers {
			if v, ok := strings.CutPrefix(m, "alertname=~"); ok {
				return strings.Split(strings.Trim(v, `"`), "|")
			}
			if v, ok := strings.CutPrefix(m, "alertname="); ok {
				return []string{strings.Trim(v, `"`)}
			}
		}
		return nil
	}
	for _, r := range rules {
		sides := append(named(r.SourceMatchers), named(r.TargetMatchers)...)
		if len(sides) < 2 || len(r.Equal) == 0 {
			t.Errorf("inhibition %v → %v equal %v: want named alerts and labels", r.SourceMatchers, r.TargetMatchers, r.Equal)
		}
		for _, name := range sides {
			have, ok := by[name]
			if !ok {
				t.Errorf("inhibition names %s, which is no alert", name)
			}
			for _, l := range r.Equal {
				if !slices.Contains(have, l) {
					t.Errorf("inhibition %v → %v: equal label %s, which %s does not carry", r.SourceMatchers, r.TargetMatchers, l, name)
				}
			}
		}
	}
	if !slices.Contains(groupBy, "job") {
		t.Errorf("notifications grouped by %v, without job", groupBy)
	}
}

// TestGrafanaRoutingMatchesTheSDK reads the committed notification-policy
// file back into the SDK's contact point and policy types (strict), and
// checks the tree routes as the Alertmanager configuration does.
func TestGrafanaRoutingMatchesTheSDK(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("generated", GrafanaRoutingFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		APIVersion    int `yaml:"apiVersion"`
		ContactPoints []struct {
			Name      string           `yaml:"name"`
			Receivers []map[string]any `yaml:"receivers"`
		} `yaml:"contactPoints"`
		Policies []map[string]any `yaml:"policies"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	strict := func(what string, v map[string]any, into interface{ UnmarshalJSONStrict([]byte) error }) {
		t.Helper()
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var errs cog.BuildErrors
		if err := into.UnmarshalJSONStrict(raw); err != nil && (!errors.As(err, &errs) || len(errs) > 0) {
			t.Errorf("%s: %v", what, err)
		}
	}
	names := map[string]bool{}
	for _, c := range doc.ContactPoints {
		names[c.Name] = true
		for _, r := range c.Receivers {
			r["name"] = c.Name
			var cp alerting.ContactPoint
			strict("contact point "+c.Name, r, &cp)
			if cp.Type != alerting.ContactPointTypeWebhook {
				t.Errorf("contact point %s: type %s", c.Name, cp.Type)
			}
		}
	}
	if doc.APIVersion != 1 || len(doc.Policies) != 1 {
		t.Fatalf("apiVersion %d with %d policy trees, want 1 and 1", doc.APIVersion, len(doc.Policies))
	}
	tree := doc.Policies[0]
	delete(tree, "orgId") // the file's, not the policy's
	var root alerting.NotificationPolicy
	strict("policy tree", tree, &root)
	if !slices.Equal(root.GroupBy, append([]string{"grafana_folder"}, groupBy...)) {
		t.Errorf("group_by %v", root.GroupBy)
	}
	routes := map[string]string{}
	for _, r := range root.Routes {
		if r.ObjectMatchers == nil || len(*r.ObjectMatchers) != 1 || r.Receiver == nil {
			t.Fatalf("route %+v: want one severity matcher and a receiver", r)
		}
		m := (*r.ObjectMatchers)[0]
		routes[m[2]] = *r.Receiver
		if !names[*r.Receiver] {
			t.Errorf("route to %s, which is no contact point", *r.Receiver)
		}
		if m[2] == SeverityInfo && !slices.Contains(r.MuteTimeIntervals, quietTiming) {
			t.Errorf("info route not muted: %+v", r)
		}
	}
	want := map[string]string{SeverityCritical: ReceiverPage, SeverityWarning: ReceiverTicket, SeverityInfo: ReceiverQuiet}
	for sev, recv := range want {
		if routes[sev] != recv {
			t.Errorf("severity %s routed to %q, want %q", sev, routes[sev], recv)
		}
	}
}
