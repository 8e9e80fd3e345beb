package dashboards

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cachewatch/cachewatch/signals"
)

// Template variables every board defines. Selectors filter on them so that a
// board shows only the jobs, instances and key groups the viewer picked.
const (
	varDatasource = "datasource"
	varJob        = "job"
	varInstance   = "instance"
	varClient     = "client"
	varKeyGroup   = "key_group"

	// rateInterval is Grafana's range for rate(): at least four scrape
	// intervals, so a rate never falls between two samples.
	rateInterval = "$__rate_interval"
)

// The labels of the client and of the key group, as the catalog spells them.
const (
	clientLabel   = signals.ClientLabel
	keyGroupLabel = signals.KeyGroupLabel
)

// exprs builds PromQL for one board from catalog definitions. Every metric
// and label name goes through it, so a name that is not in the catalog is a
// build error, not a dead panel. The first mistake is kept in err.
type exprs struct {
	client   bool // the board has a client variable
	keyGroup bool // the board has a key_group variable
	err      error
}

func (x *exprs) fail(format string, args ...any) {
	if x.err == nil {
		x.err = fmt.Errorf("dashboards: "+format, args...)
	}
}

// sel is the selector of m's series (suffix "", "_bucket", "_count" or
// "_sum"), filtered by the board's variables and the extra matchers.
func (x *exprs) sel(m signals.ID, suffix string, matchers ...string) string {
	if suffix != "" && m.Metric().Kind != signals.Histogram {
		x.fail("%s is a %s: it has no %s series", m.String(), m.Metric().Kind, suffix)
	}
	all := []string{varJob + `=~"$` + varJob + `"`, varInstance + `=~"$` + varInstance + `"`}
	if x.client && slices.Contains(m.LabelNames(), clientLabel) {
		all = append(all, clientLabel+`=~"$`+varClient+`"`)
	}
	if x.keyGroup && slices.Contains(m.LabelNames(), keyGroupLabel) {
		all = append(all, keyGroupLabel+`=~"$`+varKeyGroup+`"`)
	}
	all = append(all, matchers...)
	return m.String() + suffix + "{" + strings.Join(all, ", ") + "}"
}

// is is the matcher label="value", checked against m's catalog labels and,
// where the catalog lists them, the label's values.
func (x *exprs) is(m signals.ID, label string, values ...string) string {
	l := x.label(m, label)
	if l == nil {
		return ""
	}
	for _, v := range values {
		if len(l.Values) > 0 && !slices.Contains(l.Values, v) {
			x.fail("%s{%s}: value %q is not in the catalog", m.String(), label, v)
		}
	}
	if len(values) == 1 {
		return label + `="` + values[0] + `"`
	}
	return label + `=~"` + strings.Join(values, "|") + `"`
}

func (x *exprs) label(m signals.ID, name string) *signals.Label {
	labels := m.Metric().Labels
	for i := range labels {
		if labels[i].Name == name {
			return &labels[i]
		}
	}
	x.fail("%s has no label %q", m.String(), name)
	return nil
}

// by is the grouping clause "by (a, b) ", each label checked against m;
// empty for no labels.
func (x *exprs) by(m signals.ID, labels ...string) string {
	if len(labels) == 0 {
		return ""
	}
	for _, l := range labels {
		// le is a histogram's; job and instance are the scrape target's,
		// on every series; target is the exporter's when it watches
		// several Redis (absent, it groups as one empty value).
		if l != "le" && l != varJob && l != varInstance && l != targetLabel {
			x.label(m, l)
		}
	}
	return "by (" + strings.Join(labels, ", ") + ") "
}

// rate is sum by (labels) (rate(m{…}[$__rate_interval])).
func (x *exprs) rate(m signals.ID, by []string, matchers ...string) string {
	return x.rateOf(m, "", by, matchers...)
}

func (x *exprs) rateOf(m signals.ID, suffix string, by []string, matchers ...string) string {
	return "sum " + x.by(m, by...) + "(rate(" + x.sel(m, suffix, matchers...) + "[" + rateInterval + "]))"
}

// quantile is the q-quantile of histogram m grouped by the labels.
func (x *exprs) quantile(q float64, m signals.ID, by []string, matchers ...string) string {
	if m.Metric().Kind != signals.Histogram {
		x.fail("%s is not a histogram", m.String())
	}
	return "histogram_quantile(" + strconv.FormatFloat(q, 'f', -1, 64) + ", " +
		x.rateOf(m, "_bucket", append([]string{"le"}, by...), matchers...) + ")"
}

// heatmap is the per-bucket rate of histogram m, for a heatmap panel.
func (x *exprs) heatmap(m signals.ID) string {
	return x.rateOf(m, "_bucket", []string{"le"})
}

// The exporter's figures describe a Redis node, and every exporter that
// samples the node reports the same ones: an HA pair reports each twice.
// Its series are therefore reduced per node with max, as the alerts do,
// before anything adds nodes up; a board never shows a figure that grows
// with the number of exporters. (Figures about the exporters themselves,
// the sampler's health, are shown per exporter instead.)

// targetLabel names the Redis deployment of a multi-target exporter
// (exporter.TargetLabel): two deployments may share a node's address (two
// databases of one server), so a node is known by its target and address.
const targetLabel = "target"

// perNode are the labels that tell one node's series from another's.
var perNode = []string{targetLabel, "node"}

// nodeMax is max by (target, node, by…) (m{…}) for a gauge the exporter
// reports per node.
func (x *exprs) nodeMax(m signals.ID, by []string, matchers ...string) string {
	return x.agg("max", m, append(slices.Clone(perNode), by...), matchers...)
}

// nodeTotal is sum by (by…) of nodeMax: a total over the nodes that
// counts each node once.
func (x *exprs) nodeTotal(m signals.ID, by []string, matchers ...string) string {
	return "sum " + x.by(m, by...) + "(" + x.nodeMax(m, by, matchers...) + ")"
}

// nodeRate is max by (target, node, by…) (rate(m{…}[$__rate_interval])) for a
// server counter (INFO) that every exporter of the node reads.
func (x *exprs) nodeRate(m signals.ID, by []string, matchers ...string) string {
	return "max " + x.by(m, append(slices.Clone(perNode), by...)...) + "(rate(" + x.sel(m, "", matchers...) + "[" + rateInterval + "]))"
}

// agg is op by (labels) (m{…}) for a gauge.
func (x *exprs) agg(op string, m signals.ID, by []string, matchers ...string) string {
	if m.Metric().Kind == signals.Counter {
		x.fail("%s is a counter: use rate", m.String())
	}
	return op + " " + x.by(m, by...) + "(" + x.sel(m, "", matchers...) + ")"
}

// orZero makes a missing numerator read 0: a counter appears only once it
// is first incremented, and "no contention yet" should show 0, not No data.
// like is an expression with the same labels that exists whenever the
// denominator does.
func orZero(expr, like string) string {
	return "(" + expr + " or 0 * " + like + ")"
}

// ratio divides two expressions with the same labels.
func ratio(num, den string) string {
	return num + " / " + den
}

// ratioOfTotal is the share of each value of label among the sum of m's
// rate by the labels in by: each row of a stacked ratio panel.
func (x *exprs) ratioOfTotal(m signals.ID, label string, by []string, matchers ...string) string {
	return x.rate(m, append(slices.Clone(by), label), matchers...) +
		" / ignoring (" + label + ") group_left " + x.rate(m, by, matchers...)
}
