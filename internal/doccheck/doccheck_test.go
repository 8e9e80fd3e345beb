package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cachewatch/cachewatch/alerts"
	"github.com/cachewatch/cachewatch/dashboards"
	"github.com/cachewatch/cachewatch/signals"
)

func blocks(t *testing.T) (root string, all []Block) {
	t.Helper()
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	all, err = All(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 {
		t.Fatal("no code blocks found: the page list is wrong")
	}
	return root, all
}

// Every block says what it is, so that the check of its language applies:
// go (the source it names, compiled and run by go test), sh (its cachewatch
// commands parse; blocks marked run are run, in cmd/cachewatch), yaml,
// jsonnet (evaluated in deploy/), promql, text.
func TestBlocksHaveAKnownLanguage(t *testing.T) {
	_, all := blocks(t)
	known := map[string]bool{"go": true, "sh": true, "yaml": true, "jsonnet": true, "promql": true, "text": true}
	for _, b := range all {
		if !known[b.Lang] {
			t.Errorf("%s: fence language %q: want one of go, sh, yaml, jsonnet, promql, text", b, b.Lang)
		}
	}
}

// Every Go block is the body of an Example function that go test runs (it
// has an // Output: comment) or a whole program under examples/ with a
// test of its own, and equals that source exactly.
func TestGoBlocksAreTheirSources(t *testing.T) {
	root, all := blocks(t)
	n := 0
	for _, b := range all {
		if b.Lang != "go" {
			continue
		}
		n++
		t.Run(b.String(), func(t *testing.T) {
			want, err := source(root, b.Marker)
			if err != nil {
				t.Fatalf("%s: %v", b, err)
			}
			if b.Text != want {
				t.Errorf("%s differs from its source (%s): %s", b, b.Marker, firstDifference(b.Text, want))
			}
		})
	}
	if n == 0 {
		t.Fatal("no Go blocks: the README's program and snippets are missing")
	}
}

// source returns what a Go block must equal, from its marker.
func source(root, mark string) (string, error) {
	spec, ok := strings.CutPrefix(mark, "snippet: ")
	if !ok {
		return "", fmt.Errorf("a Go block needs <!-- snippet: FILE [ExampleFunc] --> on the line before it, naming its source")
	}
	f := strings.Fields(spec)
	src, err := os.ReadFile(filepath.Join(root, f[0]))
	if err != nil {
		return "", err
	}
	if len(f) == 1 {
		if !strings.HasPrefix(f[0], "examples/") || !strings.HasSuffix(f[0], "/main.go") {
			return "", fmt.Errorf("a whole file must be a program under examples/ (…/main.go), not %s", f[0])
		}
		tests, _ := filepath.Glob(filepath.Join(root, filepath.Dir(f[0]), "*_test.go"))
		if len(tests) == 0 {
			return "", fmt.Errorf("%s has no test that runs it", f[0])
		}
		return string(src), nil
	}
	return exampleBody(f[0], src, f[1])
}

// exampleBody returns the body of the Example function name in src,
// unindented once, without its // Output: comment.
func exampleBody(file string, src []byte, name string) (string, error) {
	if !strings.HasPrefix(name, "Example") || !strings.HasSuffix(file, "_test.go") {
		return "", fmt.Errorf("%s in %s: a snippet is an Example function of a _test.go file", name, file)
	}
	fset := token.NewFileSet()
	parsed, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		return "", err
	}
	for _, d := range parsed.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != name || fd.Recv != nil {
			continue
		}
		body := string(src[fset.Position(fd.Body.Lbrace).Offset+1 : fset.Position(fd.Body.Rbrace).Offset])
		lines := strings.Split(strings.TrimPrefix(body, "\n"), "\n")
		var out []string
		for _, l := range lines {
			trimmed := strings.TrimSpace(l)
			if strings.HasPrefix(trimmed, "// Output:") || strings.HasPrefix(trimmed, "// Unordered output:") {
				return strings.Join(out, "\n") + "\n", nil
			}
			out = append(out, strings.TrimPrefix(l, "\t"))
		}
		return "", fmt.Errorf("%s in %s has no // Output: comment, so go test compiles it but never runs it", name, file)
	}
	return "", fmt.Errorf("no func %s in %s", name, file)
}

func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d of the block is %q, the source has %q", i+1, gl, wl)
		}
	}
	return "they differ in whitespace at the end"
}

// A count written in a page ("34 rules") is the product's count: the pages
// state few counts, and each is checked against the code that makes them.
func TestCountsInPagesAreTheProducts(t *testing.T) {
	root, _ := blocks(t)
	counts := productCounts(t)
	pages, err := Pages(root)
	if err != nil {
		t.Fatal(err)
	}
	count := regexp.MustCompile(`\b(\d+) (alerts|alerting rules|recording rules|rules|metrics|dashboards|boards)\b`)
	for _, p := range append(pages, "CONTRIBUTING.md") {
		text, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range count.FindAllStringSubmatch(string(text), -1) {
			n, _ := strconv.Atoi(m[1])
			if want := counts[m[2]]; n != want {
				t.Errorf("%s says %q: the product has %d %s", p, m[0], want, m[2])
			}
		}
	}
}

func productCounts(t *testing.T) map[string]int {
	groups, err := alerts.Rules(alerts.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	boards, err := dashboards.Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	var alerting, recording int
	for _, g := range groups {
		alerting += len(g.Alerts)
		recording += len(g.Recording)
	}
	return map[string]int{"alerts": len(alerts.AlertNames()), "alerting rules": alerting, "recording rules": recording,
		"rules": alerting + recording, "metrics": len(signals.All()), "dashboards": len(boards), "boards": len(boards)}
}

// Every relative link of a page points at a file or directory of the
// repository.
func TestRelativeLinksResolve(t *testing.T) {
	root, _ := blocks(t)
	pages, err := Pages(root)
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, p := range append(pages, "CONTRIBUTING.md") {
		text, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, filepath.Dir(p), target)); err != nil {
				t.Errorf("%s links %s, which does not exist", p, m[1])
			}
		}
	}
}
