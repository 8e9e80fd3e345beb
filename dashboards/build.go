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
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"

	"github.com/cachewatch/cachewatch/alerts"
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
	// statPanel is one big number of a board's first row: the figure
	// now, coloured by its alert's thresholds, over a sparkline.
	statPanel
	// tablePanel lists the series of its one query now, one row each
	// (table.go).
	tablePanel
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
	// scale says whether the panel plots the value its runbook's alert
	// compares; if so it carries that alert's thresholds.
	scale alertScale
	// noValue is what a stat panel shows when its query finds no series
	// (Grafana's "No data" otherwise).
	noValue string
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

// text is the panel description; alert, when set, says which alert's
// thresholds the panel draws.
func (h help) text(alert string) string {
	s := h.what + "\n\n**Healthy:** " + h.healthy
	if alert != "" {
		s += "\n\n" + alert
	}
	return s + "\n\n**Runbook:** " + h.runbook.markdown()
}

// Layout: panels are this tall, and up to four share a line; the stat
// panels of a board's first row are lower, up to six on a line.
const (
	panelHeight   = 8
	statHeight    = 4
	gridWidth     = 24
	maxPerLine    = 4
	statsPerLine  = 6
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
	for _, a := range alertAnnotations() {
		d.Annotation(a)
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
		for _, p := range r.panels {
			id++
			pb, err := p.builder(id, r.span())
			if err != nil {
				return dashboard.Dashboard{}, err
			}
			d.WithPanel(pb)
		}
	}
	model, err := d.Build()
	// The SDK files every link and annotation toggle under the controls
	// menu, a place newer Grafanas fold away; without a placement they sit
	// in the top bar.
	for i := range model.Links {
		model.Links[i].Placement = nil
	}
	for i := range model.Annotations.List {
		model.Annotations.List[i].Placement = nil
	}
	// A panel link has no placement in Grafana's model at all.
	for _, p := range model.Panels {
		if p.Panel != nil {
			for i := range p.Panel.Links {
				p.Panel.Links[i].Placement = nil
			}
		}
	}
	return model, err
}

// span is the width of each of the row's panels: a line shared by up to
// four panels, or six stat panels.
func (r row) span() uint32 {
	perLine := maxPerLine
	if len(r.panels) > 0 && r.panels[0].kind == statPanel {
		perLine = statsPerLine
	}
	return uint32(gridWidth / min(len(r.panels), perLine))
}

// alertAnnotations mark on every time series panel when cachewatch alerts
// fired: Prometheus's ALERTS series of the rules it evaluates, one toggle
// per severity in the severity's colour, filtered by the board's jobs
// (every cachewatch alert keeps job). Grafana-managed rules have no ALERTS
// series; Grafana shows their state in its alerting pages.
func alertAnnotations() []cog.Builder[dashboard.AnnotationQuery] {
	var out []cog.Builder[dashboard.AnnotationQuery]
	for _, s := range severities {
		expr := `ALERTS{alertname=~"` + alertNamePrefix + `.+", alertstate="firing", severity="` + s.name + `", ` +
			varJob + `=~"$` + varJob + `"}`
		out = append(out, dashboard.NewAnnotationQueryBuilder().
			Name("Firing "+s.name+" alerts").
			Datasource(datasourceRef).
			// Info alerts page nobody: their marks are one toggle away.
			Enable(s.name != alerts.SeverityInfo).
			Hide(false).
			IconColor(s.colour).
			Expr(expr).
			Step("30s").
			TitleFormat("{{alertname}} ({{severity}})").
			TextFormat("{{job}} {{instance}} {{client}} {{node}} {{key_group}}").
			TagKeys("alertname,severity"))
	}
	return out
}

// alertNamePrefix starts the name of every cachewatch alert.
const alertNamePrefix = "Cachewatch"

func (b *board) variables() []cog.Builder[dashboard.VariableModel] {
	vars := []cog.Builder[dashboard.VariableModel]{
		dashboard.NewDatasourceVariableBuilder(varDatasource).
			Label("Data source").
			Type("prometheus"),
		queryVariable(varJob, "Job", labelValues(b.anchors, nil, "job")),
		queryVariable(varInstance, "Instance", labelValues(b.anchors, []string{varJob}, "instance")),
	}
	if b.client {
		vars = append(vars, queryVariable(varClient, "Client",
			labelValues(b.anchors, []string{varJob, varInstance}, clientLabel)))
	}
	if b.keyGroup {
		anchors := b.keyGroupAnchors
		if anchors == nil {
			anchors = b.anchors
		}
		vars = append(vars, queryVariable(varKeyGroup, "Key group",
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

// panelParts are what every kind of panel is built from.
type panelParts struct {
	id, span    uint32
	description string
	targets     []cog.Builder[variants.Dataquery]
	links       []cog.Builder[dashboard.DashboardLink]
	// steps are the thresholds of the panel's alert; nil for none.
	steps []dashboard.Threshold
}

func (p panel) builder(id, span uint32) (cog.Builder[dashboard.Panel], error) {
	if err := p.help.runbook.check(); err != nil {
		return nil, fmt.Errorf("%w (panel %q)", err, p.title)
	}
	steps, alert, err := p.thresholdsFor()
	if err != nil {
		return nil, err
	}
	parts := panelParts{id: id, span: span, description: p.help.text(alert), steps: steps}
	for i, t := range p.targets {
		q := prometheus.NewDataqueryBuilder().
			Datasource(datasourceRef).
			RefId(string(rune('A' + i))).
			Expr(t.expr).
			LegendFormat(t.legend)
		switch p.kind {
		case heatmapPanel:
			q.Format(prometheus.PromQueryFormatHeatmap)
		case tablePanel:
			q.Format(prometheus.PromQueryFormatTable).Instant()
		}
		parts.targets = append(parts.targets, q)
	}
	parts.links = []cog.Builder[dashboard.DashboardLink]{dashboard.NewDashboardLinkBuilder(p.help.runbook.title()).
		Type(dashboard.DashboardLinkTypeLink).
		Url(p.help.runbook.url()).
		Tooltip("What this panel's signal means, its likely causes and the fix").
		TargetBlank(true)}
	switch p.kind {
	case heatmapPanel:
		return p.heatmap(parts), nil
	case statPanel:
		return p.stat(parts), nil
	case tablePanel:
		return p.table(parts), nil
	}
	return p.timeSeries(parts), nil
}

func (p panel) heatmap(parts panelParts) cog.Builder[dashboard.Panel] {
	return heatmap.NewPanelBuilder().
		Id(parts.id).Title(p.title).Description(parts.description).Links(parts.links).
		Datasource(datasourceRef).Targets(parts.targets).
		Span(parts.span).Height(panelHeight).
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

// stat is one big figure, its background in its alert's colour, over a
// sparkline of the time range.
func (p panel) stat(parts panelParts) cog.Builder[dashboard.Panel] {
	st := stat.NewPanelBuilder().
		Id(parts.id).Title(p.title).Description(parts.description).Links(parts.links).
		Datasource(datasourceRef).Targets(parts.targets).
		Span(parts.span).Height(statHeight).
		Unit(p.unit).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Values(false)).
		ColorMode(common.BigValueColorModeBackground).
		GraphMode(common.BigValueGraphModeArea).
		TextMode(common.BigValueTextModeValue).
		JustifyMode(common.BigValueJustifyModeCenter).
		Orientation(common.VizOrientationAuto).
		Thresholds(thresholdsConfig(parts.steps))
	if p.max != 0 {
		st.Max(p.max)
	}
	if p.noValue != "" {
		st.NoValue(p.noValue)
	}
	return st
}

// timeSeries draws the alert's thresholds as dashed lines.
func (p panel) timeSeries(parts panelParts) cog.Builder[dashboard.Panel] {
	ts := timeseries.NewPanelBuilder().
		Id(parts.id).Title(p.title).Description(parts.description).Links(parts.links).
		Datasource(datasourceRef).Targets(parts.targets).
		Span(parts.span).Height(panelHeight).
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
	if parts.steps != nil {
		ts.Thresholds(thresholdsConfig(parts.steps)).
			ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashed))
	}
	return ts
}

// thresholdsConfig is absolute threshold steps; none leaves every value
// the healthy colour (a stat panel whose figure no alert compares).
func thresholdsConfig(steps []dashboard.Threshold) *dashboard.ThresholdsConfigBuilder {
	if steps == nil {
		steps = []dashboard.Threshold{{Color: colourHealthy}}
	}
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(steps)
}

func (b *board) String() string { return fmt.Sprintf("%s (%s)", b.title, b.uid) }
