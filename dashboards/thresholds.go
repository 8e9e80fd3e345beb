package dashboards

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/units"

	"github.com/cachewatch/cachewatch/alerts"
)

// Colours of the alert severities on panels, and of a value no alert
// fires on.
const (
	colourCritical = "red"
	colourWarning  = "orange"
	colourInfo     = "blue"
	colourHealthy  = "green"
)

// severities ranks the severities, most severe first, with their colours.
var severities = []struct{ name, colour string }{
	{alerts.SeverityCritical, colourCritical},
	{alerts.SeverityWarning, colourWarning},
	{alerts.SeverityInfo, colourInfo},
}

func severityRank(s string) int {
	return slices.IndexFunc(severities, func(x struct{ name, colour string }) bool { return x.name == s })
}

// alertScale says whether a panel plots the value its runbook's alert
// compares, so that the alert's thresholds mean the same on the panel.
type alertScale int

const (
	// notComparable: the panel plots another quantity than the alert's
	// value, or other quantities beside it on the same axis; the alert's
	// thresholds would mislead there. The default.
	notComparable alertScale = iota
	// alertValue: the panel plots the alert's value in the alert's unit.
	// Its grouping may be coarser (the worst key group, or the sum of
	// counts whose threshold is 0), never a different scale.
	alertValue
	// anyEvent: the panel plots the rate of the events the alert counts
	// over a window (per second where the alert counts per window or per
	// minute). Only a threshold of 0, "any event", means the same on both
	// scales; building the board fails if the alert has another.
	anyEvent
)

// alertLevels returns, by alert name, the rules of each severity of the
// default configuration: the alerts whose thresholds the panels draw.
var alertLevels = sync.OnceValues(func() (map[string][]alerts.Alert, error) {
	all, err := alerts.Alerts(alerts.DefaultConfig())
	if err != nil {
		return nil, fmt.Errorf("dashboards: alert thresholds: %w", err)
	}
	out := map[string][]alerts.Alert{}
	for _, a := range all {
		out[a.Name] = append(out[a.Name], a)
	}
	return out, nil
})

// fires tells whether an alert of this comparison fires on value v.
func fires(op string, v, threshold float64) bool {
	switch op {
	case ">":
		return v > threshold
	case ">=":
		return v >= threshold
	case "<":
		return v < threshold
	case "<=":
		return v <= threshold
	}
	return false
}

// boundary is where an alert's firing starts or stops, as Grafana's
// threshold steps count: a step colours values at or above its value. A
// value equal to a ">" threshold (0 on a healthy panel) does not fire, so
// its step starts at the next number above.
func boundary(op string, threshold float64) float64 {
	if op == ">" || op == "<=" {
		return math.Nextafter(threshold, math.Inf(1))
	}
	return threshold
}

// byValue returns the levels a value alone decides: of levels with the
// same comparison, which differ only by a condition on something else
// than the value (another alert firing, say), the least severe. The
// others are returned apart.
func byValue(levels []alerts.Alert) (decided, conditional []alerts.Alert) {
	for _, l := range levels {
		i := slices.IndexFunc(decided, func(d alerts.Alert) bool { return d.Op == l.Op && d.Threshold == l.Threshold })
		switch {
		case i < 0:
			decided = append(decided, l)
		case severityRank(l.Severity) > severityRank(decided[i].Severity):
			conditional = append(conditional, decided[i])
			decided[i] = l
		default:
			conditional = append(conditional, l)
		}
	}
	return decided, conditional
}

// thresholdSteps turns an alert's levels into Grafana threshold steps:
// each band of values gets the colour of the most severe level that fires
// on it, or green where none does.
func thresholdSteps(all []alerts.Alert) ([]dashboard.Threshold, error) {
	levels, _ := byValue(all)
	var bounds []float64
	for _, l := range levels {
		if !slices.Contains([]string{">", ">=", "<", "<="}, l.Op) {
			return nil, fmt.Errorf("dashboards: alert %s compares with %q", l.Name, l.Op)
		}
		if severityRank(l.Severity) < 0 {
			return nil, fmt.Errorf("dashboards: alert %s has severity %q, which has no colour", l.Name, l.Severity)
		}
		bounds = append(bounds, boundary(l.Op, l.Threshold))
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	colourOf := func(v float64) string {
		rank, colour := len(severities), colourHealthy
		for _, l := range levels {
			if r := severityRank(l.Severity); fires(l.Op, v, l.Threshold) && r < rank {
				rank, colour = r, severities[r].colour
			}
		}
		return colour
	}
	steps := []dashboard.Threshold{{Color: colourOf(math.Nextafter(bounds[0], math.Inf(-1)))}}
	for _, b := range bounds {
		if c := colourOf(b); c != steps[len(steps)-1].Color {
			steps = append(steps, dashboard.Threshold{Value: &b, Color: c})
		}
	}
	return steps, nil
}

// thresholdsFor is the threshold steps of the panel's runbook alert and a
// sentence for its help, or nothing for a panel that is not comparable.
func (p panel) thresholdsFor() ([]dashboard.Threshold, string, error) {
	if p.scale == notComparable {
		return nil, "", nil
	}
	name := p.help.runbook.alert
	all, err := alertLevels()
	if err != nil {
		return nil, "", err
	}
	levels := all[name]
	if len(levels) == 0 {
		return nil, "", fmt.Errorf("dashboards: panel %q draws the thresholds of alert %q, which package alerts does not define", p.title, name)
	}
	var words []string
	for _, l := range levels {
		if p.scale == anyEvent && l.Threshold != 0 {
			return nil, "", fmt.Errorf("dashboards: panel %q plots a rate of the events %s counts, which compares with %v, not 0: draw no thresholds or plot the alert's value", p.title, name, l.Threshold)
		}
	}
	decided, conditional := byValue(levels)
	for _, l := range decided {
		words = append(words, fmt.Sprintf("%s (%s) when %s %s", l.Severity, colourName(l.Severity), opWords[l.Op], formatValue(p.unit, l.Threshold)))
	}
	for _, l := range conditional {
		words = append(words, fmt.Sprintf("%s when %s %s and a further condition holds (see the runbook; the panel cannot show it)", l.Severity, opWords[l.Op], formatValue(p.unit, l.Threshold)))
	}
	steps, err := thresholdSteps(levels)
	if err != nil {
		return nil, "", err
	}
	return steps, "**Alert:** " + name + " is " + strings.Join(words, "; ") + ".", nil
}

var opWords = map[string]string{">": "above", ">=": "at least", "<": "below", "<=": "at most"}

func colourName(severity string) string { return severities[severityRank(severity)].colour }

// formatValue writes a threshold in the panel's unit, as the panel shows it.
func formatValue(unit string, v float64) string {
	switch unit {
	case units.Seconds:
		return time.Duration(v * float64(time.Second)).String()
	case units.PercentUnit:
		return fmt.Sprintf("%g %%", v*100)
	}
	return fmt.Sprintf("%g", v)
}
