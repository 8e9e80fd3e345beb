// Package doccheck finds the code blocks of the repository's Markdown
// pages, so that tests can compile, run or parse every one of them: a Go
// block must be the source it names (an Example function's body, or a whole
// program under examples/), a shell block's cachewatch commands must parse,
// and so on per language.
//
// A block names its source, or what checks it, in an HTML comment on the
// line just before its fence:
//
//	<!-- snippet: instrument/example_readme_test.go Example -->
//	<!-- snippet: examples/hello/main.go -->
//	<!-- run -->
//	<!-- check: targets-file -->
package doccheck

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Block is one fenced code block of a Markdown page.
type Block struct {
	File   string // relative to the repository root
	Line   int    // of the opening fence, from 1
	Lang   string // the fence's info string: go, sh, yaml…
	Marker string // the HTML comment just before the fence, without <!-- -->
	Text   string // the block's lines, without the fences' indentation
}

func (b Block) String() string { return fmt.Sprintf("%s:%d (%s)", b.File, b.Line, b.Lang) }

var (
	fence  = regexp.MustCompile("^(\\s*)(```+)\\s*([A-Za-z0-9_+-]*)\\s*$")
	marker = regexp.MustCompile(`^\s*<!--\s*(.*?)\s*-->\s*$`)
)

// Pages lists the Markdown pages whose blocks are checked, relative to
// root: the README, every page under docs/, and the READMEs of examples/,
// mixin/ and the chart.
func Pages(root string) ([]string, error) {
	var out []string
	for _, pattern := range []string{"README.md", "docs/*.md", "examples/README.md", "examples/*/README.md", "mixin/README.md",
		"deploy/helm/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return nil, err
		}
		for _, p := range m {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return nil, err
			}
			out = append(out, filepath.ToSlash(rel))
		}
	}
	sort.Strings(out)
	return out, nil
}

// Blocks returns the fenced code blocks of root/page.
func Blocks(root, page string) ([]Block, error) {
	f, err := os.Open(filepath.Join(root, page))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out          []Block
		cur          *Block
		indent, prev string
		body         []string
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		m := fence.FindStringSubmatch(line)
		switch {
		case cur == nil && m != nil:
			cur = &Block{File: page, Line: n, Lang: m[3]}
			if mm := marker.FindStringSubmatch(prev); mm != nil {
				cur.Marker = mm[1]
			}
			indent, body = m[1], nil
		case cur != nil && m != nil && m[3] == "":
			cur.Text = strings.Join(body, "\n") + "\n"
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body = append(body, strings.TrimPrefix(line, indent))
		}
		prev = line
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: code block never closed", page, cur.Line)
	}
	return out, sc.Err()
}

// All returns the blocks of every page Pages lists.
func All(root string) ([]Block, error) {
	pages, err := Pages(root)
	if err != nil {
		return nil, err
	}
	var out []Block
	for _, p := range pages {
		bs, err := Blocks(root, p)
		if err != nil {
			return nil, err
		}
		out = append(out, bs...)
	}
	return out, nil
}

// Root returns the repository root, found upward from the working
// directory (a test runs in its package's directory).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "signals")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("doccheck: no repository root above the working directory")
		}
		dir = parent
	}
}
