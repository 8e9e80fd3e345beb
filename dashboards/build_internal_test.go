package dashboards

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/units"

	"github.com/cachewatch/cachewatch/alerts"
)

// TestBuildFailsOnAlertsItCannotFollow: a panel whose runbook names an
// alert package alerts does not define, or that draws thresholds of an
// alert on a scale where they mean something else, does not build. A
// renamed alert fails `go generate` and the tests, not a dashboard.
func TestBuildFailsOnAlertsItCannotFollow(t *testing.T) {
	cases := map[string]struct {
		p    panel
		want string
	}{
		"runbook of a missing alert": {
			panel{title: "p", help: help{"w", "h", runbook{alert: "CachewatchNoSuchAlert"}}},
			"does not define"},
		"thresholds of a runbook section": {
			panel{title: "p", help: help{"w", "h", rbRetries}, scale: alertValue},
			"does not define"},
		// Warning above 5 %: on a rate that number means nothing.
		"a non-zero threshold on a rate": {
			panel{title: "p", help: help{"w", "h", rbLockContention}, scale: anyEvent, unit: units.OpsPerSecond},
			"not 0"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := c.p.builder(1, 6)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one containing %q", err, c.want)
			}
			t.Log(err)
		})
	}
	// The same panels build with an alert that exists and fits.
	ok := []panel{
		{title: "p", help: help{"w", "h", rbLockContention}, scale: alertValue, unit: units.PercentUnit},
		{title: "p", help: help{"w", "h", rbDuplicateWork}, scale: anyEvent, unit: units.OpsPerSecond},
	}
	for _, p := range ok {
		if _, err := p.builder(1, 6); err != nil {
			t.Errorf("%v: %v", p.help.runbook, err)
		}
	}
}

// TestHeadingAnchor: section links use GitHub's anchors.
func TestHeadingAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Server memory, evictions and clients": "server-memory-evictions-and-clients",
		"Retries and backoff":                  "retries-and-backoff",
		"CachewatchLocksLost":                  "cachewatchlockslost",
	} {
		if got := headingAnchor(heading); got != want {
			t.Errorf("headingAnchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

// TestThresholdSteps: Grafana colours a value by the last step at or below
// it, so each alert comparison becomes the steps that colour exactly the
// values it fires on.
func TestThresholdSteps(t *testing.T) {
	lvl := func(severity, op string, threshold float64) alerts.Alert {
		return alerts.Alert{Name: "CachewatchX", Severity: severity, Op: op, Threshold: threshold}
	}
	above0 := math.Nextafter(0, 1)
	cases := []struct {
		name   string
		levels []alerts.Alert
		want   string
	}{
		{"any event", []alerts.Alert{lvl("critical", ">", 0)}, fmt.Sprintf("green; %v red", above0)},
		{"warning and critical above", []alerts.Alert{lvl("warning", ">", 0.05), lvl("critical", ">", 0.25)},
			fmt.Sprintf("green; %v orange; %v red", math.Nextafter(0.05, 1), math.Nextafter(0.25, 1))},
		{"at least", []alerts.Alert{lvl("critical", ">=", 5)}, "green; 5 red"},
		{"below, two levels", []alerts.Alert{lvl("warning", "<", 0.9), lvl("critical", "<", 0.5)}, "red; 0.5 orange; 0.9 green"},
		// The critical adds a condition on another alert: the value alone
		// earns the warning.
		{"one comparison, two severities", []alerts.Alert{lvl("warning", "<", 1), lvl("critical", "<", 1)}, "orange; 1 green"},
		{"info", []alerts.Alert{lvl("info", ">", 0)}, fmt.Sprintf("green; %v blue", above0)},
	}
	for _, c := range cases {
		steps, err := thresholdSteps(c.levels)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range steps {
			if s.Value == nil {
				got = append(got, s.Color)
			} else {
				got = append(got, fmt.Sprintf("%v %s", *s.Value, s.Color))
			}
		}
		if g := strings.Join(got, "; "); g != c.want {
			t.Errorf("%s: steps %s, want %s", c.name, g, c.want)
		}
	}
	if _, err := thresholdSteps([]alerts.Alert{lvl("page", ">", 0)}); err == nil {
		t.Error("a severity without a colour made steps")
	}
}
