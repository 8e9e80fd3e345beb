package crosscheck

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/cachewatch/cachewatch/alerts"
	"github.com/cachewatch/cachewatch/dashboards"
)

var runbooksFile = filepath.Join("..", "..", "docs", "runbooks.md")

// runbooks is docs/runbooks.md split into what the checks need.
type runbooks struct {
	anchors  map[string]bool   // GitHub anchor of every heading
	headings map[string]bool   // text of every heading
	sections map[string]string // body of each "## " section, by heading
}

var headingRE = regexp.MustCompile(`(?m)^(#{1,6}) +(.+?) *$`)

func readRunbooks(t *testing.T) runbooks {
	t.Helper()
	b, err := os.ReadFile(runbooksFile)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	r := runbooks{anchors: map[string]bool{}, headings: map[string]bool{}, sections: map[string]string{}}
	matches := headingRE.FindAllStringSubmatchIndex(md, -1)
	for i, m := range matches {
		level, text := md[m[2]:m[3]], md[m[4]:m[5]]
		r.anchors[githubAnchor(text)] = true
		r.headings[text] = true
		if level != "##" {
			continue
		}
		end := len(md)
		if i+1 < len(matches) {
			end = matches[i+1][0]
		}
		r.sections[text] = md[m[1]:end]
	}
	return r
}

// githubAnchor is the fragment GitHub gives a Markdown heading: lower case,
// punctuation dropped, spaces as dashes.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestGithubAnchor(t *testing.T) {
	for in, want := range map[string]string{
		"CachewatchLocksLost":                  "cachewatchlockslost",
		"Server memory, evictions and clients": "server-memory-evictions-and-clients",
		"Retries and backoff":                  "retries-and-backoff",
	} {
		if got := githubAnchor(in); got != want {
			t.Errorf("githubAnchor(%q) = %q, want %q", in, got, want)
		}
	}
}

// board is one generated dashboard: its panel titles and descriptions.
type board struct {
	title        string
	panels       map[string]bool // titles of the panels
	rows         map[string]bool // titles of the rows
	descriptions []string
}

func readBoards(t *testing.T) []board {
	t.Helper()
	ds, err := dashboards.Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	var out []board
	for _, d := range ds {
		raw, err := d.JSON()
		if err != nil {
			t.Fatal(err)
		}
		var doc struct{ Panels []panel }
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		b := board{title: d.Title, panels: map[string]bool{}, rows: map[string]bool{}}
		b.collect(doc.Panels)
		out = append(out, b)
	}
	if len(out) == 0 {
		t.Fatal("no dashboards")
	}
	return out
}

type panel struct {
	Type        string  `json:"type"`
	Title       string  `json:"title"`
	Description string  `json:"description"`
	Panels      []panel `json:"panels"`
}

func (b *board) collect(ps []panel) {
	for _, p := range ps {
		if p.Type == "row" {
			b.rows[p.Title] = true
		} else {
			b.panels[p.Title] = true
			b.descriptions = append(b.descriptions, p.Description)
		}
		b.collect(p.Panels)
	}
}

var (
	runbookLinkRE    = regexp.MustCompile(`\[([^\]]+)\]\(([^)#]*docs/runbooks\.md)#([^)]*)\)`)
	runbookSectionRE = regexp.MustCompile(`docs/runbooks\.md, section "([^"]+)"`)
)

// TestDashboardRunbookLinks: every runbook link in a panel description is
// labelled with an alert that package alerts defines, and goes to that
// alert's section of docs/runbooks.md; a section named in words exists.
func TestDashboardRunbookLinks(t *testing.T) {
	rb := readRunbooks(t)
	names := alerts.AlertNames()
	linked := map[string]bool{}
	links, sections := 0, 0
	for _, b := range readBoards(t) {
		for _, desc := range b.descriptions {
			for _, m := range runbookLinkRE.FindAllStringSubmatch(desc, -1) {
				links++
				name, base, anchor := m[1], m[2], m[3]
				linked[name] = true
				if !slices.Contains(names, name) {
					t.Errorf("%s: a panel links to runbook %q, which is no alert of package alerts", b.title, name)
				}
				if anchor != alerts.RunbookAnchor(name) {
					t.Errorf("%s: runbook link %s goes to #%s, want #%s", b.title, name, anchor, alerts.RunbookAnchor(name))
				}
				if !rb.anchors[anchor] {
					t.Errorf("%s: runbook link %s goes to #%s, which is no heading of %s", b.title, name, anchor, runbooksFile)
				}
				if base != alerts.DefaultRunbookBaseURL {
					t.Errorf("%s: runbook link %s goes to %s, the rules to %s", b.title, name, base, alerts.DefaultRunbookBaseURL)
				}
			}
			for _, m := range runbookSectionRE.FindAllStringSubmatch(desc, -1) {
				sections++
				if !rb.headings[m[1]] {
					t.Errorf("%s: a panel names runbook section %q, which %s does not have", b.title, m[1], runbooksFile)
				}
			}
		}
	}
	if links == 0 {
		t.Fatal("no runbook links found in the dashboards: the pattern is stale")
	}
	t.Logf("%d runbook links, %d named sections; %d of %d alerts linked from a panel", links, sections, len(linked), len(names))
}

// TestRuleRunbookURLs: every runbook_url of the generated Prometheus and
// Grafana rule files goes to a heading of docs/runbooks.md, the section of
// its own alert.
func TestRuleRunbookURLs(t *testing.T) {
	rb := readRunbooks(t)
	for _, file := range []string{alerts.RulesFile, alerts.GrafanaFile} {
		urls := ruleRunbookURLs(t, filepath.Join("..", "..", "alerts", "generated", file))
		if len(urls) == 0 {
			t.Fatalf("%s: no runbook_url found", file)
		}
		for name, url := range urls {
			base, anchor, _ := strings.Cut(url, "#")
			if base != alerts.DefaultRunbookBaseURL || anchor != alerts.RunbookAnchor(name) {
				t.Errorf("%s: %s has runbook_url %s, want %s#%s", file, name, url, alerts.DefaultRunbookBaseURL, alerts.RunbookAnchor(name))
			}
			if !rb.anchors[anchor] {
				t.Errorf("%s: %s has runbook_url %s, whose #%s is no heading of %s", file, name, url, anchor, runbooksFile)
			}
		}
		for _, name := range alerts.AlertNames() {
			if _, ok := urls[name]; !ok {
				t.Errorf("%s has no rule for alert %s", file, name)
			}
		}
	}
}

// ruleRunbookURLs reads the runbook_url of every alert of a rule file, by
// alert name (the Prometheus "alert" key or the Grafana "title").
func ruleRunbookURLs(t *testing.T, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Title       string            `yaml:"title"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	urls := map[string]string{}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			// Grafana titles an alert of several levels "Name (severity)".
			name, _, _ := strings.Cut(r.Alert+r.Title, " (")
			if r.Alert == "" && r.Title == "" {
				continue // a recording rule
			}
			if prev, ok := urls[name]; ok && prev != r.Annotations["runbook_url"] {
				t.Errorf("%s: the levels of %s link to %s and %s", file, name, prev, r.Annotations["runbook_url"])
			}
			urls[name] = r.Annotations["runbook_url"]
		}
	}
	return urls
}

var (
	confirmRE  = regexp.MustCompile(`\*\*Confirm it\.\*\*([^\n]*)`)
	emphasisRE = regexp.MustCompile(`\*\*([^*]+)\*\*|\*([^*]+)\*`)
)

// TestRunbooksNamePanels: the "Confirm it." paragraph of every alert's
// runbook sends the reader to at least one panel, and everything it names
// in *italics* is a panel (or row) of a board the paragraph names in
// **bold**.
func TestRunbooksNamePanels(t *testing.T) {
	rb := readRunbooks(t)
	boards := map[string]board{}
	for _, b := range readBoards(t) {
		boards[b.title] = b
	}
	for _, name := range alerts.AlertNames() {
		section, ok := rb.sections[name]
		if !ok {
			t.Errorf("%s: no section in %s", name, runbooksFile)
			continue
		}
		m := confirmRE.FindStringSubmatch(section)
		if m == nil {
			t.Errorf("%s: runbook has no \"Confirm it.\" paragraph", name)
			continue
		}
		var named []board
		var italics []string
		for _, e := range emphasisRE.FindAllStringSubmatch(m[1], -1) {
			if e[1] == "" {
				italics = append(italics, e[2])
				continue
			}
			b, ok := boards[e[1]]
			if !ok {
				t.Errorf("%s: runbook names board %q, which is no dashboard title", name, e[1])
			}
			named = append(named, b)
		}
		panels := 0
		for _, it := range italics {
			isPanel, isRow := false, false
			for _, b := range named {
				isPanel = isPanel || b.panels[it]
				isRow = isRow || b.rows[it]
			}
			switch {
			case isPanel:
				panels++
			case !isRow:
				t.Errorf("%s: runbook names panel %q, which no board it names has", name, it)
			}
		}
		if panels == 0 {
			t.Errorf("%s: runbook names no panel of the dashboards", name)
		}
	}
}
