package dashboards_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/cachewatch/cachewatch/dashboards"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/signals"
)

// An HA pair of exporters sampling one Redis node reports every figure of
// the node twice, under two instance labels. The keyspace board must show
// what one exporter shows.

const (
	haExporterA = "exporter-a:9121"
	haExporterB = "exporter-b:9121"
	haNode      = "redis-1:6379"
	// haGauge is the value of every gauge series of the check.
	haGauge = 3
)

// haSeries is one series per selector of the queries, as each of the two
// exporters exports it: catalog labels set to a value the selector
// matches, counters growing, gauges at haGauge, two buckets per histogram.
func haSeries(t *testing.T, qs []dashboards.Query) []series {
	t.Helper()
	var out []series
	for _, q := range qs {
		e, err := parsePromQL(q.Expr)
		if err != nil {
			t.Fatal(err)
		}
		for _, sel := range e.selectors {
			m, ok := signals.Names()[sel.metric]
			if !ok {
				t.Fatalf("%s: %s is no catalog series", q.Panel, sel.metric)
			}
			for _, instance := range []string{haExporterA, haExporterB} {
				for _, s := range seriesFor(sel, m, instance) {
					if !slices.Contains(out, s) {
						out = append(out, s)
					}
				}
			}
		}
	}
	return out
}

func seriesFor(sel selector, m signals.Metric, instance string) []series {
	labels := []string{`job="cachewatch-exporter"`, `instance="` + instance + `"`}
	for _, l := range m.Labels {
		v := "x"
		if len(l.Values) > 0 {
			v = l.Values[0]
		}
		if l.Name == "node" {
			v = haNode
		}
		for _, mt := range sel.matchers {
			if mt.label == l.Name && !strings.HasPrefix(mt.value, "$") && mt.value != ".+" {
				v, _, _ = strings.Cut(mt.value, "|")
			}
		}
		labels = append(labels, l.Name+`="`+v+`"`)
	}
	name := func(extra ...string) string {
		return sel.metric + "{" + strings.Join(append(slices.Clone(labels), extra...), ", ") + "}"
	}
	switch {
	case strings.HasSuffix(sel.metric, "_bucket"):
		return []series{{name(`le="1"`), "0+5x80"}, {name(`le="+Inf"`), "0+10x80"}}
	case m.Kind == signals.Counter || m.Kind == signals.Histogram:
		return []series{{name(), "0+10x80"}}
	}
	return []series{{name(), itoa(haGauge) + "x80"}}
}

// haTests are, for each query, the checks that its figures over both
// exporters are those over exporter A alone: the same series with the
// same values, or for a query grouped by instance (a figure about each
// exporter), A's series and as many of B's.
func haTests(qs []dashboards.Query) []exprTest {
	only := func(instance string) *strings.Replacer {
		return strings.NewReplacer("$__rate_interval", "1m", "$job", ".+", "$key_group", ".+", "$instance", instance)
	}
	var out []exprTest
	for _, q := range qs {
		a, both := "("+only(haExporterA).Replace(q.Expr)+")", "("+only(".+").Replace(q.Expr)+")"
		e, _ := parsePromQL(q.Expr)
		extra := "count(" + both + " unless " + a + ") or vector(0)"
		if slices.Contains(e.grouping, "instance") {
			extra = "count(" + both + " unless " + a + ") - count(" + a + ")"
		}
		for _, check := range []struct {
			expr string
			want float64
		}{
			{"count(" + a + ") > bool 0", 1},
			{"count(" + both + " != " + a + ") or vector(0)", 0},
			{"count(" + a + " unless " + both + ") or vector(0)", 0},
			{extra, 0},
		} {
			out = append(out, exprTest{check.expr, "10m", []sample{{"{}", check.want}}})
		}
	}
	return out
}

// checkHA runs the checks over the queries with promtool test rules and
// returns its complaint, if any.
func checkHA(t *testing.T, promtool string, qs []dashboards.Query, extra ...exprTest) error {
	t.Helper()
	return promtoolTest(t, promtool, haSeries(t, qs), append(haTests(qs), extra...))
}

func keyspaceQueries(t *testing.T) []dashboards.Query {
	var out []dashboards.Query
	for _, q := range dashboards.Queries() {
		if q.Board == dashboards.KeyspaceUID {
			out = append(out, q)
		}
	}
	if len(out) < 20 {
		t.Fatalf("%d keyspace queries", len(out))
	}
	return out
}

// TestExporterFiguresCountEachNodeOnce evaluates every query of the
// keyspace board in the real PromQL engine over an HA pair of exporters
// and over one of them: the figures are the same. And with a stuck lock
// seen by both, the board's count of locks without TTL is what one
// exporter reports, not twice that.
func TestExporterFiguresCountEachNodeOnce(t *testing.T) {
	promtool := metrictest.Promtool(t)
	qs := keyspaceQueries(t)
	stuck := panelExpr(t, "Locks without TTL (all nodes)")
	if err := checkHA(t, promtool, qs, exprTest{stuck, "10m", []sample{{"{}", haGauge}}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d keyspace queries give over two exporters of one node what they give over one", len(qs))
}

// TestExporterCheckCanFail: the same check over a query that sums the
// exporters' series, as the board once did, fails.
func TestExporterCheckCanFail(t *testing.T) {
	promtool := metrictest.Promtool(t)
	var qs []dashboards.Query
	for _, q := range keyspaceQueries(t) {
		if q.Panel == "Locks without TTL" {
			q.Expr = strings.Replace(q.Expr, "max by (target, node, key_group)", "sum by (target, node, key_group)", 1)
			qs = append(qs, q)
		}
	}
	if len(qs) != 1 || !strings.Contains(qs[0].Expr, "sum by") {
		t.Fatalf("no query to break: %+v", qs)
	}
	err := checkHA(t, promtool, qs)
	if err == nil {
		t.Fatal("a query that adds the two exporters' series up passed the check")
	}
	t.Log(err)
}

// TestTargetsSharingANodeStayApart: a multi-target exporter watching two
// databases of one server reports the node's address under two targets;
// the board adds them up, where grouping by node alone would show one
// target's figure for both.
func TestTargetsSharingANodeStayApart(t *testing.T) {
	promtool := metrictest.Promtool(t)
	stuck := panelExpr(t, "Locks without TTL (all nodes)")
	input := []series{
		{signals.LocksWithoutTTL.String() + `{job="cachewatch-exporter", instance="` + haExporterA + `", target="db0", node="` + haNode + `", key_group="lock:job:*"}`, "3x80"},
		{signals.LocksWithoutTTL.String() + `{job="cachewatch-exporter", instance="` + haExporterA + `", target="db1", node="` + haNode + `", key_group="lock:job:*"}`, "4x80"},
	}
	want := []exprTest{{stuck, "10m", []sample{{"{}", 7}}}}
	if err := promtoolTest(t, promtool, input, want); err != nil {
		t.Fatal(err)
	}
	byNodeOnly := strings.ReplaceAll(stuck, "target, node", "node")
	if byNodeOnly == stuck {
		t.Fatalf("the panel does not group by target: %s", stuck)
	}
	if err := promtoolTest(t, promtool, input, []exprTest{{byNodeOnly, "10m", []sample{{"{}", 7}}}}); err == nil {
		t.Fatal("grouping by node alone also counted both targets: the check cannot fail")
	}
}
