package dashboards_test

import (
	"fmt"
	"strconv"
	"strings"
	"text/scanner"
	"unicode"
)

// This file reads the structure the linter rules need out of a PromQL
// expression: each selector with its matchers, its range and the functions
// around it, and every grouping label. It is not a validating parser (the
// real one is promtool, see TestQueriesParseWithPromtool); it only has to
// understand the subset of PromQL the boards use, and it fails loudly on
// anything else.

type matcher struct{ label, op, value string }

type frame struct {
	fn string   // function or aggregation that opened the parenthesis; "" for grouping
	by []string // labels of "by (…)" on an aggregation
}

type selector struct {
	metric   string
	matchers []matcher
	rng      string  // contents of [..], "" without a range
	around   []frame // enclosing frames, innermost last
}

type promExpr struct {
	selectors []selector
	grouping  []string // every label named in by/without/on/ignoring/group_left/group_right
}

var groupingKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
var binaryKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true}
var aggregations = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "count": true, "stddev": true,
	"stdvar": true, "topk": true, "bottomk": true, "quantile": true, "count_values": true, "group": true}

type ptoken struct {
	kind rune
	text string
}

func tokenize(expr string) ([]ptoken, error) {
	var sc scanner.Scanner
	sc.Init(strings.NewReader(expr))
	sc.Mode = scanner.ScanIdents | scanner.ScanFloats | scanner.ScanStrings
	sc.IsIdentRune = func(ch rune, i int) bool {
		return ch == '_' || ch == ':' || unicode.IsLetter(ch) || (i > 0 && unicode.IsDigit(ch)) || (i == 0 && ch == '$')
	}
	var errs []string
	sc.Error = func(_ *scanner.Scanner, msg string) { errs = append(errs, msg) }
	var out []ptoken
	for tok := sc.Scan(); tok != scanner.EOF; tok = sc.Scan() {
		out = append(out, ptoken{tok, sc.TokenText()})
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("scan %q: %s", expr, strings.Join(errs, "; "))
	}
	return out, nil
}

func parsePromQL(expr string) (promExpr, error) {
	toks, err := tokenize(expr)
	if err != nil {
		return promExpr{}, err
	}
	p := &promParser{toks: toks}
	if err := p.run(); err != nil {
		return promExpr{}, fmt.Errorf("%q: %w", expr, err)
	}
	return p.out, nil
}

type promParser struct {
	toks    []ptoken
	i       int
	stack   []frame
	pending *frame // an aggregation whose "(" is still to come
	out     promExpr
}

func (p *promParser) peek() ptoken {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return ptoken{kind: scanner.EOF}
}

func (p *promParser) next() ptoken { t := p.peek(); p.i++; return t }

func (p *promParser) run() error {
	for p.i < len(p.toks) {
		t := p.next()
		switch {
		case t.kind == scanner.Ident && groupingKeywords[t.text]:
			labels, err := p.labelList(t.text)
			if err != nil {
				return err
			}
			p.out.grouping = append(p.out.grouping, labels...)
			if p.pending != nil && (t.text == "by" || t.text == "without") {
				p.pending.by = labels
			}
		case t.kind == scanner.Ident && binaryKeywords[t.text]:
		case t.kind == scanner.Ident && aggregations[t.text] && p.peek().kind != '(':
			p.pending = &frame{fn: t.text}
		case t.kind == scanner.Ident && p.peek().kind == '(':
			p.next()
			p.stack = append(p.stack, frame{fn: t.text})
		case t.kind == scanner.Ident:
			if err := p.selector(t.text); err != nil {
				return err
			}
		case t.kind == '{':
			p.i--
			if err := p.selector(""); err != nil {
				return err
			}
		case t.kind == '(':
			f := frame{}
			if p.pending != nil {
				f, p.pending = *p.pending, nil
			}
			p.stack = append(p.stack, f)
		case t.kind == ')':
			if len(p.stack) == 0 {
				return fmt.Errorf("unbalanced )")
			}
			p.stack = p.stack[:len(p.stack)-1]
		case t.kind == '[':
			return fmt.Errorf("range or subquery not after a selector")
		}
	}
	if len(p.stack) > 0 || p.pending != nil {
		return fmt.Errorf("unclosed (")
	}
	return nil
}

// labelList reads the "(a, b)" after a grouping keyword.
func (p *promParser) labelList(keyword string) ([]string, error) {
	if p.peek().kind != '(' {
		if keyword == "group_left" || keyword == "group_right" {
			return nil, nil // the label list is optional here
		}
		return nil, fmt.Errorf("want ( after %s", keyword)
	}
	p.next()
	var labels []string
	for {
		t := p.next()
		switch t.kind {
		case ')':
			return labels, nil
		case ',':
		case scanner.Ident:
			labels = append(labels, t.text)
		default:
			return nil, fmt.Errorf("unexpected %q in a label list", t.text)
		}
	}
}

func (p *promParser) selector(metric string) error {
	s := selector{metric: metric, around: append([]frame(nil), p.stack...)}
	if p.peek().kind == '{' {
		p.next()
		for {
			t := p.next()
			if t.kind == '}' {
				break
			}
			if t.kind == ',' {
				continue
			}
			if t.kind != scanner.Ident {
				return fmt.Errorf("want a label name in a selector, got %q", t.text)
			}
			op := p.next().text
			if k := p.peek().kind; k == '~' || k == '=' {
				op += p.next().text
			}
			v := p.next()
			if v.kind != scanner.String {
				return fmt.Errorf("want a quoted value after %s%s", t.text, op)
			}
			value, err := strconv.Unquote(v.text)
			if err != nil {
				return err
			}
			s.matchers = append(s.matchers, matcher{t.text, op, value})
		}
	}
	if p.peek().kind == '[' {
		p.next()
		var b strings.Builder
		for t := p.next(); t.kind != ']'; t = p.next() {
			if t.kind == scanner.EOF {
				return fmt.Errorf("unclosed [")
			}
			b.WriteString(t.text)
		}
		s.rng = b.String()
	}
	p.out.selectors = append(p.out.selectors, s)
	return nil
}

// names returns the metric names a selector can match: its name, or the
// alternatives of a __name__=~"a|b" matcher.
func (s selector) names() []string {
	if s.metric != "" {
		return []string{s.metric}
	}
	for _, m := range s.matchers {
		if m.label == "__name__" {
			return strings.Split(m.value, "|")
		}
	}
	return nil
}

func (s selector) has(label, op, value string) bool {
	for _, m := range s.matchers {
		if m.label == label && m.op == op && m.value == value {
			return true
		}
	}
	return false
}
