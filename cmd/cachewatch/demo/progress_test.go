package demo

import (
	"bytes"
	"html/template"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestProgressPrinter(t *testing.T) {
	p := Progress{Phase: PhaseUnprotected, PhaseIndex: 1, Elapsed: 3 * time.Second, Total: 36 * time.Second,
		Requests: 1000, DatabaseCalls: 40, Refreshes: 8}

	var plain bytes.Buffer
	print := ProgressPrinter(&plain, false, 0)
	print(p)
	print(p) // within two seconds of the last line: not repeated
	p2 := p
	p2.Phase, p2.PhaseIndex = PhaseCachewatch, 2
	print(p2) // a new phase is always shown
	if got := strings.Count(plain.String(), "\n"); got != 2 || strings.ContainsAny(plain.String(), "\r\033") {
		t.Errorf("plain output %q: want 2 lines without control codes", plain.String())
	}
	if !strings.Contains(plain.String(), "db/refresh 5.0") {
		t.Errorf("plain output %q lacks the calls per refresh", plain.String())
	}

	var tty bytes.Buffer
	ProgressPrinter(&tty, true, 40)(p)
	line := strings.TrimPrefix(tty.String(), "\r\033[K")
	if line == tty.String() || len(line) >= 40 || strings.Contains(line, "\n") {
		t.Errorf("terminal output %q: want one rewritten line under 40 columns", tty.String())
	}
}

// The line counts as the report does: contention of waiting callers only
// (the job's try-once lock is left out by the caller of the printer), older
// writes that landed only; and a default run's line fits 80 columns.
func TestProgressLineUsesTheReportsDefinitions(t *testing.T) {
	p := Progress{Phase: PhaseUnprotected, Elapsed: 36 * time.Second, Total: 36 * time.Second,
		DatabaseCalls: 123, Refreshes: 10, WaitBusy: 3, WaitFirst: 4, LocksLost: 99, OlderLanded: 999}
	line := progressLine(p)
	for _, want := range []string{"db/refresh 12.3", "contention 75%", "lost 99", "older landed 999"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
	if len([]rune(line)) >= 80 {
		t.Errorf("line %q is %d columns, want under 80", line, len([]rune(line)))
	}
	if got := progressLine(Progress{Phase: PhaseCachewatch}); !strings.Contains(got, "contention 0%") {
		t.Errorf("no waiting caller: %q, want contention 0%%", got)
	}
}

// The HTML report's table of queries names each figure as the report's
// table does, lists every dashboard variable its PromQL uses, and draws
// the p50 on a chart of its own.
func TestHTMLReportNamesRows(t *testing.T) {
	r := &Report{Phases: []PhaseReport{{Name: PhaseUnprotected}, {Name: PhaseCachewatch}}, Queries: chartQueries()}
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, f := range figurePanels {
		if !strings.Contains(page, "<td>"+template.HTMLEscapeString(f.row)+"</td>") || strings.Contains(page, "<td>"+f.figure+"</td>") {
			t.Errorf("figure %s is not labelled %q", f.figure, f.row)
		}
	}
	listed := regexp.MustCompile(`PromQL from the generated Grafana dashboards; (.*) are their variables`).FindString(page)
	for _, q := range r.Queries {
		for _, v := range regexp.MustCompile(`\$[a-z_]+`).FindAllString(q.Expr, -1) {
			if !strings.Contains(listed, "<code>"+v+"</code>") {
				t.Errorf("the page does not list %s among the dashboards' variables: %q", v, listed)
			}
		}
	}
	if !strings.Contains(page, `id="latency-p50"`) {
		t.Error("no chart of the p50")
	}
}
