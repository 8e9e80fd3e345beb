package dashboards_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/cachewatch/cachewatch/alerts"
	"github.com/cachewatch/cachewatch/dashboards"
)

// wantThresholds are the panels that plot the value an alert compares, in
// the alert's unit: each carries exactly that alert's thresholds. Every
// other panel carries none: it plots another quantity (a rate where the
// alert compares a ratio, a ratio per command where the alert compares
// one per client, the hit ratio where the alert compares its fall) or
// other quantities on the same axis.
var wantThresholds = []string{
	dashboards.ContentionUID + " / Stale share (worst key group)",
	dashboards.ContentionUID + " / First-try contention (worst key group)",
	dashboards.ContentionUID + " / Lock acquire p99 (worst key group)",
	dashboards.ContentionUID + " / Loader calls per kept result (worst key group)",
	dashboards.ContentionUID + " / Lock acquire time p50 / p99",
	dashboards.ContentionUID + " / Contention rate (busy first attempts / first attempts)",
	dashboards.ContentionUID + " / Consecutive loader failures",
	dashboards.ContentionUID + " / Loader amplification (loader calls per kept result)",
	dashboards.ContentionUID + " / Duplicate version writes",
	dashboards.ContentionUID + " / Circuit breaker state",
	dashboards.ContentionUID + " / Key-group overflow",
	dashboards.RedisUID + " / Command error share (worst client)",
	dashboards.RedisUID + " / Script p99 (worst script)",
	dashboards.RedisUID + " / Pool timeouts a minute",
	dashboards.RedisUID + " / Script latency p99 by script",
	dashboards.KeyspaceUID + " / Locks without TTL (all nodes)",
	dashboards.KeyspaceUID + " / Long-held locks (all nodes)",
	dashboards.KeyspaceUID + " / Exporter sampling (worst exporter)",
	dashboards.KeyspaceUID + " / Lock figures' age (oldest, in sample intervals)",
	dashboards.KeyspaceUID + " / Server time per script call (worst)",
	dashboards.KeyspaceUID + " / Locks without TTL",
	dashboards.KeyspaceUID + " / Long-held locks",
	dashboards.KeyspaceUID + " / Expiry synchronisation per key group",
	dashboards.KeyspaceUID + " / Oldest entry age",
	dashboards.KeyspaceUID + " / Oldest pending message age",
	dashboards.KeyspaceUID + " / Exporter up",
	dashboards.KeyspaceUID + " / Keyspace coverage",
	dashboards.KeyspaceUID + " / Sampler errors by stage and class",
	dashboards.KeyspaceUID + " / Lock figures' age in sample intervals",
}

// The colours the severities must have on a panel.
var severityColours = []struct{ severity, colour string }{
	{alerts.SeverityCritical, "red"},
	{alerts.SeverityWarning, "orange"},
	{alerts.SeverityInfo, "blue"},
}

type step struct {
	value  *float64
	colour string
}

// thresholdSteps reads a panel's threshold steps.
func thresholdSteps(p map[string]any) []step {
	fc, _ := p["fieldConfig"].(map[string]any)
	defaults, _ := fc["defaults"].(map[string]any)
	th, _ := defaults["thresholds"].(map[string]any)
	var out []step
	for _, s := range objects(th["steps"]) {
		st := step{colour: str(s, "color")}
		if v, ok := s["value"].(float64); ok {
			st.value = &v
		}
		out = append(out, st)
	}
	return out
}

// colourAt is the colour Grafana gives value v: that of the last step
// whose value is at or below v (the first step has none: from -∞).
func colourAt(steps []step, v float64) string {
	colour := ""
	for _, s := range steps {
		if s.value == nil || *s.value <= v {
			colour = s.colour
		}
	}
	return colour
}

// alertColour is the colour the alerts give v: that of the most severe
// level firing on it, green where none fires. A level that shares its
// comparison with a less severe one differs from it by a condition on
// something else than the value: the value alone earns the less severe.
func alertColour(levels []alerts.Alert, v float64) string {
	for _, sc := range severityColours {
		for _, l := range levels {
			if l.Severity == sc.severity && firesOn(l, v) && !conditional(l, levels) {
				return sc.colour
			}
		}
	}
	return "green"
}

func conditional(l alerts.Alert, levels []alerts.Alert) bool {
	rank := func(severity string) int {
		return slices.IndexFunc(severityColours, func(sc struct{ severity, colour string }) bool { return sc.severity == severity })
	}
	for _, o := range levels {
		if o.Op == l.Op && o.Threshold == l.Threshold && rank(o.Severity) > rank(l.Severity) {
			return true
		}
	}
	return false
}

func firesOn(l alerts.Alert, v float64) bool {
	switch l.Op {
	case ">":
		return v > l.Threshold
	case ">=":
		return v >= l.Threshold
	case "<":
		return v < l.Threshold
	case "<=":
		return v <= l.Threshold
	}
	panic("unknown comparison " + l.Op)
}

// stepProblems compares the steps with the alert's levels at every value
// where either could change colour, and just beside it.
func stepProblems(steps []step, levels []alerts.Alert) []string {
	if len(levels) == 0 {
		return []string{"its runbook names no alert of package alerts"}
	}
	if len(steps) == 0 || steps[0].value != nil {
		return []string{"the first step must start at -∞ (no value)"}
	}
	var problems []string
	for i := 2; i < len(steps); i++ {
		if *steps[i].value <= *steps[i-1].value {
			problems = append(problems, fmt.Sprintf("steps out of order: %v after %v", *steps[i].value, *steps[i-1].value))
		}
	}
	var probes []float64
	for _, l := range levels {
		t := l.Threshold
		probes = append(probes, t, math.Nextafter(t, math.Inf(1)), math.Nextafter(t, math.Inf(-1)), t-1, t+1, 2*t, t/2)
	}
	for _, s := range steps[1:] {
		probes = append(probes, *s.value, math.Nextafter(*s.value, math.Inf(-1)))
	}
	for _, v := range probes {
		if got, want := colourAt(steps, v), alertColour(levels, v); got != want {
			problems = append(problems, fmt.Sprintf("at %g the panel shows %s, the alerts say %s", v, got, want))
		}
	}
	return slices.Compact(problems)
}

func alertLevels(t *testing.T) map[string][]alerts.Alert {
	t.Helper()
	all, err := alerts.Alerts(alerts.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]alerts.Alert{}
	for _, a := range all {
		out[a.Name] = append(out[a.Name], a)
	}
	return out
}

// thresholdReport lists what is wrong with the thresholds of the boards.
func thresholdReport(boards []boardJSON, levels map[string][]alerts.Alert) []string {
	var problems []string
	carrying := map[string]bool{}
	for _, b := range boards {
		for _, p := range b.panels() {
			key := b.uid() + " / " + str(p, "title")
			steps := thresholdSteps(p)
			if len(steps) <= 1 {
				if len(steps) == 1 && steps[0].colour != "green" {
					problems = append(problems, fmt.Sprintf("%s: no alert's thresholds, but coloured %s", key, steps[0].colour))
				}
				continue
			}
			carrying[key] = true
			alert := ""
			if m := descriptionAlert.FindStringSubmatch(str(p, "description")); m != nil {
				alert = m[1]
			}
			for _, problem := range stepProblems(steps, levels[alert]) {
				problems = append(problems, fmt.Sprintf("%s (alert %q): %s", key, alert, problem))
			}
			switch mode := str(p, "fieldConfig", "defaults", "custom", "thresholdsStyle", "mode"); {
			case p["type"] == "timeseries" && (mode == "" || mode == "off"):
				problems = append(problems, key+": thresholds not drawn")
			case p["type"] == "stat" && str(p, "options", "colorMode") != "background":
				problems = append(problems, key+": thresholds do not colour the figure")
			}
		}
	}
	for _, want := range wantThresholds {
		if !carrying[want] {
			problems = append(problems, want+": carries no thresholds, but plots its alert's value")
		}
	}
	for key := range carrying {
		if !slices.Contains(wantThresholds, key) {
			problems = append(problems, key+": carries thresholds, but is not a panel that plots its alert's value (wantThresholds)")
		}
	}
	return problems
}

// TestPanelsCarryTheirAlertsThresholds: each panel that plots the value
// its runbook's alert compares shows exactly that alert's thresholds
// (warning orange, critical red, info blue) as Grafana reads them, and no
// other panel shows any.
func TestPanelsCarryTheirAlertsThresholds(t *testing.T) {
	for _, problem := range thresholdReport(generated(t), alertLevels(t)) {
		t.Error(problem)
	}
}

// TestThresholdCheckCanFail breaks the thresholds of real panels and
// checks the report names each break.
func TestThresholdCheckCanFail(t *testing.T) {
	levels := alertLevels(t)
	setSteps := func(panel string, mutate func(steps []any) []any) func([]boardJSON) {
		return func(bs []boardJSON) {
			for _, b := range bs {
				for _, p := range b.panels() {
					if p["title"] == panel {
						defaults := p["fieldConfig"].(map[string]any)["defaults"].(map[string]any)
						th, _ := defaults["thresholds"].(map[string]any)
						if th == nil {
							th = map[string]any{"mode": "absolute"}
							defaults["thresholds"] = th
						}
						steps, _ := th["steps"].([]any)
						th["steps"] = mutate(steps)
					}
				}
			}
		}
	}
	breaks := map[string]func([]boardJSON){
		// Warning above 5 %.
		"a threshold moved": setSteps("Contention rate (busy first attempts / first attempts)", func(s []any) []any {
			s[1].(map[string]any)["value"] = 0.06
			return s
		}),
		"colours swapped": setSteps("Contention rate (busy first attempts / first attempts)", func(s []any) []any {
			s[0].(map[string]any)["color"], s[1].(map[string]any)["color"] = "orange", "green"
			return s
		}),
		"a severity's colour changed": setSteps("Contention rate (busy first attempts / first attempts)", func(s []any) []any {
			s[1].(map[string]any)["color"] = "red"
			return s
		}),
		"a level left out": setSteps("Contention rate (busy first attempts / first attempts)", func(s []any) []any { return s[:1] }),
		// Critical above 0: a step at 0 would paint the healthy 0 red.
		"0 coloured": setSteps("Locks without TTL", func(s []any) []any {
			s[1].(map[string]any)["value"] = 0.0
			return s
		}),
		"thresholds dropped": setSteps("Locks without TTL", func(s []any) []any { return s[:1] }),
		"thresholds on a panel of another quantity": setSteps("Locks held", func(s []any) []any {
			return []any{map[string]any{"color": "green"}, map[string]any{"value": 1.0, "color": "orange"}}
		}),
	}
	for name, mutate := range breaks {
		t.Run(name, func(t *testing.T) {
			boards := generated(t)
			mutate(boards)
			got := thresholdReport(boards, levels)
			if len(got) == 0 {
				t.Fatal("the report found nothing wrong")
			}
			t.Log(got[0])
		})
	}
}
