package dashboards

import (
	"strconv"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/units"

	"github.com/cachewatch/cachewatch/alerts"
)

// burnWindows are the windows the burn-rate panels plot: the short window
// of the fastest tier and each tier's long one.
var burnWindows = []string{"5m", "1h", "6h", "1d", "3d"}

// sloRow is the contention board's row of service-level objectives, read
// from the alerts' recording rules: for each SLO the error budget left of
// its 30 days, and how fast it burns over each window the burn-rate tiers
// compare (1 spends exactly the budget in 30 days; the fastest tier pages
// above 14.4). Objectives are the defaults of alerts.DefaultConfig.
func sloRow() row {
	budget := panel{
		title: "Error budget remaining",
		help: help{"Share of each SLO's 30-day error budget left: 1 minus the 30-day error ratio over the budget the objective allows (cache availability and lock wait per key group, Redis availability per client). " +
			"Below 0 the objective is missed.",
			"well above 0; a fast fall is a burn that pages.", runbook{alert: "CachewatchCacheAvailabilityBudgetBurn"}},
		unit: units.PercentUnit,
	}
	panels := []panel{budget}
	for _, s := range alerts.SLOs(alerts.DefaultConfig()) {
		allowed := "(1 - " + strconv.FormatFloat(s.Objective, 'g', -1, 64) + ")"
		legend := "{{" + s.Level() + "}}"
		panels[0].targets = append(panels[0].targets,
			target{"1 - " + sloSelector(s, "30d") + " / " + allowed, words(s.Name) + " " + legend})
		burn := panel{
			title: "Burn rate by window (" + words(s.Name) + ")",
			help: help{"How many times faster than the objective allows the " + words(s.Name) + " error budget burns, over each window the burn-rate alerts compare: the error ratio over the window divided by the ratio the objective allows. " +
				"1 spends the budget in exactly 30 days; pages fire above 14.4 over 1h (and 5m) or 6 over 6h (and 30m), tickets above 3 over 1d or 1 over 3d.",
				"below 1 over the long windows; short spikes over 5m alone page nobody.", runbook{alert: s.Alert}},
			unit: units.Short,
		}
		for _, w := range burnWindows {
			burn.targets = append(burn.targets, target{sloSelector(s, w) + " / " + allowed, legend + " " + w})
		}
		panels = append(panels, burn)
	}
	return row{title: "Service-level objectives", panels: panels}
}

// sloSelector selects the SLO's error ratio over window for the board's
// job and key group or client.
func sloSelector(s alerts.SLO, window string) string {
	v := varKeyGroup
	if s.Level() == clientLabel {
		v = varClient
	}
	return s.ErrorRatioRecord(window) + `{` + varJob + `=~"$` + varJob + `", ` + s.Level() + `=~"$` + v + `"}`
}

// words is an SLO's name as words: cache-availability → cache availability.
func words(name string) string { return strings.ReplaceAll(name, "-", " ") }
