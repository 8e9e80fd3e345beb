package dashboards

import (
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"

	"github.com/cachewatch/cachewatch/signals"
)

// board is the plan of one dashboard: rows of panels, read top to bottom
// from the symptom to its cause.
type board struct {
	uid, title, description string
	// anchors are the metrics whose series name the jobs, instances and key
	// groups the variables offer: those that every emitter of the board's
	// signals exports.
	anchors []signals.ID
	// keyGroupAnchors are the anchors of the key_group variable, when
	// the board's anchors do not carry key_group.
	keyGroupAnchors []signals.ID
	// client and keyGroup give the board a client and a key_group
	// variable; set them when the board's metrics carry the label.
	client, keyGroup bool
	rows             []row
}

type row struct {
	title  string
	panels []panel
}

type panelKind int

const (
	timeSeries panelKind = iota
	heatmapPanel
)

type panel struct {
	kind    panelKind
	title   string
	help    help
	unit    string
	targets []target
	// stacked shows parts of a whole (ratios by result).
	stacked bool
	// max caps the y axis (ratios: 1); zero leaves it free.
	max float64
	// limit, when set, draws the healthy limit as a dashed red line.
	limit *float64
}

type target struct {
	expr, legend string
}

// help is a panel description in three parts, so no panel can ship
// without the healthy value and where to look next.
type help struct {
	what, healthy string
	runbook       runbook
}

func (h help) String() string {
	return h.what + "\n\n**Healthy:** " + h.healthy + "\n\n**Runbook:** " + h.runbook.markdown()
}

// Layout: panels are this tall, and up to four share a line.
const (
	panelHeight   = 8
	gridWidth     = 24
	maxPerLine    = 4
	dashboardTags = "cachewatch"
)

var datasourceRef = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("$" + varDatasource)}

// build turns the plan into the SDK's dashboard model. links are the
// other boards, shown in the top bar.
func (b *board) build(links []*board) (dashboard.Dashboard, error) {
	d := dashboard.NewDashboardBuilder(b.title).
		Uid(b.uid).
		Description(b.description).
		Tags([]string{dashboardTags}).
		Readonly().
		Time("now-1h", "now").
		Refresh("30s").
		Timezone("browser").
		Tooltip(dashboard.DashboardCursorSyncCrosshair)
	for _, v := range b.variables() {
		d.WithVariable(v)
	}
	for _, l := range links {
		d.Link(dashboard.NewDashboardLinkBuilder(l.title).
			Type(dashboard.DashboardLinkTypeLink).
			Url("/d/" + l.uid).
			Tooltip(l.description).
			Icon("dashboard").
			IncludeVars(true).
			KeepTime(true))
	}
	// Rows are expanded, so their panels follow them at the top level
	// (Grafana's model nests panels only in collapsed rows).
	id := uint32(0)
	for _, r := range b.rows {
		id++
		d.WithRow(dashboard.NewRowBuilder(r.title).Id(id).Collapsed(false))
		span := uint32(gridWidth / min(len(r.panels), maxPerLine))
		for _, p := range r.panels {
			id++
			d.WithPanel(p.builder(id, span))
		}
	}
	model, err := d.Build()
	// The SDK files every link under the controls menu, a place newer
	// Grafanas fold away; without a placement they sit in the top bar.
	for i := range model.Links {
		model.Links[i].Placement = nil
	}
	return model, err
}

func (b *board) variables() []cog.Builder[dashboard.VariableModel] {
	vars := []cog.Builder[dashboard.VariableModel]{
		dashboard.NewDatasourceVariableBuilder(varDatasource).
			Label("Data source").
			Type("prometheus"),
		queryVariable(varJob, "job", labelValues(b.anchors, nil, "job")),
		queryVariable(varInstance, "instance", labelValues(b.anchors, []string{varJob}, "instance")),
	}
	if b.client {
		vars = append(vars, queryVariable(varClient, "client",
			labelValues(b.anchors, []string{varJob, varInstance}, clientLabel)))
	}
	if b.keyGroup {
		anchors := b.keyGroupAnchors
		if anchors == nil {
			anchors = b.anchors
		}
		vars = append(vars, queryVariable(varKeyGroup, "key group",
			labelValues(anchors, []string{varJob, varInstance}, keyGroupLabel)))
	}
	return vars
}

// queryVariable is a multi-value variable over label values with an "All"
// that matches any value (.+, not Grafana's list of every value, which
// breaks long regexps).
func queryVariable(name, label, query string) *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(name).
		Label(label).
		Datasource(datasourceRef).
		Query(dashboard.StringOrMap{String: cog.ToPtr(query)}).
		Definition(query).
		Multi(true).
		IncludeAll(true).
		AllValue(".+").
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc)
}

// labelValues is Grafana's label_values(selector, label) over the anchor
// metrics, filtered by the variables already chosen.
func labelValues(anchors []signals.ID, filters []string, label string) string {
	names := make([]string, len(anchors))
	for i, m := range anchors {
		names[i] = m.String()
		if m.Metric().Kind == signals.Histogram {
			names[i] += "_count"
		}
	}
	var matchers []string
	if len(names) > 1 {
		matchers = append(matchers, `__name__=~"`+strings.Join(names, "|")+`"`)
	}
	for _, f := range filters {
		matchers = append(matchers, f+`=~"$`+f+`"`)
	}
	selector := "{" + strings.Join(matchers, ", ") + "}"
	if len(names) == 1 {
		selector = names[0]
		if len(matchers) > 0 {
			selector += "{" + strings.Join(matchers, ", ") + "}"
		}
	}
	return "label_values(" + selector + ", " + label + ")"
}

func (p panel) builder(id, span uint32) cog.Builder[dashboard.Panel] {
	targets := make([]cog.Builder[variants.Dataquery], len(p.targets))
	for i, t := range p.targets {
		q := prometheus.NewDataqueryBuilder().
			Datasource(datasourceRef).
			RefId(string(rune('A' + i))).
			Expr(t.expr).
			LegendFormat(t.legend)
		if p.kind == heatmapPanel {
			q.Format(prometheus.PromQueryFormatHeatmap)
		}
		targets[i] = q
	}
	if p.kind == heatmapPanel {
		return heatmap.NewPanelBuilder().
			Id(id).Title(p.title).Description(p.help.String()).
			Datasource(datasourceRef).Targets(targets).
			Span(span).Height(panelHeight).
			Unit(p.unit).
			Calculate(false).
			YAxis(heatmap.NewYAxisConfigBuilder().Unit(p.unit)).
			Color(heatmap.NewHeatmapColorOptionsBuilder().
				Mode(heatmap.HeatmapColorModeScheme).
				Scheme("Oranges").
				Scale(heatmap.HeatmapColorScaleExponential).
				Exponent(0.5).
				Steps(64)).
			Tooltip(heatmap.NewHeatmapTooltipBuilder().Mode(common.TooltipDisplayModeSingle).YHistogram(true).ShowColorScale(true)).
			CellGap(1)
	}
	ts := timeseries.NewPanelBuilder().
		Id(id).Title(p.title).Description(p.help.String()).
		Datasource(datasourceRef).Targets(targets).
		Span(span).Height(panelHeight).
		Unit(p.unit).
		Min(0).
		FillOpacity(10).
		ShowPoints(common.VisibilityModeNever).
		Legend(common.NewVizLegendOptionsBuilder().
			DisplayMode(common.LegendDisplayModeList).
			Placement(common.LegendPlacementBottom).
			ShowLegend(true))
	if p.stacked {
		ts.Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).FillOpacity(60)
	}
	if p.max != 0 {
		ts.Max(p.max)
	}
	if p.limit != nil {
		ts.Thresholds(dashboard.NewThresholdsConfigBuilder().
			Mode(dashboard.ThresholdsModeAbsolute).
			Steps([]dashboard.Threshold{{Color: "green"}, {Value: p.limit, Color: "red"}})).
			ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashed))
	}
	return ts
}

func (b *board) String() string { return fmt.Sprintf("%s (%s)", b.title, b.uid) }
