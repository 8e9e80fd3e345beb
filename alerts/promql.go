package alerts

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
)

// expand fills the ${key} and ${key:format} placeholders of a rule
// template with cfg's values, in the formats the rules template documents
// (RulesTemplate): the same templates render the rules in Go, in the Helm
// chart and in the mixin. A key cfg does not have is a programming error.
func expand(cfg Config, template string) string {
	values := map[string]fieldValue{}
	for _, f := range cfg.fields() {
		values[f.key] = fieldValue(f)
	}
	return placeholder.ReplaceAllStringFunc(template, func(ph string) string {
		m := placeholder.FindStringSubmatch(ph)
		v, ok := values[m[1]]
		if !ok {
			panic(fmt.Sprintf("alerts: rule template names %s, which is no config key", ph))
		}
		return formatAs(v.v, m[2])
	})
}

type fieldValue field

// parse parses a PromQL expression of the rules; the rules are ours, so a
// failure is a programming error that every test catches.
func parse(e string) parser.Expr {
	x, err := parser.ParseExpr(e)
	if err != nil {
		panic(fmt.Sprintf("alerts: %v in %q", err, e))
	}
	return x
}

// lastValues rewrites query so that it reads the last value of each series
// within lookback instead of the current one: every instant vector
// selector (not those of range selectors or subqueries) becomes
// last_over_time(selector[lookback]). The parser finds the selectors; the
// rest of the text stays as written.
func lastValues(query string, lookback time.Duration) string {
	window := "[" + model.Duration(lookback).String() + "]"
	var spans [][2]int
	rewriteSelectors(parse(query), func(vs *parser.VectorSelector) parser.Expr {
		spans = append(spans, [2]int{int(vs.PosRange.Start), int(vs.PosRange.End)})
		return vs
	})
	slices.SortFunc(spans, func(a, b [2]int) int { return b[0] - a[0] }) // from the end: offsets stay valid
	out := query
	for _, sp := range spans {
		sel := out[sp[0]:sp[1]]
		// An offset modifies the selector: the range goes before it.
		name, offset := sel, ""
		if i := strings.LastIndex(sel, " offset "); i >= 0 && !strings.Contains(sel[i:], "}") {
			name, offset = sel[:i], sel[i:]
		}
		out = out[:sp[0]] + "last_over_time(" + name + window + offset + ")" + out[sp[1]:]
	}
	return out
}

// inlineRecording replaces every selector of a recording rule in e by the
// rule's expression, for Grafana instances that query a Prometheus without
// the rule file; a recording rule read over a range becomes a subquery.
func inlineRecording(e string, records map[string]string) string {
	x := rewriteSelectors(parse(e), func(vs *parser.VectorSelector) parser.Expr {
		if r, ok := records[vs.Name]; ok {
			return &parser.ParenExpr{Expr: parse(r)}
		}
		return vs
	})
	return inlineRanges(x, records).String()
}

// inlineRanges turns recording rules read over a range into subqueries of
// their expressions.
func inlineRanges(x parser.Expr, records map[string]string) parser.Expr {
	parser.Inspect(x, func(n parser.Node, _ []parser.Node) error {
		call, ok := n.(*parser.Call)
		if !ok {
			return nil
		}
		for i, a := range call.Args {
			ms, ok := a.(*parser.MatrixSelector)
			if !ok {
				continue
			}
			if r, ok := records[ms.VectorSelector.(*parser.VectorSelector).Name]; ok {
				call.Args[i] = &parser.SubqueryExpr{Expr: &parser.ParenExpr{Expr: parse(r)}, Range: ms.Range}
			}
		}
		return nil
	})
	return x
}

// rewriteSelectors returns x with every instant vector selector replaced
// by what f makes of it; selectors inside range selectors and subqueries
// stay.
func rewriteSelectors(x parser.Expr, f func(*parser.VectorSelector) parser.Expr) parser.Expr {
	switch n := x.(type) {
	case *parser.VectorSelector:
		return f(n)
	case *parser.BinaryExpr:
		n.LHS, n.RHS = rewriteSelectors(n.LHS, f), rewriteSelectors(n.RHS, f)
	case *parser.AggregateExpr:
		n.Expr = rewriteSelectors(n.Expr, f)
		if n.Param != nil {
			n.Param = rewriteSelectors(n.Param, f)
		}
	case *parser.Call:
		for i, a := range n.Args {
			n.Args[i] = rewriteSelectors(a, f)
		}
	case *parser.ParenExpr:
		n.Expr = rewriteSelectors(n.Expr, f)
	case *parser.UnaryExpr:
		n.Expr = rewriteSelectors(n.Expr, f)
	}
	return x
}

// paren wraps e in parentheses when its outermost operator is a set
// operator (and, or, unless), the only operators that bind looser than a
// comparison; other expressions read as written.
func paren(e string) string {
	if b, ok := parse(e).(*parser.BinaryExpr); ok && b.Op.IsSetOperator() {
		return "(" + e + ")"
	}
	return e
}

// selectors returns the instant and range vector selectors of e: each
// metric or recording rule it reads, with its matchers.
func selectors(e string) []*parser.VectorSelector {
	var out []*parser.VectorSelector
	parser.Inspect(parse(e), func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out
}

// groupingLabels returns every label e aggregates by or matches on.
func groupingLabels(e string) []string {
	var out []string
	parser.Inspect(parse(e), func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.AggregateExpr:
			out = append(out, n.Grouping...)
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				out = append(out, n.VectorMatching.MatchingLabels...)
				out = append(out, n.VectorMatching.Include...)
			}
		}
		return nil
	})
	slices.Sort(out)
	return slices.Compact(out)
}

// oneLine writes e on one line, as Prometheus prints it.
func oneLine(e string) string { return strings.TrimSpace(parse(e).String()) }
