package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/table"
)

// heldForColumn is the table's value column: the query's value, renamed.
const heldForColumn = "held for"

// table lists one row per series of its query, now: the labels as columns
// (the timestamp dropped), the value renamed by the panel's legend and
// sorted largest first, so the longest-held lock tops the list.
func (p panel) table(parts panelParts) cog.Builder[dashboard.Panel] {
	valueName := heldForColumn
	if len(p.targets) > 0 && p.targets[0].legend != "" {
		valueName = p.targets[0].legend
	}
	organize := dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
		"excludeByName": map[string]bool{"Time": true, "__name__": true, "job": true},
		"renameByName":  map[string]string{"Value": valueName},
	}}
	return table.NewPanelBuilder().
		Id(parts.id).Title(p.title).Description(parts.description).Links(parts.links).
		Datasource(datasourceRef).Targets(parts.targets).
		Span(parts.span).Height(panelHeight).
		Unit(p.unit).
		Transformations([]dashboard.DataTransformerConfig{organize}).
		SortBy([]cog.Builder[common.TableSortByFieldState]{common.NewTableSortByFieldStateBuilder().DisplayName(valueName).Desc(true)}).
		Thresholds(thresholdsConfig(parts.steps))
}
